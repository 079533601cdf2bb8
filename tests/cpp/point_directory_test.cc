// The point directory (tracking/point_directory.h). An entry survives its
// encoding and names every row of any span, with at most a stride to spare
// at each end; damaged bytes are refused. Reads after optimize, which take
// rows through the directory, return exactly the latest point of each step
// of any window: beside points no optimize sorted (another writer's,
// overwriting steps), after another handle's compaction moved the sorted
// rows, after a run's delete, and with the directory missing (an earlier
// build's repository, or a crash between optimize's commits), which the
// next optimize writes. Reads look for entries where the metadata says
// they are, and everywhere once another handle's compaction moved them.

#include "tracking/point_directory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kv0/error.h"
#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "test_util.h"
#include "tracking/flush_summaries.h"
#include "tracking/levels.h"
#include "tracking/schema.h"

namespace kv0::tracking {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kSteps = 40000;

// An entry over `steps` (ascending), as BuildDirectory makes one.
DirectoryEntry EntryOf(const std::vector<int64_t>& steps, uint64_t offset) {
  DirectoryEntry e;
  e.series_id = 7;
  e.fragment_id = 3;
  e.offset = offset;
  e.count = steps.size();
  e.last_step = steps.back();
  for (size_t i = 0; i < steps.size(); i += kDirectoryStride) e.fences.push_back(steps[i]);
  return e;
}

std::vector<int64_t> AscendingSteps(std::mt19937_64& rng) {
  std::vector<int64_t> steps;
  const size_t n = 1 + rng() % 2000;
  int64_t step = rng() % 4 == 0 ? kMin : static_cast<int64_t>(rng() % 20000) - 10000;
  for (size_t i = 0; i < n; ++i) {
    steps.push_back(step);
    const int64_t gap = rng() % 3 == 0 ? static_cast<int64_t>(1 + rng() % 1000) : 1;
    if (step > kMax - gap) break;
    step += gap;
  }
  if (rng() % 4 == 0 && steps.back() != kMax) steps.push_back(kMax);
  return steps;
}

TEST(DirectoryEntryTest, AnEntryNamesEveryRowOfASpanAndLittleMore) {
  std::mt19937_64 rng(20261203);
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<int64_t> steps = AscendingSteps(rng);
    const uint64_t offset = rng() % 5000;
    const DirectoryEntry entry = EntryOf(steps, offset);
    const DirectoryEntry decoded = DecodeEntry(7, 3, EncodeEntry(entry));
    ASSERT_EQ(decoded.offset, entry.offset);
    ASSERT_EQ(decoded.count, entry.count);
    ASSERT_EQ(decoded.last_step, entry.last_step);
    ASSERT_EQ(decoded.fences, entry.fences);

    std::vector<StepSpan> spans = {{kMin, kMax}, {steps.back(), kMax}, {kMin, steps.front()}};
    for (int i = 0; i < 40; ++i) {
      // Steps near the ends of int64 move inward only.
      const int64_t a =
          std::max(kMin + 2, steps[rng() % steps.size()]) - static_cast<int64_t>(rng() % 3);
      const int64_t b =
          std::min(kMax - 2, steps[rng() % steps.size()]) + static_cast<int64_t>(rng() % 3);
      spans.push_back({std::min(a, b), std::max(a, b)});
    }
    for (const StepSpan& span : spans) {
      const auto [first, last] = decoded.RowsOf(span);
      uint64_t inside = 0;
      for (size_t i = 0; i < steps.size(); ++i) {
        if (!span.Contains(steps[i])) continue;
        ++inside;
        ASSERT_GE(offset + i, first) << "span [" << span.start << ", " << span.stop << ")";
        ASSERT_LT(offset + i, last) << "span [" << span.start << ", " << span.stop << ")";
      }
      if (first < last) {
        EXPECT_GE(first, offset);
        EXPECT_LE(last, offset + steps.size());
        EXPECT_LE(last - first, inside + 2 * static_cast<uint64_t>(kDirectoryStride));
      }
    }
  }
}

TEST(DirectoryEntryTest, DamagedBytesAreCorruption) {
  std::vector<int64_t> steps;
  for (int64_t s = 0; s < 1000; ++s) steps.push_back(s * 3);
  const std::string bytes = EncodeEntry(EntryOf(steps, 10));
  auto corrupt = [](std::string_view b) {
    try {
      DecodeEntry(1, 1, b);
    } catch (const Error& e) {
      return e.code() == Code::kCorruption;
    }
    return false;
  };
  EXPECT_FALSE(corrupt(bytes));
  EXPECT_TRUE(corrupt(bytes.substr(0, bytes.size() - 1)));  // a fence short
  EXPECT_TRUE(corrupt(bytes + std::string(1, '\x02')));     // a fence too many
  EXPECT_TRUE(corrupt(""));
  EXPECT_TRUE(corrupt(std::string(12, '\xff')));  // a varint that never ends
  // Fences that go down.
  DirectoryEntry backwards = EntryOf(steps, 0);
  std::swap(backwards.fences[0], backwards.fences[1]);
  EXPECT_TRUE(corrupt(EncodeEntry(backwards)));
}

// --- Reads through the directory ---------------------------------------------

// What every series should read: its latest value at each step.
using Model = std::map<uint64_t, std::map<int64_t, double>>;

class PointDirectoryTest : public ::testing::Test {
 protected:
  RepoOptions Opts() {
    RepoOptions o;
    o.wal_dir = dir_ / "wal";
    o.flush_interval = std::chrono::hours(1);
    // The least memory, passes of 16,384 points: a series of kSteps spans
    // several fragments.
    o.optimize_memory = size_t{1} << 20;
    return o;
  }
  Repo Open() { return Repo::Open(Uri(), Opts()); }
  std::string Uri() { return dir_ / "repo"; }
  lance::Dataset Metrics() {
    return lance::Dataset::Open(Uri() + "/" + std::string(kMetricsTable), {});
  }

  void Track(tracking::Run& run, const std::string& name, int64_t step, double value) {
    run.Track(value, name, {.step = step});
    model_[SeriesId(run.run_id(), name, nlohmann::json::object())][step] = value;
  }

  // Every series of the model in whole, and in windows of every width, read
  // at once; each must hold exactly the model's points.
  void ExpectWindows(Repo& repo) {
    std::vector<uint64_t> ids;
    for (const auto& [id, points] : model_) ids.push_back(id);
    std::vector<StepRange> windows = {{}, {kMin, 0}, {kMax - 1, kMax}, {0, 1}};
    for (int i = 0; i < 24; ++i) {
      const int64_t a = static_cast<int64_t>(rng_() % (kSteps + 1000)) - 500;
      const int64_t width = i % 3 == 0 ? 1 + static_cast<int64_t>(rng_() % 20)
                                       : static_cast<int64_t>(rng_() % (kSteps / 2));
      windows.push_back({a, a + width});
    }
    for (const StepRange& w : windows) {
      const StepSpan span{w.start, w.stop};
      auto got = repo.ReadMany(ids, w);
      for (const auto& [id, points] : model_) {
        std::vector<int64_t> want_steps;
        std::vector<double> want_values;
        for (const auto& [step, value] : points) {
          if (!span.Contains(step)) continue;
          want_steps.push_back(step);
          want_values.push_back(value);
        }
        const MetricData& read = got[id];  // empty if absent
        ASSERT_EQ(read.steps, want_steps)
            << "series " << id << ", window [" << w.start << ", " << w.stop << ")";
        ASSERT_EQ(read.values, want_values) << "series " << id;
      }
    }
  }

  testing::TempDir dir_;
  Model model_;
  std::mt19937_64 rng_{1203};
};

TEST_F(PointDirectoryTest, WindowsReadExactlyThroughEveryChangeToTheSortedRows) {
  {
    Repo repo = Open();
    for (int r = 0; r < 4; ++r) {
      tracking::Run run = repo.CreateRun(NewRun{.run_id = "run " + std::to_string(r)});
      for (int64_t step = 0; step < kSteps; ++step) {
        Track(run, "dense", step, static_cast<double>(rng_() % 1000));
        if (step % 500 == 0) Track(run, "eval", step, static_cast<double>(step));
        if (step == kSteps / 2) repo.Flush();
      }
    }
    tracking::Run edges = repo.CreateRun(NewRun{.run_id = "edges"});
    for (int64_t step : {kMin, kMin + 1, int64_t{-5}, int64_t{0}, kMax - 1, kMax}) {
      Track(edges, "x", step, static_cast<double>(step % 1000));
    }
    repo.Close();
  }
  Repo repo = Open();
  ExpectWindows(repo);
  OptimizeStats optimized = repo.Optimize();
  // Each long series lies in several fragments, each with its entry.
  EXPECT_GT(optimized.directory_rows, 4u * 2);
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));

  // Another writer overwrites steps inside and at the edges of the sorted
  // rows and writes past them: its points are filtered, the sorted ones
  // taken, and the later write of each step wins.
  {
    Repo other = Open();
    tracking::Run one = other.ResumeRun("run 1"), two = other.ResumeRun("run 2");
    for (int i = 0; i < 200; ++i) {
      const int64_t step =
          i < 100 ? static_cast<int64_t>(rng_() % 12000) : static_cast<int64_t>(i % 2 ? 0 : 11999);
      Track(one, "dense", step, 5000.0 + i);
    }
    for (int64_t step = kSteps; step < kSteps + 500; ++step) Track(two, "dense", step, -1.0);
    other.Close();
  }
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));
  repo.Optimize();
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));

  // Another handle's compaction merges the sorted fragments into new ones,
  // which no directory row names.
  lance::Dataset metrics = Metrics();
  ASSERT_GE(metrics.Compact({}).removed.size(), 2u);
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));
  EXPECT_TRUE(repo.Optimize().full_rewrite);
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));

  // A deleted run's rows go, directory rows included; the rest read as before.
  const std::vector<std::string> gone = {"run 3"};
  repo.DeleteRuns(gone);
  model_.erase(SeriesId("run 3", "dense", nlohmann::json::object()));
  model_.erase(SeriesId("run 3", "eval", nlohmann::json::object()));
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));

  // No fragment listed as directed (a crash between optimize's commits, or
  // an earlier build's repository): reads filter every fragment, and the
  // next optimize, with nothing to rewrite, writes the directory.
  metrics = Metrics();
  metrics.UpdateMetadata({{kDirectedFragmentsKey, std::nullopt}});
  Repo reopened = Open();
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(reopened));
  OptimizeStats again = reopened.Optimize();
  EXPECT_FALSE(again.full_rewrite);
  EXPECT_EQ(again.points_rewritten, 0u);
  EXPECT_GT(again.directory_rows, 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(reopened));
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));
}

// The fragments of directory rows that kDirectoryHomesKey lists, by append.
std::vector<std::set<uint64_t>> ListedHomes(const lance::Dataset& metrics) {
  std::vector<std::set<uint64_t>> out;
  const auto metadata = metrics.Metadata();
  auto found = metadata.find(kDirectoryHomesKey);
  if (found == metadata.end()) return out;
  for (const auto& append : nlohmann::json::parse(found->second)) {
    out.push_back(append.at("homes").get<std::set<uint64_t>>());
  }
  return out;
}

TEST_F(PointDirectoryTest, ReadsFindEntriesInTheirHomesOrEverywhereWhenAHomeIsGone) {
  Repo repo = Open();
  const auto log_run = [&](const std::string& run_id) {
    tracking::Run run = repo.CreateRun(NewRun{.run_id = run_id});
    for (int64_t step = 0; step < kSteps; ++step) {
      Track(run, "dense", step, static_cast<double>(rng_() % 1000));
    }
    repo.Flush();
  };
  log_run("first");
  repo.Optimize();
  ASSERT_EQ(ListedHomes(Metrics()).size(), 1u);
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));

  // A new run's points sort after the sorted ones: the next optimize
  // rewrites only its fragments, and their entries go to a second home.
  log_run("second");
  OptimizeStats partial = repo.Optimize();
  ASSERT_FALSE(partial.full_rewrite);
  const auto homes = ListedHomes(Metrics());
  ASSERT_EQ(homes.size(), 2u);
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));

  // Another handle's compaction merges the small fragments (the homes and a
  // flush's) and leaves the sorted ones, still directed: the entries are
  // no longer where the metadata says, and reads look for them everywhere.
  {
    Repo other = Open();
    tracking::Run run = other.ResumeRun("first");
    for (int64_t step = kSteps; step < kSteps + 10; ++step) {
      Track(run, "dense", step, -1.0);
    }
    other.Close();
  }
  lance::Dataset metrics = Metrics();
  lance::CompactOptions small;
  small.target_rows_per_fragment = 1000;
  const auto removed = metrics.Compact(small).removed;
  for (const auto& home : homes) {
    for (uint64_t id : home) {
      ASSERT_NE(std::find(removed.begin(), removed.end(), id), removed.end()) << id;
    }
  }
  ASSERT_FALSE(FragmentList(Metrics().Metadata(), kDirectedFragmentsKey).empty());
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));
  Repo reopened = Open();
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(reopened));
}

// Flushed fragments carry their own entries: each series' points lie
// together in step order, and reads take them by range while the rows are
// as the flush or the merge wrote them, and filter once they are not.
TEST_F(PointDirectoryTest, FlushedFragmentsAreReadThroughTheirOwnEntries) {
  Repo repo = Open();
  tracking::Run run = repo.CreateRun(NewRun{.run_id = "flushed"});
  tracking::Run gone = repo.CreateRun(NewRun{.run_id = "deleted later"});
  const std::vector<std::string> names = {"a", "b", "c"};
  for (int flush = 0; flush < 4; ++flush) {
    // Series interleaved step by step, a step out of order and steps
    // overwritten (in this flush and the one before).
    for (int64_t step = 1000 * flush; step < 1000 * (flush + 1); ++step) {
      for (const std::string& name : names) {
        Track(run, name, step, static_cast<double>(rng_() % 1000));
      }
      Track(gone, "g", step, 1.0);
      if (step % 97 == 0) Track(run, "a", step - 1000, -2.0);
      if (step % 89 == 0) Track(run, "b", step - static_cast<int64_t>(rng_() % 5), -3.0);
    }
    Track(run, "c", 50 * flush, -4.0);
    repo.Flush();
  }
  const auto own_directed = [&] {
    FlushSummaries summaries;
    const lance::Dataset metrics = Metrics();
    const auto by_id = summaries.Of(metrics);
    std::vector<uint64_t> ids;
    for (const auto& [id, summary] : by_id) ids.push_back(id);
    const auto own = summaries.OwnOf(metrics, by_id, ids);
    std::map<uint64_t, bool> out;
    for (uint64_t id : ids) out[id] = own.count(id) > 0;
    return out;
  };
  const auto flushed = own_directed();
  ASSERT_EQ(flushed.size(), 4u);
  for (const auto& [id, directed] : flushed) EXPECT_TRUE(directed) << "fragment " << id;
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));

  // Another handle merges three of them, as automatic compaction does: the
  // merged fragment gets entries of its own.
  lance::Dataset metrics = Metrics();
  std::vector<uint64_t> three;
  for (const auto& f : metrics.Fragments()) {
    if (three.size() < 3) three.push_back(f.id);
  }
  metrics.CommitUpdate(three, metrics.WriteFragments(MergedFlushesStream(metrics, three)));
  const auto merged = own_directed();
  ASSERT_EQ(merged.size(), 2u);
  for (const auto& [id, directed] : merged) EXPECT_TRUE(directed) << "fragment " << id;
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));

  // Lance's compaction moves the rows: no entry may be trusted.
  metrics = Metrics();
  ASSERT_EQ(metrics.Compact({}).removed.size(), 2u);
  for (const auto& [id, directed] : own_directed()) EXPECT_FALSE(directed) << "fragment " << id;
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));

  // A merge of the compacted fragment writes entries again; a run's delete
  // then leaves deleted rows, and the fragment is filtered.
  Track(run, "a", 10, 7.0);
  repo.Flush();
  metrics = Metrics();
  std::vector<uint64_t> all;
  for (const auto& f : metrics.Fragments()) all.push_back(f.id);
  metrics.CommitUpdate(all, metrics.WriteFragments(MergedFlushesStream(metrics, all)));
  for (const auto& [id, directed] : own_directed()) EXPECT_TRUE(directed) << "fragment " << id;
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));
  repo.DeleteRuns(std::vector<std::string>{"deleted later"});
  model_.erase(SeriesId("deleted later", "g", nlohmann::json::object()));
  for (const auto& [id, directed] : own_directed()) EXPECT_FALSE(directed) << "fragment " << id;
  ASSERT_NO_FATAL_FAILURE(ExpectWindows(repo));
}

}  // namespace
}  // namespace kv0::tracking
