// Repo::ReadDownsampled checked against a reference computed here, from the
// points as ReadMany returns them, by a different method (each bucket's
// points gathered, then reduced with the standard algorithms), over
// randomized repositories: non-finite values, overwritten steps, sparse
// series, deleted runs, several writers, flushes' levels, optimize and
// reopen.

#include "tracking/downsample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "kv0/error.h"
#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "test_util.h"
#include "tracking/tables.h"

namespace kv0::tracking {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

bool SameValue(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

std::string Show(const Bucket& b) {
  std::ostringstream os;
  os << "[" << b.start << ", " << b.stop << ") count " << b.count << " non_finite " << b.non_finite
     << " first " << b.first << "@" << b.first_step << " last " << b.last << "@" << b.last_step
     << " min " << b.min << "@" << b.min_step << " max " << b.max << "@" << b.max_step << " ts "
     << b.first_timestamp_us << ".." << b.last_timestamp_us;
  return os.str();
}

bool Same(const Bucket& a, const Bucket& b) {
  return a.start == b.start && a.stop == b.stop && a.count == b.count &&
         a.non_finite == b.non_finite && a.first_step == b.first_step &&
         SameValue(a.first, b.first) && a.last_step == b.last_step && SameValue(a.last, b.last) &&
         SameValue(a.min, b.min) && a.min_step == b.min_step && SameValue(a.max, b.max) &&
         a.max_step == b.max_step && a.first_timestamp_us == b.first_timestamp_us &&
         a.last_timestamp_us == b.last_timestamp_us;
}

struct Point {
  int64_t step, ts;
  double value;
};

// The smallest power of two w with ceil(span / w) <= buckets.
int64_t ExpectedWidth(int64_t start, int64_t stop, int64_t buckets) {
  const __int128 span = static_cast<__int128>(stop) - start;
  for (int shift = 0; shift < 63; ++shift) {
    __int128 w = __int128{1} << shift;
    if ((span + w - 1) / w <= buckets) return static_cast<int64_t>(w);
  }
  return std::numeric_limits<int64_t>::max();
}

// One bucket from its points (given in step order), by the definition in
// kv0/tracking.h.
Bucket Reduce(int64_t start, int64_t stop, const std::vector<Point>& points, Axis axis) {
  Bucket b;
  b.start = start;
  b.stop = stop;
  b.count = points.size();
  auto x = [axis](const Point& p) { return axis == Axis::kStep ? p.step : p.ts; };
  // First: smallest x, then smallest step; last: greatest x, then greatest step.
  auto first = std::min_element(points.begin(), points.end(), [&](const Point& a, const Point& c) {
    return std::pair(x(a), a.step) < std::pair(x(c), c.step);
  });
  auto last = std::max_element(points.begin(), points.end(), [&](const Point& a, const Point& c) {
    return std::pair(x(a), a.step) < std::pair(x(c), c.step);
  });
  b.first_step = first->step;
  b.first = first->value;
  b.last_step = last->step;
  b.last = last->value;
  std::vector<Point> finite;
  for (const Point& p : points) {
    if (std::isfinite(p.value)) {
      finite.push_back(p);
    } else {
      b.non_finite++;
    }
  }
  if (finite.empty()) {
    b.min = b.max = kNaN;
    b.min_step = b.max_step = b.first_step;
  } else {
    auto by_value_then_step = [](const Point& a, const Point& c) {
      return std::pair(a.value, a.step) < std::pair(c.value, c.step);
    };
    auto lo = std::min_element(finite.begin(), finite.end(), by_value_then_step);
    // The greatest value, and of those the smallest step.
    auto hi = std::min_element(finite.begin(), finite.end(), [](const Point& a, const Point& c) {
      return std::pair(-a.value, a.step) < std::pair(-c.value, c.step);
    });
    b.min = lo->value;
    b.min_step = lo->step;
    b.max = hi->value;
    b.max_step = hi->step;
  }
  auto [oldest, newest] = std::minmax_element(
      points.begin(), points.end(), [](const Point& a, const Point& c) { return a.ts < c.ts; });
  b.first_timestamp_us = oldest->ts;
  b.last_timestamp_us = newest->ts;
  return b;
}

// The downsampled form of one series' points (in step order, as ReadMany
// returns them, already restricted to the window).
DownsampledSeries Reference(const std::vector<Point>& points, int64_t start, int64_t stop,
                            int64_t buckets, Axis axis) {
  DownsampledSeries out;
  out.width = ExpectedWidth(start, stop, buckets);
  auto x = [axis](const Point& p) { return axis == Axis::kStep ? p.step : p.ts; };
  if (points.size() <= 2 * static_cast<size_t>(buckets)) {
    out.raw = true;
    for (const Point& p : points) out.buckets.push_back(Reduce(x(p), x(p) + 1, {p}, axis));
    std::stable_sort(out.buckets.begin(), out.buckets.end(),
                     [](const Bucket& a, const Bucket& b) { return a.start < b.start; });
    return out;
  }
  std::map<int64_t, std::vector<Point>> cells;  // by the cell's unclipped start
  for (const Point& p : points) {
    // Floor division, for negative x as well.
    int64_t cell = x(p) / out.width * out.width;
    if (cell > x(p)) cell -= out.width;
    cells[cell].push_back(p);
  }
  for (const auto& [cell, in] : cells) {
    const auto cell_stop =
        static_cast<int64_t>(std::min<__int128>(stop, __int128{cell} + out.width));
    out.buckets.push_back(Reduce(std::max(start, cell), cell_stop, in, axis));
  }
  return out;
}

::testing::AssertionResult SameSeries(const DownsampledSeries& got, const DownsampledSeries& want) {
  if (got.width != want.width || got.raw != want.raw || got.buckets.size() != want.buckets.size()) {
    return ::testing::AssertionFailure()
           << "width " << got.width << " raw " << got.raw << " buckets " << got.buckets.size()
           << ", want width " << want.width << " raw " << want.raw << " buckets "
           << want.buckets.size();
  }
  for (size_t i = 0; i < got.buckets.size(); ++i) {
    if (!Same(got.buckets[i], want.buckets[i])) {
      return ::testing::AssertionFailure() << "bucket " << i << ": " << Show(got.buckets[i])
                                           << "\nwant " << Show(want.buckets[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<Point> PointsOf(const MetricData& d) {
  std::vector<Point> out;
  for (size_t i = 0; i < d.size(); ++i)
    out.push_back({d.steps[i], d.timestamps_us[i], d.values[i]});
  return out;
}

template <typename F>
bool ThrowsInvalidArgument(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code() == Code::kInvalidArgument;
  }
  return false;
}

// --- The grid -----------------------------------------------------------------

TEST(BucketGridTest, CellsArePowersOfTwoThatCoverTheWindowInOrder) {
  std::mt19937_64 rng(7);
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  std::vector<std::pair<int64_t, int64_t>> windows = {
      {0, 1}, {0, 1000}, {-7, 5}, {5, 6}, {kMin, kMax}, {kMax - 3, kMax}, {kMin, kMin + 1}};
  for (int i = 0; i < 200; ++i) {
    int64_t a = static_cast<int64_t>(rng() % 2000000) - 1000000;
    windows.push_back({a, a + 1 + static_cast<int64_t>(rng() % 3000000)});
  }
  for (auto [start, stop] : windows) {
    for (int64_t buckets : {1, 2, 3, 10, 1000}) {
      BucketGrid grid(start, stop, buckets);
      EXPECT_EQ(grid.width(), ExpectedWidth(start, stop, buckets)) << start << " " << stop;
      EXPECT_LE(grid.cells(), buckets + 1);
      // The cells tile [start, stop) with no gap or overlap.
      EXPECT_EQ(grid.CellStart(0), start);
      EXPECT_EQ(grid.CellStop(grid.cells() - 1), stop);
      for (int64_t c = 0; c + 1 < grid.cells(); ++c) {
        ASSERT_EQ(grid.CellStop(c), grid.CellStart(c + 1));
        ASSERT_LT(grid.CellStart(c), grid.CellStop(c));
      }
      // Each x falls in the cell whose edges hold it.
      const int64_t middle =
          start + static_cast<int64_t>((static_cast<__int128>(stop) - start) / 2);
      for (int64_t x : {start, stop - 1, middle}) {
        int64_t c = grid.CellOf(x);
        ASSERT_GE(x, grid.CellStart(c));
        ASSERT_LT(x, grid.CellStop(c));
      }
    }
  }
}

// --- Reads against the reference -------------------------------------------------

class DownsampleTest : public ::testing::Test {
 protected:
  RepoOptions Opts() {
    RepoOptions o;
    o.wal_dir = dir_ / "wal";
    o.flush_interval = std::chrono::hours(1);
    return o;
  }
  Repo Open() { return Repo::Open(Uri(), Opts()); }
  std::string Uri() { return dir_ / "repo"; }

  // Checks every series of ids against the reference computed from ReadMany.
  void ExpectExact(Repo& repo, const std::vector<uint64_t>& ids, DownsampleOptions options) {
    // The latest point of each step; a window of time applies to those.
    std::map<uint64_t, MetricData> all = repo.ReadMany(ids);
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    for (const auto& [id, data] : all) {
      for (const Point& p : PointsOf(data)) {
        int64_t x = options.x == Axis::kStep ? p.step : p.ts;
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
    }
    int64_t start = options.start.value_or(lo), stop = options.stop.value_or(hi + 1);
    std::map<uint64_t, DownsampledSeries> got = repo.ReadDownsampled(ids, options);
    for (uint64_t id : ids) {
      ASSERT_TRUE(got.count(id)) << "series " << id;
      std::vector<Point> in;
      for (const Point& p : PointsOf(all[id])) {
        int64_t x = options.x == Axis::kStep ? p.step : p.ts;
        if (x >= start && x < stop) in.push_back(p);
      }
      if (start >= stop) {
        EXPECT_TRUE(got[id].buckets.empty());
        continue;
      }
      EXPECT_TRUE(SameSeries(got[id], Reference(in, start, stop, options.buckets, options.x)))
          << "series " << id << ", window [" << start << ", " << stop << "), " << options.buckets
          << " buckets";
    }
  }

  testing::TempDir dir_;
};

// Values with spikes, NaN and infinities now and then.
double Value(std::mt19937_64& rng) {
  switch (rng() % 50) {
    case 0:
      return kNaN;
    case 1:
      return kInf;
    case 2:
      return -kInf;
    case 3:
      return 1e6;  // a spike
    default:
      return std::uniform_real_distribution<double>(-1, 1)(rng);
  }
}

TEST_F(DownsampleTest, RandomRepositoriesMatchTheReferenceAtEveryZoom) {
  std::mt19937_64 rng(20261202);
  std::vector<uint64_t> ids;
  std::vector<std::string> runs;
  {
    Repo repo = Open();
    for (int r = 0; r < 4; ++r) {
      tracking::Run run = repo.CreateRun(NewRun{.name = "r" + std::to_string(r)});
      runs.push_back(run.run_id());
      // Dense, then sparse (an evaluation every 1,000 steps), then a few
      // overwritten steps, with timestamps that sometimes go backwards.
      int64_t ts = 1'700'000'000'000'000;
      for (int64_t step = 0; step < 6000; ++step) {
        ts += static_cast<int64_t>(rng() % 1000) - 100;
        run.Track(Value(rng), "dense", {.step = step, .timestamp_us = ts});
        if (step % 1000 == 0) run.Track(Value(rng), "eval", {.step = step, .timestamp_us = ts});
        if (step == 3000) repo.Flush();
      }
      for (int i = 0; i < 50; ++i) {
        run.Track(Value(rng), "dense",
                  {.step = static_cast<int64_t>(rng() % 6000), .timestamp_us = ts += 5});
      }
      ids.push_back(SeriesId(run.run_id(), "dense", nlohmann::json::object()));
      ids.push_back(SeriesId(run.run_id(), "eval", nlohmann::json::object()));
    }
    repo.Close();
  }
  // A second writer resumes a run and writes past and over its end.
  {
    Repo other = Open();
    tracking::Run run = other.ResumeRun(runs[1]);
    for (int64_t step = 5900; step < 7000; ++step) {
      run.Track(Value(rng), "dense", {.step = step, .timestamp_us = 1'800'000'000'000'000 + step});
    }
    other.Close();
  }
  Repo repo = Open();
  auto check_zooms = [&](Repo& repo) {
    for (int64_t buckets : {1, 7, 100, 1000, 5000}) {
      ExpectExact(repo, ids, {.buckets = buckets});
      ExpectExact(repo, ids, {.buckets = buckets, .x = Axis::kTime});
      for (int zoom = 0; zoom < 4; ++zoom) {
        int64_t a = static_cast<int64_t>(rng() % 7000), b = static_cast<int64_t>(rng() % 7000);
        if (a > b) std::swap(a, b);
        ExpectExact(repo, ids, {.buckets = buckets, .start = a, .stop = b});
        ExpectExact(repo, ids, {.buckets = buckets, .start = a});
        ExpectExact(repo, ids, {.buckets = buckets, .stop = b});
      }
      if (HasFatalFailure()) return;
    }
  };
  check_zooms(repo);
  repo.Optimize();
  check_zooms(repo);
  // Reads from levels merge what optimize has not levelled: a second
  // writer's new steps (then levelled by an incremental optimize, beside the
  // older levels), and steps written again, some of them at the edges of
  // levelled cells, which must win over the levelled points.
  auto other_writes = [&](bool overwrite) {
    Repo other = Open();
    for (int r : {0, 1, 3}) {
      tracking::Run run = other.ResumeRun(runs[r]);
      for (int64_t step = 7000; step < 7700 && !overwrite; ++step) {
        run.Track(Value(rng), "dense",
                  {.step = step, .timestamp_us = 1'900'000'000'000'000 + step});
      }
      for (int i = 0; i < 40 && overwrite; ++i) {
        int64_t step = i < 8 ? 32 * static_cast<int64_t>(rng() % 200) + (i % 2 ? 31 : 0)
                             : static_cast<int64_t>(rng() % 7700);
        run.Track(i % 5 ? 1e7 : kNaN, "dense",
                  {.step = step, .timestamp_us = 2'000'000'000'000'000 + i});
      }
    }
    other.Close();
  };
  other_writes(false);
  {
    Repo after = Open();
    check_zooms(after);
    EXPECT_FALSE(after.Optimize().full_rewrite);
    check_zooms(after);
  }
  other_writes(true);
  {
    Repo after = Open();
    check_zooms(after);
    after.Optimize();
    check_zooms(after);
  }
  // Once a run's delete has finished, its series are unknown ids; the
  // others stay exact.
  repo.DeleteRuns(std::vector<std::string>{runs[2]});
  std::vector<uint64_t> live;
  for (uint64_t id : ids) {
    bool deleted = id == SeriesId(runs[2], "dense", nlohmann::json::object()) ||
                   id == SeriesId(runs[2], "eval", nlohmann::json::object());
    if (!deleted) live.push_back(id);
  }
  EXPECT_TRUE(ThrowsInvalidArgument([&] { repo.ReadDownsampled(ids, {}); }));
  EXPECT_EQ(repo.ReadDownsampled(live, {}).size(), live.size());
  ExpectExact(repo, live, {.buckets = 300});
  // Purge rewrites the fragments that held the deleted run's rows and drops
  // old versions: the levels and points left must still agree, in this
  // handle, after a reopen, and after the next optimize.
  PurgeStats purged = repo.Purge();
  EXPECT_GT(purged.versions_removed, 0u);
  EXPECT_GT(purged.bytes_removed, 0u);
  EXPECT_TRUE(ThrowsInvalidArgument([&] { repo.ReadDownsampled(ids, {}); }));
  ids = live;
  check_zooms(repo);
  repo.Close();
  {
    Repo after = Open();
    check_zooms(after);
    other_writes(true);
    check_zooms(after);
    after.Optimize();
    check_zooms(after);
  }
}

// One read over series of very different lengths takes a level coarser than
// the short series' coarsest cells (their top rows stand in), and series
// sorted in several passes, or by two optimizes, merge their cells.
TEST_F(DownsampleTest, LevelsAnswerSeriesOfEveryLengthInOneRead) {
  std::mt19937_64 rng(20261203);
  RepoOptions o = Opts();
  o.optimize_memory = size_t{1} << 20;  // sorts at most 16,384 points per pass
  std::vector<uint64_t> ids;
  std::string short_run;
  {
    Repo repo = Repo::Open(Uri(), o);
    tracking::Run long_run = repo.CreateRun(NewRun{.name = "long"});
    for (int64_t i = 0; i < 60000; ++i) {
      long_run.Track(Value(rng), "m", {.step = 10 * i - 50000, .timestamp_us = 1000 + i});
    }
    tracking::Run small = repo.CreateRun(NewRun{.name = "short"});
    short_run = small.run_id();
    for (int64_t step = 1000; step < 1500; ++step) {
      small.Track(Value(rng), "m", {.step = step, .timestamp_us = 5000 + step});
    }
    ids = {SeriesId(long_run.run_id(), "m", nlohmann::json::object()),
           SeriesId(short_run, "m", nlohmann::json::object())};
    repo.Optimize();
    // A second optimize levels the short series' later steps beside the
    // first one's cells.
    tracking::Run again = repo.ResumeRun(short_run);
    for (int64_t step = 1500; step < 9000; step += 3) {
      again.Track(Value(rng), "m", {.step = step, .timestamp_us = 9000 + step});
    }
    repo.Flush();
    EXPECT_FALSE(repo.Optimize().full_rewrite);
  }
  Repo repo = Repo::Open(Uri(), o);
  for (int64_t buckets : {1, 3, 50, 1000}) {
    ExpectExact(repo, ids, {.buckets = buckets});
    ExpectExact(repo, ids, {.buckets = buckets, .start = -40000, .stop = 150000});
    ExpectExact(repo, ids, {.buckets = buckets, .start = 999, .stop = 8999});
    for (int zoom = 0; zoom < 3; ++zoom) {
      int64_t a = static_cast<int64_t>(rng() % 600000) - 50000;
      int64_t b = static_cast<int64_t>(rng() % 600000) - 50000;
      if (a > b) std::swap(a, b);
      ExpectExact(repo, ids, {.buckets = buckets, .start = a, .stop = b});
    }
  }
}

// Before any optimize, charts come from the levels flushes wrote: exact
// where two flushes wrote the same steps, where compaction merged flushes,
// beside a fragment with no levels (an earlier build's flush), and after a
// run's delete touched the fragments.
TEST_F(DownsampleTest, FlushLevelsAnswerOnlyWhereTheyHoldEveryPoint) {
  std::mt19937_64 rng(31);
  RepoOptions o = Opts();
  o.max_fragments = 3;  // flushes' fragments are merged now and then
  std::vector<uint64_t> ids;
  std::vector<std::string> runs;
  std::vector<tracking::Run> handles;
  Repo repo = Repo::Open(Uri(), o);
  for (int r = 0; r < 4; ++r) {
    handles.push_back(repo.CreateRun(NewRun{.name = "f" + std::to_string(r)}));
    runs.push_back(handles.back().run_id());
    ids.push_back(SeriesId(runs.back(), "m", nlohmann::json::object()));
  }
  auto check = [&](Repo& reader) {
    for (int64_t buckets : {1, 10, 300}) {
      ExpectExact(reader, ids, {.buckets = buckets});
      for (int zoom = 0; zoom < 3; ++zoom) {
        int64_t a = static_cast<int64_t>(rng() % 9000), b = static_cast<int64_t>(rng() % 9000);
        if (a > b) std::swap(a, b);
        ExpectExact(reader, ids, {.buckets = buckets, .start = a, .stop = b});
      }
    }
  };
  // Flushes of consecutive steps, then flushes that write some of them
  // again (spikes and NaN among them), a few per cell or many.
  for (int flush = 0; flush < 8; ++flush) {
    for (int r = 0; r < 3; ++r) {  // long series; the fourth is written below
      tracking::Run& run = handles[r];
      for (int64_t step = flush * 1000; step < (flush + 1) * 1000; ++step) {
        run.Track(Value(rng), "m", {.step = step});
      }
      for (int i = 0; flush >= 4 && i < (r == 0 ? 5 : 300); ++i) {
        run.Track(i % 7 ? 1e6 : kNaN, "m", {.step = static_cast<int64_t>(rng() % 8000)});
      }
    }
    // A series with a few points a flush, in one cell finer than any level
    // a flush writes: its top row stands for them.
    for (int64_t step : {1, 2, 3}) {
      handles[3].Track(Value(rng), "m", {.step = 1000 * flush + step});
    }
    repo.Flush();
    ASSERT_NO_FATAL_FAILURE(check(repo));
  }
  // A fragment of points with no levels and no mark, as an earlier build
  // flushed them, at new steps and over old ones.
  {
    PointBuffer old;
    for (int64_t step = 8000; step < 9000; ++step) {
      old.Add(ids[1], step, std::nullopt, 1000 + step, Value(rng), 0, false);
    }
    for (int i = 0; i < 50; ++i) {
      old.Add(ids[2], static_cast<int64_t>(rng() % 8000), std::nullopt, 1, -5e5, uint64_t{1} << 62,
              true);
    }
    lance::Dataset::Open(Uri() + "/metrics.lance", {}).Append(MetricsStream(old, {}));
  }
  ASSERT_NO_FATAL_FAILURE(check(repo));
  lance::Dataset::Open(Uri() + "/metrics.lance", {}).Compact({});
  ASSERT_NO_FATAL_FAILURE(check(repo));
  repo.DeleteRuns(std::vector<std::string>{runs[0]});
  ids.erase(ids.begin());
  ASSERT_NO_FATAL_FAILURE(check(repo));
  Repo reopened = Repo::Open(Uri(), o);
  ASSERT_NO_FATAL_FAILURE(check(reopened));
  reopened.Optimize();
  ASSERT_NO_FATAL_FAILURE(check(reopened));
}

// Flush summaries (flush_summaries.h) let reads skip flushed fragments,
// take their level rows by address and read their statistics rows from
// memory. ReadMany uses them too, so the reads are checked against a model
// kept here: an optimized history, tails
// flushed in many fragments, old steps written again, a second handle's
// flushes, a compaction of flushed fragments and a run's delete.
TEST_F(DownsampleTest, FlushSummariesSkipOnlyFragmentsThatHoldNothingOfTheWindow) {
  std::mt19937_64 rng(4);
  std::map<uint64_t, std::map<int64_t, Point>> model;  // the latest point per step
  int64_t clock = 1'700'000'000'000'000;
  auto track = [&](tracking::Run& run, int64_t step, double value) {
    run.Track(value, "m", {.step = step, .timestamp_us = ++clock});
    model[SeriesId(run.run_id(), "m", nlohmann::json::object())][step] = {step, clock, value};
  };
  std::vector<uint64_t> ids;
  std::vector<std::string> runs;
  std::vector<tracking::Run> handles;
  Repo repo = Open();
  for (int r = 0; r < 3; ++r) {
    handles.push_back(repo.CreateRun(NewRun{.name = "s" + std::to_string(r)}));
    runs.push_back(handles.back().run_id());
    ids.push_back(SeriesId(runs.back(), "m", nlohmann::json::object()));
  }
  auto check = [&](Repo& reader) {
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    for (uint64_t id : ids) {
      lo = std::min(lo, model[id].begin()->first);
      hi = std::max(hi, model[id].rbegin()->first);
    }
    // The statistics, whose flushed rows come from the summaries too.
    auto stats = reader.GetSeriesStats(ids);
    for (uint64_t id : ids) {
      const auto& points = model[id];
      ASSERT_TRUE(stats.count(id)) << "series " << id;
      EXPECT_EQ(stats[id].count, points.size()) << "series " << id;
      EXPECT_EQ(stats[id].first_step, points.begin()->first);
      EXPECT_EQ(stats[id].last_step, points.rbegin()->first);
      EXPECT_TRUE(SameValue(stats[id].last, points.rbegin()->second.value));
    }
    // The whole view, the history, the tail, across both, and narrow
    // windows around steps written again.
    const std::vector<std::pair<int64_t, int64_t>> windows = {
        {lo, hi + 1}, {1000, 3000}, {6100, 7900}, {5000, 7000}, {90, 110}, {2040, 2060}, {0, 5000}};
    for (auto [start, stop] : windows) {
      auto many = reader.ReadMany(ids, StepRange{start, stop});
      for (int64_t buckets : {10, 300}) {
        auto got = reader.ReadDownsampled(ids, {.buckets = buckets, .start = start, .stop = stop});
        for (uint64_t id : ids) {
          std::vector<Point> in;
          for (auto it = model[id].lower_bound(start); it != model[id].end() && it->first < stop;
               ++it) {
            in.push_back(it->second);
          }
          ASSERT_EQ(PointsOf(many[id]).size(), in.size())
              << "series " << id << ", window [" << start << ", " << stop << ")";
          for (size_t i = 0; i < in.size(); ++i) {
            const Point p = PointsOf(many[id])[i];
            ASSERT_TRUE(p.step == in[i].step && p.ts == in[i].ts && SameValue(p.value, in[i].value))
                << "series " << id << " step " << in[i].step;
          }
          ASSERT_TRUE(SameSeries(got[id], Reference(in, start, stop, buckets, Axis::kStep)))
              << "series " << id << ", window [" << start << ", " << stop << "), " << buckets
              << " buckets";
        }
      }
    }
  };
  // An optimized history, then a tail in four flushes.
  for (int64_t step = 0; step < 6000; ++step) {
    for (auto& run : handles) track(run, step, Value(rng));
  }
  repo.Optimize();
  for (int flush = 0; flush < 4; ++flush) {
    for (int64_t step = 6000 + 500 * flush; step < 6500 + 500 * flush; ++step) {
      for (auto& run : handles) track(run, step, Value(rng));
    }
    repo.Flush();
  }
  ASSERT_NO_FATAL_FAILURE(check(repo));
  // A flush that writes old steps again, at cell edges among them.
  for (int64_t step : {100, 101, 2047, 2048, 4095}) track(handles[0], step, 1e7);
  track(handles[1], 2050, kNaN);
  repo.Flush();
  ASSERT_NO_FATAL_FAILURE(check(repo));
  // Another handle's flushes, new steps and an old one, read by this one.
  {
    Repo other = Open();
    tracking::Run run = other.ResumeRun(runs[1]);
    for (int64_t step = 8000; step < 8600; ++step) track(run, step, Value(rng));
    other.Flush();
    track(run, 3000, -1e7);
    other.Close();
  }
  ASSERT_NO_FATAL_FAILURE(check(repo));
  // The flushed fragments merged into one: their summaries combined.
  lance::Dataset::Open(Uri() + "/metrics.lance", {}).Compact({});
  ASSERT_NO_FATAL_FAILURE(check(repo));
  track(handles[2], 7000, 1e8);
  repo.Flush();
  ASSERT_NO_FATAL_FAILURE(check(repo));
  // A run's delete leaves rows deleted in the flushed fragments.
  repo.DeleteRuns(std::vector<std::string>{runs[0]});
  ids.erase(ids.begin());
  ASSERT_NO_FATAL_FAILURE(check(repo));
  Repo reopened = Open();
  ASSERT_NO_FATAL_FAILURE(check(reopened));
}

TEST_F(DownsampleTest, OneSpikeAndOneNanInALongSeriesShowAtEveryZoom) {
  Repo repo = Open();
  tracking::Run run = repo.CreateRun(NewRun{.name = "long"});
  const int64_t kPoints = 200'000, kSpike = 123'457, kNan = 77'777;
  for (int64_t step = 0; step < kPoints; ++step) {
    double v = step == kSpike ? 1e9 : step == kNan ? kNaN : std::sin(step * 0.001);
    run.Track(v, "loss", {.step = step});
  }
  uint64_t id = SeriesId(run.run_id(), "loss", nlohmann::json::object());
  std::vector<uint64_t> ids = {id};
  // Windows of every width around the spike and around the NaN, before
  // optimize (flush levels and raw points) and after (optimize's levels).
  auto check_zooms = [&](Repo& repo) {
    for (int64_t centre : {kSpike, kNan}) {
      for (int64_t window : {kPoints, int64_t{20'000}, int64_t{2'000}, int64_t{600}}) {
        DownsampleOptions options{
            .buckets = 500, .start = centre - window / 3, .stop = centre + window / 2};
        if (window == kPoints) options = {.buckets = 500};
        auto got = repo.ReadDownsampled(ids, options).at(id);
        double max = -kInf;
        uint64_t non_finite = 0;
        for (const Bucket& b : got.buckets) {
          if (b.count > b.non_finite) max = std::max(max, b.max);
          non_finite += b.non_finite;
          EXPECT_FALSE(std::isnan(b.min) && b.count > b.non_finite) << Show(b);
        }
        if (centre == kSpike || window == kPoints) {
          EXPECT_EQ(max, 1e9) << "window " << window << " around " << centre;
        } else {
          EXPECT_LT(max, 2.0) << "window " << window << " around " << centre;
        }
        if (centre == kNan || window == kPoints) {
          EXPECT_EQ(non_finite, 1u) << "window " << window << " around " << centre;
        }
        EXPECT_LE(got.buckets.size(), 501u);
        ExpectExact(repo, ids, options);
      }
    }
  };
  check_zooms(repo);
  repo.Optimize();
  check_zooms(repo);
  ExpectExact(repo, ids, {.buckets = 999});
}

TEST_F(DownsampleTest, WritesNotYetFlushedAndAReopenAreRead) {
  std::vector<uint64_t> ids;
  {
    Repo repo = Open();
    tracking::Run run = repo.CreateRun(NewRun{.name = "w"});
    for (int64_t step = 0; step < 5000; ++step) run.Track(step % 17, "m", {.step = step});
    ids = {SeriesId(run.run_id(), "m", nlohmann::json::object())};
    // Buffered only: the read flushes first, as every read does.
    auto got = repo.ReadDownsampled(ids, {.buckets = 10}).at(ids[0]);
    uint64_t count = 0;
    for (const Bucket& b : got.buckets) count += b.count;
    EXPECT_EQ(count, 5000u);
    EXPECT_FALSE(got.raw);
    EXPECT_EQ(got.width, 512);
  }
  Repo reopened = Open();
  ExpectExact(reopened, ids, {.buckets = 10});
  ExpectExact(reopened, ids, {.buckets = 2500});  // raw: 5,000 points for 2,500 buckets
  EXPECT_TRUE(reopened.ReadDownsampled(ids, {.buckets = 2500}).at(ids[0]).raw);
}

TEST_F(DownsampleTest, BadArgumentsAreRefusedAndReadNothing) {
  Repo repo = Open();
  tracking::Run run = repo.CreateRun(NewRun{.name = "b"});
  run.Track(1.0, "m", {.step = 0});
  std::vector<uint64_t> ids = {SeriesId(run.run_id(), "m", nlohmann::json::object())};
  EXPECT_TRUE(ThrowsInvalidArgument([&] { repo.ReadDownsampled(ids, {.buckets = 0}); }));
  EXPECT_TRUE(ThrowsInvalidArgument([&] { repo.ReadDownsampled(ids, {.buckets = -3}); }));
  EXPECT_TRUE(ThrowsInvalidArgument([&] { repo.ReadDownsampled(ids, {.start = 10, .stop = 9}); }));
  std::vector<uint64_t> unknown = {ids[0], 12345};
  EXPECT_TRUE(ThrowsInvalidArgument([&] { repo.ReadDownsampled(unknown, {}); }));
  std::vector<uint64_t> reserved = {0};
  EXPECT_TRUE(ThrowsInvalidArgument([&] { repo.ReadDownsampled(reserved, {}); }));
  // An empty window is no error: the series is there, with no buckets.
  auto empty = repo.ReadDownsampled(ids, {.start = 5, .stop = 5});
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_TRUE(empty.at(ids[0]).buckets.empty());
  // The stream variant refuses the same way, and otherwise has one row per bucket.
  ArrowArrayStream stream{};
  EXPECT_TRUE(ThrowsInvalidArgument([&] { repo.ReadDownsampledStream(unknown, {}, &stream); }));
  EXPECT_EQ(stream.release, nullptr);
  repo.ReadDownsampledStream(ids, {}, &stream);
  ArrowArray batch{};
  ASSERT_EQ(stream.get_next(&stream, &batch), 0);
  ASSERT_NE(batch.release, nullptr);
  EXPECT_EQ(batch.length, 1);
  batch.release(&batch);
  stream.release(&stream);
}

}  // namespace
}  // namespace kv0::tracking
