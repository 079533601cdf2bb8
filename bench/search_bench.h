// `kv0 bench search`: run search in storage against the brute-force path a
// client would take (every run, every parameter, every statistic, filtered
// in memory), on one repository of many runs.
#pragma once

#include <cstdint>
#include <string>

namespace kv0::bench {

struct SearchBenchArgs {
  // Runs, each with 20 parameters and 10 series of 3 points.
  uint64_t runs = 100'000;
  // Times each query runs on a warm handle (p50 and p95 come from these).
  uint64_t repeat = 20;
  // Times the brute force and the new process run per query (medians come
  // from these); 1 keeps a run of a million runs within the hour.
  uint64_t slow_repeat = 3;
  // False: no brute force, so the searches' results go unchecked. It holds
  // every run, parameter and statistic in memory and takes about 10 s a
  // query at 100,000 runs, so a million runs are measured without it.
  bool brute_force = true;
  std::string json_path;  // where to write every figure as JSON; empty: none
  std::string dir;        // parent of the scratch directory; empty: the system's
};

// Builds the repository, times the queries before and after optimize, prints
// a summary (progress on stderr) and writes the JSON file if asked. Returns
// 0, or 1 when a query's result differs from the brute-force one. Timings
// are never checked.
int RunSearchBench(const SearchBenchArgs& args);

// The benchmark's new-process reader: opens the repository at uri and runs
// query number `query` once, printing the open and query times as JSON.
int RunSearchQuery(const std::string& uri, const std::string& wal_dir, int query);

}  // namespace kv0::bench
