// Opening and closing a repository: the four tables (created, or given the
// columns added since they were written), the WAL and its replay.

#include <set>
#include <unordered_set>

#include "lance/auto_cleanup.h"
#include "tracking/repo_impl.h"
#include "tracking/schema.h"
#include "util/location.h"

namespace kv0::tracking {
namespace {

const arrow::Schema& TableSchema(int table) {
  switch (table) {
    case kRuns:
      return RunsSchema();
    case kParams:
      return ParamsSchema();
    case kSeries:
      return SeriesSchema();
    default:
      return MetricsSchema();
  }
}

std::string_view TableDir(int table) {
  static constexpr std::string_view kDirs[] = {kRunsTable, kParamsTable, kSeriesTable,
                                               kMetricsTable};
  return kDirs[table];
}

std::set<std::string> ColumnNames(const lance::Dataset& dataset) {
  arrow::OwnedSchema schema = dataset.Schema();
  std::set<std::string> names;
  for (int64_t i = 0; i < schema->n_children; ++i) names.insert(schema->children[i]->name);
  return names;
}

// The table's WAL kind, for replay.
int TableOf(const WalRecord& record) { return static_cast<int>(record.index()); }

uint64_t SeqOf(const WalRecord& record) {
  return std::visit([](const auto& r) -> uint64_t { return r.seq; }, record);
}

}  // namespace

const char* TableName(int table) {
  static const char* kNames[] = {"runs", "params", "series", "metrics"};
  return kNames[table];
}

namespace {

pipeline::Options PipelineOptions(const std::string& uri, const std::string& wal_dir,
                                  const RepoOptions& options) {
  pipeline::Options out;
  out.name = "repository " + uri;
  out.wal_dir = wal_dir;
  out.wal_sync = options.wal_sync;
  // Mapped, so logging a point is a memory copy that survives the process.
  out.mapped_wal = true;
  out.flush_interval = options.flush_interval;
  out.mark_ttl = options.mark_ttl;
  out.replay_stale_wal = options.replay_stale_wal;
  return out;
}

}  // namespace

static_assert(kTableCount <= pipeline::kMaxTables);

// The options with kv0's object-store client defaults in the storage options.
static RepoOptions WithClientDefaults(RepoOptions options) {
  options.storage_options = lance::WithClientDefaults(
      std::move(options.storage_options), options.request_timeout, options.request_retries);
  return options;
}

RepoImpl::RepoImpl(std::string uri, const RepoOptions& options)
    : uri_(std::move(uri)),
      options_(WithClientDefaults(options)),
      wal_dir_(IsMemoryUri(uri_)
                   ? std::string()
                   : wal::DatasetDir(wal::ResolveRoot(options.wal_dir), "repo:" + uri_)),
      pipeline_(*this, PipelineOptions(uri_, wal_dir_, options)) {}

std::shared_ptr<RepoImpl> RepoImpl::Open(const std::string& location, const RepoOptions& options) {
  if (options.flush_rows == 0) throw Error(Code::kInvalidArgument, "flush_rows must be positive");
  if (options.optimize_memory < (1 << 20)) {
    throw Error(Code::kInvalidArgument, "optimize_memory must be at least 1 MiB");
  }
  std::shared_ptr<RepoImpl> repo(new RepoImpl(NormalizeLocation(location), options));
  repo->OpenTables();
  if (!IsMemoryUri(repo->uri_)) {
    repo->shared_ = std::make_unique<SharedCommits>(repo->uri_, repo->options_.storage_options,
                                                    repo->options_.commit_timeout);
  }
  repo->records_ =
      std::make_unique<RecordsStore>(repo->uri_, repo->options_.storage_options,
                                     &repo->pipeline_.clock(), options.version_retention);
  // One listing: repositories of earlier versions kept every records table
  // in one dataset; it is copied into per-table datasets once, and kept.
  if (!IsMemoryUri(repo->uri_) && repo->records_->HasLegacy()) repo->records_->MigrateLegacy();
  repo->LoadTombstones(true);
  repo->pipeline_.Open(repo);  // the WAL, and the replay of abandoned ones
  Background::Get().Register(repo);
  return repo;
}

void RepoImpl::OpenTables() {
  const auto& storage = options_.storage_options;
  for (int t = 0; t < kTableCount; ++t) {
    std::string uri = uri_ + "/" + std::string(TableDir(t));
    try {
      tables_[t] = std::make_shared<lance::Dataset>(lance::Dataset::Open(uri, storage));
    } catch (const Error& e) {
      if (e.code() != Code::kNotFound) throw;
      try {
        tables_[t] =
            std::make_shared<lance::Dataset>(lance::Dataset::Create(uri, storage, TableSchema(t)));
      } catch (const Error& again) {
        if (again.code() != Code::kConflict) throw;  // another handle created it first
        tables_[t] = std::make_shared<lance::Dataset>(lance::Dataset::Open(uri, storage));
      }
    }
    tables_[t]->SetCommitTimeout(options_.commit_timeout);
    tables_[t]->SetAutoCleanup(std::make_shared<lance::AutoCleanup>(options_.version_retention));
  }
  // Tables written before the later columns existed gain them, all null (a
  // metadata-only commit). Two handles racing here: the loser's commit fails
  // because the columns exist; it then finds them present.
  for (auto [table, late] :
       {std::pair{kRuns, &RunsLateColumns()}, std::pair{kMetrics, &MetricsLateColumns()}}) {
    auto names = ColumnNames(*tables_[table]);
    arrow::Schema missing;
    for (const auto& field : *late) {
      if (!names.count(field.name)) missing.push_back(field);
    }
    if (missing.empty()) continue;
    try {
      tables_[table]->AddNullColumns(missing);
      bool had_stats = std::none_of(missing.begin(), missing.end(),
                                    [](const arrow::Field& f) { return f.name == "stats"; });
      if (table == kMetrics && !had_stats) DeltasForOldPoints();
    } catch (const Error&) {
      tables_[table]->CheckoutLatest();
      auto now = ColumnNames(*tables_[table]);
      for (const auto& field : missing) {
        if (!now.count(field.name)) throw;
      }
    }
  }
}

// Points written before the stats column existed have no statistics rows.
// One pass over them gives each series a delta with the right step bounds and
// last point, marked dirty so that reads count its points exactly; the next
// optimize replaces it with an exact one.
void RepoImpl::DeltasForOldPoints() {
  lance::ScanOptions scan;
  scan.columns = {"series_id", "step", "timestamp", "value"};
  scan.filter = "series_id <> 0";
  scan.with_row_address = true;
  PointBuffer deltas;
  auto reader = tables_[kMetrics]->Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt64Column id(*batch, "series_id"), address(*batch, lance::kRowAddress);
    arrow::Int64Column step(*batch, "step");
    arrow::TimestampColumn timestamp(*batch, "timestamp");
    arrow::Float64Column value(*batch, "value");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      StatsDelta& delta = deltas.deltas[id.value(i)];
      delta.Add(step.value(i), value.value(i), timestamp.value(i), address.value(i));
      delta.set_dirty();
    }
  }
  if (!deltas.deltas.empty()) tables_[kMetrics]->Append(MetricsStream(deltas, {}));
}

std::map<std::string, Mark> RepoImpl::ReadMarks(
    int table, const std::optional<std::vector<uint64_t>>& fragments) {
  lance::ScanOptions scan;
  scan.fragment_ids = fragments;
  switch (table) {
    case kRuns:
    case kParams:
      scan.columns = {"seq", "run_id"};
      scan.filter = "starts_with(run_id, " + SqlString(kWalMarkPrefix) + ")";
      break;
    case kSeries:
      scan.columns = {"run_id", "name"};
      scan.filter = "series_id = 0";
      break;
    default:
      scan.columns = {"step", "epoch"};
      scan.filter = "series_id = 0 AND epoch IS NOT NULL AND value = 0";  // not level rows
  }
  std::map<std::string, Mark> marks;
  auto note = [&](std::string writer, uint64_t seq) {
    Mark& mark = marks[writer];
    mark.writer_id = std::move(writer);
    mark.seq = std::max(mark.seq, seq);
  };
  auto reader = tables_[table]->Scan(scan);
  while (auto batch = reader.Next()) {
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      if (table == kMetrics) {
        note(WriterIdFromStep(arrow::Int64Column(*batch, "step").value(i)),
             static_cast<uint64_t>(arrow::Int64Column(*batch, "epoch").value(i)));
        continue;
      }
      auto run_id = arrow::Utf8Column(*batch, "run_id").value(i);
      if (!IsMarkRunId(run_id)) continue;
      std::string writer(run_id.substr(kWalMarkPrefix.size()));
      uint64_t seq = table == kSeries
                         ? std::stoull(std::string(arrow::Utf8Column(*batch, "name").value(i)))
                         : arrow::UInt64Column(*batch, "seq").value(i);
      note(std::move(writer), seq);
    }
  }
  return marks;
}

// Replay (the pipeline claims the WALs of writers that are gone and skips
// what the marks cover): a crash between two of a flush's commits thus
// replays exactly the tables that missed it.

pipeline::Layer::RecordInfo RepoImpl::Describe(std::string_view record) {
  WalRecord decoded = DecodeWalRecord(record);
  uint64_t seq = SeqOf(decoded);
  return {TableOf(decoded), seq, seq};
}

std::vector<pipeline::Batch::Marks> RepoImpl::StoredMarks() {
  // A writer that died between announcing a fragment and seeing it committed
  // (shared_commits.h) has rows in storage-to-be that no mark covers yet:
  // committed first, their marks keep replay from writing them again.
  if (shared_) {
    for (int t = 0; t < kTableCount; ++t) shared_->CommitAnnounced(*tables_[t], TableName(t));
  }
  std::vector<pipeline::Batch::Marks> out(kTableCount);
  for (int t = 0; t < kTableCount; ++t) {
    for (const auto& [writer, mark] : ReadMarks(t)) out[t][writer] = mark.seq;
  }
  return out;
}

// Replayed points whose series the WAL does not carry must name a series
// already committed; if none does (its run was deleted since), they are
// dropped with the other rows of deleted runs.
void RepoImpl::PrepareReplay(std::span<const std::string_view> records) {
  std::unordered_set<uint64_t> replayed_series, point_series;
  for (std::string_view bytes : records) {
    WalRecord record = DecodeWalRecord(bytes);
    if (auto* series = std::get_if<SeriesRecord>(&record)) {
      replayed_series.insert(series->series.series_id);
    } else if (auto* points = std::get_if<PointsRecordData>(&record)) {
      for (const auto& [id, delta] : points->points.deltas) point_series.insert(id);
    }
  }
  std::vector<uint64_t> lookup;
  for (uint64_t id : point_series) {
    if (!replayed_series.count(id)) lookup.push_back(id);
  }
  std::vector<SeriesInfo> stored;
  for (size_t i = 0; i < lookup.size(); i += 500) {
    std::vector<uint64_t> part(lookup.begin() + i,
                               lookup.begin() + std::min(lookup.size(), i + 500));
    for (auto& s : ReadSeries(SqlIn("series_id", part))) stored.push_back(std::move(s));
  }
  auto locked = pipeline_.Lock();
  for (const auto& s : stored) {
    SeriesState& known = series_[s.series_id];
    known.id = s.series_id;
    known.run_id = s.run_id;
  }
}

void RepoImpl::Replay(std::string_view bytes, pipeline::Batch& pending) {
  auto& buf = static_cast<WriteBuffer&>(pending);
  WalRecord record = DecodeWalRecord(bytes);
  if (auto* run = std::get_if<RunRow>(&record)) {
    buf.runs.push_back(std::move(*run));
  } else if (auto* params = std::get_if<ParamsRecord>(&record)) {
    for (auto& row : Flatten(params->params)) {
      buf.params.push_back({params->seq, params->run_id, std::move(row)});
    }
  } else if (auto* series = std::get_if<SeriesRecord>(&record)) {
    SeriesState& known = series_[series->series.series_id];
    known.id = series->series.series_id;
    known.run_id = series->series.run_id;
    buf.series.push_back(std::move(series->series));
  } else {
    buf.points.Append(std::move(std::get<PointsRecordData>(record).points));
    buf.generation = WriteBuffer::NextGeneration();
  }
}

void RepoImpl::Close() {
  owner_.Check("repository", uri_);  // a fork's child must not flush the parent's WAL
  if (closed_.exchange(true)) return;
  pipeline_.Close();  // throws with the rows still logged
}

RepoImpl::~RepoImpl() {
  try {
    Close();
  } catch (...) {
    // The WAL still holds the rows; the next open replays them.
  }
}

void RepoImpl::CheckOpen() const {
  owner_.Check("repository", uri_);
  if (closed_) throw Error(Code::kNotSupported, "repository " + uri_ + " is closed");
}

}  // namespace kv0::tracking
