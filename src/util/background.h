// The process-wide background threads that drive every open handle's timers.
//
// One tick thread calls OnTick on every registered client every tick(). A
// tick must be cheap: it decides what is due (a WAL fsync, a flush) and hands
// anything that can wait on I/O to Submit, which runs it on a small worker
// pool. So a slow job (a commit to a hung object store) never delays ticks,
// and delays other jobs only once every worker is stuck.
//
// Clients are held by weak_ptr, so registering never keeps a handle alive: a
// client whose last shared_ptr goes away is simply not ticked again, and is
// forgotten. The tick thread holds a shared_ptr to a client only while
// calling its OnTick; if the client's owner lets go meanwhile, the client is
// destroyed on the tick thread when OnTick returns.
//
// Exceptions thrown by OnTick or by a job are caught and ignored, so one
// faulty client cannot stop the threads; report failures by other means.
// OnTick and jobs may call Register and Submit: no lock is held while they run.
//
// The threads start on first Register or Submit and stop at process exit
// (from an atexit hook): the tick thread stops first, then the workers run
// every job still queued, including jobs those jobs submit, and are joined.
// A job that never returns therefore keeps the process from exiting. After
// that, Register does nothing and Submit runs the job on the calling thread,
// so late callers (destructors of other static objects) still get their work
// done. The object itself is never destroyed.
//
// In the child of a fork(), the parent's threads, clients and queued jobs are
// gone: nothing is ticked or run twice, and the first Register or Submit in
// the child starts fresh threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kv0 {

class BackgroundClient {
 public:
  virtual ~BackgroundClient() = default;

  // Called on the tick thread once per tick while the client is alive, never
  // concurrently with itself. now is the tick's time.
  virtual void OnTick(std::chrono::steady_clock::time_point now) = 0;
};

class Background {
 public:
  // The process-wide instance, created on first use.
  static Background& Get();

  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  // Ticks client from the next tick on, for as long as it is alive.
  // Registering a client twice, or one that has already expired, does nothing.
  void Register(std::weak_ptr<BackgroundClient> client);

  // Runs job on a worker thread, never on the tick thread. Jobs start in
  // submission order but may run concurrently with each other. Throws
  // kv0::Error(kInvalidArgument) if job is empty.
  void Submit(std::function<void()> job);

  // Submits job unless the job last submitted with the same `queued` flag
  // has not finished: for work whose one run serves every request made
  // before it starts, like a flush of a handle's buffer. The flag is set
  // until the job returns or throws; it is shared so that it outlives a
  // handle destroyed while its job runs.
  void SubmitOnce(const std::shared_ptr<std::atomic<bool>>& queued, std::function<void()> job);

  // How often clients are ticked.
  std::chrono::milliseconds tick() const { return kTick; }

  static constexpr std::chrono::milliseconds kTick{20};
  static constexpr int kWorkers = 4;

 private:
  Background();
  ~Background() = delete;  // see Get()

  void StartLocked();
  void Shutdown();
  void TickLoop();
  void WorkLoop();
  void ForgetParentAfterFork();

  std::mutex mu_;
  std::condition_variable tick_cv_;  // signalled on shutdown
  std::condition_variable work_cv_;  // signalled on a new job and on shutdown
  bool started_ = false;             // threads_ were created (in this process)
  bool stopping_ = false;            // process exit has begun
  int live_workers_ = 0;             // workers that have not yet left WorkLoop
  std::vector<std::thread> threads_;
  std::vector<std::weak_ptr<BackgroundClient>> clients_;
  std::deque<std::function<void()>> jobs_;

  // In a forked child: the parent's threads and jobs, kept (never run, joined
  // or destroyed) because touching them there would be wrong.
  std::vector<std::thread> orphan_threads_;
  std::deque<std::function<void()>> orphan_jobs_;
};

}  // namespace kv0
