// kv0::tracking: the storage of an experiment tracker.
//
// A repository is a location (a local directory or an object-store URI)
// holding four Lance datasets, plus one per records table:
//
//   runs.lance          one row per change of a run's record
//   params.lance        one row per (run, dotted parameter key) change
//   series.lance        one row per metric series (run, name, context)
//   metrics.lance       the points, plus statistics rows (see SeriesStats)
//   records/<t>.lance   rows of the records table t (see AppendRecords)
//
// Writing. Run::Track and Run::SetParams only append to a buffer shared by
// the Repo handle, and to a local write-ahead log. The buffer is committed
// when it holds flush_rows points, every flush_interval, on Flush(),
// Run::Finish() (see finish_waits) and Close(): one append per non-empty
// table, runs beside series, then params beside metrics, so a reader never
// meets a point of a series or the parameters of a run it cannot see yet.
// A failed flush keeps the rows it did not commit for the next one.
//
// Limits. One change (a run's record as CreateRun or an update writes it, one
// SetParams call, a new series' name and context) is at most kMaxWriteSize
// bytes of JSON; a larger one fails with InvalidArgument and changes
// nothing. A flush of more than 2 GiB is committed as several Arrow batches
// of one fragment per table, so everything accepted can be committed.
//
// Reading. Every query flushes the handle's buffer first, moves to the
// latest version of the tables it reads and scans them with a filter; so a
// handle always reads its own writes and, at query time, everything other
// writers committed.
//
// Slow stores. Queries read the store, so they wait for it, but never
// without a bound: each request for at most request_timeout (retried
// request_retries times), the query's flush for at most commit_timeout per
// table, and then the query fails with IOError (the buffered writes stay
// buffered and logged). Run::Update and CreateRun read too (the stored
// record; deletions, at most once a second), with the same bounds. Track
// and SetParams never wait on the store: they only log and buffer (a
// writer that runs twice flush_rows ahead of the background flush tries
// one flush itself, unless flushes are backing off after failures).
//
// Concurrency. Repo and Run are thread-safe. Many processes may write to one
// repository at once (all writes are appends). Changes to one run merge field
// by field: two writers that change different fields never undo each other,
// and for one field the change with the newest sequence number wins.
//
// Fork. A Repo and its Runs belong to the process that opened the Repo. In
// the child of a fork() every call on them throws NotSupported, and
// destroying them does nothing (no flush, no close, no change to the
// parent's write-ahead log or locks); the child opens a Repo of its own.
//
// Failures throw kv0::Error (include/kv0/error.h); absence is std::optional.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv0/arrow_c.h"
#include "kv0/error.h"
#include "kv0/wal_sync.h"

namespace kv0::tracking {

inline constexpr size_t kMaxWriteSize = size_t{1} << 30;

// ---------------------------------------------------------------------------
// Values exchanged with the API. Each has a JSON form (to_json/from_json for
// nlohmann::json) for HTTP APIs; times are integers in microseconds since the
// Unix epoch, UTC.

// The record of one run, as readers see it.
struct RunInfo {
  std::string run_id;
  std::optional<std::string> name, experiment, description;
  std::vector<std::string> tags;
  std::string status = "running";  // running, finished, failed or aborted
  bool archived = false;
  int64_t created_at_us = 0;
  int64_t updated_at_us = 0;  // time of the run's newest row
  std::optional<int64_t> ended_at_us;
  std::optional<std::string> kind;       // training, eval, ...
  std::optional<nlohmann::json> target;  // what the run is about

  bool operator==(const RunInfo&) const = default;
};

// True for the statuses a run may have: running, finished, failed, aborted.
bool IsValidStatus(std::string_view status);

// JSON: an object whose keys are the member names above. to_json omits
// absent optionals. from_json requires run_id; a missing key takes the
// member's default and a null name, experiment, description, ended_at_us or
// kind means absent. Throws kv0::Error(kInvalidArgument), naming the key, for
// a value of the wrong type or an invalid status.
void to_json(nlohmann::json& j, const RunInfo& info);
void from_json(const nlohmann::json& j, RunInfo& info);

// One metric series of a run.
struct SeriesInfo {
  // xxh3 of the run id, the name and the canonical context (see SeriesId).
  uint64_t series_id = 0;
  std::string run_id;
  std::string name;
  nlohmann::json context = nlohmann::json::object();
  int64_t created_at_us = 0;

  bool operator==(const SeriesInfo&) const = default;
};
void to_json(nlohmann::json& j, const SeriesInfo& info);
void from_json(const nlohmann::json& j, SeriesInfo& info);

// What a tracker shows about a series, read without reading its points.
//
// The last point is the one with the greatest step (at one step, the latest
// write). min and max consider finite values only; a series whose points are
// all non-finite has min and max NaN and min_step and max_step 0. count and
// non_finite count every point (NaN and infinities are non-finite).
// last_timestamp_us is the newest timestamp of any point.
struct SeriesStats {
  uint64_t count = 0;
  int64_t first_step = 0;
  int64_t last_step = 0;
  double last = 0;
  double min = 0;
  int64_t min_step = 0;
  double max = 0;
  int64_t max_step = 0;
  uint64_t non_finite = 0;
  int64_t last_timestamp_us = 0;

  bool operator==(const SeriesStats&) const = default;
};
// JSON has no NaN or infinities: NaN is written as null, infinities as the
// strings "Infinity" and "-Infinity"; from_json reads them back.
void to_json(nlohmann::json& j, const SeriesStats& stats);
void from_json(const nlohmann::json& j, SeriesStats& stats);

// The points of one series, ordered by step, one point per step (the latest
// written). Column i of each vector describes point i.
struct MetricData {
  std::vector<int64_t> steps;
  std::vector<std::optional<int64_t>> epochs;
  std::vector<int64_t> timestamps_us;
  std::vector<double> values;

  size_t size() const { return steps.size(); }
  bool operator==(const MetricData&) const = default;
};
// JSON: {"steps": [...], "epochs": [... or null], "timestamps_us": [...],
// "values": [...]}, non-finite values written as for SeriesStats.
void to_json(nlohmann::json& j, const MetricData& data);
void from_json(const nlohmann::json& j, MetricData& data);

// The id of the series (run_id, name, context): xxh3-64 of run_id, a zero
// byte, name, a zero byte and the context as compact JSON with sorted keys.
// 0 is reserved for statistics rows, so a hash of 0 becomes 1. Throws
// kInvalidArgument if context is not an object.
uint64_t SeriesId(std::string_view run_id, std::string_view name, const nlohmann::json& context);

// ---------------------------------------------------------------------------
// Arguments.

struct NewRun {
  std::optional<std::string> run_id;  // default: a new UUIDv7, 32 hex digits
  std::optional<std::string> name, experiment, description;
  std::vector<std::string> tags;
  std::optional<std::string> kind;
  std::optional<nlohmann::json> target;
  std::optional<int64_t> created_at_us;  // default: now (an import keeps its time)
};

struct TrackOptions {
  std::optional<int64_t> step;  // default: one past the series' last step
  std::optional<int64_t> epoch;
  nlohmann::json context = nlohmann::json::object();  // must be an object
  std::optional<int64_t> timestamp_us;                // default: now
};

// Steps start <= step < stop.
struct StepRange {
  int64_t start = std::numeric_limits<int64_t>::min();
  int64_t stop = std::numeric_limits<int64_t>::max();
};

// Timestamps start_us <= timestamp < stop_us.
struct TimeRange {
  int64_t start_us = std::numeric_limits<int64_t>::min();
  int64_t stop_us = std::numeric_limits<int64_t>::max();
};

// --- Downsampled reads ------------------------------------------------------
//
// A chart shows a series of millions of points on a few thousand pixels. A
// downsampled read cuts a window of the axis into buckets and reduces each
// bucket to the points a line chart needs to look exactly like the full
// series (first, last, minimum, maximum: "M4"), plus counts and timestamps.

enum class Axis { kStep, kTime };

struct DownsampleOptions {
  // Buckets across the window; > 0. A read returns at most buckets + 1 per
  // series (see Bucket for why one more).
  int64_t buckets = 1000;
  // The window [start, stop) on the axis: steps, or for kTime timestamps in
  // microseconds since the Unix epoch. An unset end is the extreme point of
  // all the series read, so that they share one axis.
  std::optional<int64_t> start, stop;
  Axis x = Axis::kStep;
};

// The points of one series with x in [start, stop).
//
// The edges lie on a grid: cells of DownsampledSeries::width (a power of two,
// the smallest for which `buckets` cells cover the window), counted from 0
// and clipped to the window, so the first and last buckets may be narrower
// and there may be one more than asked for. Steps are the latest write of
// each step, as in every read.
//
// Non-finite values (NaN, infinities) are counted in count and non_finite
// and may be first or last; min and max consider finite values only, so a
// NaN never hides a spike nor turns a minimum into NaN. A bucket with no
// finite value has min and max NaN, and min_step and max_step equal to
// first_step.
struct Bucket {
  int64_t start = 0, stop = 0;
  uint64_t count = 0;
  uint64_t non_finite = 0;
  // The points with the smallest and the greatest x (for kTime, ties go to
  // the smaller step for first and to the greater for last).
  int64_t first_step = 0;
  double first = 0;
  int64_t last_step = 0;
  double last = 0;
  // The extreme finite values; ties go to the smaller step.
  double min = 0;
  int64_t min_step = 0;
  double max = 0;
  int64_t max_step = 0;
  // The oldest and newest timestamps of the bucket's points.
  int64_t first_timestamp_us = 0, last_timestamp_us = 0;
};

struct DownsampledSeries {
  int64_t width = 0;  // the grid's cell width on the axis
  // A series with at most 2 x buckets points in the window is returned as
  // its points, each a bucket [x, x + 1) of its own, since they are no more
  // than its buckets would be: raw says so.
  bool raw = false;
  std::vector<Bucket> buckets;  // by start (raw: by x, then step); no empty ones
};

// --- Run search ---------------------------------------------------------------
//
// Which runs a runs page shows, chosen in storage. The language is written
// out with examples in docs/tracking.md; in short:
//
//   filter    a condition on runs: comparisons joined by AND, OR, NOT and
//             parentheses; "" matches every run.
//   terms     params.<dotted key>, metrics.<name>[.<stat>],
//             metrics['<name>', {<context>}][.<stat>] and the attributes
//             run_id, name, experiment, description, status, kind, archived,
//             created_at, updated_at, ended_at (optionally "attributes.").
//             Stats: last (the default), min, max, count, first_step,
//             last_step, min_step, max_step, non_finite. metrics.<name> is
//             the series with the empty context. Backquotes quote a name.
//   compare   = != < <= > >= LIKE ILIKE [NOT] IN (...) IS [NOT] NULL, against
//             'text', numbers, true and false; times in microseconds.
//
// Values are typed: a comparison holds only if the term has a value of the
// literal's type (a number for a number, text for 'text', a flag for true or
// false). A missing parameter or metric, a value of another type, a
// parameter that is null, a list or an object, and a NaN statistic make
// every comparison false, so NOT of such a comparison is true; IS NULL is
// true exactly for them. Ordering puts numbers, then text, then flags, then
// missing values (NaN included) last whatever the direction; run_id
// ascending breaks every tie, so pages never repeat or skip a run.
struct RunQuery {
  std::string filter;
  // Each entry one term or several separated by commas, each optionally
  // followed by ASC (the default) or DESC. Empty: newest created_at first.
  std::vector<std::string> order_by;
  size_t limit = 100;      // runs per page, >= 1
  std::string page_token;  // from the previous page of the same query; "" for the first
  // Param and metric terms to return for each run of the page. Unset: every
  // parameter of the page's runs and the last value of each of their series
  // (by the column names of RunPage).
  std::optional<std::vector<std::string>> columns;
};

struct RunPage {
  std::vector<RunInfo> runs;  // in the query's order
  // "params.<key>", or "metrics.<name>.<stat>" with the context as compact
  // JSON after the name when it is not empty (metrics.loss{"subset":"val"}.min).
  std::vector<std::string> columns;
  // values[i][c]: column c of runs[i]; null when the run has no value.
  std::vector<std::vector<nlohmann::json>> values;
  uint64_t matched = 0;         // runs the filter matches, over all pages
  std::string next_page_token;  // "" after the last page
};

// The page as an Arrow stream of one batch: run_id, name, experiment,
// description, status, kind (utf8), archived (bool), tags (list<utf8>),
// created_at, updated_at, ended_at (timestamp[us, UTC]), target (utf8, JSON),
// then a column per RunPage column: parameters as utf8 (strings as they are,
// other values as JSON text), metric values as float64 and steps and counts
// as int64. *out is released first if set; the caller owns it.
void RunPageToArrow(const RunPage& page, ArrowArrayStream* out);

// One version per table, in the order runs, params, series, metrics.
struct TableVersions {
  uint64_t runs = 0, params = 0, series = 0, metrics = 0;
  bool operator==(const TableVersions&) const = default;
};

// One row of a records table (see Repo::AppendRecords). Rows are keyed by
// (run_id, item_id): the newest row of a key replaces the older ones.
struct Record {
  uint64_t seq = 0;  // set when the row is written; ignored by AppendRecords
  std::optional<std::string> run_id;
  std::string item_id;
  nlohmann::json data;        // any JSON value
  int64_t created_at_us = 0;  // 0 in AppendRecords: now
  bool operator==(const Record&) const = default;
};
void to_json(nlohmann::json& j, const Record& record);
void from_json(const nlohmann::json& j, Record& record);

// Which rows of a records table to read. At most one of run_id and run_ids,
// and at most one of item_id, item_ids and item_prefix; the two kinds
// combine with AND. Empty: every row.
struct RecordQuery {
  std::optional<std::string> run_id;
  std::optional<std::vector<std::string>> run_ids;  // any of them
  std::optional<std::string> item_id;
  std::optional<std::vector<std::string>> item_ids;  // any of them
  std::optional<std::string> item_prefix;            // item ids starting with it
  uint64_t version = 0;                              // read this version (0: latest)
  std::string tag;                                   // or the version this tag names
};

struct PurgeStats {
  uint64_t datasets = 0;          // datasets purged
  uint64_t versions_removed = 0;  // old versions deleted
  uint64_t bytes_removed = 0;
  std::vector<std::string> tags_deleted;  // with force: "<dataset>:<tag>"
};

struct OptimizeStats {
  uint64_t run_rows_before = 0, run_rows_after = 0;  // runs.lance rows (marks included)
  uint64_t points_rewritten = 0;                     // points the sorted rewrite wrote
  bool full_rewrite = false;                         // every metrics fragment was rewritten
  uint64_t level_cells = 0;                          // cells of charts' levels written
  uint64_t level_bytes = 0;  // their encoded size (before Lance compresses them)
  // Rows of the point directory written: one per series and sorted fragment.
  uint64_t directory_rows = 0;
};

using kv0::WalSync;

struct RepoOptions {
  // Object-store settings handed to Lance unchanged (aws_endpoint, ...).
  std::map<std::string, std::string> storage_options;

  // Buffered points that trigger a flush; a writer that gets twice as far
  // ahead of the background flush waits for one.
  size_t flush_rows = 50000;
  std::chrono::milliseconds flush_interval{5000};
  // A table with more small fragments (under 2^20 rows, the size compaction
  // merges toward) than this after a flush is compacted.
  size_t max_fragments = 32;
  // Memory the sorted rewrite of optimize() may hold, in bytes; larger
  // tables are rewritten in several passes.
  size_t optimize_memory = size_t{256} << 20;
  // Versions older than this are removed in the background, within a tenth
  // of it after they expire (src/lance/auto_cleanup.h); never inside a commit.
  std::chrono::seconds version_retention{7 * 24 * 3600};

  // Object stores, as for kv0::kv::Options: a bound on each request, its
  // retries, and a bound on each commit. A flush writes up to four commits
  // in two rounds, so Close() takes at most about two commit_timeouts.
  std::chrono::milliseconds request_timeout{30000};
  uint32_t request_retries = 3;
  std::chrono::milliseconds commit_timeout{60000};

  // Write-ahead log, as for kv0::kv::Options.
  std::string wal_dir;
  WalSync wal_sync = WalSync::kBatch;
  std::chrono::seconds mark_ttl{30 * 24 * 3600};
  bool replay_stale_wal = false;

  // Whether Run::Finish waits for the flush it starts. A flush is an append
  // per table, four commits in two rounds, which cost a process that logs
  // short runs one after another more than their points did; without waiting, its
  // finishes share the background flushes with the next runs' writes. What
  // a finish acknowledged is in the WAL either way (a crash loses nothing,
  // as for Track); only when other handles see it changes: within a flush,
  // or at Repo::Flush() or Close().
  bool finish_waits = true;

  // Whether this handle's flushes share commits with the repository's other
  // writers: each flush announces its rows (an uncommitted fragment per
  // table) and any writer's commit takes every announced fragment, so the
  // commits per table stop growing with the number of writers
  // (docs/design.md, "Commits that writers share"). Handles with and
  // without it can write one repository together. Off: each flush commits
  // its own rows, one append per table.
  bool shared_commits = false;
};

struct RepoImpl;  // src/tracking/repo_impl.h

// A handle on one run, for writing. Cheap to copy; copies share the run.
// Valid after its Repo handle is closed only in that every call then throws
// kNotSupported.
class Run {
 public:
  Run(const Run&);
  Run(Run&&) noexcept;
  Run& operator=(const Run&);
  Run& operator=(Run&&) noexcept;
  ~Run();

  const std::string& run_id() const;

  // Buffers one point. The series is (this run, name, opts.context); it is
  // created on its first point. Throws kInvalidArgument for an empty name or
  // a context that is not a JSON object.
  void Track(double value, std::string_view name, const TrackOptions& opts = {});

  // Track, unless the call would wait for a flush (the handle's buffer
  // holds twice flush_rows points, counting those of a flush under way):
  // then nothing is written and it returns false. Bindings that hold a lock
  // a flush may need (a Python GIL, for Lance's log callback) call this
  // first and Track, with the lock released, when it returns false.
  bool TryTrack(double value, std::string_view name, const TrackOptions& opts = {});

  // Merges params (a JSON object; nested objects flatten to dotted keys)
  // into the run's parameters. Keys it does not name keep their values.
  // Throws kInvalidArgument for what tracking::Flatten rejects.
  void SetParams(const nlohmann::json& params);

  // Applies change to the run's current record and writes the fields it
  // changed (none: nothing is written). run_id, created_at_us... all fields
  // but run_id and updated_at_us may change. Returns the new record.
  RunInfo Update(const std::function<void(RunInfo&)>& change);

  // Sets the status (finished, failed or aborted) and the end time (now, or
  // ended_at_us), then flushes the repository handle: with finish_waits
  // (the default) it returns once the flush has committed the run's writes,
  // which other handles then read; without, once the status is in the WAL,
  // as a Track is, leaving the commit to a background flush it starts.
  void Finish(std::string_view status = "finished");
  void FinishAt(std::string_view status, int64_t ended_at_us);

 private:
  friend class Repo;
  friend struct RepoImpl;
  struct State;
  Run(std::shared_ptr<RepoImpl> repo, std::shared_ptr<State> state);
  // The repository, after checking that this process opened it.
  RepoImpl& live() const;
  std::shared_ptr<RepoImpl> repo_;
  std::shared_ptr<State> state_;
};

class Repo {
 public:
  // Opens the repository at uri (a path or URI), creating its tables if
  // missing, adding later columns to older tables, and replaying the local
  // WAL of writers that are gone (if committing the replayed writes fails,
  // they stay buffered and the open succeeds: a later flush commits them).
  static Repo Open(const std::string& uri, const RepoOptions& options = {});

  Repo(Repo&&) noexcept;
  Repo& operator=(Repo&&) noexcept;
  // Flushes (errors are swallowed; the WAL keeps the rows) and closes.
  ~Repo();

  const std::string& uri() const;

  // --- Writing -------------------------------------------------------------
  // Creates a run. An existing run_id is allowed: the new row sets every
  // field, so it resets the run's record (as an import would).
  Run CreateRun(const NewRun& run);
  // A handle on an existing run; default steps continue after each series'
  // stored last step (taken from statistics, no point is read). NotFound if
  // the run does not exist.
  Run ResumeRun(const std::string& run_id);
  // Reads the run's record (NotFound if none), applies change and writes the
  // fields it changed. Reads no points. Returns the new record.
  RunInfo UpdateRun(const std::string& run_id, const std::function<void(RunInfo&)>& change);

  // Commits everything buffered. Throws what the failing commit threw; the
  // rows not committed stay buffered.
  void Flush();
  // Flushes, then closes the handle; later calls throw kNotSupported.
  void Close();

  // --- Reading -------------------------------------------------------------
  std::vector<RunInfo> Runs();  // ordered by created_at_us, then run_id
  std::optional<RunInfo> GetRun(const std::string& run_id);
  nlohmann::json Params(const std::string& run_id);   // {} when none
  std::map<std::string, nlohmann::json> AllParams();  // run id -> parameters
  std::vector<SeriesInfo> Series(const std::string& run_id);
  std::vector<SeriesInfo> AllSeries();
  // Statistics of the series in ids that have points; others are absent.
  std::map<uint64_t, SeriesStats> GetSeriesStats(std::span<const uint64_t> ids);
  // The points of each series in ids with a step in range (a series with
  // none is absent).
  std::map<uint64_t, MetricData> ReadMany(std::span<const uint64_t> ids, StepRange range = {});
  // The same by time: for each step, the latest point is chosen first, then
  // kept if its timestamp is in range.
  std::map<uint64_t, MetricData> ReadManyIn(std::span<const uint64_t> ids, TimeRange range);
  // The same as an Arrow stream of record batches with columns series_id
  // (uint64), step (int64), epoch (int64, nullable), timestamp
  // (timestamp[us, UTC]) and value (float64), ordered by series as in ids,
  // then step. Series are read a bounded number of points at a time, so the
  // whole result is never held in memory. *out is filled (released first if
  // set) and owned by the caller; it stays readable after the Repo is closed.
  void ReadManyStream(std::span<const uint64_t> ids, StepRange range, ArrowArrayStream* out);
  void ReadManyInStream(std::span<const uint64_t> ids, TimeRange range, ArrowArrayStream* out);
  // Each series in ids in buckets (see Bucket and DownsampleOptions). A
  // series with no point in the window has no buckets (and raw set). Throws
  // InvalidArgument, reading nothing, for buckets <= 0, start > stop, or an
  // id no series has: the series of a deleted run are absent while the
  // delete removes their rows, and unknown once it has. What a read costs:
  // on the step axis, once Optimize() has written levels, about one cell
  // per bucket per series, plus the points at edges a zoom cuts and those
  // logged since the last optimize (docs/design.md, "Charts from levels");
  // otherwise, and on the time axis, the points in the window (read in one
  // pass; with kTime and an end unset, two).
  std::map<uint64_t, DownsampledSeries> ReadDownsampled(std::span<const uint64_t> ids,
                                                        const DownsampleOptions& options = {});
  // The same as an Arrow stream, a batch per series in the order of ids,
  // with columns series_id (uint64), raw (bool), width, start, stop (int64),
  // count, non_finite (uint64), first_step (int64), first (float64),
  // last_step (int64), last, min (float64), min_step (int64), max (float64),
  // max_step (int64), first_timestamp, last_timestamp (timestamp[us, UTC]).
  // min, max, min_step and max_step are null in a bucket with no finite
  // value. Ownership as for ReadManyStream.
  void ReadDownsampledStream(std::span<const uint64_t> ids, const DownsampleOptions& options,
                             ArrowArrayStream* out);

  // The runs query selects, in its order, a page at a time (see RunQuery).
  // Reads the runs table whole, and for each parameter or metric the query
  // names one scan of its rows (params.key, or the statistics of the named
  // series); the columns of the page's runs only. Throws InvalidArgument,
  // reading nothing, for a malformed filter, order_by or column (naming the
  // position and what was expected), an unknown attribute, a limit of 0 or a
  // page token of another query.
  RunPage SearchRuns(const RunQuery& query);

  // The newest version of each table in storage, found without scanning:
  // a tracker compares them to skip a refresh when nothing changed.
  TableVersions LatestVersions();
  // The versions this handle last read or wrote.
  TableVersions Versions();

  // --- Maintenance ---------------------------------------------------------
  // Brings storage into its read-optimised shape: folds each live run's rows
  // (see tracking/run_record.h); deletes every row of deleted runs that is
  // still stored (a writer racing a delete) and drops tombstones and WAL
  // marks older than mark_ttl; rewrites the metrics fragments not yet sorted
  // by (series_id, step), keeping the latest point per step, with one exact
  // statistics row per series, in passes that fit optimize_memory; keeps a
  // BTREE index on metrics.series_id and a ZONEMAP index on metrics.step;
  // folds superseded records rows and indexes item_id and run_id; compacts
  // params and series. Rows other writers append meanwhile are kept. Running
  // it again with nothing new rewrites nothing.
  OptimizeStats Optimize();
  // --- Deleting runs ---------------------------------------------------------
  // Deletes runs: commits a tombstone per run first, then deletes the runs'
  // points, statistics, series, parameters, records and other rows. Every
  // read ignores a deleted run from the tombstone on. Unknown ids are
  // ignored. See docs/operations.md for writers racing a delete.
  void DeleteRuns(std::span<const std::string> run_ids);

  // --- Records tables ----------------------------------------------------------
  // A records table is a dataset of its own under records/ (any name works:
  // it is escaped into a directory name), created by its first append.
  // Appends rows (seq and, when 0, created_at_us are set here) in one commit
  // and returns the table's new version. Throws kInvalidArgument for an
  // empty table name or item id.
  uint64_t AppendRecords(const std::string& table, std::span<const Record> rows);
  // The newest row of every (run_id, item_id) that query selects, ordered by
  // run_id (rows without one first), then item_id. A table that does not
  // exist has no rows; a version or tag that does not exist is NotFound.
  std::vector<Record> Records(const std::string& table, const RecordQuery& query = {});
  // The same as an Arrow stream with columns seq (uint64), table_name (utf8),
  // run_id (utf8, nullable), item_id (utf8), data (utf8, JSON) and
  // created_at (timestamp[us, UTC]).
  void RecordsStream(const std::string& table, const RecordQuery& query, ArrowArrayStream* out);
  // The table's latest version (0 if it does not exist), so a run can record
  // exactly what it read.
  uint64_t RecordsVersion(const std::string& table);
  std::vector<std::string> RecordTables();  // names, sorted
  // Tags keep one records table's rows at a version (default: the latest).
  void CreateRecordsTag(const std::string& table, const std::string& tag, uint64_t version = 0);
  void DeleteRecordsTag(const std::string& table, const std::string& tag);
  std::map<std::string, uint64_t> RecordsTags(const std::string& table);
  // True if the location holds the single records.lance of earlier kv0
  // versions (one directory listing). Open migrates it into per-table
  // datasets once and keeps it.
  bool HasLegacyRecords();

  // --- Purge ---------------------------------------------------------------------
  // Rewrites every fragment holding deleted rows (in the tracking and records
  // tables) and removes every version no tag names, except the latest. A tag
  // on an older version that still holds rows of a deleted run fails the
  // purge with kBusy naming it, unless force, which deletes such tags.
  PurgeStats Purge(bool force = false);

  // Marks the statistics of ids for recomputation from their points (the
  // next reads compute them exactly, until optimize stores exact ones).
  void RecomputeSeriesStats(std::span<const uint64_t> ids);

 private:
  explicit Repo(std::shared_ptr<RepoImpl> impl);
  // The handle, after checking that this process opened it.
  RepoImpl& live() const;
  std::shared_ptr<RepoImpl> impl_;
};

}  // namespace kv0::tracking
