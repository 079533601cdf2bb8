// A crash test of the mapped WAL with real processes: a child appends
// numbered records and reports each acknowledged one; the parent kills it
// with SIGKILL at a random moment and claims its directory. Every
// acknowledged record must be there, in order, and the one in flight either
// whole or not at all: nothing was synced, and nothing needs to be for a
// process crash.

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crash_runner.h"
#include "crash_workload.h"
#include "test_util.h"
#include "wal/segment.h"
#include "wal/wal.h"

namespace kv0::wal {
namespace {

using kv0::testing::MappedCrashPayload;

TEST(WalMappedCrashTest, AcknowledgedRecordsSurviveSigkill) {
  std::mt19937_64 rng(20240601);
  const char* modes[] = {"none", "none", "none", "none", "batch", "always"};
  for (int round = 0; round < 6; ++round) {
    std::string mode = modes[round];
    SCOPED_TRACE("round " + std::to_string(round) + ", " + mode);
    kv0::testing::TempDir dir;
    std::string ds = dir / "wal";
    int64_t stop_after = 200 + static_cast<int64_t>(rng() % 600);
    // Small segments, so that kills also land around the move to a new one.
    std::string capacity = std::to_string(64 << 10);
    bool killed = false;
    int64_t acked = kv0::testing::RunAndKill(
        {kv0::testing::SiblingBinary("wal_mapped_crash_child"), ds, mode, capacity}, stop_after,
        &killed);
    EXPECT_TRUE(killed) << "the child exited by itself";
    ASSERT_GE(acked, stop_after) << "the child stopped early";

    auto claimed = ClaimAbandoned(ds, "");
    ASSERT_EQ(claimed.size(), 1u);
    const std::vector<std::string> records = claimed[0].records;
    ASSERT_GE(records.size(), static_cast<size_t>(acked)) << "acknowledged records are missing";
    // The record in flight is whole or absent; nothing beyond it exists.
    ASSERT_LE(records.size(), static_cast<size_t>(acked + 1));
    for (size_t i = 0; i < records.size(); ++i) {
      ASSERT_TRUE(records[i] == MappedCrashPayload(i)) << "record " << i << " differs";
    }
    EXPECT_GT(ListSegments(claimed[0].dir).size(), 1u);

    // The claim left well-formed files: reading again gives the same.
    claimed.clear();
    auto again = ClaimAbandoned(ds, "");
    ASSERT_EQ(again.size(), 1u);
    EXPECT_TRUE(again[0].records == records);
  }
}

}  // namespace
}  // namespace kv0::wal
