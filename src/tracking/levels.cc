// Levels: building, storing and decoding the cells optimize keeps (the
// layout is in levels.h).

#include "tracking/levels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>

#include "kv0/error.h"
#include "tracking/downsample.h"
#include "tracking/point_directory.h"
#include "tracking/schema.h"
#include "util/clock.h"
#include "util/varint.h"

namespace kv0::tracking {
namespace {

static_assert(std::endian::native == std::endian::little,
              "a cell's values are stored as the host's doubles, which must be little-endian");

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// --- The cell format ----------------------------------------------------------
//
// A row's cells, in ascending cell number, each as
//
//   cell number      zigzag varint: the number itself for the first cell, then
//                    the gap from the cell before
//   count            varint
//   non_finite       varint
//   first, last, min, max steps
//                    varints: offsets from the cell's first step (the cell
//                    number times the width), each below the width
//   first timestamp  zigzag varint: from the cell before's last timestamp (0
//                    for the first cell)
//   last timestamp   zigzag varint: from the first
//   first, last, min, max values
//                    8 bytes each, the doubles' bits
//
// About 45 bytes for a full cell of 128 steps, against 104 for the same
// fields at a fixed width: a chart reads a few hundred thousand cells, so
// their bytes are most of its cost.

void PutDouble(std::string* out, double v) {
  char bytes[8];
  std::memcpy(bytes, &v, 8);
  out->append(bytes, 8);
}

constexpr const char* kCorruptCells = "a level row of metrics holds cells that do not decode";

std::string EncodeCells(const std::vector<std::pair<int64_t, Bucket>>& cells, int64_t width) {
  std::string out;
  out.reserve(cells.size() * 48);
  int64_t previous_cell = 0, previous_timestamp = 0;
  for (const auto& [cell, b] : cells) {
    const int64_t base = cell * width;
    PutVarint(&out, Zigzag(WrapSub(cell, previous_cell)));
    PutVarint(&out, b.count);
    PutVarint(&out, b.non_finite);
    for (int64_t step : {b.first_step, b.last_step, b.min_step, b.max_step}) {
      PutVarint(&out, static_cast<uint64_t>(step - base));
    }
    PutVarint(&out, Zigzag(WrapSub(b.first_timestamp_us, previous_timestamp)));
    PutVarint(&out, Zigzag(WrapSub(b.last_timestamp_us, b.first_timestamp_us)));
    for (double v : {b.first, b.last, b.min, b.max}) PutDouble(&out, v);
    previous_cell = cell;
    previous_timestamp = b.last_timestamp_us;
  }
  return out;
}

// Appends `cells` to `out` as rows of at most one chunk each.
void ChunkCells(uint64_t series_id, int level, bool top,
                std::vector<std::pair<int64_t, Bucket>> cells, std::vector<LevelRow>* out) {
  for (auto& [cell, bucket] : cells) {
    const int64_t chunk = ChunkOfCell(cell);
    if (out->empty() || out->back().series_id != series_id || out->back().level != level ||
        out->back().chunk != chunk) {
      out->push_back(LevelRow{series_id, level, chunk, top, {}});
    }
    out->back().cells.emplace_back(cell, bucket);
  }
}

}  // namespace

int FinestLevelWithin(int64_t width) {
  int level = -1;
  while (level + 1 < kLevels && LevelWidth(level + 1) <= width) ++level;
  return level;
}

int64_t CellOfStep(int64_t step, int64_t width) { return FloorDiv(step, width); }

int64_t ChunkOfCell(int64_t cell) { return FloorDiv(cell, kCellsPerRow) * kCellsPerRow; }

void MergeBuckets(Bucket* into, const Bucket& from) {
  if (from.count == 0) return;
  if (into->count == 0) {
    const int64_t start = into->start, stop = into->stop;
    *into = from;
    into->start = start;
    into->stop = stop;
    return;
  }
  const bool into_finite = into->count > into->non_finite;
  const bool from_finite = from.count > from.non_finite;
  if (from.first_step < into->first_step) {
    into->first_step = from.first_step;
    into->first = from.first;
  }
  if (from.last_step > into->last_step) {
    into->last_step = from.last_step;
    into->last = from.last;
  }
  into->first_timestamp_us = std::min(into->first_timestamp_us, from.first_timestamp_us);
  into->last_timestamp_us = std::max(into->last_timestamp_us, from.last_timestamp_us);
  into->count += from.count;
  into->non_finite += from.non_finite;
  if (!from_finite) {
    // No finite value yet: min and max stay NaN at the first point (AddPoint).
    if (!into_finite) into->min_step = into->max_step = into->first_step;
    return;
  }
  // Ties go to the smaller step, as AddPoint's strict comparisons give.
  if (!into_finite || from.min < into->min ||
      (from.min == into->min && from.min_step < into->min_step)) {
    into->min = from.min;
    into->min_step = from.min_step;
  }
  if (!into_finite || from.max > into->max ||
      (from.max == into->max && from.max_step < into->max_step)) {
    into->max = from.max;
    into->max_step = from.max_step;
  }
}

void BuildLevels(uint64_t series_id, std::span<const Point> points, std::vector<LevelRow>* out,
                 int first_level) {
  if (points.empty()) return;
  // Level 0 from the points, each coarser level from the one below it.
  std::vector<std::pair<int64_t, Bucket>> cells;
  for (const Point& p : points) {
    const int64_t cell = CellOfStep(p.step, kLevelBase);
    if (cells.empty() || cells.back().first != cell) cells.emplace_back(cell, Bucket{});
    AddPoint(&cells.back().second, Axis::kStep, p.step, p.timestamp_us, p.value);
  }
  for (int level = 0;; ++level) {
    const bool last = cells.size() <= 1 || level + 1 == kLevels;
    std::vector<std::pair<int64_t, Bucket>> coarser;
    if (!last) {
      for (const auto& [cell, bucket] : cells) {
        const int64_t parent = FloorDiv(cell, kLevelRatio);
        if (coarser.empty() || coarser.back().first != parent)
          coarser.emplace_back(parent, Bucket{});
        MergeBuckets(&coarser.back().second, bucket);
      }
    }
    if (level >= first_level || last) ChunkCells(series_id, level, last, std::move(cells), out);
    if (last) return;
    cells = std::move(coarser);
  }
}

namespace {

void AppendLevelRows(const std::vector<LevelRow>& rows, OptimizeStats* stats,
                     arrow::BatchBuilder& b) {
  const int64_t now_us = static_cast<int64_t>(WallNanos() / 1000);
  for (const LevelRow& row : rows) {
    b.uint64(0).Append(kReservedSeriesId);
    b.int64(1).Append(static_cast<int64_t>(row.series_id));
    b.int64(2).Append(row.chunk);
    b.timestamp(3).Append(now_us);
    b.float64(4).Append(row.top ? kTopLevelRowValue : kLevelRowValue);
    const std::string cells = EncodeCells(row.cells, LevelWidth(row.level));
    stats->level_cells += row.cells.size();
    stats->level_bytes += cells.size();
    b.binary(5).Append(cells);
    b.uint64(6).Append(static_cast<uint64_t>(row.level));
  }
}

// The rows of each series of a flush's points, series by id, rows in the
// order reads rank them: by step, then seq (a point without one is older
// than any with one), then place in the buffer.
using RowsBySeries = std::vector<std::pair<uint64_t, std::vector<uint32_t>>>;
RowsBySeries OrderBySeries(const PointBuffer& points) {
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_id;
  for (size_t i = 0; i < points.size(); ++i) {
    by_id[points.series_ids[i]].push_back(static_cast<uint32_t>(i));
  }
  RowsBySeries out(std::make_move_iterator(by_id.begin()), std::make_move_iterator(by_id.end()));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [id, rows] : out) {
    auto earlier = [&](uint32_t a, uint32_t b) {
      return std::tie(points.steps[a], points.seqs[a]) < std::tie(points.steps[b], points.seqs[b]);
    };
    // Points usually come in step order: then the sort is skipped.
    if (!std::is_sorted(rows.begin(), rows.end(), earlier)) {
      std::stable_sort(rows.begin(), rows.end(), earlier);
    }
  }
  return out;
}

// The level rows of points ordered by `by_series`: per series, the latest
// point of each step (the last of the step in that order).
std::vector<LevelRow> FlushLevels(const PointBuffer& points, const RowsBySeries& by_series) {
  std::vector<LevelRow> rows;
  std::vector<Point> latest;
  for (const auto& [id, order] : by_series) {
    latest.clear();
    for (uint32_t i : order) {
      Point p{points.steps[i], points.values[i], points.timestamps_us[i], points.seqs[i]};
      if (!latest.empty() && latest.back().step == p.step) {
        latest.back() = p;
      } else {
        latest.push_back(p);
      }
    }
    BuildLevels(id, latest, &rows, kFlushFirstLevel);
  }
  return rows;
}

}  // namespace

arrow::OwnedStream LevelsStream(const std::vector<LevelRow>& rows, OptimizeStats* stats) {
  arrow::BatchBuilder b(MetricsSchema());
  AppendLevelRows(rows, stats, b);
  return arrow::OneBatch(MetricsSchema(), b);
}

arrow::OwnedStream FlushStream(const PointBuffer& points, std::span<const Mark> marks) {
  // Each series' points together, in step order, so that the fragment's
  // own entries find them by range (point_directory.h).
  const RowsBySeries by_series = OrderBySeries(points);
  std::vector<uint32_t> order;
  order.reserve(points.size());
  OwnEntryBuilder entries;
  for (const auto& [id, rows] : by_series) {
    order.insert(order.end(), rows.begin(), rows.end());
    for (uint32_t i : rows) entries.Add(id, points.steps[i]);
  }

  arrow::BatchBuilder b(MetricsSchema());
  AppendMetricsRows(points, marks, /*exact_deltas=*/false, b, order);
  OptimizeStats ignored;
  AppendLevelRows(FlushLevels(points, by_series), &ignored, b);
  AppendOwnEntries(entries.Finish(), b);
  const uint64_t rows = static_cast<uint64_t>(b.num_rows()) + 1;  // this mark included
  AppendFlushMark(static_cast<int64_t>(rows),
                  {.fragment_rows = rows, .tail_rows = rows - points.size()}, b);
  return arrow::OneBatch(MetricsSchema(), b);
}

std::string FlushTail::Encode() const {
  std::string out(kEncodedSize, '\0');
  out[0] = static_cast<char>(kFormatVersion);
  std::memcpy(out.data() + 1, &fragment_rows, 8);
  std::memcpy(out.data() + 9, &tail_rows, 8);
  return out;
}

std::optional<FlushTail> FlushTail::Decode(std::string_view bytes) {
  if (bytes.size() != kEncodedSize || static_cast<uint8_t>(bytes[0]) != kFormatVersion) {
    return std::nullopt;
  }
  FlushTail tail;
  std::memcpy(&tail.fragment_rows, bytes.data() + 1, 8);
  std::memcpy(&tail.tail_rows, bytes.data() + 9, 8);
  if (tail.tail_rows == 0 || tail.tail_rows > tail.fragment_rows) return std::nullopt;
  return tail;
}

void AppendFlushMark(int64_t counted_rows, const FlushTail& tail, arrow::BatchBuilder& b) {
  b.uint64(0).Append(kReservedSeriesId);
  b.int64(1).Append(0);
  b.int64(2).Append(counted_rows);
  b.timestamp(3).Append(static_cast<int64_t>(WallNanos() / 1000));
  b.float64(4).Append(kFlushMarkValue);
  b.binary(5).Append(tail.Encode());
  b.uint64(6).AppendNull();
}

std::set<uint64_t> FragmentList(const std::map<std::string, std::string>& metadata,
                                const char* key) {
  std::set<uint64_t> out;
  auto found = metadata.find(key);
  if (found == metadata.end()) return out;
  auto json = nlohmann::json::parse(found->second, nullptr, false);
  if (!json.is_array()) return out;
  for (const auto& id : json) {
    if (id.is_number_unsigned()) out.insert(id.get<uint64_t>());
  }
  return out;
}

void DecodeCells(std::string_view bytes, int level, std::vector<std::pair<int64_t, Bucket>>* out) {
  const int64_t width = LevelWidth(level);
  ByteReader in(bytes, kCorruptCells);
  int64_t cell = 0, previous_timestamp = 0;
  while (!in.done()) {
    cell = WrapAdd(cell, Unzigzag(in.Varint()));
    if (cell < std::numeric_limits<int64_t>::min() / width ||
        cell > std::numeric_limits<int64_t>::max() / width) {
      in.Fail();  // no step is in it
    }
    Bucket b;
    b.count = in.Varint();
    b.non_finite = in.Varint();
    int64_t* steps[] = {&b.first_step, &b.last_step, &b.min_step, &b.max_step};
    for (int64_t* step : steps) {
      const uint64_t offset = in.Varint();
      if (offset >= static_cast<uint64_t>(width)) in.Fail();
      *step = WrapAdd(cell * width, static_cast<int64_t>(offset));
    }
    b.first_timestamp_us = WrapAdd(previous_timestamp, Unzigzag(in.Varint()));
    b.last_timestamp_us = WrapAdd(b.first_timestamp_us, Unzigzag(in.Varint()));
    double* values[] = {&b.first, &b.last, &b.min, &b.max};
    for (double* v : values) *v = in.Double();
    previous_timestamp = b.last_timestamp_us;
    out->emplace_back(cell, b);
  }
}

}  // namespace kv0::tracking
