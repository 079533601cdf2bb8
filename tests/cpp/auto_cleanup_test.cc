// kv0's automatic cleanup of old versions (src/lance/auto_cleanup.h): when it
// runs, what it keeps, that it runs after commits rather than inside them,
// and that an owner going away stops it.

#include "lance/auto_cleanup.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "lance/dataset.h"
#include "test_util.h"
#include "util/background.h"

namespace kv0::lance {
namespace {

using namespace std::chrono_literals;

const arrow::Schema kSchema = {{"id", arrow::Type::kUInt64, false}};

arrow::OwnedStream Row(uint64_t id) {
  arrow::BatchBuilder builder(kSchema);
  builder.uint64(0).Append(id);
  return arrow::OneBatch(kSchema, builder);
}

class AutoCleanupTest : public ::testing::Test {
 protected:
  // A dataset with one row per commit, ids [0, rows).
  Dataset Create(std::chrono::seconds retention) {
    Dataset dataset = Dataset::Create(dir_ / "t.lance", {}, kSchema);
    cleanup_ = std::make_shared<AutoCleanup>(retention);
    dataset.SetAutoCleanup(cleanup_);
    return dataset;
  }

  void AppendUntil(Dataset& dataset, uint64_t version) {
    while (dataset.version() < version) dataset.Append(Row(rows_++));
  }

  testing::TempDir dir_;
  std::shared_ptr<AutoCleanup> cleanup_;
  uint64_t rows_ = 0;
};

TEST_F(AutoCleanupTest, RetentionZeroCleansAtEachCrossing) {
  Dataset dataset = Create(0s);
  AppendUntil(dataset, 19);
  cleanup_->WaitIdle();
  EXPECT_EQ(cleanup_->cleanups(), 0u) << "no multiple of 20 crossed yet";
  EXPECT_EQ(dataset.Versions().size(), 19u);

  AppendUntil(dataset, 20);
  cleanup_->WaitIdle();
  EXPECT_EQ(cleanup_->cleanups(), 1u);
  EXPECT_LT(dataset.Versions().size(), 19u);

  AppendUntil(dataset, 45);
  cleanup_->WaitIdle();
  EXPECT_EQ(cleanup_->cleanups(), 2u);
  EXPECT_EQ(dataset.CountRows(), rows_) << "a cleanup removed rows of the current version";
  EXPECT_EQ(Dataset::Open(dir_ / "t.lance", {}).CountRows(), rows_);
}

TEST_F(AutoCleanupTest, KeepsVersionsYoungerThanTheRetention) {
  Dataset dataset = Create(std::chrono::hours(1));
  AppendUntil(dataset, 45);
  cleanup_->WaitIdle();
  EXPECT_EQ(cleanup_->cleanups(), 0u);
  EXPECT_EQ(dataset.Versions().size(), 45u);
}

TEST_F(AutoCleanupTest, CleansOnceTheOldestVersionIsOverdue) {
  const auto retention = 3s;
  auto created = std::chrono::steady_clock::now();
  Dataset dataset = Create(retention);
  AppendUntil(dataset, 21);
  cleanup_->WaitIdle();
  if (std::chrono::steady_clock::now() - created < retention) {
    EXPECT_EQ(cleanup_->cleanups(), 0u) << "nothing was old enough";
    EXPECT_EQ(dataset.Versions().size(), 21u);
  }

  // Every version so far expires; the check after the next crossing cleans.
  std::this_thread::sleep_for(retention + retention / 10 + 500ms);
  AppendUntil(dataset, 41);
  cleanup_->WaitIdle();
  EXPECT_GE(cleanup_->cleanups(), 1u);
  auto versions = dataset.Versions();
  ASSERT_FALSE(versions.empty());
  EXPECT_GE(versions.front().version, 21u) << "versions older than the retention were kept";
  EXPECT_EQ(dataset.CountRows(), rows_);
}

// The check runs on the background pool after the commit returned: with
// every worker held, commits go on and nothing is cleaned until they are
// released.
TEST_F(AutoCleanupTest, RunsAfterTheCommitNotInsideIt) {
  Dataset dataset = Create(0s);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int held = 0;
  for (int i = 0; i < Background::kWorkers; ++i) {
    Background::Get().Submit([&] {
      std::unique_lock lock(mu);
      ++held;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return held == Background::kWorkers; });
  }
  AppendUntil(dataset, 25);
  EXPECT_EQ(cleanup_->cleanups(), 0u);
  EXPECT_EQ(dataset.Versions().size(), 25u) << "a version was removed inside a commit";
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  cleanup_->WaitIdle();
  EXPECT_EQ(cleanup_->cleanups(), 1u);
  EXPECT_LT(dataset.Versions().size(), 25u);
}

TEST_F(AutoCleanupTest, RemovesLancesOwnSettingsAndKeepsOthers) {
  Dataset dataset = Dataset::Create(dir_ / "old.lance", {}, kSchema);
  dataset.UpdateConfig({{"lance.auto_cleanup.interval", "20"},
                        {"lance.auto_cleanup.older_than", "7days"},
                        {"kv0.other", "kept"}});
  dataset.SetAutoCleanup(std::make_shared<AutoCleanup>(0s));
  auto config = Dataset::Open(dir_ / "old.lance", {}).Config();
  EXPECT_FALSE(config.count("lance.auto_cleanup.interval"));
  EXPECT_FALSE(config.count("lance.auto_cleanup.older_than"));
  EXPECT_EQ(config["kv0.other"], "kept");
}

// An owner that goes away with a job queued or running: the destructor
// cancels or waits, and the dataset stays whole.
TEST_F(AutoCleanupTest, OwnerGoneWhileAJobIsDue) {
  for (int round = 0; round < 5; ++round) {
    {
      Dataset dataset = round == 0 ? Create(0s) : Dataset::Open(dir_ / "t.lance", {});
      if (round > 0) {
        cleanup_ = std::make_shared<AutoCleanup>(0s);
        dataset.SetAutoCleanup(cleanup_);
      }
      AppendUntil(dataset, (round + 1) * AutoCleanup::kEveryVersions);
      cleanup_.reset();  // the dataset holds the last reference
    }
    EXPECT_EQ(Dataset::Open(dir_ / "t.lance", {}).CountRows(), rows_);
  }
}

}  // namespace
}  // namespace kv0::lance
