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
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

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
      if (e.path().extension() == ".wmap") segments_.push_back(e.path().string());
    }
    std::sort(segments_.begin(), segments_.end());
  }
  // Where each record of a mapped segment starts: records are padded to 8
  // bytes, and the data ends at the first zero length.
  static std::vector<size_t> RecordOffsets(const std::string& data) {
    std::vector<size_t> out;
    for (size_t pos = 0; pos + 12 <= data.size();) {
      uint32_t length;
      std::memcpy(&length, &data[pos], 4);
      if (length == 0) break;
      out.push_back(pos);
      pos += (12 + length + 7) / 8 * 8;
    }
    return out;
  }
  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void WriteFile(const std::string& path, const std::string& data) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
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
  std::string data = ReadFile(segment);
  std::vector<size_t> records = RecordOffsets(data);
  ASSERT_GE(records.size(), 300u);
  // A byte of the middle record's payload (the padding after it is not
  // data, and the preallocated rest of the file holds none).
  size_t record = records[records.size() / 2];
  uint32_t length;
  std::memcpy(&length, &data[record], 4);
  data[record + 12 + length / 2] ^= 0x40;
  WriteFile(segment, data);
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
  std::string data = ReadFile(last);
  std::vector<size_t> records = RecordOffsets(data);
  ASSERT_FALSE(records.empty());
  // The last record's length was never stored, as when the process dies
  // during its copy: its bytes are there, behind a zero length.
  std::memset(&data[records.back()], 0, 4);
  WriteFile(last, data);
  auto db = DB::Open(db_, Opts());
  State got = Read(*db);
  // That tears the last record written: it (and only it) is lost.
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
