#include "util/background.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <utility>

#include "kv0/error.h"

namespace kv0 {

namespace {

void NameThisThread(const char* name) {
#ifdef __linux__
  pthread_setname_np(pthread_self(), name);  // shows in top, gdb and perf
#else
  (void)name;
#endif
}

// Runs a job or tick, swallowing what it throws: the caller is a loop that
// must keep serving everyone else, and has nobody to report to.
template <typename F>
void RunGuarded(F&& f) noexcept {
  try {
    f();
  } catch (...) {
  }
}

}  // namespace

Background& Background::Get() {
  // Never destroyed: a handle destroyed late in static destruction may still
  // reach it, so only the threads stop at exit, from an atexit hook that runs
  // where a function-local static's destructor would.
  static Background* const instance = [] {
    auto* background = new Background;
    std::atexit([] { Get().Shutdown(); });
    // The child of a fork has none of the parent's threads. Holding mu_
    // across fork() keeps the state it guards consistent in the child.
    pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); },
                   [] {
                     Get().ForgetParentAfterFork();
                     Get().mu_.unlock();
                   });
    return background;
  }();
  return *instance;
}

Background::Background() = default;

void Background::Register(std::weak_ptr<BackgroundClient> client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || client.expired()) return;
  StartLocked();
  // Identity of the control block; works even for clients that expire now.
  auto same = [&client](const std::weak_ptr<BackgroundClient>& other) {
    return !client.owner_before(other) && !other.owner_before(client);
  };
  if (std::none_of(clients_.begin(), clients_.end(), same)) clients_.push_back(std::move(client));
}

void Background::Submit(std::function<void()> job) {
  if (!job) throw Error(Code::kInvalidArgument, "Background::Submit: empty job");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) StartLocked();
    // While any worker is alive (also while draining at exit), one of them
    // will see this job before it leaves.
    if (live_workers_ > 0) {
      jobs_.push_back(std::move(job));
      work_cv_.notify_one();
      return;
    }
  }
  RunGuarded(job);  // the pool is gone: process exit is under way
}

void Background::SubmitOnce(const std::shared_ptr<std::atomic<bool>>& queued,
                            std::function<void()> job) {
  if (!job) throw Error(Code::kInvalidArgument, "Background::SubmitOnce: empty job");
  if (queued->exchange(true)) return;
  Submit([queued, job = std::move(job)] {
    RunGuarded(job);
    queued->store(false);
  });
}

void Background::StartLocked() {
  if (started_) return;
  started_ = true;
  threads_.emplace_back([this] { TickLoop(); });
  for (int i = 0; i < kWorkers; i++) {
    threads_.emplace_back([this] { WorkLoop(); });
    live_workers_++;  // it cannot leave WorkLoop before we release mu_
  }
}

void Background::Shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    threads.swap(threads_);
  }
  tick_cv_.notify_all();
  work_cv_.notify_all();
  // exit() may be called from a job or a tick, on one of these threads: that
  // one cannot join itself, and it ends with the process anyway.
  for (std::thread& thread : threads) {
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();
    } else {
      thread.join();
    }
  }
}

void Background::TickLoop() {
  NameThisThread("kv0-tick");
  std::unique_lock<std::mutex> lock(mu_);
  auto next = std::chrono::steady_clock::now() + kTick;
  while (!tick_cv_.wait_until(lock, next, [this] { return stopping_; })) {
    // Tick a copy, without the lock, so clients can Register and Submit.
    std::vector<std::weak_ptr<BackgroundClient>> clients = clients_;
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    for (const auto& weak : clients) {
      if (std::shared_ptr<BackgroundClient> client = weak.lock()) {
        RunGuarded([&] { client->OnTick(now); });
      }  // may destroy the client, here and without the lock
    }
    clients.clear();
    lock.lock();
    std::erase_if(clients_, [](const auto& weak) { return weak.expired(); });

    // Keep a steady cadence; after a stall, skip the missed ticks rather
    // than run them back to back.
    next += kTick;
    const auto after = std::chrono::steady_clock::now();
    if (next < after) next = after + kTick;
  }
}

void Background::WorkLoop() {
  NameThisThread("kv0-worker");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) break;  // stopping, and nothing left to run
    std::function<void()> job;
    job.swap(jobs_.front());  // unlike a move, leaves an empty function to pop
    jobs_.pop_front();
    lock.unlock();
    RunGuarded(job);
    job = nullptr;  // its captures may run destructors that Submit
    lock.lock();
  }
  live_workers_--;
}

void Background::ForgetParentAfterFork() {
  // Only the forking thread exists here, holding mu_. The parent's threads
  // cannot be joined, and its clients and jobs belong to the parent: ticking
  // or running them here would do their work twice.
  for (std::thread& thread : threads_) orphan_threads_.push_back(std::move(thread));
  threads_.clear();
  for (auto& job : jobs_) orphan_jobs_.emplace_back().swap(job);
  jobs_.clear();
  clients_.clear();
  started_ = false;
  live_workers_ = 0;
  // A condition variable remembers its waiters, and the parent's waiters do
  // not exist here: glibc would wait for them to wake, so a notify could
  // block forever. Start the child with fresh ones (reusing the storage
  // without destroying the old objects is allowed, and nobody waits on them).
  new (&tick_cv_) std::condition_variable;
  new (&work_cv_) std::condition_variable;
}

}  // namespace kv0
