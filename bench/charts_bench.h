// `kv0 bench charts`: a chart read from storage (Repo::ReadDownsampled)
// beside the raw read a client would reduce itself (Repo::ReadManyStream),
// on one repository of many long series.
//
// The repository: `runs` runs, each with one series "loss" of `points`
// steps (0, 1, ...), holding one spike (1,000 where the curve is below 3)
// and one NaN, logged run after run and finished. Then, in order:
//
//   before optimize   the reads below on a new handle, each once: with no
//                     index yet, a read scans the whole table per chunk of
//                     about a million points;
//   optimize          Repo::Optimize(), timed;
//   after optimize    the reads again on a new handle;
//   unoptimized tail  `tail` more points appended to every run (ResumeRun),
//                     not optimized, and the reads again.
//
// A read asks for every series at once, in `buckets` buckets, over four
// windows: the whole history, a tenth of it, a hundredth, and 1,000 steps,
// each centred on the spikes. Each is repeated `repeat` times on the same
// handle and reported as p50 / p95 of the wall time, with the CPU time, the
// bytes the process read (rchar of /proc/self/io) and the peak resident
// memory during the read. The raw read of the same series and window runs
// beside each.
//
// The results are checked, never the timings: every series' buckets hold
// every point of the window, and where the window holds a spike and a NaN,
// the spike is a maximum and the NaN is counted.
#pragma once

#include <cstdint>
#include <string>

namespace kv0::bench {

struct ChartsBenchArgs {
  uint64_t runs = 200;
  uint64_t points = 200'000;  // per run
  uint64_t tail = 10'000;     // points per run added after optimize
  uint64_t buckets = 1000;
  uint64_t repeat = 5;
  std::string json_path;  // where to write every figure as JSON; empty: none
  std::string dir;        // parent of the scratch directory; empty: the system's
};

// Prints a summary (progress on stderr) and writes the JSON file if asked.
// Returns 0, or 1 when a result is wrong.
int RunChartsBench(const ChartsBenchArgs& args);

}  // namespace kv0::bench
