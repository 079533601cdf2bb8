// `kv0 bench kv`: a db_bench-style comparison of kv0's key-value layer with
// RocksDB, both run in one process on the same machine with the same keys.
#pragma once

#include <cstdint>
#include <string>

namespace kv0::bench {

struct KvBenchArgs {
  // Keys in the main workloads (fillseq, fillrandom, overwrite, readrandom,
  // seekrandom, reopen).
  uint64_t keys = 1'000'000;
  // Keys in each row of the WAL put-rate comparison; 0 means keys / 10.
  uint64_t wal_keys = 0;
  // Where to write every figure as JSON; empty for none.
  std::string json_path;
  // Parent of the benchmark's temporary directory; empty for the system's
  // temporary directory. The benchmark's own directory is removed at the end.
  std::string dir;
};

// Runs every workload for both engines, prints the tables to stdout (progress
// to stderr) and writes the JSON file if asked. Returns 0, or 1 when an engine
// failed or returned wrong results (the tables and the JSON say which).
int RunKvBench(const KvBenchArgs& args);

}  // namespace kv0::bench
