// Runs a crash-test child process and kills it part-way: the children print
// "ready", then the number of each operation once it is acknowledged.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace kv0::testing {

// The path of a program built next to the running test.
inline std::string SiblingBinary(const std::string& name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

// Runs args until the child has acknowledged `stop_after` operations, kills
// it with SIGKILL and returns how many it acknowledged (counting what it
// printed whole before it died). *killed says whether SIGKILL ended it, as
// opposed to the child exiting by itself.
inline int64_t RunAndKill(const std::vector<std::string>& args, int64_t stop_after,
                          bool* killed = nullptr) {
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
  if (killed != nullptr) *killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  // The child ran ahead of what was read: whatever it printed before dying
  // was acknowledged too. A line cut short was not printed whole.
  while (std::fgets(line, sizeof(line), lines) != nullptr) {
    if (std::strchr(line, '\n') != nullptr) acked = std::stoll(line);
  }
  std::fclose(lines);
  return acked + 1;
}

}  // namespace kv0::testing
