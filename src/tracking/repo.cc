// The public Repo and Run API: argument checks and forwarding to RepoImpl,
// plus the JSON forms of SeriesInfo and MetricData and series ids.

#include <xxhash.h>

#include "tracking/repo_impl.h"
#include "tracking/schema.h"
#include "tracking/series_stats.h"

namespace kv0::tracking {
namespace {

[[noreturn]] void BadJson(const std::string& what) {
  throw Error(Code::kInvalidArgument, "JSON: " + what);
}

}  // namespace

uint64_t SeriesId(std::string_view run_id, std::string_view name, const nlohmann::json& context) {
  if (!context.is_object()) {
    throw Error(Code::kInvalidArgument, "a metric context must be a JSON object");
  }
  std::string bytes;
  bytes.append(run_id);
  bytes.push_back('\0');
  bytes.append(name);
  bytes.push_back('\0');
  bytes.append(context.dump());  // nlohmann objects keep their keys sorted
  uint64_t id = XXH3_64bits(bytes.data(), bytes.size());
  return id == kReservedSeriesId ? 1 : id;
}

void to_json(nlohmann::json& j, const SeriesInfo& s) {
  j = {{"series_id", s.series_id},
       {"run_id", s.run_id},
       {"name", s.name},
       {"context", s.context},
       {"created_at_us", s.created_at_us}};
}

void from_json(const nlohmann::json& j, SeriesInfo& s) {
  try {
    s.series_id = j.at("series_id").get<uint64_t>();
    s.run_id = j.at("run_id").get<std::string>();
    s.name = j.at("name").get<std::string>();
    s.context = j.value("context", nlohmann::json::object());
    s.created_at_us = j.value("created_at_us", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    BadJson(std::string("series: ") + e.what());
  }
}

void to_json(nlohmann::json& j, const MetricData& d) {
  nlohmann::json epochs = nlohmann::json::array(), values = nlohmann::json::array();
  for (const auto& e : d.epochs) epochs.push_back(e ? nlohmann::json(*e) : nlohmann::json());
  for (double v : d.values) values.push_back(DoubleToJson(v));
  j = {{"steps", d.steps},
       {"epochs", epochs},
       {"timestamps_us", d.timestamps_us},
       {"values", values}};
}

void from_json(const nlohmann::json& j, MetricData& d) {
  try {
    d.steps = j.at("steps").get<std::vector<int64_t>>();
    d.timestamps_us = j.at("timestamps_us").get<std::vector<int64_t>>();
    d.epochs.clear();
    for (const auto& e : j.at("epochs")) {
      d.epochs.push_back(e.is_null() ? std::nullopt : std::optional(e.get<int64_t>()));
    }
    d.values.clear();
    for (const auto& v : j.at("values")) {
      auto value = DoubleFromJson(v);
      if (!value) BadJson("metric value is not a number");
      d.values.push_back(*value);
    }
  } catch (const nlohmann::json::exception& e) {
    BadJson(std::string("metric data: ") + e.what());
  }
  if (d.epochs.size() != d.steps.size() || d.timestamps_us.size() != d.steps.size() ||
      d.values.size() != d.steps.size()) {
    BadJson("metric data columns have different lengths");
  }
}

// --- Run ----------------------------------------------------------------------

Run::Run(std::shared_ptr<RepoImpl> repo, std::shared_ptr<State> state)
    : repo_(std::move(repo)), state_(std::move(state)) {}

Run::Run(const Run&) = default;
Run::Run(Run&&) noexcept = default;
Run& Run::operator=(const Run&) = default;
Run& Run::operator=(Run&&) noexcept = default;

Run::~Run() {
  // In a fork's child the last reference would close the parent's handle.
  if (repo_ && repo_->owner_.Inherited()) Abandon(std::move(repo_));
}

RepoImpl& Run::live() const {
  repo_->owner_.Check("repository", repo_->uri_);
  return *repo_;
}

const std::string& Run::run_id() const { return state_->run_id; }

void Run::Track(double value, std::string_view name, const TrackOptions& opts) {
  live().Track(*state_, value, name, opts, true);
}

bool Run::TryTrack(double value, std::string_view name, const TrackOptions& opts) {
  return live().Track(*state_, value, name, opts, false);
}

void Run::SetParams(const nlohmann::json& params) { live().SetParams(*state_, params); }

RunInfo Run::Update(const std::function<void(RunInfo&)>& change) {
  return live().UpdateLive(*state_, change);
}

void Run::Finish(std::string_view status) { FinishAt(status, WallNanos() / 1000); }

void Run::FinishAt(std::string_view status, int64_t ended_at_us) {
  if (status == "running") {
    throw Error(Code::kInvalidArgument, "finish needs a final status, not running");
  }
  live().FinishLive(*state_, status, ended_at_us);
}

// --- Repo ---------------------------------------------------------------------

Repo::Repo(std::shared_ptr<RepoImpl> impl) : impl_(std::move(impl)) {}
Repo::Repo(Repo&&) noexcept = default;
Repo& Repo::operator=(Repo&&) noexcept = default;

RepoImpl& Repo::live() const {
  impl_->owner_.Check("repository", impl_->uri_);
  return *impl_;
}

Repo::~Repo() {
  if (!impl_) return;
  if (impl_->owner_.Inherited()) {
    // A fork's child: closing would flush and release the parent's WAL.
    Abandon(std::move(impl_));
    return;
  }
  try {
    impl_->Close();
  } catch (...) {
    // The WAL keeps what could not be committed; the next open replays it.
  }
}

Repo Repo::Open(const std::string& uri, const RepoOptions& options) {
  return Repo(RepoImpl::Open(uri, options));
}

const std::string& Repo::uri() const { return live().uri_; }

Run Repo::CreateRun(const NewRun& run) { return live().CreateRun(run); }
Run Repo::ResumeRun(const std::string& run_id) { return live().ResumeRun(run_id); }
RunInfo Repo::UpdateRun(const std::string& run_id, const std::function<void(RunInfo&)>& change) {
  return live().UpdateRun(run_id, change);
}
void Repo::Flush() { live().Flush(); }
void Repo::Close() { live().Close(); }

std::vector<RunInfo> Repo::Runs() { return live().Runs(); }
std::optional<RunInfo> Repo::GetRun(const std::string& run_id) { return live().GetRun(run_id); }

nlohmann::json Repo::Params(const std::string& run_id) {
  auto all = live().ReadParams("run_id = " + SqlString(run_id));
  auto it = all.find(run_id);
  return it == all.end() ? nlohmann::json::object() : it->second;
}

std::map<std::string, nlohmann::json> Repo::AllParams() { return live().ReadParams(""); }

std::vector<SeriesInfo> Repo::Series(const std::string& run_id) {
  live().Flush();
  return live().ReadSeries("run_id = " + SqlString(run_id));
}

std::vector<SeriesInfo> Repo::AllSeries() {
  live().Flush();
  return live().ReadSeries("");
}

std::map<uint64_t, SeriesStats> Repo::GetSeriesStats(std::span<const uint64_t> ids) {
  return live().GetSeriesStats(ids);
}

std::map<uint64_t, MetricData> Repo::ReadMany(std::span<const uint64_t> ids, StepRange range) {
  return live().ReadMany(ids, range, std::nullopt);
}

std::map<uint64_t, MetricData> Repo::ReadManyIn(std::span<const uint64_t> ids, TimeRange range) {
  return live().ReadMany(ids, StepRange{}, range);
}

void Repo::ReadManyStream(std::span<const uint64_t> ids, StepRange range, ArrowArrayStream* out) {
  live().ReadStream(ids, range, std::nullopt, out);
}

void Repo::ReadManyInStream(std::span<const uint64_t> ids, TimeRange range, ArrowArrayStream* out) {
  live().ReadStream(ids, StepRange{}, range, out);
}

std::map<uint64_t, DownsampledSeries> Repo::ReadDownsampled(std::span<const uint64_t> ids,
                                                            const DownsampleOptions& options) {
  return live().ReadDownsampled(ids, options);
}

void Repo::ReadDownsampledStream(std::span<const uint64_t> ids, const DownsampleOptions& options,
                                 ArrowArrayStream* out) {
  live().ReadDownsampledStream(ids, options, out);
}

RunPage Repo::SearchRuns(const RunQuery& query) { return live().SearchRuns(query); }

TableVersions Repo::LatestVersions() {
  live().CheckOpen();
  auto& t = live().tables_;
  return {t[kRuns]->LatestVersion(), t[kParams]->LatestVersion(), t[kSeries]->LatestVersion(),
          t[kMetrics]->LatestVersion()};
}

TableVersions Repo::Versions() {
  auto& t = live().tables_;
  return {t[kRuns]->version(), t[kParams]->version(), t[kSeries]->version(),
          t[kMetrics]->version()};
}

void Repo::DeleteRuns(std::span<const std::string> run_ids) { live().DeleteRuns(run_ids); }

uint64_t Repo::AppendRecords(const std::string& table, std::span<const Record> rows) {
  live().CheckOpen();
  live().LoadTombstones(false);
  for (const auto& row : rows) {
    if (row.run_id && live().IsDeleted(*row.run_id)) {
      throw Error(Code::kInvalidArgument, "run " + *row.run_id + " was deleted");
    }
  }
  return live().Records().Append(table, rows);
}

std::vector<Record> Repo::Records(const std::string& table, const RecordQuery& query) {
  return live().Records().Read(table, query, live().HiddenRuns());
}

void Repo::RecordsStream(const std::string& table, const RecordQuery& query,
                         ArrowArrayStream* out) {
  live().Records().ReadStream(table, query, live().HiddenRuns(), out);
}

uint64_t Repo::RecordsVersion(const std::string& table) { return live().Records().Version(table); }

std::vector<std::string> Repo::RecordTables() { return live().Records().Tables(); }

void Repo::CreateRecordsTag(const std::string& table, const std::string& tag, uint64_t version) {
  live().Records().CreateTag(table, tag, version);
}

void Repo::DeleteRecordsTag(const std::string& table, const std::string& tag) {
  live().Records().DeleteTag(table, tag);
}

std::map<std::string, uint64_t> Repo::RecordsTags(const std::string& table) {
  return live().Records().Tags(table);
}

bool Repo::HasLegacyRecords() { return live().Records().HasLegacy(); }

PurgeStats Repo::Purge(bool force) { return live().Purge(force); }

OptimizeStats Repo::Optimize() { return live().Optimize(); }

void Repo::RecomputeSeriesStats(std::span<const uint64_t> ids) { live().MarkDirty(ids); }

}  // namespace kv0::tracking
