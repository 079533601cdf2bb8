// `kv0 bench tracking`: the tracking layer at the scale of a busy tracker.
#pragma once

#include <cstdint>
#include <string>

namespace kv0::bench {

struct TrackingBenchArgs {
  // Runs logged one after another, each with 20 parameters and 10 series of
  // 1000 steps.
  uint64_t runs = 2000;
  // Points of the Track() throughput run, spread over 5 series; the range
  // read uses its first series, so 5,000,000 gives the 1,000,000-point
  // series the target is stated for.
  uint64_t points = 5'000'000;
  // Where to write every figure as JSON; empty for none.
  std::string json_path;
  // Parent of the benchmark's temporary directory; empty for the system's
  // temporary directory. The benchmark's own directory is removed at the end.
  std::string dir;
};

// Runs every phase, prints a summary with the targets to stdout (progress to
// stderr) and writes the JSON file if asked. Returns 0, or 1 when a phase
// failed or read back wrong results. Timings are never checked.
int RunTrackingBench(const TrackingBenchArgs& args);

// The benchmark's reader: opens the repository at uri (its WAL under
// wal_dir, or the default root when empty), times the queries a tracker's
// server makes to refresh its catalog, twice, and prints them as JSON on
// stdout. Run by RunTrackingBench in a process of its own, so that nothing
// the writer cached helps it.
int RunTrackingRefresh(const std::string& uri, const std::string& wal_dir);

}  // namespace kv0::bench
