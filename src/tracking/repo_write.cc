// The write path: runs, parameters and points into the buffer (and the WAL),
// and the flush that commits the buffer table by table.

#include <cinttypes>
#include <cstdio>
#include <random>

#include "tracking/repo_impl.h"
#include "tracking/schema.h"

namespace kv0::tracking {
namespace {

std::atomic<void (*)(const char*)> flush_hook{nullptr};

int64_t NowMicros() { return static_cast<int64_t>(WallNanos() / 1000); }

// A UUIDv7 as 32 hex digits: 48 bits of Unix milliseconds, then random bits,
// so run ids sort by creation time.
std::string NewRunId() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  uint64_t ms = WallNanos() / 1'000'000;
  uint64_t hi = (ms << 16) | 0x7000 | (random() & 0x0fff);
  uint64_t lo = (random() & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
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

}  // namespace

bool RepoImpl::BufferFull() {
  std::lock_guard lock(write_mu_);
  // A failing flush puts its points back: count them as still buffered.
  return buffer_.points.size() + flushing_points_ + 1 >= 2 * options_.flush_rows;
}

void RepoImpl::CheckLive(const Run::State& run) const {
  if (run.deleted) {
    throw Error(Code::kNotFound, "run " + run.run_id + " was deleted from " + uri_);
  }
}

// Zero or one mark, as MetricsStream takes them.
static std::vector<Mark> Marks(const std::optional<Mark>& mark) {
  return mark ? std::vector<Mark>{*mark} : std::vector<Mark>{};
}

void SetFlushHookForTesting(void (*hook)(const char* table)) { flush_hook = hook; }

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

void RepoImpl::LogLocked(const std::string& record) {
  if (wal_) wal_->Append(record);
}

void RepoImpl::AddRunRowLocked(RunRow row) {
  LogLocked(EncodeRunRecord(row));
  buffer_.wal_seq[kRuns] = std::max(buffer_.wal_seq[kRuns], row.seq);
  buffer_.runs.push_back(std::move(row));
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
    std::lock_guard lock(write_mu_);
    AddRunRowLocked(RunRow{clock_.Next(), info, kAllRunFields});
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
  std::lock_guard lock(write_mu_);
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
    std::string key = s.name;
    if (!s.context.empty()) key += '\0' + s.context.dump();
    state->series[key] = &known;
  }
  return Run(shared_from_this(), std::move(state));
}

RunInfo RepoImpl::UpdateLive(Run::State& run, const std::function<void(RunInfo&)>& change) {
  {
    std::lock_guard lock(write_mu_);
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
    std::lock_guard lock(write_mu_);
    for (const auto& row : buffer_.runs) {
      if (row.record.run_id == run_id) rows.push_back(row);
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
  std::lock_guard lock(write_mu_);
  CheckOpen();
  if (fields != 0) {
    after.updated_at_us = NowMicros();
    AddRunRowLocked(RunRow{clock_.Next(), after, fields});
  }
  return after;
}

void RepoImpl::SetParams(Run::State& run, const nlohmann::json& params) {
  auto rows = Flatten(params);  // validates before anything is logged
  std::lock_guard lock(write_mu_);
  CheckOpen();
  CheckLive(run);
  uint64_t seq = clock_.Next();
  LogLocked(EncodeParamsRecord(seq, run.run_id, params));
  buffer_.wal_seq[kParams] = std::max(buffer_.wal_seq[kParams], seq);
  for (auto& row : rows) buffer_.params.push_back({seq, run.run_id, std::move(row)});
}

void RepoImpl::MarkDirty(std::span<const uint64_t> ids) {
  std::lock_guard lock(write_mu_);
  CheckOpen();
  for (uint64_t id : ids) {
    if (id != kReservedSeriesId) buffer_.points.deltas[id].set_dirty();
  }
}

void RepoImpl::Track(Run::State& run, double value, std::string_view name,
                     const TrackOptions& opts) {
  if (name.empty()) throw Error(Code::kInvalidArgument, "empty metric name");
  if (!opts.context.is_object()) {
    throw Error(Code::kInvalidArgument, "a metric context must be a JSON object");
  }
  size_t buffered;
  {
    std::lock_guard lock(write_mu_);
    CheckOpen();
    CheckLive(run);
    std::string context_key;
    std::string_view key = name;
    if (!opts.context.empty()) {
      context_key = std::string(name) + '\0' + opts.context.dump();
      key = context_key;
    }
    auto found = run.series.find(key);
    SeriesState* series;
    if (found != run.series.end()) {
      series = found->second;
    } else {
      uint64_t id = SeriesId(run.run_id, name, opts.context);
      auto [it, is_new] = series_.try_emplace(id);
      series = &it->second;
      series->id = id;
      if (is_new) {
        series->run_id = run.run_id;
        SeriesInfo info{id, run.run_id, std::string(name), opts.context, NowMicros()};
        uint64_t seq = clock_.Next();
        LogLocked(EncodeSeriesRecord(seq, info));
        buffer_.wal_seq[kSeries] = std::max(buffer_.wal_seq[kSeries], seq);
        buffer_.series.push_back(std::move(info));
      }
      run.series.emplace(std::string(key), series);
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
    uint64_t seq = clock_.Next();
    int64_t timestamp = opts.timestamp_us.value_or(static_cast<int64_t>(seq / 1000));
    if (wal_) {
      // The log is memory-mapped: this append is a copy into the page
      // cache, which outlives a crash of the process.
      point_record_.Start(seq);
      point_record_.Add(series->id, step, opts.epoch, timestamp, value);
      wal_->Append(point_record_.bytes());
      buffer_.wal_seq[kMetrics] = std::max(buffer_.wal_seq[kMetrics], seq);
    }
    if (series->delta_generation != buffer_.generation) {
      series->delta = &buffer_.points.deltas[series->id];
      series->delta_generation = buffer_.generation;
    }
    buffer_.points.Add(series->id, step, opts.epoch, timestamp, value, seq, dirty, series->delta);
    buffered = buffer_.points.size();
  }
  if (buffered >= 2 * options_.flush_rows) {
    Flush();  // the background flush is not keeping up: this writer waits
  } else if (buffered >= options_.flush_rows) {
    ScheduleFlush();
  }
}

void RepoImpl::ScheduleFlush() {
  // A failed flush puts the rows back in the buffer for the next one, so the
  // job's error needs no reporting.
  std::weak_ptr<RepoImpl> weak = weak_from_this();
  Background::Get().SubmitOnce(flush_queued_, [weak] {
    auto self = weak.lock();
    if (self && !self->closed_) self->Flush();
  });
}

void RepoImpl::OnTick(SteadyTime now) {
  if (closed_) return;
  int64_t now_ns = SteadyNanos(now);
  bool has_pending;
  {
    std::lock_guard lock(write_mu_);
    has_pending = !buffer_.empty();
  }
  if (wal_ && wal_->mode() == wal::SyncMode::kBatch && now_ns - last_wal_sync_ns_ >= 100'000'000) {
    last_wal_sync_ns_ = now_ns;
    wal_->Sync();
  }
  auto interval = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.flush_interval);
  if (has_pending && now_ns - last_flush_ns_ >= interval.count()) ScheduleFlush();
}

void RepoImpl::Flush() {
  CheckOpen();
  std::lock_guard lock(flush_mu_);
  FlushLocked();
}

void RepoImpl::FlushLocked() {
  last_flush_ns_ = SteadyNanos();
  {
    std::lock_guard lock(write_mu_);
    if (buffer_.empty()) return;
  }
  // Other writers' deletes, checked at most once a second: rows of runs
  // deleted elsewhere are dropped instead of committed.
  LoadTombstones(false);
  WriteBuffer buf;
  uint64_t sealed = 0;
  {
    std::lock_guard lock(write_mu_);
    if (buffer_.empty()) return;
    std::swap(buf, buffer_);
    std::swap(buffer_.points, spare_points_);
    buffer_.generation = buf.generation + 1;
    DropDeletedLocked(&buf);
    flushing_points_ = buf.points.size();
    // Sealing under the lock that took the rows makes the sealed segments
    // hold exactly what this flush commits.
    if (wal_) sealed = wal_->Seal();
  }

  auto mark = [&](int table) -> std::optional<Mark> {
    if (!wal_) return std::nullopt;
    return Mark{wal_->writer_id(), buf.wal_seq[table]};
  };
  // One append per table, in an order that lets a reader name every point it
  // sees. A table is cleared from buf once committed, so on failure buf holds
  // exactly what goes back to the buffer.
  bool committed[kTableCount] = {false, false, false, false};
  try {
    if (!buf.runs.empty()) {
      auto commit = tables_[kRuns]->Append(RunsStream(buf.runs, mark(kRuns)));
      {
        // Tombstones are never buffered: this commit holds none to read.
        std::lock_guard lock(deleted_mu_);
        tombstone_fragments_.insert(commit.fragment_ids.begin(), commit.fragment_ids.end());
      }
      buf.runs.clear();
      committed[kRuns] = true;
      last_mark_[kRuns] = buf.wal_seq[kRuns];
      if (auto hook = flush_hook.load()) hook("runs");
    }
    if (!buf.params.empty()) {
      tables_[kParams]->Append(ParamsStream(buf.params, mark(kParams)));
      buf.params.clear();
      committed[kParams] = true;
      last_mark_[kParams] = buf.wal_seq[kParams];
      if (auto hook = flush_hook.load()) hook("params");
    }
    if (!buf.series.empty()) {
      tables_[kSeries]->Append(SeriesStream(buf.series, mark(kSeries)));
      buf.series.clear();
      committed[kSeries] = true;
      last_mark_[kSeries] = buf.wal_seq[kSeries];
      if (auto hook = flush_hook.load()) hook("series");
    }
    if (!buf.points.empty()) {
      tables_[kMetrics]->Append(MetricsStream(buf.points, Marks(mark(kMetrics))));
      buf.points.Clear();
      std::swap(buf.points, spare_points_);
      committed[kMetrics] = true;
      last_mark_[kMetrics] = buf.wal_seq[kMetrics];
      if (auto hook = flush_hook.load()) hook("metrics");
    }
  } catch (...) {
    // The uncommitted rows go back in front of anything written meanwhile;
    // the sealed segments still hold them, so they stay until a flush
    // commits everything.
    std::lock_guard lock(write_mu_);
    buf.runs.insert(buf.runs.end(), buffer_.runs.begin(), buffer_.runs.end());
    buf.params.insert(buf.params.end(), buffer_.params.begin(), buffer_.params.end());
    buf.series.insert(buf.series.end(), buffer_.series.begin(), buffer_.series.end());
    buf.points.Append(std::move(buffer_.points));
    for (int t = 0; t < kTableCount; ++t) {
      buf.wal_seq[t] = std::max(buf.wal_seq[t], buffer_.wal_seq[t]);
    }
    uint64_t generation = buffer_.generation + 1;
    buffer_ = std::move(buf);
    buffer_.generation = generation;
    flushing_points_ = 0;
    throw;
  }
  {
    std::lock_guard lock(write_mu_);
    flushing_points_ = 0;
  }
  if (wal_) {
    try {
      wal_->DeleteSealed(sealed);
    } catch (const Error&) {
      // Harmless: the mark rows make a replay skip these records, and the
      // next flush deletes the segments.
    }
  }
  for (int t = 0; t < kTableCount; ++t) {
    if (committed[t]) MaybeCompact(t);
  }
}

// Each flush adds a fragment per table it wrote. Past max_fragments, Lance's
// compaction merges them (rows unchanged, so nothing is lost to a concurrent
// append), and this writer's older mark rows are dropped: only its newest
// one matters to a replay.
void RepoImpl::MaybeCompact(int table) {
  lance::Dataset& dataset = *tables_[table];
  if (lance::MergeableFragments(dataset.Fragments()) <= options_.max_fragments) return;
  try {
    dataset.Compact(lance::CompactOptions{});
    if (wal_ && last_mark_[table] != 0) {
      std::string writer = wal_->writer_id();
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
          // The metrics marks wait for optimize's rewrite: a delete by
          // predicate would scan the whole table at every compaction.
          break;
      }
    }
  } catch (const Error&) {
    // A concurrent compaction won; the next flush tries again.
  }
}

}  // namespace kv0::tracking
