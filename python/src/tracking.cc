// Python bindings of kv0::tracking: the native submodule kv0._kv0.tracking,
// with _Repo (which kv0.tracking.Repo, python/kv0/tracking.py, extends),
// Run and series_id.
//
// The GIL. Every call into kv0 releases the GIL, as kv.cc does: Lance's log
// callback (module.cc) takes the GIL on Lance's runtime threads, so a
// thread that waits on Lance, or on a kv0 lock held by a thread that waits
// on Lance, while holding the GIL can deadlock with it.
//
// Run's methods are bound in tracking_run.cc (where Run.track, the hot
// path, keeps the GIL, and why), the conversions of arguments and results
// are in tracking_convert.h, and Repo.search_runs in tracking_search.cc.

#include "kv0/tracking.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrow_capsule.h"
#include "json_convert.h"
#include "tracking_convert.h"
#include "tracking_handles.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kv0::python {

void BindTracking(nb::module_& m) {
  InitTimeTypes();
  nb::module_ t = m.def_submodule(
      "tracking",
      "Native half of kv0.tracking, the experiment-tracking tables (see kv0.tracking).");

  t.def(
      "series_id",
      [](std::string_view run_id, std::string_view name, nb::handle context) {
        return tr::SeriesId(run_id, name, Context(context));
      },
      "run_id"_a, "name"_a, "context"_a = nb::none(),
      nb::sig("def series_id(run_id: str, name: str, context: dict | None = None) -> int"),
      "The id of the series (run_id, name, context): xxh3-64 of the run id, the name and the "
      "context (a dict, None meaning {}) as compact JSON with sorted keys; never 0.");

  BindRun(t);

  nb::class_<PyRepo> repo_class(t, "_Repo");
  repo_class
      .def(
          "__init__",
          [](PyRepo* self, const std::string& uri,
             std::optional<std::map<std::string, std::string>> storage_options, size_t flush_rows,
             double flush_interval, size_t max_fragments, size_t optimize_memory,
             double version_retention, std::optional<std::string> wal_dir,
             const std::string& wal_sync, double mark_ttl, bool replay_stale_wal,
             double request_timeout, uint32_t request_retries, double commit_timeout,
             bool finish_waits, bool shared_commits) {
            tr::RepoOptions o;
            if (storage_options) o.storage_options = std::move(*storage_options);
            o.flush_rows = flush_rows;
            o.flush_interval = Millis(flush_interval, "flush_interval");
            o.max_fragments = max_fragments;
            o.optimize_memory = optimize_memory;
            o.version_retention = Seconds(version_retention, "version_retention");
            if (wal_dir) o.wal_dir = *wal_dir;
            o.wal_sync = kv0::ParseWalSync(wal_sync);
            o.mark_ttl = Seconds(mark_ttl, "mark_ttl");
            o.replay_stale_wal = replay_stale_wal;
            o.request_timeout = Millis(request_timeout, "request_timeout");
            o.request_retries = request_retries;
            o.commit_timeout = Millis(commit_timeout, "commit_timeout");
            o.finish_waits = finish_waits;
            o.shared_commits = shared_commits;
            std::optional<tr::Repo> repo;
            {
              nb::gil_scoped_release release;
              repo.emplace(tr::Repo::Open(uri, o));
            }
            new (self) PyRepo(std::move(*repo));
          },
          "uri"_a, nb::kw_only(), "storage_options"_a = nb::none(), "flush_rows"_a = 50000,
          "flush_interval"_a = 5.0, "max_fragments"_a = 32, "optimize_memory"_a = size_t{256} << 20,
          "version_retention"_a = 7 * 86400.0, "wal_dir"_a = nb::none(), "wal_sync"_a = "batch",
          "mark_ttl"_a = 30 * 86400.0, "replay_stale_wal"_a = false, "request_timeout"_a = 30.0,
          "request_retries"_a = 3, "commit_timeout"_a = 60.0, "finish_waits"_a = true,
          "shared_commits"_a = false)
      .def_prop_ro("uri", &PyRepo::uri, "The repository's location, as opened.")
      .def_prop_ro("closed", &PyRepo::closed, "True once close() was called.")
      .def(
          "create_run",
          [](PyRepo& self, std::optional<std::string> run_id, nb::handle name,
             nb::handle experiment, nb::handle description, nb::handle tags, nb::handle kind,
             nb::handle target, nb::handle created_at) {
            tr::NewRun n;
            n.run_id = std::move(run_id);
            n.name = OptionalStr(name, "name");
            n.experiment = OptionalStr(experiment, "experiment");
            n.description = OptionalStr(description, "description");
            n.tags = Tags(tags);
            n.kind = OptionalStr(kind, "kind");
            if (!target.is_none()) n.target = ToJson(target);
            n.created_at_us = OptionalMicros(created_at, "created_at");
            std::optional<tr::Run> run;
            {
              nb::gil_scoped_release release;
              run.emplace(self.repo().CreateRun(n));
            }
            return PyRun(std::move(*run));
          },
          "run_id"_a = nb::none(), "name"_a = nb::none(), "experiment"_a = nb::none(),
          "description"_a = nb::none(), "tags"_a = nb::tuple(), "kind"_a = nb::none(),
          "target"_a = nb::none(), "created_at"_a = nb::none(), nb::keep_alive<0, 1>(),
          nb::sig("def create_run(self, run_id: str | None = None, name: str | None = None, "
                  "experiment: str | None = None, description: str | None = None, tags: "
                  "collections.abc.Iterable[str] = (), kind: str | None = None, target: object = "
                  "None, created_at: datetime.datetime | int | None = None) -> Run"),
          "Creates a run with status 'running' and returns a handle on it. run_id defaults to a "
          "new UUIDv7 (32 hex digits); an existing run_id resets that run's record. target is "
          "any JSON-able value; created_at a datetime (naive = UTC) or an int of microseconds "
          "since the Unix epoch, default now.")
      .def(
          "resume_run",
          [](PyRepo& self, const std::string& run_id) {
            std::optional<tr::Run> run;
            {
              nb::gil_scoped_release release;
              run.emplace(self.repo().ResumeRun(run_id));
            }
            return PyRun(std::move(*run));
          },
          "run_id"_a, nb::keep_alive<0, 1>(),
          "A handle on an existing run; default steps continue after each series' stored last "
          "step. Raises kv0.errors.NotFound if the run does not exist.")
      .def(
          "update_run",
          [](PyRepo& self, const std::string& run_id, nb::kwargs fields) {
            RunChange change = ParseRunChange(fields, "update_run");
            tr::RunInfo info;
            {
              nb::gil_scoped_release release;
              info = self.repo().UpdateRun(run_id, [&change](tr::RunInfo& r) { change.Apply(r); });
            }
            return RunInfoToDict(info);
          },
          "run_id"_a, "fields"_a, nb::sig("def update_run(self, run_id: str, **fields) -> dict"),
          "Changes the given fields of a run's record, as Run.update does, and returns the new "
          "record. Raises kv0.errors.NotFound if the run does not exist.")
      .def(
          "flush",
          [](PyRepo& self) {
            nb::gil_scoped_release release;
            self.repo().Flush();
          },
          "Commits everything buffered.")
      .def("close", &PyRepo::Close,
           "Flushes, then closes the handle; later calls raise "
           "kv0.errors.NotSupported. Closing twice is allowed.")
      .def(
          "runs",
          [](PyRepo& self) {
            std::vector<tr::RunInfo> runs;
            {
              nb::gil_scoped_release release;
              runs = self.repo().Runs();
            }
            nb::list out;
            for (const auto& r : runs) out.append(RunInfoToDict(r));
            return out;
          },
          nb::sig("def runs(self) -> list[dict]"),
          "Every run's record, ordered by created_at_us then run_id. Keys: run_id, name, "
          "experiment, description, tags, status, archived, created_at_us, updated_at_us, "
          "ended_at_us, kind, target (absent values are None).")
      .def(
          "run",
          [](PyRepo& self, const std::string& run_id) -> nb::object {
            std::optional<tr::RunInfo> info;
            {
              nb::gil_scoped_release release;
              info = self.repo().GetRun(run_id);
            }
            if (!info) return nb::none();
            return RunInfoToDict(*info);
          },
          "run_id"_a, nb::sig("def run(self, run_id: str) -> dict | None"),
          "One run's record, or None.")
      .def(
          "params",
          [](PyRepo& self, const std::string& run_id) {
            nlohmann::json params;
            {
              nb::gil_scoped_release release;
              params = self.repo().Params(run_id);
            }
            return FromJson(params);
          },
          "run_id"_a, nb::sig("def params(self, run_id: str) -> dict"),
          "The run's parameters, nested ({} when none).")
      .def(
          "all_params",
          [](PyRepo& self) {
            std::map<std::string, nlohmann::json> all;
            {
              nb::gil_scoped_release release;
              all = self.repo().AllParams();
            }
            nb::dict out;
            for (const auto& [run_id, params] : all) {
              out[nb::str(run_id.data(), run_id.size())] = FromJson(params);
            }
            return out;
          },
          nb::sig("def all_params(self) -> dict[str, dict]"),
          "The parameters of every run, by run id.")
      .def(
          "series",
          [](PyRepo& self, const std::string& run_id) {
            std::vector<tr::SeriesInfo> series;
            {
              nb::gil_scoped_release release;
              series = self.repo().Series(run_id);
            }
            return SeriesListToPy(series);
          },
          "run_id"_a, nb::sig("def series(self, run_id: str) -> list[dict]"),
          "The run's metric series. Keys: series_id, run_id, name, context, created_at_us.")
      .def(
          "all_series",
          [](PyRepo& self) {
            std::vector<tr::SeriesInfo> series;
            {
              nb::gil_scoped_release release;
              series = self.repo().AllSeries();
            }
            return SeriesListToPy(series);
          },
          nb::sig("def all_series(self) -> list[dict]"), "The metric series of every run.")
      .def(
          "series_stats",
          [](PyRepo& self, nb::handle ids) {
            std::vector<uint64_t> v = Ids(ids);
            std::map<uint64_t, tr::SeriesStats> stats;
            {
              nb::gil_scoped_release release;
              stats = self.repo().GetSeriesStats(v);
            }
            nb::dict out;
            for (const auto& [id, s] : stats) out[nb::int_(id)] = SeriesStatsToDict(s);
            return out;
          },
          "ids"_a,
          nb::sig("def series_stats(self, ids: collections.abc.Iterable[int]) -> dict[int, dict]"),
          "Statistics of the series in ids that have points (others are absent), read without "
          "reading the points. Keys: count, first_step, last_step, last (value at the greatest "
          "step), min, min_step, max, max_step (finite values only; NaN when there are none), "
          "non_finite, last_timestamp_us.")
      .def(
          "read_many",
          [](PyRepo& self, nb::handle ids, std::optional<int64_t> start,
             std::optional<int64_t> stop) {
            std::vector<uint64_t> v = Ids(ids);
            tr::StepRange range;
            if (start) range.start = *start;
            if (stop) range.stop = *stop;
            arrow::OwnedStream stream;
            {
              nb::gil_scoped_release release;
              self.repo().ReadManyStream(v, range, stream.get());
            }
            return ExportStream(std::move(stream));
          },
          "ids"_a, "start"_a = nb::none(), "stop"_a = nb::none(),
          nb::sig("def read_many(self, ids: collections.abc.Iterable[int], start: int | None = "
                  "None, stop: int | None = None) -> kv0._kv0.ArrowStream"),
          "The points of the series in ids with start <= step < stop, one per step (the latest "
          "written), as a single-use Arrow stream (__arrow_c_stream__; e.g. pyarrow.table(...)) "
          "with columns series_id (uint64), step (int64), epoch (int64, nullable), timestamp "
          "(timestamp[us, UTC]) and value (float64), ordered by series as in ids, then step.")
      .def(
          "read_many_in",
          [](PyRepo& self, nb::handle ids, nb::handle start_time, nb::handle stop_time) {
            std::vector<uint64_t> v = Ids(ids);
            tr::TimeRange range;
            if (auto s = OptionalMicros(start_time, "start_time")) range.start_us = *s;
            if (auto s = OptionalMicros(stop_time, "stop_time")) range.stop_us = *s;
            arrow::OwnedStream stream;
            {
              nb::gil_scoped_release release;
              self.repo().ReadManyInStream(v, range, stream.get());
            }
            return ExportStream(std::move(stream));
          },
          "ids"_a, "start_time"_a = nb::none(), "stop_time"_a = nb::none(),
          nb::sig("def read_many_in(self, ids: collections.abc.Iterable[int], start_time: "
                  "datetime.datetime | int | None = None, stop_time: datetime.datetime | int | "
                  "None = None) -> kv0._kv0.ArrowStream"),
          "As read_many, by time: for each step the latest point is chosen, then kept if "
          "start_time <= timestamp < stop_time (datetimes, naive = UTC, or ints of "
          "microseconds since the Unix epoch).")
      .def(
          "_read_downsampled",
          [](PyRepo& self, nb::handle ids, int64_t buckets, nb::handle start, nb::handle stop,
             const std::string& x) {
            std::vector<uint64_t> v = Ids(ids);
            tr::DownsampleOptions options;
            options.buckets = buckets;
            if (x == "step") {
              options.x = tr::Axis::kStep;
              if (!start.is_none()) options.start = nb::cast<int64_t>(start);
              if (!stop.is_none()) options.stop = nb::cast<int64_t>(stop);
            } else if (x == "time") {
              options.x = tr::Axis::kTime;
              options.start = OptionalMicros(start, "start");
              options.stop = OptionalMicros(stop, "stop");
            } else {
              throw Error(Code::kInvalidArgument,
                          "x must be \"step\" or \"time\", not \"" + x + "\"");
            }
            arrow::OwnedStream stream;
            {
              nb::gil_scoped_release release;
              self.repo().ReadDownsampledStream(v, options, stream.get());
            }
            return ExportStream(std::move(stream));
          },
          "ids"_a, "buckets"_a, "start"_a.none(), "stop"_a.none(), "x"_a,
          nb::sig("def _read_downsampled(self, ids: collections.abc.Iterable[int], buckets: int, "
                  "start: object, stop: object, x: str) -> kv0._kv0.ArrowStream"),
          "The stream behind Repo.read_downsampled.")
      .def(
          "latest_versions",
          [](PyRepo& self) {
            tr::TableVersions v;
            {
              nb::gil_scoped_release release;
              v = self.repo().LatestVersions();
            }
            return VersionsToTuple(v);
          },
          nb::sig("def latest_versions(self) -> tuple[int, int, int, int]"),
          "The newest version in storage of the tables runs, params, series and metrics, found "
          "without scanning: unchanged versions mean nothing changed.")
      .def(
          "versions",
          [](PyRepo& self) {
            tr::TableVersions v;
            {
              nb::gil_scoped_release release;
              v = self.repo().Versions();
            }
            return VersionsToTuple(v);
          },
          nb::sig("def versions(self) -> tuple[int, int, int, int]"),
          "The versions of (runs, params, series, metrics) this handle last read or wrote.")
      .def(
          "optimize",
          [](PyRepo& self) {
            tr::OptimizeStats s;
            {
              nb::gil_scoped_release release;
              s = self.repo().Optimize();
            }
            nb::dict d;
            d["run_rows_before"] = nb::int_(s.run_rows_before);
            d["run_rows_after"] = nb::int_(s.run_rows_after);
            d["points_rewritten"] = nb::int_(s.points_rewritten);
            d["full_rewrite"] = nb::bool_(s.full_rewrite);
            d["level_cells"] = nb::int_(s.level_cells);
            d["level_bytes"] = nb::int_(s.level_bytes);
            d["directory_rows"] = nb::int_(s.directory_rows);
            return d;
          },
          nb::sig("def optimize(self) -> dict"),
          "Folds run rows, rewrites unsorted metrics fragments sorted by (series_id, step) with "
          "exact statistics and the levels charts read, compacts params and series and "
          "maintains the indices on metrics. Returns run_rows_before, run_rows_after, "
          "points_rewritten, full_rewrite, level_cells, level_bytes and directory_rows.")
      .def(
          "recompute_series_stats",
          [](PyRepo& self, nb::handle ids) {
            std::vector<uint64_t> v = Ids(ids);
            nb::gil_scoped_release release;
            self.repo().RecomputeSeriesStats(v);
          },
          "ids"_a,
          nb::sig("def recompute_series_stats(self, ids: collections.abc.Iterable[int]) -> None"),
          "Marks the statistics of ids for recomputation from their points.")
      .def(
          "delete_runs",
          [](PyRepo& self, nb::handle run_ids) {
            std::vector<std::string> ids = StrList(run_ids, "run_ids");
            nb::gil_scoped_release release;
            self.repo().DeleteRuns(ids);
          },
          "run_ids"_a,
          nb::sig("def delete_runs(self, run_ids: collections.abc.Iterable[str]) -> None"),
          "Deletes runs: commits a tombstone per run, then deletes their points, statistics, "
          "series, parameters and records rows. Every read ignores a deleted run from then on, "
          "and writing through a handle on it raises kv0.errors.NotFound. Unknown ids are "
          "ignored. The bytes stay in older table versions until purge().")
      .def(
          "append_records",
          [](PyRepo& self, const std::string& table, nb::handle rows) {
            std::vector<tr::Record> r = RecordRows(rows);
            nb::gil_scoped_release release;
            return self.repo().AppendRecords(table, r);
          },
          "table"_a, "rows"_a,
          nb::sig("def append_records(self, table: str, rows: collections.abc.Iterable[dict]) -> "
                  "int"),
          "Appends rows to the records table (created by its first append) in one commit and "
          "returns the table's new version. Each row is a dict with item_id (a non-empty str), "
          "data (any JSON-able value), and optionally run_id (str or None) and created_at (a "
          "datetime, naive = UTC, or an int of microseconds since the Unix epoch; default, or 0: "
          "now). Rows are keyed by (run_id, item_id): a newer row replaces the older ones. "
          "Rows as records() returns them are accepted too (seq is ignored, created_at_us "
          "read as created_at).")
      .def(
          "records",
          [](PyRepo& self, const std::string& table, nb::handle run_id, nb::handle run_ids,
             nb::handle item_id, nb::handle item_ids, nb::handle item_prefix, nb::handle version,
             nb::handle tag) {
            tr::RecordQuery q =
                MakeRecordQuery(run_id, run_ids, item_id, item_ids, item_prefix, version, tag);
            std::vector<tr::Record> rows;
            {
              nb::gil_scoped_release release;
              rows = self.repo().Records(table, q);
            }
            nb::list out;
            for (const auto& r : rows) out.append(RecordToDict(r));
            return out;
          },
          "table"_a, nb::kw_only(), "run_id"_a = nb::none(), "run_ids"_a = nb::none(),
          "item_id"_a = nb::none(), "item_ids"_a = nb::none(), "item_prefix"_a = nb::none(),
          "version"_a = nb::none(), "tag"_a = nb::none(),
          nb::sig("def records(self, table: str, *, run_id: str | None = None, run_ids: "
                  "collections.abc.Iterable[str] | None = None, item_id: str | None = None, "
                  "item_ids: collections.abc.Iterable[str] | None = None, item_prefix: str | None "
                  "= None, version: int | None = None, tag: str | None = None) -> list[dict]"),
          "The newest row of every (run_id, item_id) the filters select, ordered by run_id "
          "(rows without one first), then item_id, as dicts with keys seq, run_id, item_id, "
          "data and created_at_us. Filters: at most one of run_id and run_ids (any of them), "
          "at most one of item_id, item_ids and item_prefix; the two kinds combine with AND. "
          "version or tag reads the table as it was then. A table that does not exist has no "
          "rows; a version or tag that does not exist raises kv0.errors.NotFound. Rows of "
          "deleted runs are never returned.")
      .def(
          "records_arrow",
          [](PyRepo& self, const std::string& table, nb::handle run_id, nb::handle run_ids,
             nb::handle item_id, nb::handle item_ids, nb::handle item_prefix, nb::handle version,
             nb::handle tag) {
            tr::RecordQuery q =
                MakeRecordQuery(run_id, run_ids, item_id, item_ids, item_prefix, version, tag);
            arrow::OwnedStream stream;
            {
              nb::gil_scoped_release release;
              self.repo().RecordsStream(table, q, stream.get());
            }
            return ExportStream(std::move(stream));
          },
          "table"_a, nb::kw_only(), "run_id"_a = nb::none(), "run_ids"_a = nb::none(),
          "item_id"_a = nb::none(), "item_ids"_a = nb::none(), "item_prefix"_a = nb::none(),
          "version"_a = nb::none(), "tag"_a = nb::none(),
          nb::sig("def records_arrow(self, table: str, *, run_id: str | None = None, run_ids: "
                  "collections.abc.Iterable[str] | None = None, item_id: str | None = None, "
                  "item_ids: collections.abc.Iterable[str] | None = None, item_prefix: str | None "
                  "= None, version: int | None = None, tag: str | None = None) -> "
                  "kv0._kv0.ArrowStream"),
          "As records(), as a single-use Arrow stream (__arrow_c_stream__; e.g. "
          "pyarrow.table(...)) with columns seq (uint64), table_name (string), run_id (string, "
          "nullable), item_id (string), data (string, the JSON text) and created_at "
          "(timestamp[us, UTC]).")
      .def(
          "records_version",
          [](PyRepo& self, const std::string& table) {
            nb::gil_scoped_release release;
            return self.repo().RecordsVersion(table);
          },
          "table"_a, nb::sig("def records_version(self, table: str) -> int"),
          "The records table's latest version (0 if it does not exist), so that a run can "
          "record exactly what it read.")
      .def(
          "record_tables",
          [](PyRepo& self) {
            std::vector<std::string> names;
            {
              nb::gil_scoped_release release;
              names = self.repo().RecordTables();
            }
            return names;
          },
          nb::sig("def record_tables(self) -> list[str]"),
          "The names of the records tables, sorted.")
      .def(
          "create_records_tag",
          [](PyRepo& self, const std::string& table, const std::string& tag, nb::handle version) {
            uint64_t v = Version(version);
            nb::gil_scoped_release release;
            self.repo().CreateRecordsTag(table, tag, v);
          },
          "table"_a, "tag"_a, "version"_a = nb::none(),
          nb::sig("def create_records_tag(self, table: str, tag: str, version: int | None = None) "
                  "-> None"),
          "Tags a version of one records table (default: the latest), which keeps its rows "
          "readable with records(table, tag=...). Tags belong to one table.")
      .def(
          "delete_records_tag",
          [](PyRepo& self, const std::string& table, const std::string& tag) {
            nb::gil_scoped_release release;
            self.repo().DeleteRecordsTag(table, tag);
          },
          "table"_a, "tag"_a, nb::sig("def delete_records_tag(self, table: str, tag: str) -> None"),
          "Deletes a tag of one records table.")
      .def(
          "records_tags",
          [](PyRepo& self, const std::string& table) {
            std::map<std::string, uint64_t> tags;
            {
              nb::gil_scoped_release release;
              tags = self.repo().RecordsTags(table);
            }
            nb::dict out;
            for (const auto& [tag, version] : tags) {
              out[nb::str(tag.data(), tag.size())] = nb::int_(version);
            }
            return out;
          },
          "table"_a, nb::sig("def records_tags(self, table: str) -> dict[str, int]"),
          "The tags of one records table and the versions they name.")
      .def(
          "has_legacy_records",
          [](PyRepo& self) {
            nb::gil_scoped_release release;
            return self.repo().HasLegacyRecords();
          },
          nb::sig("def has_legacy_records(self) -> bool"),
          "True if the location holds the single records.lance of earlier kv0 versions (which "
          "opening migrated into per-table datasets, and kept).")
      .def(
          "purge",
          [](PyRepo& self, bool force) {
            tr::PurgeStats s;
            {
              nb::gil_scoped_release release;
              s = self.repo().Purge(force);
            }
            nb::dict d;
            d["datasets"] = nb::int_(s.datasets);
            d["versions_removed"] = nb::int_(s.versions_removed);
            d["bytes_removed"] = nb::int_(s.bytes_removed);
            nb::list tags;
            for (const auto& t : s.tags_deleted) tags.append(nb::str(t.data(), t.size()));
            d["tags_deleted"] = tags;
            return d;
          },
          "force"_a = false, nb::sig("def purge(self, force: bool = False) -> dict"),
          "Makes deleted runs' bytes unreachable: rewrites every fragment holding deleted rows "
          "(tracking and records tables) and removes every version no tag names, except the "
          "latest. A tag on a version that still holds rows of a deleted run makes it raise "
          "kv0.errors.Busy naming the tag, unless force, which deletes such tags. Returns "
          "datasets, versions_removed, bytes_removed and tags_deleted (with force, as "
          "'<dataset>:<tag>', e.g. 'records/evals:v1').");
  BindRunSearch(repo_class);
}

}  // namespace kv0::python
