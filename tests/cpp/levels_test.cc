// The levels' stored form (tracking/levels.h): the rows BuildLevels makes,
// written as metrics rows and decoded again, give back every field of every
// cell, at the extremes of steps and timestamps; damaged bytes are refused.
// (That reads from levels are exact is downsample_test's job.)

#include "tracking/levels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kv0/error.h"
#include "lance/arrow.h"
#include "tracking/downsample.h"

namespace kv0::tracking {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

bool SameValue(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

void ExpectSameCell(const Bucket& a, const Bucket& b, const std::string& where) {
  EXPECT_EQ(a.count, b.count) << where;
  EXPECT_EQ(a.non_finite, b.non_finite) << where;
  EXPECT_EQ(a.first_step, b.first_step) << where;
  EXPECT_EQ(a.last_step, b.last_step) << where;
  EXPECT_EQ(a.min_step, b.min_step) << where;
  EXPECT_EQ(a.max_step, b.max_step) << where;
  EXPECT_TRUE(SameValue(a.first, b.first)) << where;
  EXPECT_TRUE(SameValue(a.last, b.last)) << where;
  EXPECT_TRUE(SameValue(a.min, b.min)) << where;
  EXPECT_TRUE(SameValue(a.max, b.max)) << where;
  EXPECT_EQ(a.first_timestamp_us, b.first_timestamp_us) << where;
  EXPECT_EQ(a.last_timestamp_us, b.last_timestamp_us) << where;
}

// The stats column of each row of LevelsStream(rows), in order.
std::vector<std::string> StoredCells(const std::vector<LevelRow>& rows) {
  OptimizeStats written;
  arrow::StreamReader reader(LevelsStream(rows, &written));
  std::vector<std::string> out;
  uint64_t total = 0;
  while (auto batch = reader.Next()) {
    arrow::BinaryColumn stats(*batch, "stats");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      out.emplace_back(stats.value(i));
      total += out.back().size();
    }
  }
  EXPECT_EQ(total, written.level_bytes);
  uint64_t cells = 0;
  for (const LevelRow& row : rows) cells += row.cells.size();
  EXPECT_EQ(cells, written.level_cells);
  return out;
}

// Points of one series at `steps`, with random values (some not finite)
// and timestamps that jump across the whole int64 range.
std::vector<Point> RandomPoints(std::mt19937_64& rng, std::vector<int64_t> steps) {
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  const double odd[] = {std::nan(""), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity(), -0.0, 1e308};
  std::vector<Point> points;
  for (int64_t step : steps) {
    Point p;
    p.step = step;
    p.value = rng() % 10 == 0 ? odd[rng() % 5] : static_cast<double>(rng() % 1000) / 7;
    switch (rng() % 8) {
      case 0:
        p.timestamp_us = kMin;
        break;
      case 1:
        p.timestamp_us = kMax;
        break;
      default:
        p.timestamp_us = static_cast<int64_t>(rng());
    }
    points.push_back(p);
  }
  return points;
}

TEST(LevelsTest, StoredCellsDecodeToTheCellsBuilt) {
  std::mt19937_64 rng(20261203);
  std::vector<std::vector<int64_t>> shapes;
  shapes.push_back({0});
  shapes.push_back({kMin, kMin + 1, -1, 0, kMax - 1, kMax});  // the extremes, in one series
  std::vector<int64_t> dense, sparse, negative;
  for (int64_t s = 0; s < 70000; ++s) dense.push_back(s);
  for (int64_t s = 0; s < 3000; ++s) sparse.push_back(s * 1000 + static_cast<int64_t>(rng() % 999));
  for (int64_t s = 0; s < 5000; ++s) negative.push_back(-static_cast<int64_t>(rng() % 1000000));
  shapes.push_back(dense);
  shapes.push_back(sparse);
  shapes.push_back(negative);

  for (size_t shape = 0; shape < shapes.size(); ++shape) {
    const std::vector<Point> points = RandomPoints(rng, shapes[shape]);
    std::vector<LevelRow> rows;
    BuildLevels(42, points, &rows);
    ASSERT_FALSE(rows.empty());
    EXPECT_TRUE(rows.back().top) << "shape " << shape;
    const std::vector<std::string> stored = StoredCells(rows);
    ASSERT_EQ(stored.size(), rows.size());
    uint64_t points_at_level_0 = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      std::vector<std::pair<int64_t, Bucket>> decoded;
      DecodeCells(stored[r], rows[r].level, &decoded);
      ASSERT_EQ(decoded.size(), rows[r].cells.size()) << "shape " << shape << " row " << r;
      for (size_t c = 0; c < decoded.size(); ++c) {
        const std::string where = "shape " + std::to_string(shape) + " row " + std::to_string(r) +
                                  " cell " + std::to_string(rows[r].cells[c].first);
        EXPECT_EQ(decoded[c].first, rows[r].cells[c].first) << where;
        EXPECT_EQ(ChunkOfCell(decoded[c].first), rows[r].chunk) << where;
        ExpectSameCell(decoded[c].second, rows[r].cells[c].second, where);
        if (rows[r].level == 0) points_at_level_0 += decoded[c].second.count;
      }
    }
    EXPECT_EQ(points_at_level_0, points.size()) << "shape " << shape;
  }
}

TEST(LevelsTest, EveryLevelIsTwiceTheWidthOfTheOneBelow) {
  EXPECT_EQ(LevelWidth(0), kLevelBase);
  for (int level = 1; level < kLevels; ++level) {
    EXPECT_EQ(LevelWidth(level), 2 * LevelWidth(level - 1));
    // A bucket of a level's width is one cell of that level.
    EXPECT_EQ(FinestLevelWithin(LevelWidth(level)), level);
    EXPECT_EQ(FinestLevelWithin(LevelWidth(level) + 1), level);
    EXPECT_EQ(FinestLevelWithin(2 * LevelWidth(level) - 1), level);
  }
  EXPECT_EQ(FinestLevelWithin(kLevelBase - 1), -1);
}

TEST(LevelsTest, DamagedCellsAreCorruption) {
  std::mt19937_64 rng(5);
  std::vector<int64_t> steps;
  for (int64_t s = 0; s < 500; ++s) steps.push_back(s);
  std::vector<LevelRow> rows;
  BuildLevels(7, RandomPoints(rng, steps), &rows);
  const std::string row = StoredCells(rows).front();
  const int level = rows.front().level;
  std::vector<std::pair<int64_t, Bucket>> cells;
  // Cut short, anywhere inside its last cell.
  for (size_t cut = 1; cut < 40; ++cut) {
    cells.clear();
    EXPECT_THROW(DecodeCells(std::string_view(row).substr(0, row.size() - cut), level, &cells),
                 Error)
        << "cut " << cut;
  }
  // A step offset no cell of the level can hold (the first cell's first
  // step, after its number, count and non-finite count, one byte each).
  std::string wide = row;
  ASSERT_LT(static_cast<uint8_t>(wide[3]), 0x80);
  wide[3] = static_cast<char>(0x7f);
  cells.clear();
  EXPECT_THROW(DecodeCells(wide, level, &cells), Error);
  // A varint that never ends.
  cells.clear();
  EXPECT_THROW(DecodeCells(std::string(12, '\xff'), level, &cells), Error);
  // The same bytes read as a finer level: offsets past its width.
  if (level > 0) {
    cells.clear();
    EXPECT_THROW(DecodeCells(row, 0, &cells), Error);
  }
  cells.clear();
  EXPECT_NO_THROW(DecodeCells(row, level, &cells));
}

}  // namespace
}  // namespace kv0::tracking
