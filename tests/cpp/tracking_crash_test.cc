// A tracking writer killed at random points of a workload that overwrites
// earlier steps often (with flushes, automatic compactions and optimize in
// between), then reopened: every step must read back the value of its latest
// acknowledged point, or of the point in flight when the writer died, in the
// points, in the statistics and in a chart's buckets. Each reopen replays the writer's WAL.
//
// KV0_CRASH_ROUNDS sets the number of kills (default 150).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <random>
#include <string>

#include "crash_runner.h"
#include "crash_workload.h"
#include "kv0/tracking.h"
#include "test_util.h"

namespace kv0::tracking {
namespace {

using kv0::testing::MakeOverwriteOp;
using kv0::testing::OverwriteOp;
using kv0::testing::OverwriteSeries;
using Steps = std::map<int64_t, double>;

// A chart of the series in four buckets must agree with the points the model
// holds in each bucket's range, and the buckets must hold all of them.
void ExpectChartOf(Repo& repo, uint64_t id, const Steps& want) {
  DownsampleOptions options;
  options.buckets = 4;
  DownsampledSeries chart = repo.ReadDownsampled(std::vector<uint64_t>{id}, options).at(id);
  uint64_t counted = 0;
  for (const Bucket& bucket : chart.buckets) {
    SCOPED_TRACE("bucket [" + std::to_string(bucket.start) + ", " + std::to_string(bucket.stop) +
                 ")");
    auto begin = want.lower_bound(bucket.start), end = want.lower_bound(bucket.stop);
    ASSERT_NE(begin, end) << "a bucket without points";
    // Ties go to the smaller step, as they do with min_element and max_element.
    auto by_value = [](auto& a, auto& b) { return a.second < b.second; };
    auto min = std::min_element(begin, end, by_value), max = std::max_element(begin, end, by_value);
    EXPECT_EQ(bucket.count, static_cast<uint64_t>(std::distance(begin, end)));
    EXPECT_EQ(bucket.first_step, begin->first);
    EXPECT_EQ(bucket.first, begin->second);
    EXPECT_EQ(bucket.last_step, std::prev(end)->first);
    EXPECT_EQ(bucket.last, std::prev(end)->second);
    EXPECT_EQ(bucket.min, min->second);
    EXPECT_EQ(bucket.min_step, min->first);
    EXPECT_EQ(bucket.max, max->second);
    EXPECT_EQ(bucket.max_step, max->first);
    counted += bucket.count;
  }
  EXPECT_EQ(counted, want.size());
}

int Rounds() { return static_cast<int>(kv0::testing::EnvNumber("KV0_CRASH_ROUNDS", 150)); }

TEST(TrackingCrashTest, OverwrittenStepsReadTheirLatestAcknowledgedValueAfterKills) {
  kv0::testing::TempDir dir;
  const std::string repo_path = dir / "repo", wal = dir / "wal";
  const uint64_t seed = 15;
  RepoOptions options;
  options.wal_dir = wal;
  std::mt19937_64 rng(seed);
  std::map<int, Steps> model;  // what the operations before `done` wrote
  int64_t done = 0;
  uint64_t kills = 0, overwrites = 0, checked = 0;
  const int rounds = Rounds();
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round) + ", from operation " + std::to_string(done));
    bool killed = false;
    int64_t stop_after = done + 5 + static_cast<int64_t>(rng() % 300);
    int64_t acked =
        kv0::testing::RunAndKill({kv0::testing::SiblingBinary("tracking_overwrite_child"),
                                  repo_path, wal, std::to_string(seed), std::to_string(done)},
                                 stop_after, &killed);
    kills += killed;
    acked = std::max(acked, done);
    for (int64_t i = done; i < acked; ++i) {
      OverwriteOp op = MakeOverwriteOp(seed, i);
      if (op.kind != OverwriteOp::kTrack) continue;
      overwrites += model[op.series].count(op.step);
      model[op.series][op.step] = op.value;
    }
    const OverwriteOp in_flight = MakeOverwriteOp(seed, acked);

    Repo repo = Repo::Open(repo_path, options);  // replays the writer's WAL
    bool applied = false;
    for (int s = 0; s < 3; ++s) {
      uint64_t id = SeriesId("overwrites", OverwriteSeries(s), nlohmann::json::object());
      MetricData data = repo.ReadMany(std::vector<uint64_t>{id})[id];
      Steps got;
      for (size_t i = 0; i < data.size(); ++i) got[data.steps[i]] = data.values[i];
      Steps want = model[s];
      if (in_flight.kind == OverwriteOp::kTrack && in_flight.series == s &&
          got.count(in_flight.step) && got[in_flight.step] == in_flight.value) {
        want[in_flight.step] = in_flight.value;  // the point in flight made it
        applied = true;
      }
      ASSERT_EQ(got, want) << OverwriteSeries(s);
      checked += got.size();
      if (want.empty()) continue;
      SeriesStats stats = repo.GetSeriesStats(std::vector<uint64_t>{id}).at(id);
      auto [min, max] = std::minmax_element(want.begin(), want.end(),
                                            [](auto& a, auto& b) { return a.second < b.second; });
      EXPECT_EQ(stats.count, want.size()) << OverwriteSeries(s);
      EXPECT_EQ(stats.last_step, want.rbegin()->first) << OverwriteSeries(s);
      EXPECT_EQ(stats.last, want.rbegin()->second) << OverwriteSeries(s);
      EXPECT_EQ(stats.min, min->second) << OverwriteSeries(s);
      EXPECT_EQ(stats.max, max->second) << OverwriteSeries(s);
      SCOPED_TRACE(OverwriteSeries(s));
      ExpectChartOf(repo, id, want);
    }
    repo.Close();
    if (applied) model[in_flight.series][in_flight.step] = in_flight.value;
    done = applied ? acked + 1 : acked;
  }
  EXPECT_GT(kills, static_cast<uint64_t>(rounds) / 2);
  EXPECT_GT(overwrites, static_cast<uint64_t>(rounds));
  std::printf("%llu kills, %lld operations, %llu overwrites, %llu points checked\n",
              static_cast<unsigned long long>(kills), static_cast<long long>(done),
              static_cast<unsigned long long>(overwrites),
              static_cast<unsigned long long>(checked));
}

}  // namespace
}  // namespace kv0::tracking
