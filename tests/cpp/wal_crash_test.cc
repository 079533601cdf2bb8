// Crash tests with real processes: a child writes and reports every
// acknowledged write; the parent kills it with SIGKILL at a random moment,
// reopens the database and checks that every acknowledged write is there
// and that the write in flight is there entirely or not at all.

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "crash_runner.h"
#include "crash_workload.h"
#include "test_util.h"

namespace kv0::kv {
namespace {

using State = std::map<std::string, std::string>;

State Read(DB& db) {
  State out;
  auto it = db.NewIterator();
  for (it->SeekToFirst(); it->Valid(); it->Next()) out[std::string(it->key())] = it->value();
  return out;
}

class WalCrashTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(WalCrashTest, AcknowledgedWritesSurviveSigkill) {
  auto [mode, explicit_commits] = GetParam();
  std::mt19937_64 rng(std::hash<std::string>{}(mode) + explicit_commits);
  for (int round = 0; round < 10; ++round) {
    kv0::testing::TempDir dir;
    std::string db_path = dir / "db", wal = dir / "wal";
    uint64_t seed = rng() % 1000;
    int64_t stop_after = 20 + static_cast<int64_t>(rng() % 600);
    std::vector<std::string> args = {kv0::testing::SiblingBinary("crash_child"), db_path, wal,
                                     std::to_string(seed), mode};
    if (explicit_commits) args.push_back("explicit");
    int64_t acked = kv0::testing::RunAndKill(args, stop_after);
    ASSERT_GE(acked, stop_after) << "the child stopped early";

    State before, after;
    for (int64_t i = 0; i < acked; ++i)
      kv0::testing::ApplyToModel(kv0::testing::CrashOp(seed, i), before);
    after = before;
    kv0::testing::ApplyToModel(kv0::testing::CrashOp(seed, acked), after);

    Options options;
    options.wal_dir = wal;
    auto db = DB::Open(db_path, options);
    State got = Read(*db);
    EXPECT_TRUE(got == before || got == after)
        << mode << " round " << round << ": acked " << acked << ", state matches neither";
    // Replay committed what it found: a second reopen sees the same.
    db.reset();
    db = DB::Open(db_path, options);
    EXPECT_EQ(Read(*db), got);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, WalCrashTest,
                         ::testing::Combine(::testing::Values("none", "batch", "always"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_with_commits" : "");
                         });

// A child that wrote only to its WAL (it never commits) and was killed.
class AbandonedWalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    acked_ = kv0::testing::RunAndKill(
        {kv0::testing::SiblingBinary("crash_child"), db_, wal_, "7", "always", "noflush"}, 300);
    for (const auto& e : std::filesystem::recursive_directory_iterator(wal_)) {
      if (e.path().extension() == ".wal") segments_.push_back(e.path().string());
    }
    std::sort(segments_.begin(), segments_.end());
  }
  State Model(int64_t n) {
    State m;
    for (int64_t i = 0; i < n; ++i) kv0::testing::ApplyToModel(kv0::testing::CrashOp(7, i), m);
    return m;
  }
  Options Opts() {
    Options o;
    o.wal_dir = wal_;
    return o;
  }

  kv0::testing::TempDir dir_;
  std::string db_ = dir_ / "db", wal_ = dir_ / "wal";
  int64_t acked_ = 0;
  std::vector<std::string> segments_;
};

TEST_F(AbandonedWalTest, ReplayRecoversEverythingAcknowledged) {
  ASSERT_GE(acked_, 300);
  auto db = DB::Open(db_, Opts());
  State got = Read(*db);
  EXPECT_TRUE(got == Model(acked_) || got == Model(acked_ + 1));
}

TEST_F(AbandonedWalTest, FlippedByteFailsTheOpenNamingTheFile) {
  ASSERT_FALSE(segments_.empty());
  std::string segment = segments_.front();
  auto size = std::filesystem::file_size(segment);
  {
    std::fstream f(segment, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(size / 2);
    char c = 0;
    f.get(c);
    f.seekp(size / 2);
    f.put(static_cast<char>(c ^ 0x40));
  }
  try {
    DB::Open(db_, Opts());
    FAIL() << "opened over a damaged WAL";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kCorruption);
    EXPECT_NE(std::string(e.what()).find(segment), std::string::npos) << e.what();
  }
  // Moving the damaged file away lets the database open, without it.
  std::filesystem::rename(segment, dir_ / "damaged.wal");
  auto db = DB::Open(db_, Opts());
  EXPECT_EQ(Read(*db), State{});
}

TEST_F(AbandonedWalTest, TornTailIsDroppedAndTheRestReplayed) {
  ASSERT_FALSE(segments_.empty());
  std::string last = segments_.back();
  std::filesystem::resize_file(last, std::filesystem::file_size(last) - 3);
  auto db = DB::Open(db_, Opts());
  State got = Read(*db);
  // Cutting 3 bytes tears the last record written: it (and only it) is lost.
  bool matched = false;
  for (int64_t n = acked_ - 1; n <= acked_ + 1; ++n) matched |= (got == Model(n));
  EXPECT_TRUE(matched);
}

TEST_F(AbandonedWalTest, StaleWalWithoutAMarkNeedsReplayStaleWal) {
  Options strict = Opts();
  strict.mark_ttl = std::chrono::seconds(0);  // every operation counts as stale
  try {
    DB::Open(db_, strict);
    FAIL() << "replayed a stale WAL";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("replay_stale_wal"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(wal_), std::string::npos) << e.what();
  }
  strict.replay_stale_wal = true;
  auto db = DB::Open(db_, strict);
  State got = Read(*db);
  EXPECT_TRUE(got == Model(acked_) || got == Model(acked_ + 1));
}

}  // namespace
}  // namespace kv0::kv
