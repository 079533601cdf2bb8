// Levels: building, storing and decoding the cells optimize keeps (the
// layout is in levels.h).

#include "tracking/levels.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "kv0/error.h"
#include "tracking/downsample.h"
#include "tracking/schema.h"
#include "util/clock.h"

namespace kv0::tracking {
namespace {

static_assert(std::endian::native == std::endian::little,
              "cells are stored as the host's 8-byte words, which must be little-endian");

// A stored cell: its number, then the Bucket's aggregates (its edges follow
// from the number and the level).
constexpr size_t kCellWords = 13;
constexpr size_t kCellBytes = kCellWords * 8;

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

template <typename T>
void Put(std::string* out, T word) {
  static_assert(sizeof(T) == 8);
  char bytes[8];
  std::memcpy(bytes, &word, 8);
  out->append(bytes, 8);
}

template <typename T>
T Get(const char*& at) {
  T word;
  std::memcpy(&word, at, 8);
  at += 8;
  return word;
}

std::string EncodeCells(const std::vector<std::pair<int64_t, Bucket>>& cells) {
  std::string out;
  out.reserve(cells.size() * kCellBytes);
  for (const auto& [cell, b] : cells) {
    Put(&out, cell);
    Put(&out, b.count);
    Put(&out, b.non_finite);
    Put(&out, b.first_step);
    Put(&out, b.first);
    Put(&out, b.last_step);
    Put(&out, b.last);
    Put(&out, b.min);
    Put(&out, b.min_step);
    Put(&out, b.max);
    Put(&out, b.max_step);
    Put(&out, b.first_timestamp_us);
    Put(&out, b.last_timestamp_us);
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

int64_t LevelWidth(int level) { return kLevelBase << (2 * level); }

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

void BuildLevels(uint64_t series_id, std::span<const Point> points, std::vector<LevelRow>* out) {
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
    ChunkCells(series_id, level, last, std::move(cells), out);
    if (last) return;
    cells = std::move(coarser);
  }
}

arrow::OwnedStream LevelsStream(const std::vector<LevelRow>& rows) {
  arrow::BatchBuilder b(MetricsSchema());
  const int64_t now_us = static_cast<int64_t>(WallNanos() / 1000);
  for (const LevelRow& row : rows) {
    b.uint64(0).Append(kReservedSeriesId);
    b.int64(1).Append(static_cast<int64_t>(row.series_id));
    b.int64(2).Append(row.chunk);
    b.timestamp(3).Append(now_us);
    b.float64(4).Append(row.top ? kTopLevelRowValue : kLevelRowValue);
    b.binary(5).Append(EncodeCells(row.cells));
    b.uint64(6).Append(static_cast<uint64_t>(row.level));
  }
  return arrow::OneBatch(MetricsSchema(), b);
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

void DecodeCells(std::string_view bytes, std::vector<std::pair<int64_t, Bucket>>* out) {
  if (bytes.size() % kCellBytes != 0) {
    throw Error(Code::kCorruption, "a level row of metrics holds " + std::to_string(bytes.size()) +
                                       " bytes, not whole cells");
  }
  out->reserve(out->size() + bytes.size() / kCellBytes);
  for (const char* at = bytes.data(); at < bytes.data() + bytes.size();) {
    const int64_t cell = Get<int64_t>(at);
    Bucket b;
    b.count = Get<uint64_t>(at);
    b.non_finite = Get<uint64_t>(at);
    b.first_step = Get<int64_t>(at);
    b.first = Get<double>(at);
    b.last_step = Get<int64_t>(at);
    b.last = Get<double>(at);
    b.min = Get<double>(at);
    b.min_step = Get<int64_t>(at);
    b.max = Get<double>(at);
    b.max_step = Get<int64_t>(at);
    b.first_timestamp_us = Get<int64_t>(at);
    b.last_timestamp_us = Get<int64_t>(at);
    out->emplace_back(cell, b);
  }
}

}  // namespace kv0::tracking
