// The writer the tracking overwrite crash test kills: runs the overwrite
// workload (crash_workload.h) on one run from operation START on and prints
// the number of each acknowledged operation.
//
//   tracking_overwrite_child REPO WAL_DIR SEED START
//
// Small flushes and a low max_fragments make commits and automatic
// compactions frequent, so kills land in and between them.

#include <cstdio>
#include <string>

#include "crash_workload.h"
#include "kv0/tracking.h"

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  namespace tr = kv0::tracking;
  tr::RepoOptions options;
  options.wal_dir = argv[2];
  options.flush_rows = 40;
  options.flush_interval = std::chrono::milliseconds(50);
  options.max_fragments = 4;
  uint64_t seed = std::stoull(argv[3]);
  int64_t start = std::stoll(argv[4]);
  tr::Repo repo = tr::Repo::Open(argv[1], options);
  tr::NewRun spec;
  spec.run_id = "overwrites";
  tr::Run run = start == 0 ? repo.CreateRun(spec) : repo.ResumeRun("overwrites");
  std::printf("ready\n");
  std::fflush(stdout);
  for (int64_t i = start;; ++i) {
    kv0::testing::OverwriteOp op = kv0::testing::MakeOverwriteOp(seed, i);
    switch (op.kind) {
      case kv0::testing::OverwriteOp::kTrack: {
        tr::TrackOptions track;
        track.step = op.step;
        run.Track(op.value, kv0::testing::OverwriteSeries(op.series), track);
        break;
      }
      case kv0::testing::OverwriteOp::kFlush:
        repo.Flush();
        break;
      case kv0::testing::OverwriteOp::kOptimize:
        repo.Optimize();
        break;
    }
    std::printf("%lld\n", static_cast<long long>(i));
    std::fflush(stdout);
  }
}
