// `kv0 bench versions`: does a commit get slower as a dataset's versions
// accumulate? One writer appends one row per commit to a fresh dataset and
// each commit is timed, in two runs on the same store:
//
//   kv0     kv0's automatic cleanup (src/lance/auto_cleanup.h): checks after
//           commits, in the background;
//   lance   Lance's own automatic cleanup inside every 20th commit, as kv0
//           datasets had it before (the dataset configuration that asks for
//           it, with the same retention).
//
// Both use the same retention: by default 7 days, so no version expires
// during the run and every version is retained, as in a dataset's first
// week; a retention of seconds (`retention_s`) has cleanups remove versions
// while commits go on, as in a dataset months old. The report compares the
// commits near version 20 with those near the end, and gives the oldest
// version kept at the end.
#pragma once

#include <cstdint>
#include <string>

#include "lance/dataset.h"

namespace kv0::bench {

struct VersionsBenchArgs {
  uint64_t versions = 100'000;           // commits of the kv0 run
  uint64_t lance_versions = 2'000;       // commits of the lance run (it slows down)
  uint64_t retention_s = 7 * 24 * 3600;  // version_retention of both runs
  // Where the datasets go: a directory or object-store URI prefix; empty: a
  // scratch directory under `dir`.
  std::string uri;
  lance::StorageOptions storage;
  std::string json_path;  // where to write every figure as JSON; empty: none
  std::string dir;        // parent of the scratch directory; empty: the system's
};

// Prints a summary (progress on stderr) and writes the JSON file if asked.
// Returns 0, or 1 when a dataset does not hold every committed row. Timings
// are never checked.
int RunVersionsBench(const VersionsBenchArgs& args);

}  // namespace kv0::bench
