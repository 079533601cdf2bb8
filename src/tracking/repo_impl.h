// The machinery behind kv0::tracking::Repo and Run. One RepoImpl per open
// handle; Run handles share it.
//
// Following a write: Run::Track -> RepoImpl::Track (repo_write.cc) takes a
// seq from the pipeline's clock, logs the point to the WAL and adds it to the
// pending batch, under the write pipeline's lock (src/pipeline/
// write_pipeline.h says how a write becomes durable). A flush commits the
// batch table by table (RepoImpl::Commit: runs beside series, then params
// beside metrics, each with its mark rows); after it, tables over
// max_fragments are compacted. Reads (repo_read.cc) move each table they
// read to its latest version and scan it with a filter. Opening
// (repo_open.cc) creates or upgrades the tables and lets the pipeline replay
// abandoned WALs. optimize.cc holds Optimize.
//
// Locks, always taken in this order: search_mu_ (one run search at a time,
// over the handle's SearchCache), the pipeline's flush lock (one flush,
// compaction or optimize at a time), the pipeline's lock (the batches, the
// WAL record staging and the handle's caches of runs and series),
// deleted_mu_. flush_summaries_' lock is a leaf: nothing is locked under it.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "pipeline/write_pipeline.h"
#include "tracking/flush_summaries.h"
#include "tracking/records.h"
#include "tracking/run_record.h"
#include "tracking/search_cache.h"
#include "tracking/shared_commits.h"
#include "tracking/tables.h"
#include "tracking/wal_records.h"
#include "util/background.h"
#include "util/owner_process.h"

namespace kv0::tracking {

class BucketGrid;  // downsample.h

enum TableIndex { kRuns = 0, kParams = 1, kSeries = 2, kMetrics = 3, kTableCount = 4 };
// "runs", "params", "series", "metrics".
const char* TableName(int table);

// Above this many ids a filter lists none and the scan filters in memory (or
// the ids are split across scans of at most this many).
inline constexpr size_t kMaxFilterIds = 1000;

// ids in their first order, each once, without the reserved id 0.
std::vector<uint64_t> Unique(std::span<const uint64_t> ids);

// What this handle knows of one series.
struct SeriesState {
  uint64_t id = 0;
  std::string run_id;
  bool has_last = false;
  int64_t last_step = 0;  // greatest step tracked or loaded, if has_last
  // The series' delta in the write buffer, valid while delta_generation
  // equals the buffer's generation (a flush takes the buffer away).
  StatsDelta* delta = nullptr;
  uint64_t delta_generation = 0;
};

// Everything written and not yet committed: the pending batch, or the one a
// flush is committing.
struct WriteBuffer : pipeline::Batch {
  std::vector<RunRow> runs;
  std::vector<ParamChange> params;
  std::vector<SeriesInfo> series;
  PointBuffer points;
  // Changes whenever points.deltas may have moved (see SeriesState::delta);
  // unique across buffers.
  uint64_t generation = NextGeneration();
  // The tables this handle committed itself, for the compaction after it
  // (a table whose rows another writer's shared commit carried is left to
  // that writer: every writer compacting after the same commit would race).
  bool committed[kTableCount] = {false, false, false, false};

  bool empty() const override {
    return runs.empty() && params.empty() && series.empty() && points.empty();
  }
  static uint64_t NextGeneration();

 protected:
  void AppendWrites(Batch&& later) override;
};

}  // namespace kv0::tracking

struct kv0::tracking::Run::State {
  std::string run_id;
  bool deleted = false;  // a tombstone was seen: writes fail with NotFound
  // Created with a given id: stored points may exist that this handle has
  // not read (see Track).
  bool history_unknown = false;
  // The series this handle tracked or resumed, by name and then context;
  // they point into RepoImpl::series_. A name is looked up by string_view and
  // a context compared in place (a name rarely has more than a few), so
  // tracking a known series neither allocates nor serializes its context.
  struct Known {
    nlohmann::json context;
    SeriesState* series;
  };
  // Looked up by string_view on every Track, with absl's hash: the lookup,
  // with std::hash and a node-based map, was about a tenth of Track's
  // samples in a profile.
  absl::flat_hash_map<std::string, std::vector<Known>> series;

  // nullptr when (name, context) is not known yet.
  kv0::tracking::SeriesState* FindSeries(std::string_view name,
                                         const nlohmann::json& context) const;
  void AddSeries(std::string_view name, const nlohmann::json& context,
                 kv0::tracking::SeriesState* known);
};

namespace kv0::tracking {

struct RepoImpl : public BackgroundClient,
                  public pipeline::Layer,
                  public std::enable_shared_from_this<RepoImpl> {
  using SteadyTime = std::chrono::steady_clock::time_point;

  RepoImpl(std::string uri, const RepoOptions& options);
  ~RepoImpl() override;

  // repo_open.cc
  static std::shared_ptr<RepoImpl> Open(const std::string& uri, const RepoOptions& options);
  void OpenTables();
  void DeltasForOldPoints();
  // Each WAL writer's newest mark in the table (or in some of its fragments).
  std::map<std::string, Mark> ReadMarks(
      int table, const std::optional<std::vector<uint64_t>>& fragments = std::nullopt);
  void Close();

  // repo_write.cc
  std::shared_ptr<Run::State> NewRunState(const std::string& run_id);
  Run CreateRun(const NewRun& run);
  Run ResumeRun(const std::string& run_id);
  RunInfo UpdateRun(const std::string& run_id, const std::function<void(RunInfo&)>& change);
  // The run's record from storage and this handle's buffer (no flush).
  std::optional<RunInfo> CurrentRecord(const std::string& run_id);
  // Run::Update: UpdateRun, refused for a run this handle knows is deleted.
  RunInfo UpdateLive(Run::State& run, const std::function<void(RunInfo&)>& change);
  // Buffers one point. Unless may_wait, a point that would make the caller
  // flush (the buffer, with a flush's points, holds 2 * flush_rows) is not
  // written and false returned.
  bool Track(Run::State& run, double value, std::string_view name, const TrackOptions& opts,
             bool may_wait);
  void SetParams(Run::State& run, const nlohmann::json& params);
  // Writes an empty dirty delta per series: reads recompute them from their
  // points until optimize stores exact statistics.
  void MarkDirty(std::span<const uint64_t> ids);
  void Flush();
  // Run::FinishAt: the run's status and end time, then Flush(), or a
  // background flush without options_.finish_waits.
  void FinishLive(Run::State& run, std::string_view status, int64_t ended_at_us);
  void OnTick(SteadyTime now) override;
  void AddRunRow(pipeline::WritePipeline::Locked& write, RunRow row);
  // Commits one table's rows: an append, or with options_.shared_commits a
  // shared commit (shared_commits.h), which another writer's commit may
  // have carried.
  SharedCommits::Committed CommitRows(int table, arrow::OwnedStream rows);
  // Before a commit that removes fragments of `table` as the handle's
  // version holds them: the announcements of those fragments are retired
  // (shared_commits.h; every writer's, whatever this handle's options).
  void RetireAnnounced(int table);
  // Lance's compaction of `table`, leaving announced fragments alone.
  lance::CompactOptions CompactionOf(int table, lance::CompactOptions options = {}) const;
  void MaybeCompact(int table);
  void MergeUnsortedMetrics();

  // What the tracking layer plugs into the write pipeline (repo_write.cc and,
  // for replay, repo_open.cc).
  std::unique_ptr<pipeline::Batch> NewBatch() override;
  void Commit(pipeline::Batch& batch) override;
  void AfterCommit(pipeline::Batch& batch) override;
  RecordInfo Describe(std::string_view record) override;
  std::vector<pipeline::Batch::Marks> StoredMarks() override;
  void PrepareReplay(std::span<const std::string_view> records) override;
  void Replay(std::string_view record, pipeline::Batch& pending) override;

  // repo_read.cc
  std::vector<RunRow> ReadRunRows(const std::string& filter);
  std::vector<RunInfo> Runs();
  std::optional<RunInfo> GetRun(const std::string& run_id);
  std::map<std::string, nlohmann::json> ReadParams(const std::string& filter);
  std::vector<SeriesInfo> ReadSeries(const std::string& filter);
  std::map<uint64_t, SeriesStats> GetSeriesStats(std::span<const uint64_t> ids);
  // The statistics of ids (distinct, of live runs) at the version of metrics
  // the handle holds: merged deltas, and dirty series from their points.
  std::map<uint64_t, SeriesStats> StatsAtCurrentVersion(std::span<const uint64_t> ids);
  // The statistics of merged deltas; dirty series are computed from their
  // points at the handle's version of metrics.
  std::map<uint64_t, SeriesStats> FinishStats(const std::map<uint64_t, StatsDelta>& deltas);
  // Merged deltas of ids (dirty ones included), read from the reserved rows.
  // The statistics rows of ids, merged, at the version of metrics the handle
  // holds (callers move it to the latest first).
  // With fragments, only the statistics rows of those fragments. Without,
  // the flushed fragments' rows come from their summaries
  // (flush_summaries.h), read once per fragment.
  std::map<uint64_t, StatsDelta> ReadDeltas(
      std::span<const uint64_t> ids,
      const std::optional<std::vector<uint64_t>>& fragments = std::nullopt);
  // The same, read from `metrics` (a handle on metrics.lance at some version).
  static std::map<uint64_t, StatsDelta> ReadDeltasIn(
      lance::Dataset& metrics, std::span<const uint64_t> ids,
      const std::optional<std::vector<uint64_t>>& fragments);
  // The statistics rows that ReadDeltasIn merges, unmerged and undecoded:
  // visit(series id, encoded delta) for each row of those fragments that
  // may be one of ids (rows of other series too when ids are many; the
  // caller picks), so that a caller keeping deltas in its own layout does
  // not go through a map.
  static void ForEachDeltaIn(lance::Dataset& metrics, std::span<const uint64_t> ids,
                             const std::optional<std::vector<uint64_t>>& fragments,
                             absl::FunctionRef<void(uint64_t, std::string_view)> visit);
  void ReadStream(std::span<const uint64_t> ids, StepRange steps, std::optional<TimeRange> times,
                  ArrowArrayStream* out);
  std::map<uint64_t, MetricData> ReadMany(std::span<const uint64_t> ids, StepRange steps,
                                          std::optional<TimeRange> times);
  // Flushes, then moves the table to its latest version; returns it.
  lance::Dataset& Latest(int table);

  // run_search.cc
  RunPage SearchRuns(const RunQuery& query);

  // downsample.cc
  std::map<uint64_t, DownsampledSeries> ReadDownsampled(std::span<const uint64_t> ids,
                                                        const DownsampleOptions& options);
  void ReadDownsampledStream(std::span<const uint64_t> ids, const DownsampleOptions& options,
                             ArrowArrayStream* out);
  // downsample_levels.cc: the window [start, stop) of each of ids in the
  // grid's buckets (all of them, empty ones too, edges set), from the levels
  // optimize and flushes wrote; series with no point there are absent. False, with
  // nothing read into out, when the levels cannot answer: none written, or
  // rewritten since, or no cell of theirs fits in a bucket.
  bool ReadDownsampledFromLevels(const std::vector<uint64_t>& ids, const BucketGrid& grid,
                                 int64_t start, int64_t stop,
                                 std::map<uint64_t, std::vector<Bucket>>* out);
  // Throws InvalidArgument naming the first id in ids that no series has
  // (the reserved id 0 included); ids may repeat.
  void CheckSeriesExist(std::span<const uint64_t> ids);

  // delete.cc
  void DeleteRuns(std::span<const std::string> run_ids);
  // Reads tombstones from the runs fragments not read before; unless force,
  // at most once a second. Marks the runs deleted in this handle.
  void LoadTombstones(bool force);
  bool IsDeleted(const std::string& run_id);
  // ids without the series of deleted runs (free when no run is deleted).
  // Call it after moving metrics to the version a read will scan: every
  // point there then has its series row in the series table read here, so
  // an id with none belongs to a deleted run whose rows are being removed.
  std::vector<uint64_t> WithoutDeletedRuns(std::vector<uint64_t> ids);
  // For records reads: hides rows of deleted runs (tombstones read first).
  RecordsStore::Hidden HiddenRuns();
  // Removes from buf every row of a deleted run, and every point whose series
  // no live run names (holding the pipeline's lock).
  void DropDeletedLocked(WriteBuffer* buf);
  // Deletes the rows of run_ids from every table but their tombstones, in
  // the order points, statistics, series, params, runs, records. Tables with
  // no such row get no commit.
  void DeleteRowsOfRuns(const std::vector<std::string>& run_ids);

  // optimize.cc
  OptimizeStats Optimize();
  void FoldRuns(OptimizeStats* stats);
  void SortMetrics(OptimizeStats* stats);
  void PruneMarks(int table);

  // purge.cc
  PurgeStats Purge(bool force);

  // Throws NotSupported if the handle is closed or was opened by another
  // process (this one is a fork's child).
  void CheckOpen() const;
  RecordsStore& Records() {
    CheckOpen();
    return *records_;
  }
  // Throws NotFound for a run deleted since the handle was made (holding the
  // pipeline's lock).
  void CheckLive(const Run::State& run) const;

  const std::string uri_;
  // The process that opened the handle: in any other, the handle does
  // nothing at all (util/owner_process.h).
  const OwnerProcess owner_;
  const RepoOptions options_;

  // Shared so that a read stream can keep its table after Close.
  std::shared_ptr<lance::Dataset> tables_[kTableCount];
  std::unique_ptr<RecordsStore> records_;
  // Announced fragments (shared_commits.h); null for memory://.
  std::unique_ptr<SharedCommits> shared_;

  // This writer's newest mark row per table (its seq), for pruning older
  // ones; touched under the flush lock.
  uint64_t last_mark_[kTableCount] = {0, 0, 0, 0};
  // The point columns of the last committed flush, emptied but with their
  // capacity, handed to the next batch: refilling them costs no reallocation
  // and no fresh pages. Touched under the flush lock.
  PointBuffer spare_points_;

  // Guarded by the pipeline's lock.
  PointsRecord point_record_;                         // reused by Track, to log without allocating
  std::string wal_dir_;                               // empty for memory://
  std::unordered_map<uint64_t, SeriesState> series_;  // series this handle knows
  std::map<std::string, std::weak_ptr<Run::State>> run_states_;

  // Deleted runs, as the tombstones read so far say.
  std::mutex deleted_mu_;  // after the pipeline's lock when both are held
  std::unordered_set<std::string> deleted_;
  std::unordered_set<uint64_t> tombstone_fragments_;  // runs fragments read for tombstones
  uint64_t tombstone_version_ = 0;                    // runs version they were read at
  int64_t tombstone_check_ns_ = 0;                    // steady clock

  std::atomic<bool> closed_{false};

  // What the fragments flushes wrote say of themselves, kept for the next
  // read (flush_summaries.h).
  FlushSummaries flush_summaries_;

  // What run searches read, kept for the next one (search_cache.h).
  std::mutex search_mu_;
  std::unique_ptr<SearchCache> search_cache_;  // guarded by search_mu_

  // Last member: destroyed first, while everything its layer callbacks touch
  // still exists.
  pipeline::WritePipeline pipeline_;
};

}  // namespace kv0::tracking
