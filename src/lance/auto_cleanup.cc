#include "lance/auto_cleanup.h"

#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <utility>

#include "util/background.h"

namespace kv0::lance {

namespace {

using Clock = std::chrono::system_clock;

Clock::time_point FromMicros(int64_t us) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::microseconds(us)));
}

}  // namespace

struct AutoCleanup::State {
  explicit State(std::chrono::seconds retention) : retention(retention) {}

  // The job: decides from the oldest version whether a cleanup is overdue,
  // runs it, and says when to check next.
  void Run(Dataset& dataset) {
    {
      std::lock_guard lock(mu);
      if (stopped) {
        busy = false;
        idle.notify_all();
        return;
      }
      running_pid = getpid();
    }
    auto now = Clock::now();
    auto grace = retention / 10;
    Clock::time_point next = now;  // after a failure: at the next crossing
    bool cleaned = false;
    try {
      auto overdue_at = FromMicros(dataset.OldestVersion().timestamp_us) + retention + grace;
      if (now >= overdue_at) {
        dataset.CleanupOldVersions(retention);
        cleaned = true;
        next = now + grace;
      } else {
        next = overdue_at;
      }
    } catch (...) {
      // Nothing was lost: the versions stay until a later job removes them.
    }
    std::lock_guard lock(mu);
    next_check = next;
    if (cleaned) ++cleanups;
    running_pid = 0;
    busy = false;
    idle.notify_all();
  }

  const std::chrono::seconds retention;
  std::mutex mu;
  std::condition_variable idle;    // signalled when a job ends
  bool busy = false;               // a job is queued or running
  bool stopped = false;            // the owner is gone: run no job
  pid_t running_pid = 0;           // the process whose thread runs the job
  Clock::time_point next_check{};  // the epoch: check at the first crossing
  uint64_t cleanups = 0;
};

AutoCleanup::AutoCleanup(std::chrono::seconds retention)
    : state_(std::make_shared<State>(retention)) {}

AutoCleanup::~AutoCleanup() {
  std::unique_lock lock(state_->mu);
  state_->stopped = true;
  // A job queued but not started will see `stopped` and return. In a
  // forked child the parent's running job is gone: nothing to wait for.
  state_->idle.wait(lock, [&] { return state_->running_pid != getpid(); });
}

void AutoCleanup::Committed(const Dataset& dataset, uint64_t before) {
  bool claimed = false;
  try {
    if (dataset.version() / kEveryVersions == before / kEveryVersions) return;
    {
      std::lock_guard lock(state_->mu);
      if (state_->stopped || state_->busy || Clock::now() < state_->next_check) return;
      state_->busy = claimed = true;
    }
    auto clone = std::make_shared<Dataset>(dataset.Clone());
    Background::Get().Submit([state = state_, clone] { state->Run(*clone); });
  } catch (...) {
    // A failed clone or submit only skips this check.
    if (!claimed) return;
    std::lock_guard lock(state_->mu);
    state_->busy = false;
    state_->idle.notify_all();
  }
}

void AutoCleanup::WaitIdle() {
  std::unique_lock lock(state_->mu);
  state_->idle.wait(lock, [&] { return !state_->busy; });
}

uint64_t AutoCleanup::cleanups() const {
  std::lock_guard lock(state_->mu);
  return state_->cleanups;
}

}  // namespace kv0::lance
