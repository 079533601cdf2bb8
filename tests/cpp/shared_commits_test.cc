// Shared commits (src/tracking/shared_commits.h): writers that commit one
// another's flushes, and the faults that could make a flush count twice or
// not at all.

#include "tracking/shared_commits.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kv0/error.h"
#include "kv0/tracking.h"
#include "lance/arrow.h"
#include "lance/dataset.h"
#include "test_util.h"

namespace kv0::tracking {
namespace {

using json = nlohmann::json;

// Installs a commit hook for the scope of a test.
struct CommitHookScope {
  explicit CommitHookScope(lance::CommitHook hook) { lance::SetCommitHookForTesting(hook); }
  ~CommitHookScope() { lance::SetCommitHookForTesting(nullptr); }
};

class SharedCommitsTest : public ::testing::Test {
 protected:
  RepoOptions Opts(const std::string& wal) {
    RepoOptions o;
    o.wal_dir = dir_ / wal;
    o.flush_interval = std::chrono::hours(1);  // tests flush explicitly
    o.shared_commits = true;
    return o;
  }
  std::string Uri() { return dir_ / "repo"; }
  std::vector<std::string> Announced(const std::string& table) {
    return lance::ListDir(Uri() + "/_pending/" + table, {});
  }
  // Rows of the series' points in metrics, whatever reads make of them.
  uint64_t RawPoints(uint64_t series_id) {
    return lance::Dataset::Open(Uri() + "/metrics.lance", {})
        .CountRows("series_id = " + std::to_string(series_id));
  }
  // A run of `points` points of "loss" (step i, value i).
  uint64_t Write(Repo& repo, const std::string& run_id, int points) {
    NewRun new_run;
    new_run.run_id = run_id;
    tracking::Run run = repo.CreateRun(new_run);
    for (int i = 0; i < points; ++i) {
      TrackOptions track;
      track.step = i;
      run.Track(i, "loss", track);
    }
    return SeriesId(run_id, "loss", json::object());
  }
  // What a new handle reads of the series: its count of points.
  uint64_t CountRead(uint64_t series_id) {
    RepoOptions o;
    o.wal_dir = dir_ / "wal-reader";
    Repo reader = Repo::Open(Uri(), o);
    std::vector<uint64_t> ids = {series_id};
    auto stats = reader.GetSeriesStats(ids);
    auto data = reader.ReadMany(ids);
    EXPECT_EQ(data[series_id].size(), stats[series_id].count);
    return stats[series_id].count;
  }

  testing::TempDir dir_;
};

TEST_F(SharedCommitsTest, TwoWritersEveryPointOnce) {
  Repo a = Repo::Open(Uri(), Opts("wal-a"));
  Repo b = Repo::Open(Uri(), Opts("wal-b"));
  uint64_t sa = Write(a, "a", 50);
  uint64_t sb = Write(b, "b", 70);
  a.Flush();
  b.Flush();
  EXPECT_EQ(CountRead(sa), 50u);
  EXPECT_EQ(CountRead(sb), 70u);
  EXPECT_EQ(RawPoints(sa), 50u);
  EXPECT_EQ(RawPoints(sb), 70u);
  for (const char* table : {"runs", "params", "series", "metrics"}) {
    EXPECT_TRUE(Announced(table).empty()) << table;
  }
  // A handle without shared commits writes beside them.
  RepoOptions plain = Opts("wal-c");
  plain.shared_commits = false;
  Repo c = Repo::Open(Uri(), plain);
  uint64_t sc = Write(c, "c", 30);
  c.Flush();
  EXPECT_EQ(CountRead(sc), 30u);
  a.Close();
  b.Close();
  c.Close();
}

// Writer A has announced its points and read a version, and is about to
// commit; B's flush commits A's points with its own meanwhile. A's commit
// must then fail (it would store the points a second time) and A find its
// points committed. Without the shared commit's conflict, A's append would be
// rebased over B's and every point of A counted twice.
TEST_F(SharedCommitsTest, AnotherWritersCommitCarriesMineOnce) {
  Repo a = Repo::Open(Uri(), Opts("wal-a"));
  Repo b = Repo::Open(Uri(), Opts("wal-b"));
  uint64_t sa = Write(a, "a", 50);
  uint64_t sb = Write(b, "b", 70);

  std::mutex mu;
  std::condition_variable cv;
  bool a_waiting = false, release = false;
  std::atomic<std::thread::id> a_thread{};
  std::atomic<int> metrics_commits{0}, a_attempts{0};
  CommitHookScope hook([&](const std::string& uri, std::string_view op, bool committed) {
    if (op != "shared commit" || !uri.ends_with("/metrics.lance")) return;
    if (committed) {
      ++metrics_commits;
      return;
    }
    if (std::this_thread::get_id() != a_thread.load() || a_attempts++ > 0) return;
    std::unique_lock lock(mu);
    a_waiting = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  std::thread flush_a([&] {
    a_thread = std::this_thread::get_id();
    a.Flush();
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return a_waiting; });
  }
  b.Flush();  // commits A's announced points with B's
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  flush_a.join();

  EXPECT_EQ(a_attempts.load(), 1) << "A should have found its points committed by B";
  EXPECT_EQ(metrics_commits.load(), 1);
  EXPECT_EQ(RawPoints(sa), 50u);
  EXPECT_EQ(RawPoints(sb), 70u);
  EXPECT_EQ(CountRead(sa), 50u);
  EXPECT_EQ(CountRead(sb), 70u);
  EXPECT_TRUE(Announced("metrics").empty());
  a.Close();
  b.Close();
}

// A writer dies between announcing its points and committing them. Its WAL
// is replayed later; the announcement may be committed by another writer
// first, or by nobody until then. Either way each point is stored once.
TEST_F(SharedCommitsTest, WriterKilledAfterAnnouncingIsCommittedOnce) {
  for (bool other_writer_first : {false, true}) {
    SCOPED_TRACE(other_writer_first ? "another writer commits it first" : "replay finds it");
    testing::TempDir dir;
    const std::string uri = dir / "repo";
    int status = testing::RunChild({testing::CrashChildPath(), uri, dir / "wal", "shared"});
    ASSERT_TRUE(WIFEXITED(status)) << "the child died of a signal: " << status;
    ASSERT_EQ(WEXITSTATUS(status), 0) << "3: the hook never fired";
    ASSERT_EQ(lance::ListDir(uri + "/_pending/metrics", {}).size(), 1u);
    const uint64_t loss = SeriesId("crashed", "loss", json::object());
    ASSERT_EQ(lance::Dataset::Open(uri + "/metrics.lance", {})
                  .CountRows("series_id = " + std::to_string(loss)),
              0u);

    RepoOptions o;
    o.flush_interval = std::chrono::hours(1);
    o.shared_commits = true;
    if (other_writer_first) {
      o.wal_dir = dir / "wal-other";
      Repo other = Repo::Open(uri, o);
      Write(other, "other", 10);
      other.Flush();
      other.Close();
    }
    o.wal_dir = dir / "wal";  // the child's: its WAL is replayed
    {
      Repo replayed = Repo::Open(uri, o);
      replayed.Flush();
      std::vector<uint64_t> ids = {loss};
      auto stats = replayed.GetSeriesStats(ids);
      EXPECT_EQ(stats[loss].count, 100u);
      EXPECT_EQ(stats[loss].last, 99 * 0.5);
      EXPECT_EQ(replayed.ReadMany(ids)[loss].size(), 100u);
      replayed.Close();
    }
    EXPECT_EQ(lance::Dataset::Open(uri + "/metrics.lance", {})
                  .CountRows("series_id = " + std::to_string(loss)),
              100u);
    EXPECT_TRUE(lance::ListDir(uri + "/_pending/metrics", {}).empty());
  }
}

const arrow::Schema kIdSchema = {{"id", arrow::Type::kUInt64, false}};

arrow::OwnedStream Rows(std::vector<uint64_t> ids) {
  arrow::BatchBuilder builder(kIdSchema);
  for (uint64_t id : ids) builder.uint64(0).Append(id);
  return arrow::OneBatch(kIdSchema, builder);
}

// A committer that dies after its commit leaves the announcement behind.
// Compaction must not merge that fragment away while the announcement
// exists: the next round would no longer find it committed and would commit
// it again.
TEST(SharedCommitsUnitTest, AnnouncementLeftBehindIsRetiredNotCommittedAgain) {
  testing::TempDir dir;
  const std::string uri = dir / "t.lance";
  lance::Dataset dataset = lance::Dataset::Create(uri, {}, kIdSchema);
  SharedCommits shared(dir.path().string(), {}, std::chrono::seconds(30));
  for (uint64_t i = 0; i < 3; ++i) dataset.Append(Rows({i}));
  {
    CommitHookScope hook([](const std::string&, std::string_view op, bool committed) {
      if (op == "shared commit" && committed) throw Error(Code::kIOError, "injected: died");
    });
    EXPECT_THROW(shared.Commit(dataset, "t", Rows({100})), Error);
  }
  dataset.CheckoutLatest();
  ASSERT_EQ(dataset.CountRows(), 4u);
  std::vector<std::string> left = lance::ListDir(shared.Dir("t"), {});
  ASSERT_EQ(left.size(), 1u);

  lance::CompactOptions compact;
  compact.protected_dir = shared.Dir("t");
  dataset.Compact(compact);
  dataset.CheckoutLatest();
  bool kept = false;
  for (const auto& f : dataset.Fragments()) kept = kept || f.data_file == left[0];
  EXPECT_TRUE(kept) << "compaction merged an announced fragment";

  shared.Commit(dataset, "t", Rows({200}));
  dataset.CheckoutLatest();
  EXPECT_EQ(dataset.CountRows(), 5u);
  EXPECT_EQ(dataset.CountRows("id = 100"), 1u);
  EXPECT_TRUE(lance::ListDir(shared.Dir("t"), {}).empty());

  // Retire: an announcement of a committed fragment goes; others stay.
  {
    CommitHookScope hook([](const std::string&, std::string_view op, bool committed) {
      if (op == "shared commit" && committed) throw Error(Code::kIOError, "injected: died");
    });
    EXPECT_THROW(shared.Commit(dataset, "t", Rows({300})), Error);
  }
  lance::PutObject(shared.Dir("t") + "/not-committed.lance", {}, "[]");
  dataset.CheckoutLatest();
  shared.Retire(dataset, "t");
  EXPECT_EQ(lance::ListDir(shared.Dir("t"), {}), std::vector<std::string>{"not-committed.lance"});
}

// Writer A announced first and is slow to commit (blocked after reading its
// version); B announces after it. B must wait for A instead of committing
// A's fragment with its own: A's commit then succeeds at its first attempt,
// and B commits its own fragment after it. Without the wait B commits both
// and A's commit is refused.
TEST(SharedCommitsUnitTest, LaterAnnouncementWaitsForTheOldest) {
  testing::TempDir dir;
  const std::string uri = dir / "t.lance";
  lance::Dataset::Create(uri, {}, kIdSchema);
  lance::Dataset dataset_a = lance::Dataset::Open(uri, {});
  lance::Dataset dataset_b = lance::Dataset::Open(uri, {});
  // A takeover far longer than the test: B never stops waiting for A.
  SharedCommits shared_a(dir.path().string(), {}, std::chrono::minutes(5), std::chrono::minutes(5));
  SharedCommits shared_b(dir.path().string(), {}, std::chrono::minutes(5), std::chrono::minutes(5));

  std::mutex mu;
  std::condition_variable cv;
  bool a_blocked = false, release = false;
  std::atomic<std::thread::id> a_thread{};
  std::vector<std::string> commits;  // "a" or "b", in the order they landed
  int a_attempts = 0;
  CommitHookScope hook([&](const std::string&, std::string_view op, bool committed) {
    if (op != "shared commit") return;
    const bool is_a = std::this_thread::get_id() == a_thread.load();
    std::unique_lock lock(mu);
    if (committed) {
      commits.push_back(is_a ? "a" : "b");
      return;
    }
    if (!is_a || a_attempts++ > 0) return;
    a_blocked = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  std::thread writer_a([&] {
    a_thread = std::this_thread::get_id();
    shared_a.Commit(dataset_a, "t", Rows({1}));
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return a_blocked; });
  }
  // B's announcement is written later than A's by the store's clock.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::thread writer_b([&] { shared_b.Commit(dataset_b, "t", Rows({2})); });
  // Long enough for B to commit if it did not wait; B's waiting does not
  // depend on it.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  writer_a.join();
  writer_b.join();

  EXPECT_EQ(commits, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a_attempts, 1);
  dataset_a.CheckoutLatest();
  EXPECT_EQ(dataset_a.CountRows(), 2u);
  EXPECT_TRUE(lance::ListDir(shared_a.Dir("t"), {}).empty());
}

// B announces first and is held before its commit; A, announcing after it
// with no patience (a takeover of zero), commits B's fragment with its own
// and deletes both announcements. B then finds its own gone. B read and
// wrote an announcement in every round, and must forget each once it is no
// longer listed: without that its cache grows by one entry per flush that
// another writer carries.
TEST(SharedCommitsUnitTest, CacheForgetsAnnouncementsThatOthersCommitted) {
  testing::TempDir dir;
  const std::string uri = dir / "t.lance";
  lance::Dataset::Create(uri, {}, kIdSchema);
  lance::Dataset dataset_a = lance::Dataset::Open(uri, {});
  lance::Dataset dataset_b = lance::Dataset::Open(uri, {});
  SharedCommits shared_a(dir.path().string(), {}, std::chrono::minutes(5),
                         std::chrono::milliseconds(0));
  SharedCommits shared_b(dir.path().string(), {}, std::chrono::minutes(5), std::chrono::minutes(5));

  std::mutex mu;
  std::condition_variable cv;
  bool b_blocked = false, release = false;
  std::atomic<std::thread::id> b_thread{};
  int carried_by_a = 0;
  CommitHookScope hook([&](const std::string&, std::string_view op, bool committed) {
    if (op != "shared commit" || std::this_thread::get_id() != b_thread.load()) return;
    std::unique_lock lock(mu);
    if (committed || b_blocked) return;  // B's retry after the conflict
    b_blocked = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  constexpr int kFlushes = 5;
  for (int i = 0; i < kFlushes; ++i) {
    {
      std::lock_guard lock(mu);
      b_blocked = release = false;
    }
    SharedCommits::Committed by_b;
    std::thread writer_b([&] {
      b_thread = std::this_thread::get_id();
      by_b = shared_b.Commit(dataset_b, "t", Rows({static_cast<uint64_t>(2 * i)}));
    });
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return b_blocked; });
    }
    // A's announcement is written later than B's by the store's clock.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    SharedCommits::Committed by_a =
        shared_a.Commit(dataset_a, "t", Rows({static_cast<uint64_t>(2 * i + 1)}));
    {
      std::lock_guard lock(mu);
      release = true;
    }
    cv.notify_all();
    writer_b.join();
    EXPECT_TRUE(by_a.by_this_writer);
    EXPECT_FALSE(by_b.by_this_writer) << "flush " << i;
    carried_by_a += by_b.by_this_writer ? 0 : 1;
  }
  EXPECT_EQ(carried_by_a, kFlushes);
  dataset_a.CheckoutLatest();
  EXPECT_EQ(dataset_a.CountRows(), 2u * kFlushes);
  EXPECT_TRUE(lance::ListDir(shared_a.Dir("t"), {}).empty());
  // Nothing is listed any more, so neither writer needs to keep anything.
  EXPECT_EQ(shared_b.CachedForTesting(), 0u);
  EXPECT_EQ(shared_a.CachedForTesting(), 0u);
}

}  // namespace
}  // namespace kv0::tracking
