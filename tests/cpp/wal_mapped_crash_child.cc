// The writer wal_mapped_crash_test kills: appends numbered records to a mapped
// WAL and prints the number of each record once its Append has returned.
//
//   wal_mapped_crash_child DATASET_DIR none|batch|always CAPACITY
//
// Record i is MappedCrashPayload(i) (the test builds the same bytes).

#include <cstdint>
#include <cstdio>
#include <string>

#include "crash_workload.h"
#include "wal/wal.h"

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  auto log = kv0::wal::Log::Open(argv[1], kv0::ParseWalSync(argv[2]), /*mapped=*/true,
                                 std::stoull(argv[3]));
  std::printf("ready\n");
  std::fflush(stdout);
  for (uint64_t i = 0;; ++i) {
    log->Append(kv0::testing::MappedCrashPayload(i));
    std::printf("%llu\n", static_cast<unsigned long long>(i));
    std::fflush(stdout);
  }
}
