// The writer wal_mapped_crash_test kills: appends numbered records to a mapped
// WAL and prints the number of each record once its Append has returned.
//
//   wal_mapped_crash_child DATASET_DIR none|batch|always CAPACITY
//
// Record i is MappedCrashPayload(i) (the test builds the same bytes).

#include <cstdint>
#include <cstdio>
#include <string>

#include "wal/wal.h"

namespace {

// Mostly small records, every tenth a big one, so that a kill can land in
// the middle of a long copy; as in wal_mapped_crash_test.cc.
std::string MappedCrashPayload(uint64_t i) {
  size_t size = i % 10 == 9 ? 20000 + i % 5000 : 16 + i % 200;
  std::string payload = std::to_string(i) + ":";
  for (size_t j = payload.size(); j < size; ++j) payload.push_back(static_cast<char>(i * 31 + j));
  return payload;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  auto log = kv0::wal::Log::Open(argv[1], kv0::wal::ParseSyncMode(argv[2]), /*mapped=*/true,
                                 std::stoull(argv[3]));
  std::printf("ready\n");
  std::fflush(stdout);
  for (uint64_t i = 0;; ++i) {
    log->Append(MappedCrashPayload(i));
    std::printf("%llu\n", static_cast<unsigned long long>(i));
    std::fflush(stdout);
  }
}
