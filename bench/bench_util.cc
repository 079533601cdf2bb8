#include "bench/bench_util.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "kv0/error.h"

namespace kv0::bench {

namespace fs = std::filesystem;

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
