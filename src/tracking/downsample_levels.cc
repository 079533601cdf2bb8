// ReadDownsampled's fast path: a step window folded from the levels optimize
// wrote (levels.h), and from raw points only where the levels cannot say:
//
//   - the window's two edges, where a cell of the level lies partly outside
//     it: read raw, every fragment, the latest point per step;
//   - points in fragments no optimize levelled (new flushes, other writers):
//     read raw from those fragments; each is added as it is, unless its step
//     lies between the first and last step of a levelled cell, which may
//     hold an older point at that step: that cell is read raw instead.
//
// Everything else is whole cells, merged into the chart's buckets, which are
// whole numbers of cells. Cells, edges, new points and cells read raw cover
// disjoint steps, so the merge is exact. What a read costs: the rows of the
// level (about 2 cells per bucket, up to kCellsPerRow - 1 more at each end)
// and the points of the edges and of the unlevelled fragments.

#include <algorithm>
#include <set>

#include "tracking/downsample.h"
#include "tracking/levels.h"
#include "tracking/repo_impl.h"
#include "tracking/schema.h"

namespace kv0::tracking {
namespace {

struct StepSpan {
  int64_t start, stop;  // [start, stop)
};

std::string SpanFilter(const std::vector<StepSpan>& spans) {
  std::string filter;
  for (const StepSpan& s : spans) {
    if (!filter.empty()) filter += " OR ";
    filter += "(step >= " + SqlInt(s.start) + " AND step < " + SqlInt(s.stop) + ")";
  }
  return "(" + filter + ")";
}

// The latest point of each step of `ids` in `spans`, read from `fragments`
// of `metrics` (all of them if unset).
PointsBySeries ReadLatest(const lance::Dataset& metrics, const std::vector<uint64_t>& ids,
                          const std::vector<StepSpan>& spans,
                          const std::optional<std::vector<uint64_t>>& fragments) {
  PointsBySeries points;
  if (ids.empty() || spans.empty()) return points;
  for (size_t begin = 0; begin < ids.size(); begin += kMaxFilterIds) {
    std::vector<uint64_t> part(ids.begin() + begin,
                               ids.begin() + std::min(ids.size(), begin + kMaxFilterIds));
    lance::ScanOptions scan;
    scan.columns = PointColumns();
    scan.with_row_address = true;
    scan.fragment_ids = fragments;
    scan.filter = SqlIn("series_id", part) + " AND " + SpanFilter(spans);
    auto reader = metrics.Scan(scan);
    while (auto batch = reader.Next()) CollectPoints(*batch, &points);
  }
  for (auto& [id, series] : points) LatestPerStep(&series);
  return points;
}

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
  // The cells wholly inside the window, [cell_lo, cell_hi), and the steps
  // they cover, [inner_start, inner_stop): within the window, so in range.
  const int64_t cell_lo = CellOfStep(start, width) + (start % width != 0 ? 1 : 0);
  const int64_t cell_hi = CellOfStep(stop, width);
  if (cell_lo >= cell_hi) return false;  // no whole cell: the raw read is small
  const int64_t inner_start = cell_lo * width, inner_stop = cell_hi * width;

  // One version throughout: its fragments, its metadata, its rows.
  lance::Dataset metrics = Latest(kMetrics).Clone();
  std::set<uint64_t> present;
  for (const auto& f : metrics.Fragments()) present.insert(f.id);
  const auto metadata = metrics.Metadata();
  const std::set<uint64_t> levelled = FragmentList(metadata, kLevelledFragmentsKey);
  if (levelled.empty()) return false;
  for (uint64_t id : levelled) {
    if (!present.count(id)) return false;  // rewritten since: the next optimize redoes them
  }
  std::vector<uint64_t> unlevelled;
  for (uint64_t id : present) {
    if (!levelled.count(id)) unlevelled.push_back(id);
  }

  // The cells of the level, and the top rows below it, per series.
  std::map<uint64_t, std::map<int64_t, Bucket>> cells;
  for (size_t begin = 0; begin < ids.size(); begin += kMaxFilterIds) {
    std::vector<int64_t> part;
    for (size_t i = begin; i < std::min(ids.size(), begin + kMaxFilterIds); ++i) {
      part.push_back(static_cast<int64_t>(ids[i]));
    }
    lance::ScanOptions scan;
    scan.columns = {"step", "seq", "stats"};
    scan.fragment_ids = std::vector<uint64_t>(levelled.begin(), levelled.end());
    scan.filter = "series_id = 0 AND " + SqlInSigned("step", part) +
                  " AND ((seq = " + std::to_string(level) +
                  " AND value >= " + std::to_string(static_cast<int>(kLevelRowValue)) +
                  " AND epoch >= " + SqlInt(ChunkOfCell(cell_lo)) +
                  " AND epoch <= " + SqlInt(ChunkOfCell(cell_hi - 1)) +
                  ") OR (value = " + std::to_string(static_cast<int>(kTopLevelRowValue)) +
                  " AND seq < " + std::to_string(level) + "))";
    auto reader = metrics.Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::Int64Column series(*batch, "step");
      arrow::UInt64Column row_level(*batch, "seq");
      arrow::BinaryColumn stats(*batch, "stats");
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        std::map<int64_t, Bucket> decoded;
        DecodeCells(stats.value(i), &decoded);
        // A top row of a finer level: its one cell, numbered at this level.
        int64_t per_cell = 1;
        for (uint64_t l = row_level.value(i); l < static_cast<uint64_t>(level); ++l) {
          per_cell *= kLevelRatio;
        }
        auto& mine = cells[static_cast<uint64_t>(series.value(i))];
        for (const auto& [cell, bucket] : decoded) {
          const int64_t at = per_cell == 1 ? cell : CellOfStep(cell, per_cell);
          if (at >= cell_lo && at < cell_hi) MergeBuckets(&mine[at], bucket);
        }
      }
    }
  }

  // Points not levelled yet, in the inner cells (the edges are read below).
  PointsBySeries fresh;
  if (!unlevelled.empty())
    fresh = ReadLatest(metrics, ids, {{inner_start, inner_stop}}, unlevelled);

  // The raw spans: the edges for every series; the cells a fresh point may
  // overwrite, per series.
  std::vector<StepSpan> edges;
  if (start < inner_start) edges.push_back({start, inner_start});
  if (inner_stop < stop) edges.push_back({inner_stop, stop});
  std::map<uint64_t, std::vector<StepSpan>> rewritten;
  for (auto& [id, points] : fresh) {
    auto& mine = cells[id];
    std::vector<StoredPoint> kept;
    for (const StoredPoint& p : points) {
      const int64_t cell = CellOfStep(p.step, width);
      auto found = mine.find(cell);
      if (found == mine.end() || p.step < found->second.first_step ||
          p.step > found->second.last_step) {
        kept.push_back(p);
        continue;
      }
      rewritten[id].push_back({cell * width, (cell + 1) * width});
      mine.erase(found);
    }
    // Points in a cell now read raw are in that raw read.
    std::erase_if(kept, [&](const StoredPoint& p) {
      for (const StepSpan& s : rewritten[id]) {
        if (p.step >= s.start && p.step < s.stop) return true;
      }
      return false;
    });
    points = std::move(kept);
  }

  std::map<uint64_t, std::vector<Bucket>> folded;
  auto add = [&](uint64_t id, int64_t step, const Bucket& b) {
    auto& buckets = folded[id];
    if (buckets.empty()) buckets.resize(static_cast<size_t>(grid.cells()));
    MergeBuckets(&buckets[static_cast<size_t>(grid.CellOf(step))], b);
  };
  for (const auto& [id, mine] : cells) {
    for (const auto& [cell, bucket] : mine) add(id, cell * width, bucket);
  }
  for (const auto& [id, points] : fresh) {
    for (const StoredPoint& p : points) add(id, p.step, OnePoint(p));
  }
  for (const auto& [id, points] : ReadLatest(metrics, ids, edges, std::nullopt)) {
    for (const StoredPoint& p : points) add(id, p.step, OnePoint(p));
  }
  for (const auto& [id, spans] : rewritten) {
    for (const auto& [read_id, points] : ReadLatest(metrics, {id}, spans, std::nullopt)) {
      for (const StoredPoint& p : points) add(read_id, p.step, OnePoint(p));
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
