// Flush summaries read by address (flush_summaries.h): a fragment that ends
// with a mark describing its tail is summarised from two takes, every other
// one by a scan. The two ways must agree on every fragment, whatever wrote
// it: flushes, the merge of unsorted fragments, Lance's compaction, a run's
// delete, an earlier build's flush without a mark.

#include "tracking/flush_summaries.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "test_util.h"
#include "tracking/levels.h"
#include "tracking/tables.h"

namespace kv0::tracking {
namespace {

class FlushSummariesTest : public ::testing::Test {
 protected:
  RepoOptions Opts() {
    RepoOptions o;
    o.wal_dir = dir_ / "wal";
    o.flush_interval = std::chrono::hours(1);
    o.max_fragments = 3;  // the unsorted fragments are merged every few flushes
    return o;
  }
  std::string Uri() { return dir_ / "repo"; }
  lance::Dataset Metrics() { return lance::Dataset::Open(Uri() + "/metrics.lance", {}); }

  // Reads every summary both ways and compares them; returns how the
  // address-reading side read them.
  FlushSummaries::Reads ExpectSameBothWays() {
    lance::Dataset metrics = Metrics();
    FlushSummaries by_address(true), scanned(false);
    const auto a = by_address.Of(metrics), b = scanned.Of(metrics);
    EXPECT_EQ(scanned.reads().by_address, 0u);
    EXPECT_EQ(a.size(), b.size());
    for (const auto& [fragment, want] : b) {
      SCOPED_TRACE("fragment " + std::to_string(fragment));
      auto found = a.find(fragment);
      if (found == a.end()) {
        ADD_FAILURE() << "no summary read by address";
        continue;
      }
      const FlushSummary& got = *found->second;
      EXPECT_EQ(got.rows, want->rows);
      EXPECT_EQ(got.marked_rows, want->marked_rows);
      EXPECT_EQ(got.counted_rows, want->counted_rows);
      EXPECT_EQ(got.Bounded(), want->Bounded());
      EXPECT_EQ(got.Levelled(), want->Levelled());
      EXPECT_EQ(got.deltas.size(), want->deltas.size());
      for (const auto& [series, delta] : want->deltas) {
        auto other = got.deltas.find(series);
        if (other == got.deltas.end()) {
          ADD_FAILURE() << "series " << series << " missing";
          continue;
        }
        EXPECT_EQ(other->second.Encode(), delta.Encode()) << "series " << series;
      }
      auto key = [](const LevelRowAt& r) {
        return std::tie(r.offset, r.series_id, r.level, r.chunk, r.top);
      };
      auto sorted = [&](std::vector<LevelRowAt> rows) {
        std::sort(rows.begin(), rows.end(),
                  [&](const LevelRowAt& x, const LevelRowAt& y) { return key(x) < key(y); });
        return rows;
      };
      const auto got_levels = sorted(got.levels), want_levels = sorted(want->levels);
      EXPECT_EQ(got_levels.size(), want_levels.size());
      for (size_t i = 0; i < std::min(got_levels.size(), want_levels.size()); ++i) {
        EXPECT_TRUE(key(got_levels[i]) == key(want_levels[i])) << "level row " << i;
      }
    }
    return by_address.reads();
  }

  testing::TempDir dir_;
};

TEST_F(FlushSummariesTest, ReadByAddressTheyEqualThoseScanned) {
  std::mt19937_64 rng(6);
  Repo repo = Repo::Open(Uri(), Opts());
  std::vector<tracking::Run> runs;
  for (int r = 0; r < 3; ++r)
    runs.push_back(repo.CreateRun(NewRun{.name = "r" + std::to_string(r)}));
  auto flush = [&](int64_t first, int64_t steps) {
    for (auto& run : runs) {
      for (int64_t step = first; step < first + steps; ++step) {
        run.Track(std::uniform_real_distribution<double>(-1, 1)(rng), "loss", {.step = step});
        if (step % 7 == 0) run.Track(1.0 * step, "acc", {.step = step});
      }
      // An old step written again: its series' delta is dirty.
      if (first > 0) run.Track(1e6, "loss", {.step = static_cast<int64_t>(rng() % first)});
    }
    repo.Flush();
  };

  // Flushes, and the merges of their fragments that max_fragments asks for:
  // every summary is read by address.
  for (int i = 0; i < 9; ++i) flush(600 * i, 600);
  auto reads = ExpectSameBothWays();
  EXPECT_GT(reads.by_address, 0u);
  EXPECT_EQ(reads.scanned, 0u) << "a flush's or a merge's fragment was scanned";
  EXPECT_LT(Metrics().Fragments().size(), 9u) << "no merge happened";

  // Lance's compaction puts one flush's mark after other fragments' rows:
  // the mark no longer describes the fragment, which is scanned.
  Metrics().Compact({});
  reads = ExpectSameBothWays();
  EXPECT_GT(reads.scanned, 0u);

  // An earlier build's flush: points and statistics rows, no mark.
  {
    PointBuffer old;
    const uint64_t id = SeriesId(runs[0].run_id(), "loss", nlohmann::json::object());
    for (int64_t step = 9000; step < 9100; ++step)
      old.Add(id, step, std::nullopt, step, 0.5, 0, false);
    Metrics().Append(MetricsStream(old, {}));
  }
  for (int i = 0; i < 4; ++i) flush(9100 + 300 * i, 300);
  ExpectSameBothWays();

  // A run's delete leaves deletion files; the merges after it copy only
  // the rows left.
  repo.DeleteRuns(std::vector<std::string>{runs[1].run_id()});
  runs.erase(runs.begin() + 1);
  reads = ExpectSameBothWays();
  EXPECT_GT(reads.scanned, 0u);
  for (int i = 0; i < 5; ++i) flush(11000 + 300 * i, 300);
  ExpectSameBothWays();
}

// A merge writes one fragment: its points, then every reserved row of the
// fragments it merged but their own entries, then its own entries and one
// mark that describes that tail.
TEST_F(FlushSummariesTest, AMergeGathersTheReservedRowsAtTheEnd) {
  Repo repo = Repo::Open(Uri(), Opts());
  tracking::Run run = repo.CreateRun(NewRun{.name = "m"});
  for (int i = 0; i < 3; ++i) {
    for (int64_t step = 100 * i; step < 100 * (i + 1); ++step) run.Track(1.0, "x", {.step = step});
    repo.Flush();
  }
  lance::Dataset metrics = Metrics();
  std::vector<uint64_t> ids;
  uint64_t rows = 0;
  for (const auto& f : metrics.Fragments()) {
    ids.push_back(f.id);
    rows += f.physical_rows;
  }
  ASSERT_EQ(ids.size(), 3u);
  metrics.CommitUpdate(ids, metrics.WriteFragments(MergedFlushesStream(metrics, ids)));
  metrics = Metrics();
  ASSERT_EQ(metrics.Fragments().size(), 1u);
  const lance::FragmentInfo merged = metrics.Fragments()[0];
  // One mark more, and one own entry where each flush had one.
  EXPECT_EQ(merged.physical_rows, rows - 3 + 1 + 1);

  lance::ScanOptions scan;
  scan.columns = {"series_id", "epoch", "value", "stats"};
  std::vector<uint64_t> series;
  std::optional<FlushTail> tail;
  int64_t last_epoch = 0;
  auto reader = metrics.Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt64Column id(*batch, "series_id");
    arrow::Int64Column epoch(*batch, "epoch");
    arrow::BinaryColumn stats(*batch, "stats");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      series.push_back(id.value(i));
      if (i + 1 == batch->num_rows() && !stats.is_null(i)) {
        tail = FlushTail::Decode(stats.value(i));
        last_epoch = epoch.value(i);
      }
    }
  }
  ASSERT_EQ(series.size(), merged.physical_rows);
  ASSERT_TRUE(tail.has_value()) << "the last row is not a mark describing the tail";
  EXPECT_EQ(tail->fragment_rows, merged.physical_rows);
  EXPECT_EQ(last_epoch, 1 + 1 - 3);  // the flushes' marks count the rest
  const size_t points = series.size() - tail->tail_rows;
  EXPECT_EQ(points, 300u);
  for (size_t i = 0; i < series.size(); ++i) {
    EXPECT_EQ(series[i] == kReservedSeriesId, i >= points) << "row " << i;
  }
  // Its summary: levelled (the marks add up) and directed by the one entry.
  FlushSummaries summaries;
  const auto by_id = summaries.Of(metrics);
  EXPECT_TRUE(by_id.at(merged.id)->Levelled());
  const auto own = summaries.OwnOf(metrics, by_id, {merged.id});
  ASSERT_EQ(own.count(merged.id), 1u);
  const uint64_t series_id = SeriesId(run.run_id(), "x", nlohmann::json::object());
  ASSERT_EQ(own.at(merged.id)->by_series.size(), 1u);
  const auto& entries = own.at(merged.id)->by_series.at(series_id);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].offset, 0u);
  EXPECT_EQ(entries[0].count, 300u);
  EXPECT_EQ(entries[0].last_step, 299);
  // The statistics read from it are the points'.
  auto stats = Repo::Open(Uri(), Opts()).GetSeriesStats(std::vector<uint64_t>{series_id});
  EXPECT_EQ(stats[series_id].count, 300u);
  EXPECT_EQ(stats[series_id].last_step, 299);
}

TEST(FlushTailTest, DecodesWhatItEncodesAndNothingElse) {
  const FlushTail tail{.fragment_rows = 1'000'003, .tail_rows = 41};
  const std::string bytes = tail.Encode();
  ASSERT_EQ(bytes.size(), FlushTail::kEncodedSize);
  auto back = FlushTail::Decode(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->fragment_rows, tail.fragment_rows);
  EXPECT_EQ(back->tail_rows, tail.tail_rows);
  EXPECT_FALSE(FlushTail::Decode(bytes.substr(1)));
  EXPECT_FALSE(FlushTail::Decode(""));
  std::string wrong_version = bytes;
  wrong_version[0] = 2;
  EXPECT_FALSE(FlushTail::Decode(wrong_version));
  EXPECT_FALSE(FlushTail::Decode(FlushTail{.fragment_rows = 5, .tail_rows = 0}.Encode()));
  EXPECT_FALSE(FlushTail::Decode(FlushTail{.fragment_rows = 5, .tail_rows = 6}.Encode()));
}

}  // namespace
}  // namespace kv0::tracking
