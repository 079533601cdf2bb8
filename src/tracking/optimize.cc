// optimize(): folds run rows, rewrites unsorted metrics fragments sorted by
// (series_id, step) with one exact statistics row per series, compacts the
// other tables and keeps the BTREE index on metrics.series_id up to date.
//
// Every rewrite here is one Lance Update that removes the fragments it read
// and adds new ones, so rows other writers append meanwhile are kept (their
// fragments are untouched).

#include <algorithm>
#include <cinttypes>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "tracking/levels.h"
#include "tracking/point_directory.h"
#include "tracking/repo_impl.h"
#include "tracking/schema.h"

namespace kv0::tracking {
namespace {

// What one point costs while it is being sorted, for the memory bound.
constexpr uint64_t kBytesPerPoint = 64;

std::vector<uint64_t> Ids(const std::vector<lance::FragmentInfo>& fragments) {
  std::vector<uint64_t> ids;
  for (const auto& f : fragments) ids.push_back(f.id);
  return ids;
}

// Points of one series per pass of the sorted rewrite.
struct Pass {
  uint64_t first_id, last_id;  // series ids [first_id, last_id]
  int64_t start = INT64_MIN, stop = INT64_MAX;
};

// The lists of metrics fragments kept in its metadata (schema.h).
struct FragmentLists {
  std::set<uint64_t> sorted, levelled, directed;
};

std::string JsonList(const std::set<uint64_t>& ids) {
  nlohmann::json list = nlohmann::json::array();
  for (uint64_t id : ids) list.push_back(id);
  return list.dump();
}

// Writes the directory of `written` (fragments optimize just committed,
// sorted and levelled) and of `undirected` (sorted fragments without one),
// in a commit of its own, since fragments get their ids only from theirs;
// then records the lists: `lists` plus the written fragments and the
// directory's, which holds no point, so it is sorted, levelled and directed.
// If this process dies before the lists are written, the next optimize
// rewrites the fragments missing from them (the directory's rows, of no
// live series, are dropped), and until then reads filter them.
void RecordSorted(lance::Dataset& metrics, std::span<const uint64_t> written,
                  std::span<const uint64_t> undirected, FragmentLists lists, OptimizeStats* stats) {
  std::vector<uint64_t> to_direct(written.begin(), written.end());
  to_direct.insert(to_direct.end(), undirected.begin(), undirected.end());
  std::vector<uint64_t> directed;
  const auto entries = BuildDirectory(metrics, to_direct, &directed);
  std::vector<uint64_t> own;
  if (!entries.empty()) {
    own = metrics.Append(DirectoryStream(entries)).fragment_ids;
    stats->directory_rows += entries.size();
  }
  for (auto* list : {&lists.sorted, &lists.levelled, &lists.directed}) {
    list->insert(own.begin(), own.end());
  }
  lists.sorted.insert(written.begin(), written.end());
  lists.levelled.insert(written.begin(), written.end());
  lists.directed.insert(directed.begin(), directed.end());
  metrics.UpdateMetadata({{kSortedFragmentsKey, JsonList(lists.sorted)},
                          {kLevelledFragmentsKey, JsonList(lists.levelled)},
                          {kDirectedFragmentsKey, JsonList(lists.directed)},
                          {kDirectoryHomesKey, DirectoryHomesAfter(metrics, own, directed)}});
}

RunRow MarkRow(const Mark& mark) {
  RunRow row;
  row.seq = mark.seq;
  row.record.run_id = std::string(kWalMarkPrefix) + mark.writer_id;
  row.fields = 0;
  return row;
}

}  // namespace

OptimizeStats RepoImpl::Optimize() {
  CheckOpen();
  Flush();
  auto flushes = pipeline_.LockFlushes();
  OptimizeStats stats;
  LoadTombstones(true);
  FoldRuns(&stats);
  // Rows of deleted runs that a writer racing the delete committed.
  std::vector<std::string> deleted;
  {
    std::lock_guard deleted_lock(deleted_mu_);
    deleted.assign(deleted_.begin(), deleted_.end());
  }
  std::sort(deleted.begin(), deleted.end());
  if (!deleted.empty()) DeleteRowsOfRuns(deleted);
  SortMetrics(&stats);
  records_->Optimize(HiddenRuns());
  for (int table : {kParams, kSeries}) {
    PruneMarks(table);
    if (Latest(table).Fragments().size() > 1) tables_[table]->Compact(CompactionOf(table));
  }
  return stats;
}

void RepoImpl::FoldRuns(OptimizeStats* stats) {
  lance::Dataset& runs = Latest(kRuns);
  RetireAnnounced(kRuns);
  auto fragments = Ids(runs.Fragments());
  std::vector<RunRow> rows;
  {
    lance::ScanOptions scan;
    scan.fragment_ids = fragments;
    auto reader = runs.Scan(scan);
    while (auto batch = reader.Next()) DecodeRunRows(*batch, &rows);
  }
  auto marks = ReadMarks(kRuns, fragments);
  stats->run_rows_before = runs.CountRows();

  std::map<std::string, std::vector<RunRow>> by_run;
  for (auto& row : rows) by_run[row.record.run_id].push_back(std::move(row));
  std::vector<RunRow> folded;
  uint64_t stale_before = WallNanosAgo(options_.mark_ttl);
  for (auto& [id, run_rows] : by_run) {
    auto tombstone = std::find_if(run_rows.begin(), run_rows.end(), IsTombstone);
    if (tombstone == run_rows.end()) {
      for (auto& row : FoldRun(std::move(run_rows))) folded.push_back(std::move(row));
      continue;
    }
    // A deleted run keeps only its newest tombstone, until mark_ttl: no WAL
    // older than that is replayed without replay_stale_wal.
    for (const auto& row : run_rows) {
      if (IsTombstone(row) && row.seq > tombstone->seq)
        tombstone = run_rows.begin() + (&row - run_rows.data());
    }
    if (tombstone->seq >= stale_before) folded.push_back(*tombstone);
  }
  for (const auto& [writer, mark] : marks) {
    if (mark.seq >= stale_before) folded.push_back(MarkRow(mark));
  }
  uint64_t in_fragments = 0;
  for (const auto& f : runs.Fragments()) {
    if (std::find(fragments.begin(), fragments.end(), f.id) != fragments.end()) {
      in_fragments += f.physical_rows - f.deleted_rows;
    }
  }
  if (folded.size() == in_fragments) {
    stats->run_rows_after = stats->run_rows_before;
    return;  // nothing to fold
  }
  auto written = runs.WriteFragments(RunsStream(folded, {}));
  runs.CommitUpdate(fragments, std::move(written));
  stats->run_rows_after = runs.CountRows();
}

void RepoImpl::PruneMarks(int table) {
  lance::Dataset& dataset = Latest(table);
  auto marks = ReadMarks(table);
  uint64_t stale_before = WallNanosAgo(options_.mark_ttl);
  for (const auto& [writer, mark] : marks) {
    std::string run_id = SqlString(std::string(kWalMarkPrefix) + writer);
    std::string filter = "run_id = " + run_id;
    if (mark.seq >= stale_before) {
      if (table == kSeries) {
        char digits[24];
        std::snprintf(digits, sizeof(digits), "%020" PRIu64, mark.seq);
        filter += " AND name < " + SqlString(digits);
      } else {
        filter += " AND seq < " + std::to_string(mark.seq);
      }
    }
    if (dataset.CountRows(filter) > 0) dataset.Delete(filter);
  }
}

void RepoImpl::SortMetrics(OptimizeStats* stats) {
  lance::Dataset& metrics = Latest(kMetrics);
  RetireAnnounced(kMetrics);
  auto fragments = metrics.Fragments();
  std::set<uint64_t> present;
  for (const auto& f : fragments) present.insert(f.id);
  auto metadata = metrics.Metadata();
  const std::set<uint64_t> sorted = FragmentList(metadata, kSortedFragmentsKey);
  const std::set<uint64_t> levelled = FragmentList(metadata, kLevelledFragmentsKey);
  std::vector<uint64_t> unsorted;
  for (uint64_t id : present) {
    if (!sorted.count(id)) unsorted.push_back(id);
  }
  // Sorted fragments without levels (an earlier build's) are rewritten, once;
  // those without a directory (also an earlier build's) get one.
  bool unlevelled = false;
  for (uint64_t id : sorted) unlevelled = unlevelled || !levelled.count(id);
  const FragmentLists kept{sorted, levelled, FragmentList(metadata, kDirectedFragmentsKey)};
  std::vector<uint64_t> undirected;
  for (uint64_t id : sorted) {
    if (present.count(id) && !kept.directed.count(id)) undirected.push_back(id);
  }
  if (unsorted.empty() && !unlevelled) {
    if (!undirected.empty()) RecordSorted(metrics, {}, undirected, kept, stats);
    return;
  }

  // A full rewrite when a sorted fragment is gone (merged by compaction) or
  // has no levels...
  bool full = unlevelled;
  for (uint64_t id : sorted) full = full || !present.count(id);
  // ...or the new fragments hold an earlier optimize's exact statistics...
  if (!full) {
    lance::ScanOptions scan;
    scan.columns = {"step"};
    scan.fragment_ids = unsorted;
    scan.filter = "series_id = 0 AND epoch IS NULL AND value = 1";
    auto reader = metrics.Scan(scan);
    while (auto batch = reader.Next()) full = full || batch->num_rows() > 0;
  }
  // ...or a new point is at or below the last sorted step of its series
  // (a step written again, or out of order).
  if (!full && !sorted.empty()) {
    std::unordered_map<uint64_t, int64_t> sorted_last;
    lance::ScanOptions scan;
    scan.columns = {"step", "stats"};
    scan.fragment_ids = std::vector<uint64_t>(sorted.begin(), sorted.end());
    scan.filter = "series_id = 0 AND epoch IS NULL";
    auto reader = metrics.Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::Int64Column step(*batch, "step");
      arrow::BinaryColumn encoded(*batch, "stats");
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        StatsDelta delta = StatsDelta::Decode(encoded.value(i));
        if (!delta.empty()) sorted_last[static_cast<uint64_t>(step.value(i))] = delta.last_step();
      }
    }
    lance::ScanOptions points;
    points.columns = {"series_id", "step"};
    points.fragment_ids = unsorted;
    points.filter = "series_id <> 0";
    auto point_reader = metrics.Scan(points);
    while (!full) {
      auto batch = point_reader.Next();
      if (!batch) break;
      arrow::UInt64Column id(*batch, "series_id");
      arrow::Int64Column step(*batch, "step");
      for (int64_t i = 0; i < batch->num_rows() && !full; ++i) {
        auto last = sorted_last.find(id.value(i));
        full = last != sorted_last.end() && step.value(i) <= last->second;
      }
    }
  }
  std::vector<uint64_t> rewrite = full ? Ids(fragments) : unsorted;
  stats->full_rewrite = rewrite.size() == fragments.size();

  // Series a live run names; points of any other series are dropped. The
  // series table is read after the fragments were listed, and a flush
  // commits series before points, so every listed point's series is here.
  std::unordered_set<uint64_t> live;
  for (const auto& s : ReadSeries("")) live.insert(s.series_id);

  // Pass 1: points per series and their step bounds, to plan passes that
  // fit optimize_memory.
  struct Extent {
    uint64_t count = 0;
    int64_t min_step = INT64_MAX, max_step = INT64_MIN;
  };
  std::map<uint64_t, Extent> extents;
  {
    lance::ScanOptions scan;
    scan.columns = {"series_id", "step"};
    scan.fragment_ids = rewrite;
    scan.filter = "series_id <> 0";
    auto reader = metrics.Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::UInt64Column id(*batch, "series_id");
      arrow::Int64Column step(*batch, "step");
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        if (!live.count(id.value(i))) continue;
        Extent& e = extents[id.value(i)];
        e.count++;
        e.min_step = std::min(e.min_step, step.value(i));
        e.max_step = std::max(e.max_step, step.value(i));
      }
    }
  }
  uint64_t budget = std::max<uint64_t>(1, options_.optimize_memory / kBytesPerPoint);
  std::vector<Pass> passes;
  uint64_t in_pass = 0;
  for (const auto& [id, e] : extents) {
    if (e.count > budget) {
      // One series larger than the budget: split by step range.
      uint64_t pieces = (e.count + budget - 1) / budget;
      uint64_t span = static_cast<uint64_t>(e.max_step) - static_cast<uint64_t>(e.min_step);
      uint64_t width = span / pieces + 1;
      for (uint64_t start = static_cast<uint64_t>(e.min_step);;) {
        uint64_t left = static_cast<uint64_t>(e.max_step) - start;
        bool last = left < width;
        Pass pass{id, id, static_cast<int64_t>(start),
                  last ? INT64_MAX : static_cast<int64_t>(start + width)};
        passes.push_back(pass);
        if (last) break;
        start += width;
      }
      in_pass = budget;
      continue;
    }
    if (passes.empty() || in_pass + e.count > budget) {
      passes.push_back({id, id});
      in_pass = 0;
    }
    passes.back().last_id = id;
    in_pass += e.count;
  }

  // Pass 2..n: each pass reads its series, keeps the latest point per step,
  // writes them sorted and computes their exact statistics.
  lance::UncommittedFragments written;
  std::map<uint64_t, StatsDelta> exact;
  for (const auto& pass : passes) {
    lance::ScanOptions scan;
    scan.columns = PointColumns();
    scan.fragment_ids = rewrite;
    scan.with_row_address = true;
    scan.filter = "series_id >= " + std::to_string(pass.first_id) +
                  " AND series_id <= " + std::to_string(pass.last_id);
    if (pass.start != INT64_MIN) scan.filter += " AND step >= " + SqlInt(pass.start);
    if (pass.stop != INT64_MAX) scan.filter += " AND step < " + SqlInt(pass.stop);
    PointsBySeries points;
    auto reader = metrics.Scan(scan);
    while (auto batch = reader.Next()) {
      CollectPoints(*batch, &points, [&live](uint64_t id) { return live.count(id) > 0; });
    }
    PointBuffer out;
    std::vector<LevelRow> levels;
    for (auto& [id, series] : points) {
      LatestPerStep(&series);
      std::vector<Point> kept;
      for (const StoredPoint& p : series) {
        out.series_ids.push_back(id);
        out.seqs.push_back(p.seq);
        out.steps.push_back(p.step);
        out.epochs.push_back(p.epoch);
        out.has_epoch.push_back(p.has_epoch);
        out.timestamps_us.push_back(p.timestamp_us);
        out.values.push_back(p.value);
        kept.push_back(Point{p.step, p.value, p.timestamp_us, p.seq});
      }
      // Steps of a split series' passes are disjoint: merging stays exact,
      // for the statistics and for the cells of levels (reads merge a cell
      // that two passes wrote).
      exact[id].Merge(ExactStats(kept));
      BuildLevels(id, kept, &levels);
      stats->points_rewritten += kept.size();
    }
    points.clear();
    if (!out.steps.empty()) written.Extend(metrics.WriteFragments(MetricsStream(out, {})));
    if (!levels.empty()) written.Extend(metrics.WriteFragments(LevelsStream(levels, stats)));
  }

  // The reserved rows: one exact delta per rewritten series, and each
  // writer's newest mark that is not stale.
  {
    PointBuffer reserved;
    reserved.deltas.insert(exact.begin(), exact.end());
    std::vector<Mark> marks;
    uint64_t stale_before = WallNanosAgo(options_.mark_ttl);
    for (const auto& [writer, mark] : ReadMarks(kMetrics, rewrite)) {
      if (mark.seq >= stale_before) marks.push_back(mark);
    }
    if (!reserved.deltas.empty() || !marks.empty()) {
      written.Extend(metrics.WriteFragments(MetricsStream(reserved, marks, /*exact=*/true)));
    }
  }
  auto commit = metrics.CommitUpdate(rewrite, std::move(written));

  // A full rewrite replaced every fragment the lists named.
  FragmentLists lists;
  if (!full) lists = kept;
  RecordSorted(metrics, commit.fragment_ids, full ? std::vector<uint64_t>{} : undirected, lists,
               stats);
  if (metrics.CountRows() > 0) {
    // Sorted by (series_id, step), a series' rows are contiguous and so are
    // its steps: zones of rows have narrow ranges of both, so a read skips
    // all but the zones of its series and, in a step range, most of those.
    // (A BTREE on series_id returned every row of a series, to be sorted
    // and intersected with the step range: 0.2 s for a 1,000-step window of
    // 20 series of 200,000 points, 25 ms with the zone map.)
    metrics.CreateScalarIndex("series_id", kSeriesIndexName, lance::Dataset::IndexKind::kZoneMap);
    metrics.CreateScalarIndex("step", kStepIndexName, lance::Dataset::IndexKind::kZoneMap);
    if (metrics.Indices().count(kOldSeriesIndexName)) metrics.DropIndex(kOldSeriesIndexName);
  }
}

}  // namespace kv0::tracking
