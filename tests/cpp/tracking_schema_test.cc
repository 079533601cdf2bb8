// The tracking tables' schemas survive a round trip through Lance exactly:
// names, types and nullability, and late columns can be added to old tables.

#include <gtest/gtest.h>

#include "batch_util.h"
#include "lance/dataset.h"
#include "test_util.h"
#include "tracking/schema.h"
#include "tracking/tables.h"

namespace kv0::tracking {
namespace {

std::string Format(arrow::Type type) {
  switch (type) {
    case arrow::Type::kUInt8:
      return "C";
    case arrow::Type::kUInt32:
      return "I";
    case arrow::Type::kUInt64:
      return "L";
    case arrow::Type::kInt64:
      return "l";
    case arrow::Type::kFloat64:
      return "g";
    case arrow::Type::kBool:
      return "b";
    case arrow::Type::kBinary:
      return "z";
    case arrow::Type::kUtf8:
      return "u";
    case arrow::Type::kListUtf8:
      return "+l";
    case arrow::Type::kTimestampUs:
      return "tsu:UTC";
  }
  return "?";
}

void ExpectStored(const lance::Dataset& ds, const arrow::Schema& expected) {
  arrow::OwnedSchema stored = ds.Schema();
  ASSERT_EQ(stored->n_children, static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const ArrowSchema& field = *stored->children[i];
    EXPECT_EQ(field.name, expected[i].name);
    EXPECT_EQ(field.format, Format(expected[i].type)) << expected[i].name;
    EXPECT_EQ((field.flags & ARROW_FLAG_NULLABLE) != 0, expected[i].nullable) << expected[i].name;
  }
}

TEST(TrackingSchema, EveryTableRoundTripsThroughLance) {
  kv0::testing::TempDir dir;
  for (const auto* schema : {&RunsSchema(), &ParamsSchema(), &SeriesSchema(), &MetricsSchema()}) {
    auto ds = lance::Dataset::Create(dir / std::to_string(reinterpret_cast<uintptr_t>(schema)), {},
                                     *schema);
    ExpectStored(ds, *schema);
  }
}

TEST(TrackingSchema, LateColumnsCompleteOldTables) {
  kv0::testing::TempDir dir;
  arrow::Schema old_runs(RunsSchema().begin(), RunsSchema().end() - 3);
  auto runs = lance::Dataset::Create(dir / "runs.lance", {}, old_runs);
  runs.AddNullColumns(RunsLateColumns());
  ExpectStored(runs, RunsSchema());

  arrow::Schema old_metrics(MetricsSchema().begin(),
                            MetricsSchema().end() - MetricsLateColumns().size());
  auto metrics = lance::Dataset::Create(dir / "metrics.lance", {}, old_metrics);
  metrics.AddNullColumns(MetricsLateColumns());
  ExpectStored(metrics, MetricsSchema());
}

TEST(TrackingSchema, FieldBitsAreDistinct) {
  uint32_t seen = 0;
  for (uint32_t bit : {kFieldName, kFieldExperiment, kFieldDescription, kFieldTags, kFieldStatus,
                       kFieldArchived, kFieldCreatedAt, kFieldEndedAt, kFieldKind, kFieldTarget}) {
    EXPECT_EQ(seen & bit, 0u);
    seen |= bit;
  }
  EXPECT_EQ(seen, static_cast<uint32_t>(kAllRunFields));
  EXPECT_EQ(seen & kFieldDeleted, 0u);
}

// A batch of many short series (as optimize and reads meet before optimize:
// 100,000 runs of 3 points a series) must cost memory for its points only.
// Each series used to reserve room for the rest of the batch, which at
// 1,000,000 series held gigabytes of pages for 3,000,000 points.
TEST(TablesTest, CollectPointsReservesOnlyTheRowsOfEachSeries) {
  const arrow::Schema schema = {{"series_id", arrow::Type::kUInt64},
                                {"step", arrow::Type::kInt64},
                                {"epoch", arrow::Type::kInt64},
                                {"timestamp", arrow::Type::kTimestampUs},
                                {"value", arrow::Type::kFloat64},
                                {"seq", arrow::Type::kUInt64},
                                {lance::kRowAddress, arrow::Type::kUInt64}};
  arrow::BatchBuilder builder(schema);
  constexpr uint64_t kSeries = 3000, kPerSeries = 3;
  uint64_t row = 0;
  for (uint64_t series = 1; series <= kSeries; ++series) {
    for (uint64_t step = 0; step < kPerSeries; ++step, ++row) {
      builder.uint64(0).Append(series);
      builder.int64(1).Append(static_cast<int64_t>(step));
      builder.int64(2).AppendNull();
      builder.timestamp(3).Append(static_cast<int64_t>(row));
      builder.float64(4).Append(0.5);
      builder.uint64(5).Append(row + 1);
      builder.uint64(6).Append(row);
    }
  }
  arrow::Batch batch = arrow::Import(schema, arrow::Finish(builder));

  PointsBySeries points;
  CollectPoints(batch, &points);
  ASSERT_EQ(points.size(), kSeries);
  size_t capacity = 0;
  for (const auto& [series, series_points] : points) {
    ASSERT_EQ(series_points.size(), kPerSeries) << series;
    EXPECT_EQ(series_points.back().seq, (series - 1) * kPerSeries + kPerSeries) << series;
    capacity += series_points.capacity();
  }
  EXPECT_LE(capacity, 2 * kSeries * kPerSeries);
}

}  // namespace
}  // namespace kv0::tracking
