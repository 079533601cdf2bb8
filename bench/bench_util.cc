#include "bench/bench_util.h"

#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>

#include "kv0/error.h"

extern char** environ;

namespace kv0::bench {

namespace fs = std::filesystem;

std::string RunSelf(const std::vector<std::string>& arguments) {
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {exe};
  args.insert(args.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (pipe(fds) != 0) throw Error(Code::kIOError, "pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw Error(Code::kIOError, "cannot start " + exe + ": " + std::strerror(rc));
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string what;
    for (const auto& a : arguments) what += " " + a;
    throw Error(Code::kIOError, "the child process (" + what.substr(1) + ") failed (status " +
                                    std::to_string(status) + "): " + out);
  }
  return out;
}

std::string WithCommas(double value) {
  auto v = static_cast<long long>(value + 0.5);
  std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string Fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(i == 0 ? 0 : i - 1, v.size() - 1)];
}

Memory ProcessMemory() {
  std::ifstream status("/proc/self/status");
  std::string line;
  Memory m;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) m.resident_mb = std::stod(line.substr(6)) / 1024;
    if (line.rfind("VmHWM:", 0) == 0) m.peak_mb = std::stod(line.substr(6)) / 1024;
  }
  return m;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::string Timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

ScratchDir::ScratchDir(const std::string& parent_option, const std::string& prefix) {
  fs::path parent = parent_option.empty() ? fs::temp_directory_path() : fs::path(parent_option);
  fs::create_directories(parent);
  std::string pattern = (fs::absolute(parent) / (prefix + "-XXXXXX")).string();
  if (!mkdtemp(pattern.data())) {
    throw Error(Code::kIOError, "cannot create a directory in " + parent.string());
  }
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

}  // namespace kv0::bench
