// kv0's automatic removal of old versions, kept out of the commit path.
//
// Every commit is a Lance version, and a version's superseded files stay
// until a cleanup removes versions older than the retention
// (`version_retention`, 7 days by default). Lance can run that cleanup inside
// every n-th commit, but its cost grows with the versions retained (it reads
// every manifest): on a local S3 server a commit that cleaned took 0.09 s at
// version 20 and 2.77 s at version 1,000, and a dataset flushed every few
// seconds retains tens of thousands of versions. So kv0 datasets have Lance's
// hook off, and an AutoCleanup per dataset and writing handle does the work:
//
//   1. After a commit through the handle (Dataset::Committing) whose version
//      crosses a multiple of kEveryVersions, and only if the handle's next
//      check is due, it submits one background job (Background::Submit) on
//      a clone of the dataset handle. The commit has already returned.
//   2. The job finds the oldest version no tag names (a listing and one
//      manifest read). Only if that version is older than the retention plus
//      a tenth of it does it run Lance's cleanup of versions older than the
//      retention; either way it sets the handle's next check: a tenth of the
//      retention after a cleanup, or when the oldest version will be overdue.
//
// So a cleanup, which reads every retained manifest, runs about once per
// tenth of the retention per dataset (a handle that opens later learns from
// the oldest version that another one cleaned recently), and its cost spread
// over the commits in between is about eleven manifest reads per commit,
// however long the dataset has been written. Versions older than the
// retention are removed within a tenth of the retention, never before it. A
// retention of 0 checks, and cleans, at every crossing. A failed job changes
// nothing; the next crossing tries again.
//
// Thread safety: Committed may be called from any thread. Destroying the
// AutoCleanup (its owner's close) cancels a job that has not started and
// waits for a running one, so nothing of a closed handle runs afterwards.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "lance/dataset.h"

namespace kv0::lance {

class AutoCleanup {
 public:
  // Commits are checked when their version crosses a multiple of this.
  static constexpr uint64_t kEveryVersions = 20;

  explicit AutoCleanup(std::chrono::seconds retention);
  ~AutoCleanup();
  AutoCleanup(const AutoCleanup&) = delete;
  AutoCleanup& operator=(const AutoCleanup&) = delete;

  // After a commit that moved `dataset` from version `before` to its
  // current version. Cheap unless a job is submitted; never throws.
  void Committed(const Dataset& dataset, uint64_t before);

  // Waits until no job is queued or running (for tests and benchmarks).
  void WaitIdle();

  // For tests: how many cleanups ran (not counting checks that found none
  // due).
  uint64_t cleanups() const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the job
};

}  // namespace kv0::lance
