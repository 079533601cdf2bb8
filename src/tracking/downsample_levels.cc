// ReadDownsampled's fast path: a step window folded from levels (levels.h),
// the ones optimize wrote and the ones flushes wrote beside their points,
// and from raw points only where the levels cannot say:
//
//   - a cell whose parts share a step (a step written in two flushes, or in
//     a flush after optimize levelled it): only the latest write counts, so
//     its steps in the window are read raw, every fragment, the latest
//     point per step (ReadLatestPoints: taken by address where the point
//     directory covers them), from the fragments that may hold them;
//   - an edge cell of the window (one that lies partly outside it) whose
//     points reach outside the window: its part inside is read raw, the
//     same way. An edge cell whose points all lie inside is used whole; so
//     a view of a whole series, whose window ends at its last point, reads
//     no raw point of a levelled series;
//   - points in fragments with no levels of them (an earlier build's
//     flushes, fragments a run's delete touched): read raw from those
//     fragments; each is added as it is, unless its step lies between the
//     first and last step of a cell, which may hold an older point at that
//     step: that cell is read raw instead.
//
// Everything else is whole cells, merged into the chart's buckets, each a
// whole number of cells. Cells, raw spans and the other points cover
// disjoint steps, so the merge is exact.
//
// Which fragments a read touches: optimize's levelled fragments, by a
// filter on their level rows; of the others, only those whose flush
// summaries (flush_summaries.h) say they may hold a point of the window.
// Their level rows are taken by address, and a fragment without levels is
// read point by point. What a read costs: the rows of the level (about a
// cell per bucket and fragment, up to kCellsPerRow - 1 more at each end),
// the summaries of fragments this handle has not seen before (one scan of
// their reserved rows), and the points of the spans read raw and of the
// fragments without levels in the window.

#include <algorithm>
#include <set>
#include <tuple>

#include "tracking/downsample.h"
#include "tracking/flush_summaries.h"
#include "tracking/levels.h"
#include "tracking/point_directory.h"
#include "tracking/repo_impl.h"
#include "tracking/schema.h"

namespace kv0::tracking {
namespace {

// One series' cells at the read's level: gathered in any order, then
// sorted by cell number with the parts of one cell merged. Parts from two
// folds of optimize cover steps apart; parts from two flushes, or from a
// flush and optimize, may share a step (a step written again), and then
// only a raw read says which point is the latest: such a cell is listed as
// overlapping.
class Cells {
 public:
  void Add(int64_t cell, const Bucket& bucket) { cells_.emplace_back(cell, bucket); }

  void Finish() {
    std::stable_sort(cells_.begin(), cells_.end(), [](const auto& a, const auto& b) {
      return std::tie(a.first, a.second.first_step) < std::tie(b.first, b.second.first_step);
    });
    size_t kept = 0;
    for (size_t i = 0; i < cells_.size(); ++i) {
      if (kept > 0 && cells_[kept - 1].first == cells_[i].first) {
        Bucket& into = cells_[kept - 1].second;
        if (into.last_step >= cells_[i].second.first_step) overlapping_.push_back(cells_[i].first);
        MergeBuckets(&into, cells_[i].second);
      } else {
        cells_[kept++] = cells_[i];
      }
    }
    cells_.resize(kept);
    overlapping_.erase(std::unique(overlapping_.begin(), overlapping_.end()), overlapping_.end());
  }

  // After Finish(): cells whose parts share steps.
  const std::vector<int64_t>& overlapping() const { return overlapping_; }

  // The cell numbered `cell`, or null if it holds no point (also once
  // emptied, as a cell sent to the raw read is). After Finish().
  Bucket* Find(int64_t cell) {
    auto at = std::lower_bound(cells_.begin(), cells_.end(), cell,
                               [](const auto& c, int64_t n) { return c.first < n; });
    if (at == cells_.end() || at->first != cell || at->second.count == 0) return nullptr;
    return &at->second;
  }

  const std::vector<std::pair<int64_t, Bucket>>& sorted() const { return cells_; }

 private:
  std::vector<std::pair<int64_t, Bucket>> cells_;
  std::vector<int64_t> overlapping_;
};

Bucket OnePoint(const StoredPoint& p) {
  Bucket b;
  AddPoint(&b, Axis::kStep, p.step, p.timestamp_us, p.value);
  return b;
}

}  // namespace

bool RepoImpl::ReadDownsampledFromLevels(const std::vector<uint64_t>& ids, const BucketGrid& grid,
                                         int64_t start, int64_t stop,
                                         std::map<uint64_t, std::vector<Bucket>>* out) {
  const int level = FinestLevelWithin(grid.width());
  if (level < 0 || ids.empty()) return false;
  const int64_t width = LevelWidth(level);
  // The cells that meet the window, [first_cell, last_cell], and those
  // wholly inside it, [cell_lo, cell_hi).
  const int64_t first_cell = CellOfStep(start, width);
  const int64_t last_cell = CellOfStep(stop - 1, width);
  const int64_t cell_lo = first_cell + (start % width != 0 ? 1 : 0);
  const int64_t cell_hi = CellOfStep(stop, width);
  if (cell_lo >= cell_hi) return false;  // no whole cell: the raw read is small
  // A cell's steps, clipped to the window (the clip also keeps the edge
  // cells' products in range).
  auto cell_span = [&](int64_t cell) {
    return StepSpan{cell < cell_lo ? start : cell * width,
                    cell >= cell_hi ? stop : (cell + 1) * width};
  };

  // One version throughout: its fragments, its metadata, its rows.
  lance::Dataset metrics = Latest(kMetrics).Clone();
  const auto fragments = metrics.Fragments();
  std::set<uint64_t> present;
  for (const auto& f : fragments) present.insert(f.id);
  const std::set<uint64_t> levelled = FragmentList(metrics.Metadata(), kLevelledFragmentsKey);
  for (uint64_t id : levelled) {
    if (!present.count(id)) return false;  // rewritten since: the next optimize redoes them
  }
  // The other fragments, by their flush summaries: those that hold no point
  // of the window are skipped; those whose flushes wrote levels of all
  // their points (from kFlushFirstLevel on) give their level rows by
  // address; the rest are read point by point.
  const std::set<uint64_t> wanted(ids.begin(), ids.end());
  const auto summaries = flush_summaries_.Of(metrics);
  const int64_t first_chunk = ChunkOfCell(first_cell), last_chunk = ChunkOfCell(last_cell);
  std::vector<uint64_t> unlevelled, flush_level_rows;
  bool flush_levelled = false;
  for (const auto& f : fragments) {
    if (levelled.count(f.id)) continue;
    auto found = summaries.find(f.id);
    const FlushSummary* summary = found == summaries.end() ? nullptr : found->second.get();
    if (summary && !summary->MayHold(ids, {{start, stop}})) continue;
    if (!summary || level < kFlushFirstLevel || !summary->Levelled()) {
      unlevelled.push_back(f.id);
      continue;
    }
    flush_levelled = true;
    for (const LevelRowAt& row : summary->levels) {
      if (!wanted.count(row.series_id)) continue;
      if ((row.level == level && row.chunk >= first_chunk && row.chunk <= last_chunk) ||
          (row.top && row.level < level)) {
        flush_level_rows.push_back(f.id << 32 | row.offset);
      }
    }
  }
  if (levelled.empty() && !flush_levelled) return false;

  // The cells of the level, and the top rows below it, per series: from
  // optimize's fragments by filter, from flushes' by address.
  std::map<uint64_t, Cells> cells;
  std::vector<std::pair<int64_t, Bucket>> decoded;
  auto add_level_rows = [&](const arrow::Batch& batch) {
    arrow::Int64Column series(batch, "step");
    arrow::UInt64Column row_level(batch, "seq");
    arrow::BinaryColumn stats(batch, "stats");
    for (int64_t i = 0; i < batch.num_rows(); ++i) {
      decoded.clear();
      DecodeCells(stats.value(i), static_cast<int>(row_level.value(i)), &decoded);
      // A top row of a finer level: its one cell, numbered at this level.
      const int64_t per_cell = width / LevelWidth(static_cast<int>(row_level.value(i)));
      Cells& mine = cells[static_cast<uint64_t>(series.value(i))];
      for (auto& [cell, bucket] : decoded) {
        const int64_t at = CellOfStep(cell, per_cell);
        if (at >= first_cell && at <= last_cell) mine.Add(at, bucket);
      }
    }
  };
  for (const auto& part : Chunks(ids, kMaxFilterIds)) {
    if (levelled.empty()) break;
    lance::ScanOptions scan;
    scan.columns = {"step", "seq", "stats"};
    scan.fragment_ids = std::vector<uint64_t>(levelled.begin(), levelled.end());
    scan.filter = "series_id = 0 AND " + ReservedStepIn(part) +
                  " AND ((seq = " + std::to_string(level) +
                  " AND value >= " + std::to_string(static_cast<int>(kLevelRowValue)) +
                  " AND epoch >= " + SqlInt(first_chunk) + " AND epoch <= " + SqlInt(last_chunk) +
                  ") OR (value = " + std::to_string(static_cast<int>(kTopLevelRowValue)) +
                  " AND seq < " + std::to_string(level) + "))";
    auto reader = metrics.Scan(scan);
    while (auto batch = reader.Next()) add_level_rows(*batch);
  }
  if (!flush_level_rows.empty()) {
    std::sort(flush_level_rows.begin(), flush_level_rows.end());
    auto reader = metrics.Take(flush_level_rows, {"step", "seq", "stats"});
    while (auto batch = reader.Next()) add_level_rows(*batch);
  }
  for (auto& [id, mine] : cells) mine.Finish();

  // Per series, the spans read raw: each replaces a cell, dropped here.
  std::map<uint64_t, std::vector<StepSpan>> raw;
  auto read_raw = [&](uint64_t id, int64_t cell, Bucket* found) {
    raw[id].push_back(cell_span(cell));
    *found = Bucket{};
  };
  for (auto& [id, mine] : cells) {
    for (int64_t cell : mine.overlapping()) {
      if (Bucket* found = mine.Find(cell)) read_raw(id, cell, found);
    }
    for (int64_t edge : {first_cell, last_cell}) {
      if (edge >= cell_lo && edge < cell_hi) continue;  // wholly inside
      Bucket* found = mine.Find(edge);
      if (found && (found->first_step < start || found->last_step >= stop)) {
        read_raw(id, edge, found);
      }
    }
  }

  // Points not levelled yet. One that may overwrite a cell's point sends the
  // cell to the raw read, which also reads the new points inside it.
  PointsBySeries fresh;
  if (!unlevelled.empty()) {
    fresh = ReadLatestPoints(metrics, ids, {{start, stop}}, unlevelled,
                             flush_summaries_.OwnOf(metrics, summaries, unlevelled));
  }
  for (auto& [id, points] : fresh) {
    auto mine = cells.find(id);
    if (mine != cells.end()) {
      for (const StoredPoint& p : points) {
        const int64_t cell = CellOfStep(p.step, width);
        Bucket* found = mine->second.Find(cell);
        if (found && p.step >= found->first_step && p.step <= found->last_step) {
          read_raw(id, cell, found);
        }
      }
    }
    auto spans = raw.find(id);
    if (spans != raw.end()) {
      std::erase_if(points, [&](const StoredPoint& p) { return InSpans(spans->second, p.step); });
    }
  }

  std::map<uint64_t, std::vector<Bucket>> folded;
  auto add = [&](uint64_t id, int64_t step, const Bucket& b) {
    auto& buckets = folded[id];
    if (buckets.empty()) buckets.resize(static_cast<size_t>(grid.cells()));
    MergeBuckets(&buckets[static_cast<size_t>(grid.CellOf(step))], b);
  };
  // A cell lies in one bucket (both grids are aligned powers of two), and
  // its first point lies in the window.
  for (const auto& [id, mine] : cells) {
    for (const auto& [cell, bucket] : mine.sorted()) {
      if (bucket.count > 0) add(id, bucket.first_step, bucket);
    }
  }
  for (const auto& [id, points] : fresh) {
    for (const StoredPoint& p : points) add(id, p.step, OnePoint(p));
  }
  // The raw reads, one per set of spans (in a zoom, every series shares its
  // two edges).
  std::map<std::vector<StepSpan>, std::vector<uint64_t>> by_spans;
  for (const auto& [id, spans] : raw) by_spans[spans].push_back(id);
  for (const auto& [spans, group] : by_spans) {
    const auto from = FlushSummaries::MayHold(summaries, fragments, group, spans);
    const OwnDirectories own = flush_summaries_.OwnOf(metrics, summaries, from);
    for (const auto& [id, points] : ReadLatestPoints(metrics, group, spans, from, own)) {
      for (const StoredPoint& p : points) add(id, p.step, OnePoint(p));
    }
  }
  for (auto& [id, buckets] : folded) {
    for (size_t i = 0; i < buckets.size(); ++i) {
      buckets[i].start = grid.CellStart(static_cast<int64_t>(i));
      buckets[i].stop = grid.CellStop(static_cast<int64_t>(i));
    }
  }
  *out = std::move(folded);
  return true;
}

}  // namespace kv0::tracking
