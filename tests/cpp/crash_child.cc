// The writer the crash tests kill: runs the crash workload against a
// database and prints the number of each acknowledged operation.
//
//   crash_child DB WAL_DIR SEED none|batch|always [explicit]
//
// With "explicit" it also flushes every 25 operations and compacts every
// 100, so kills land inside commits and rewrites; with "noflush" it never
// commits, so everything it acknowledged is only in its WAL.

#include <cstdio>
#include <string>

#include "crash_workload.h"

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  kv0::kv::Options options;
  options.wal_dir = argv[2];
  uint64_t seed = std::stoull(argv[3]);
  std::string mode = argv[4];
  options.wal_sync = mode == "none"     ? kv0::kv::WalSync::kNone
                     : mode == "always" ? kv0::kv::WalSync::kAlways
                                        : kv0::kv::WalSync::kBatch;
  std::string extra = argc > 5 ? argv[5] : "";
  bool explicit_commits = extra == "explicit";
  options.write_buffer_size = 4 << 10;
  options.max_fragments = 3;
  options.flush_interval = std::chrono::milliseconds(200);
  if (extra == "noflush") {
    options.write_buffer_size = 1 << 30;
    options.flush_interval = std::chrono::hours(24);
  }
  auto db = kv0::kv::DB::Open(argv[1], options);
  std::printf("ready\n");
  std::fflush(stdout);
  for (uint64_t i = 0;; ++i) {
    db->Write(kv0::testing::CrashOp(seed, i));
    std::printf("%llu\n", static_cast<unsigned long long>(i));
    std::fflush(stdout);
    if (explicit_commits && i % 25 == 24) db->Flush();
    if (explicit_commits && i % 100 == 99) db->CompactRange();
  }
}
