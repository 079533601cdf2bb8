// The writer repo_test kills between two commits of a flush.
//
//   tracking_crash_child REPO WAL_DIR [shared]
//
// Opens the repository with that WAL directory, creates the run "crashed",
// sets its parameters, tracks 100 points of "loss" (step i, value i * 0.5,
// timestamp 1000000 + i) and flushes. A commit hook ends the process with
// status 0 just before the metrics commit, once the params commit beside it
// has ended: runs, params and series are committed, and the points are only
// in the WAL. With "shared" the handle shares commits
// (RepoOptions::shared_commits) and the points are also announced, not
// committed. Status 3 means the hook never fired, 4 that the params commit
// never ended.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string_view>

#include "kv0/tracking.h"
#include "lance/dataset.h"

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  namespace tracking = kv0::tracking;
  tracking::RepoOptions options;
  options.wal_dir = argv[2];
  options.flush_interval = std::chrono::hours(1);  // only the explicit flush commits
  const bool shared = argc > 3 && std::string_view(argv[3]) == "shared";
  options.shared_commits = shared;
  tracking::Repo repo = tracking::Repo::Open(argv[1], options);
  static std::atomic<bool> params_committed{false};
  kv0::lance::SetCommitHookForTesting(
      [shared](const std::string& uri, std::string_view operation, bool committed) {
        if (committed && uri.ends_with("/params.lance")) params_committed = true;
        if (committed || !uri.ends_with("/metrics.lance")) return;
        if (shared && operation != "shared commit") return;  // the fragment is not announced yet
        for (int ms = 0; ms < 60'000 && !params_committed; ++ms) usleep(1000);
        _exit(params_committed ? 0 : 4);
      });

  tracking::NewRun new_run;
  new_run.run_id = "crashed";
  new_run.name = "crash";
  new_run.created_at_us = 1'000'000;
  tracking::Run run = repo.CreateRun(new_run);
  run.SetParams({{"lr", 0.5}, {"model", {{"layers", 4}, {"act", "relu"}}}});
  for (int i = 0; i < 100; ++i) {
    tracking::TrackOptions track;
    track.step = i;
    track.timestamp_us = 1'000'000 + i;
    run.Track(i * 0.5, "loss", track);
  }
  repo.Flush();
  std::fprintf(stderr, "tracking_crash_child: the flush hook did not fire\n");
  return 3;
}
