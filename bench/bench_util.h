// Small pieces the benchmarks share: a child process, number formatting,
// medians, the report's timestamp and the scratch directory.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace kv0::bench {

// Runs this executable with `arguments` in a new process, so that nothing
// this one cached helps it, and returns what it printed on stdout. Throws
// IOError if it cannot start or does not exit with 0.
std::string RunSelf(const std::vector<std::string>& arguments);

// 1234567.4 -> "1,234,567" (rounded to a whole number).
std::string WithCommas(double value);
// value with `decimals` digits after the point.
std::string Fixed(double value, int decimals);
// The median of v (0 for none).
double Median(std::vector<double> v);
// The smallest value with at least a fraction p of v at or below it (0 for
// none).
double Percentile(std::vector<double> v, double p);
// d in seconds.
inline double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
// This process's resident memory now (VmRSS) and its peak (VmHWM), in MB.
struct Memory {
  double resident_mb = 0, peak_mb = 0;
};
Memory ProcessMemory();
// CPU time this process has used, user and system, in seconds.
double CpuSeconds();
// Now, as "YYYY-MM-DDTHH:MM:SSZ".
std::string Timestamp();

// A fresh directory named <prefix>-XXXXXX under `parent` (empty: the system
// temporary directory), removed with everything in it when this goes away,
// however the benchmark ends.
class ScratchDir {
 public:
  ScratchDir(const std::string& parent, const std::string& prefix);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kv0::bench
