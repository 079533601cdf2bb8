// The write path: runs, parameters and points into the buffer (and the WAL),
// and the flush that commits the buffer table by table.

#include <bit>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <functional>
#include <future>
#include <random>
#include <set>

#include "tracking/flush_summaries.h"
#include "tracking/levels.h"
#include "tracking/repo_impl.h"
#include "tracking/schema.h"

namespace kv0::tracking {
namespace {

int64_t NowMicros() { return static_cast<int64_t>(WallNanos() / 1000); }

// One table's commit in a flush's round, taken when the table has rows.
struct TableCommit {
  bool wanted;
  std::function<void()> commit;
};

// Runs a round's commits at once and returns when every one has finished,
// then rethrows the first failure: a commit that failed left its table's rows
// in the batch, and one that succeeded took its own out.
void CommitTogether(std::initializer_list<TableCommit> round) {
  std::vector<std::future<void>> others;
  const TableCommit* here = nullptr;  // the first, on this thread
  for (const TableCommit& table : round) {
    if (!table.wanted) continue;
    if (here == nullptr) {
      here = &table;
    } else {
      others.push_back(std::async(std::launch::async, table.commit));
    }
  }
  std::exception_ptr failure;
  if (here != nullptr) {
    try {
      here->commit();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  for (std::future<void>& other : others) {
    try {
      other.get();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// A UUIDv7 as 32 hex digits: 48 bits of Unix milliseconds, then random bits,
// so run ids sort by creation time.
std::string NewRunId() {
  // Seeded per thread, and again in a fork's child: the child's copy of the
  // parent's generator would draw the parent's (and every sibling's) bits,
  // and runs created in the same millisecond would share an id.
  thread_local struct {
    OwnerProcess process;
    std::mt19937_64 bits{std::random_device{}()};
  } random;
  if (random.process.Inherited()) {
    random.process = OwnerProcess();
    random.bits.seed(std::random_device{}());
  }
  uint64_t ms = WallNanos() / 1'000'000;
  uint64_t hi = (ms << 16) | 0x7000 | (random.bits() & 0x0fff);
  uint64_t lo = (random.bits() & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
  char text[40];
  std::snprintf(text, sizeof(text), "%016" PRIx64 "%016" PRIx64, hi, lo);
  return text;
}

void CheckRunId(const std::string& run_id) {
  if (run_id.empty()) throw Error(Code::kInvalidArgument, "empty run id");
  if (run_id.starts_with(kWalMarkPrefix)) {
    throw Error(Code::kInvalidArgument,
                "run ids starting with " + std::string(kWalMarkPrefix) + " are reserved");
  }
}

void CheckRecord(const RunInfo& info) {
  if (!IsValidStatus(info.status)) {
    throw Error(Code::kInvalidArgument, "invalid run status \"" + info.status +
                                            "\" (running, finished, failed or aborted)");
  }
}

// Equal and of the same JSON types all the way down, and floats bit for
// bit, so that equal contexts serialize alike: 1 and 1.0, or 0.0 and -0.0,
// are == in nlohmann::json but name different series. A test stricter than
// the series id only costs a second entry for the same series.
bool SameJson(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.type() != b.type()) return false;
  if (a.is_number_float()) {
    return std::bit_cast<uint64_t>(a.get<double>()) == std::bit_cast<uint64_t>(b.get<double>());
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto x = a.begin(), y = b.begin(); x != a.end(); ++x, ++y) {
      if (x.key() != y.key() || !SameJson(x.value(), y.value())) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!SameJson(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

void RepoImpl::CheckLive(const Run::State& run) const {
  if (run.deleted) {
    throw Error(Code::kNotFound, "run " + run.run_id + " was deleted from " + uri_);
  }
}

uint64_t WriteBuffer::NextGeneration() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void WriteBuffer::AppendWrites(Batch&& other) {
  auto& later = static_cast<WriteBuffer&>(other);
  runs.insert(runs.end(), later.runs.begin(), later.runs.end());
  params.insert(params.end(), later.params.begin(), later.params.end());
  series.insert(series.end(), later.series.begin(), later.series.end());
  points.Append(std::move(later.points));
  // Deltas of both moved: pointers into either are stale.
  generation = NextGeneration();
}

// The batch's mark rows for one table, as the streams take them.
static std::vector<Mark> MarksOf(const WriteBuffer& buf, int table) {
  std::vector<Mark> marks;
  for (const auto& [writer, seq] : buf.marks(table)) marks.push_back(Mark{writer, seq});
  return marks;
}

std::shared_ptr<Run::State> RepoImpl::NewRunState(const std::string& run_id) {
  // Handles on one run share its series cache.
  if (auto it = run_states_.find(run_id); it != run_states_.end()) {
    if (auto state = it->second.lock()) return state;
  }
  auto state = std::make_shared<Run::State>();
  state->run_id = run_id;
  run_states_[run_id] = state;
  return state;
}

// Throws InvalidArgument for a change too large to commit, before it is
// logged.
static const std::string& Checked(const std::string& record) {
  if (record.size() > kMaxWriteSize) {
    throw Error(Code::kInvalidArgument, "a change of " + std::to_string(record.size()) +
                                            " bytes is over kv0's limit of 1 GiB");
  }
  return record;
}

void RepoImpl::AddRunRow(pipeline::WritePipeline::Locked& write, RunRow row) {
  write.Log(Checked(EncodeRunRecord(row)), kRuns, row.seq);
  write.pending<WriteBuffer>().runs.push_back(std::move(row));
}

Run RepoImpl::CreateRun(const NewRun& spec) {
  CheckOpen();
  RunInfo info;
  info.run_id = spec.run_id.value_or(NewRunId());
  CheckRunId(info.run_id);
  LoadTombstones(false);
  if (IsDeleted(info.run_id)) {
    throw Error(Code::kInvalidArgument,
                "run " + info.run_id + " was deleted; its id cannot be used again");
  }
  info.name = spec.name;
  info.experiment = spec.experiment;
  info.description = spec.description;
  info.tags = spec.tags;
  info.kind = spec.kind;
  info.target = spec.target;
  int64_t now = NowMicros();
  info.created_at_us = spec.created_at_us.value_or(now);
  info.updated_at_us = now;
  std::shared_ptr<Run::State> state;
  {
    auto write = pipeline_.BeginWrite();
    AddRunRow(write, RunRow{pipeline_.clock().Next(), info, kAllRunFields});
    state = NewRunState(info.run_id);
    // A given id may name a run with stored points this handle has not
    // read: its first points to each series are counted as possibly
    // overwriting some.
    state->history_unknown = spec.run_id.has_value();
  }
  return Run(shared_from_this(), std::move(state));
}

Run RepoImpl::ResumeRun(const std::string& run_id) {
  auto info = GetRun(run_id);
  if (!info) throw Error(Code::kNotFound, "run " + run_id + " does not exist in " + uri_);
  auto series = ReadSeries("run_id = " + SqlString(run_id));
  std::vector<uint64_t> ids;
  for (const auto& s : series) ids.push_back(s.series_id);
  // The last steps come from the statistics rows; no point is read.
  Latest(kMetrics);
  auto deltas = ReadDeltas(ids);
  auto locked = pipeline_.Lock();
  auto state = NewRunState(run_id);
  for (const auto& s : series) {
    SeriesState& known = series_[s.series_id];
    known.id = s.series_id;
    known.run_id = run_id;
    auto delta = deltas.find(s.series_id);
    if (delta != deltas.end() && !delta->second.empty()) {
      known.last_step = known.has_last ? std::max(known.last_step, delta->second.last_step())
                                       : delta->second.last_step();
      known.has_last = true;
    }
    state->AddSeries(s.name, s.context, &known);
  }
  return Run(shared_from_this(), std::move(state));
}

RunInfo RepoImpl::UpdateLive(Run::State& run, const std::function<void(RunInfo&)>& change) {
  {
    auto locked = pipeline_.Lock();
    CheckOpen();
    CheckLive(run);
  }
  return UpdateRun(run.run_id, change);
}

std::optional<RunInfo> RepoImpl::CurrentRecord(const std::string& run_id) {
  // The buffer's rows of the run and the stored ones merge like any rows, so
  // no flush is needed. A flush moving rows in between only hides changes
  // this handle made to fields that the update then leaves alone.
  std::vector<RunRow> rows;
  {
    // The batch a flush is committing counts too: its rows are not in
    // storage yet (and if the commit lands meanwhile, the read below sees
    // them; a row read twice merges like any other).
    auto locked = pipeline_.Lock();
    for (const WriteBuffer* buf :
         {&locked.pending<WriteBuffer>(), locked.in_flight<WriteBuffer>()}) {
      if (buf == nullptr) continue;
      for (const auto& row : buf->runs) {
        if (row.record.run_id == run_id) rows.push_back(row);
      }
    }
  }
  for (auto& row : ReadRunRows("run_id = " + SqlString(run_id))) rows.push_back(std::move(row));
  return MergeRun(std::move(rows));
}

RunInfo RepoImpl::UpdateRun(const std::string& run_id,
                            const std::function<void(RunInfo&)>& change) {
  CheckOpen();
  auto before = CurrentRecord(run_id);
  if (!before) throw Error(Code::kNotFound, "run " + run_id + " does not exist in " + uri_);
  RunInfo after = *before;
  change(after);
  after.run_id = run_id;
  CheckRecord(after);
  uint32_t fields = ChangedFields(*before, after);
  auto write = pipeline_.BeginWrite();
  if (fields != 0) {
    after.updated_at_us = NowMicros();
    AddRunRow(write, RunRow{pipeline_.clock().Next(), after, fields});
  }
  return after;
}

void RepoImpl::SetParams(Run::State& run, const nlohmann::json& params) {
  auto rows = Flatten(params);  // validates before anything is logged
  auto write = pipeline_.BeginWrite();
  CheckLive(run);
  uint64_t seq = pipeline_.clock().Next();
  write.Log(Checked(EncodeParamsRecord(seq, run.run_id, params)), kParams, seq);
  auto& pending = write.pending<WriteBuffer>();
  for (auto& row : rows) pending.params.push_back({seq, run.run_id, std::move(row)});
}

void RepoImpl::MarkDirty(std::span<const uint64_t> ids) {
  auto write = pipeline_.BeginWrite();
  auto& pending = write.pending<WriteBuffer>();
  for (uint64_t id : ids) {
    if (id != kReservedSeriesId) pending.points.deltas[id].set_dirty();
  }
}

SeriesState* Run::State::FindSeries(std::string_view name, const nlohmann::json& context) const {
  auto found = series.find(absl::string_view(name.data(), name.size()));
  if (found == series.end()) return nullptr;
  for (const Known& k : found->second) {
    if (SameJson(k.context, context)) return k.series;
  }
  return nullptr;
}

void Run::State::AddSeries(std::string_view name, const nlohmann::json& context,
                           SeriesState* known) {
  auto found = series.find(absl::string_view(name.data(), name.size()));
  if (found == series.end()) found = series.emplace(std::string(name), std::vector<Known>{}).first;
  found->second.push_back({context, known});
}

bool RepoImpl::Track(Run::State& run, double value, std::string_view name, const TrackOptions& opts,
                     bool may_wait) {
  if (name.empty()) throw Error(Code::kInvalidArgument, "empty metric name");
  if (!opts.context.is_object()) {
    throw Error(Code::kInvalidArgument, "a metric context must be a JSON object");
  }
  size_t buffered;
  {
    auto write = pipeline_.BeginWrite();
    auto& pending = write.pending<WriteBuffer>();
    CheckLive(run);
    if (!may_wait) {
      // A failing flush puts its points back: count them as still buffered.
      const WriteBuffer* flushing = write.in_flight<WriteBuffer>();
      if (pending.points.size() + (flushing ? flushing->points.size() : 0) + 1 >=
          2 * options_.flush_rows) {
        return false;
      }
    }
    SeriesState* series = run.FindSeries(name, opts.context);
    if (series == nullptr) {
      uint64_t id = SeriesId(run.run_id, name, opts.context);
      auto [it, is_new] = series_.try_emplace(id);
      series = &it->second;
      series->id = id;
      if (is_new) {
        series->run_id = run.run_id;
        SeriesInfo info{id, run.run_id, std::string(name), opts.context, NowMicros()};
        uint64_t seq = pipeline_.clock().Next();
        write.Log(Checked(EncodeSeriesRecord(seq, info)), kSeries, seq);
        pending.series.push_back(std::move(info));
      }
      run.AddSeries(name, opts.context, series);
    }

    int64_t step = opts.step.value_or(series->has_last ? series->last_step + 1 : 0);
    // A step at or below one already written may replace a point that some
    // delta counts: readers then recompute this series from its points.
    bool dirty = (series->has_last && step <= series->last_step) ||
                 (!series->has_last && run.history_unknown);
    series->last_step = series->has_last ? std::max(series->last_step, step) : step;
    series->has_last = true;
    // One clock read serves both: a seq is the wall clock in nanoseconds,
    // bumped past anything seen.
    uint64_t seq = pipeline_.clock().Next();
    int64_t timestamp = opts.timestamp_us.value_or(static_cast<int64_t>(seq / 1000));
    if (pipeline_.has_wal()) {
      // The log is memory-mapped: this append is a copy into the page
      // cache, which outlives a crash of the process.
      point_record_.Start(seq);
      point_record_.Add(series->id, step, opts.epoch, timestamp, value);
      write.Log(point_record_.bytes(), kMetrics, seq);
    }
    if (series->delta_generation != pending.generation) {
      series->delta = &pending.points.deltas[series->id];
      series->delta_generation = pending.generation;
    }
    pending.points.Add(series->id, step, opts.epoch, timestamp, value, seq, dirty, series->delta);
    buffered = pending.points.size();
  }
  if (buffered >= 2 * options_.flush_rows) {
    pipeline_.FlushForBackpressure();  // the background flush is not keeping up
  } else if (buffered >= options_.flush_rows) {
    pipeline_.FlushSoon();
  }
  return true;
}

void RepoImpl::OnTick(SteadyTime now) {
  if (!closed_) pipeline_.OnTick(now);
}

void RepoImpl::Flush() {
  CheckOpen();
  pipeline_.Flush();
}

// A finish writes a row whose mask holds only the status and the end time,
// so a merge takes every other field from the rows before it, whoever wrote
// them, and nothing needs reading first. (An update reads the record to
// know which fields changed: a scan of the runs table that cost a short
// run's finish about as much as one of its commits.)
void RepoImpl::FinishLive(Run::State& run, std::string_view status, int64_t ended_at_us) {
  RunInfo fields;
  fields.run_id = run.run_id;
  fields.status = std::string(status);
  fields.ended_at_us = ended_at_us;
  CheckRecord(fields);
  {
    auto write = pipeline_.BeginWrite();
    CheckLive(run);
    fields.updated_at_us = NowMicros();
    AddRunRow(write,
              RunRow{pipeline_.clock().Next(), std::move(fields), kFieldStatus | kFieldEndedAt});
  }
  if (options_.finish_waits) {
    pipeline_.Flush();
  } else {
    pipeline_.FlushSoon();
  }
}

std::unique_ptr<pipeline::Batch> RepoImpl::NewBatch() {
  auto buf = std::make_unique<WriteBuffer>();
  std::swap(buf->points, spare_points_);
  return buf;
}

void RepoImpl::Commit(pipeline::Batch& batch) {
  auto& buf = static_cast<WriteBuffer&>(batch);
  // Other writers' deletes, checked at most once a second: rows of runs
  // deleted elsewhere are dropped instead of committed. A closing handle
  // skips the check (it reads the store, and close waits only for its
  // commits): rows it then commits for such runs stay hidden, as those of
  // any writer racing a delete do, and optimize removes them.
  if (!closed_) LoadTombstones(false);
  {
    auto locked = pipeline_.Lock();
    DropDeletedLocked(&buf);
  }
  const std::string& writer = pipeline_.writer_id();
  // After a table's commit its rows and marks leave the batch (under the
  // lock: reads look at the batch), so on failure the batch holds exactly
  // what goes back.
  auto done = [&](int table, const SharedCommits::Committed& commit, auto clear_rows) {
    if (auto own = buf.marks(table).find(writer); own != buf.marks(table).end()) {
      last_mark_[table] = own->second;
    }
    auto locked = pipeline_.Lock();
    clear_rows();
    buf.ClearMarks(table);
    buf.committed[table] = commit.by_this_writer;
  };
  // Two rounds, each committing its tables at once (on S3 a commit is mostly
  // waiting). A reader names a point through its series, so series go before
  // metrics; run search reads params and metrics at versions older than the
  // runs it reads (run_search.cc), so runs go before both. Runs and series
  // wait for nothing. A round that fails leaves the next one uncommitted.
  auto commit_runs = [&] {
    auto commit = CommitRows(kRuns, RunsStream(buf.runs, MarksOf(buf, kRuns)));
    {
      // Tombstones are never buffered: this commit holds none to read.
      std::lock_guard lock(deleted_mu_);
      const auto& ids = commit.result.fragment_ids;
      tombstone_fragments_.insert(ids.begin(), ids.end());
    }
    done(kRuns, commit, [&] { buf.runs.clear(); });
  };
  auto commit_series = [&] {
    auto commit = CommitRows(kSeries, SeriesStream(buf.series, MarksOf(buf, kSeries)));
    done(kSeries, commit, [&] { buf.series.clear(); });
  };
  auto commit_params = [&] {
    auto commit = CommitRows(kParams, ParamsStream(buf.params, MarksOf(buf, kParams)));
    done(kParams, commit, [&] { buf.params.clear(); });
  };
  auto commit_metrics = [&] {
    SharedCommits::Committed commit;
    try {
      commit = CommitRows(kMetrics, FlushStream(buf.points, MarksOf(buf, kMetrics)));
    } catch (const Error&) {
      // A commit that failed may still have happened (a timeout after Lance
      // wrote the manifest), and then the retry stores these statistics
      // twice. Dirty deltas are recomputed from the points, which a second
      // copy does not change: reads keep one point per step.
      auto locked = pipeline_.Lock();
      for (auto& [id, delta] : buf.points.deltas) delta.set_dirty();
      throw;
    }
    done(kMetrics, commit, [&] {
      buf.points.Clear();  // keeps the columns' capacity for the next batch
      std::swap(buf.points, spare_points_);
    });
  };
  // Each table's rows stay in the batch until its commit succeeds, so a
  // table whose round comes twice (after a failure) commits only what is left.
  CommitTogether({{!buf.runs.empty(), commit_runs}, {!buf.series.empty(), commit_series}});
  CommitTogether({{!buf.params.empty(), commit_params}, {!buf.points.empty(), commit_metrics}});
}

SharedCommits::Committed RepoImpl::CommitRows(int table, arrow::OwnedStream rows) {
  if (options_.shared_commits && shared_) {
    return shared_->Commit(*tables_[table], TableName(table), std::move(rows));
  }
  return {tables_[table]->Append(std::move(rows)), true};
}

void RepoImpl::RetireAnnounced(int table) {
  if (shared_) shared_->Retire(*tables_[table], TableName(table));
}

lance::CompactOptions RepoImpl::CompactionOf(int table, lance::CompactOptions options) const {
  if (shared_) options.protected_dir = shared_->Dir(TableName(table));
  return options;
}

void RepoImpl::AfterCommit(pipeline::Batch& batch) {
  // A closing handle leaves compaction to the next one: close takes only
  // its flush's commits.
  if (closed_) return;
  auto& buf = static_cast<WriteBuffer&>(batch);
  for (int t = 0; t < kTableCount; ++t) {
    if (buf.committed[t]) MaybeCompact(t);
  }
}

// Each flush adds a fragment per table it wrote. Past max_fragments, Lance's
// compaction merges them (rows unchanged, so nothing is lost to a concurrent
// append), and this writer's older mark rows are dropped: only its newest
// one matters to a replay.
void RepoImpl::MaybeCompact(int table) {
  lance::Dataset& dataset = *tables_[table];
  if (table == kMetrics) return MergeUnsortedMetrics();
  if (lance::MergeableFragments(dataset.Fragments()) <= options_.max_fragments) return;
  try {
    dataset.Compact(CompactionOf(table));
    if (pipeline_.has_wal() && last_mark_[table] != 0) {
      const std::string& writer = pipeline_.writer_id();
      std::string prefix = SqlString(std::string(kWalMarkPrefix) + writer);
      uint64_t newest = last_mark_[table];
      switch (table) {
        case kRuns:
        case kParams:
          dataset.Delete("run_id = " + prefix + " AND seq < " + std::to_string(newest));
          break;
        case kSeries: {
          char digits[24];
          std::snprintf(digits, sizeof(digits), "%020" PRIu64, newest);
          dataset.Delete("series_id = 0 AND run_id = " + prefix + " AND name < " +
                         SqlString(digits));
          break;
        }
        default:
          break;
      }
    }
  } catch (const Error&) {
    // A concurrent compaction won; the next flush tries again.
  }
}

// Metrics' small fragments are merged as the others', except those optimize
// sorted: Lance's compaction would merge them too (they are small when a
// series is), and a sorted fragment gone makes the next optimize rewrite the
// whole table and, until then, keeps reads off the levels. So the unsorted
// ones are copied, rows unchanged, into one fragment that replaces them in
// one Update, their reserved rows gathered at its end where a reader finds
// them by address (flush_summaries.h). (The metrics marks wait for
// optimize's rewrite: a delete by predicate would scan the whole table at
// every flush.)
void RepoImpl::MergeUnsortedMetrics() {
  lance::Dataset& metrics = *tables_[kMetrics];
  const std::set<uint64_t> sorted = FragmentList(metrics.Metadata(), kSortedFragmentsKey);
  std::vector<uint64_t> small;
  for (const auto& f : metrics.Fragments()) {
    if (!sorted.count(f.id) && f.physical_rows < lance::kCompactTargetRows) small.push_back(f.id);
  }
  if (small.size() <= options_.max_fragments) return;
  try {
    RetireAnnounced(kMetrics);
    metrics.CommitUpdate(small, metrics.WriteFragments(MergedFlushesStream(metrics, small)));
  } catch (const Error&) {
    // A concurrent optimize or merge took them; the next flush tries again.
  }
}

}  // namespace kv0::tracking
