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

#include "test_util.h"
#include "wal/segment.h"
#include "wal/wal.h"

extern char** environ;

namespace kv0::wal {
namespace {

// The same bytes as in wal_mapped_crash_child.cc.
std::string MappedCrashPayload(uint64_t i) {
  size_t size = i % 10 == 9 ? 20000 + i % 5000 : 16 + i % 200;
  std::string payload = std::to_string(i) + ":";
  for (size_t j = payload.size(); j < size; ++j) payload.push_back(static_cast<char>(i * 31 + j));
  return payload;
}

std::string ChildPath() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "wal_mapped_crash_child")
      .string();
}

// Runs the child until it has acknowledged `stop_after` records, kills it,
// and returns how many it acknowledged.
int64_t RunAndKill(const std::vector<std::string>& args, int64_t stop_after) {
  int out[2];
  if (pipe(out) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
    throw std::runtime_error("spawn " + args[0]);
  }
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  FILE* lines = fdopen(out[0], "r");
  int64_t acked = -1;
  char line[64];
  while (std::fgets(line, sizeof(line), lines) != nullptr) {
    if (std::strncmp(line, "ready", 5) == 0) continue;
    acked = std::stoll(line);
    if (acked + 1 >= stop_after) break;
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child exited by itself";
  // The child ran ahead of what was read: whatever it printed before dying
  // was acknowledged too. A line cut short was not printed whole.
  while (std::fgets(line, sizeof(line), lines) != nullptr) {
    if (std::strchr(line, '\n') != nullptr) acked = std::stoll(line);
  }
  std::fclose(lines);
  return acked + 1;
}

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
    int64_t acked = RunAndKill({ChildPath(), ds, mode, capacity}, stop_after);
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
