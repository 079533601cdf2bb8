// Tests of the process-wide tick thread and worker pool.
//
// All tests share the one Background instance, as handles do. Nothing here
// asserts on timing: waits are "eventually, within 10 s", and checks that
// something did not happen are ones a correct implementation cannot fail.

#include "util/background.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kv0/error.h"

namespace kv0 {
namespace {

using Clock = std::chrono::steady_clock;

// Polls until done() holds or 10 s pass; returns whether it held.
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Counts its ticks into state that outlives it, so a test can watch a client
// after it is gone.
class CountingClient : public BackgroundClient {
 public:
  struct State {
    std::atomic<int> ticks{0};
    std::atomic<bool> destroyed{false};
    std::atomic<bool> ticked_twice_at_once{false};
  };

  explicit CountingClient(std::shared_ptr<State> state, bool throws = false)
      : state_(std::move(state)), throws_(throws) {}
  ~CountingClient() override { state_->destroyed = true; }

  void OnTick(Clock::time_point now) override {
    // One tick passes one time point to every client; seeing it twice means
    // this client was ticked twice in one tick.
    if (now == last_) state_->ticked_twice_at_once = true;
    last_ = now;
    state_->ticks++;
    if (throws_) throw Error(Code::kIOError, "tick failed");
  }

 private:
  std::shared_ptr<State> state_;
  bool throws_;
  Clock::time_point last_{};
};

// A job that blocks until the test opens the gate. The gate opens when the
// test ends, however it ends, so no worker stays stuck after it.
struct Gate {
  std::latch open{1};
  std::atomic<int> entered{0};
  std::atomic<int> left{0};

  std::function<void()> BlockingJob(const std::shared_ptr<Gate>& self) {
    return [self] {
      self->entered++;
      self->open.wait();
      self->left++;
    };
  }
};

class GateGuard {
 public:
  explicit GateGuard(std::shared_ptr<Gate> gate) : gate_(std::move(gate)) {}
  ~GateGuard() {
    gate_->open.count_down();
    Eventually([&] { return gate_->left.load() == gate_->entered.load(); });
  }

 private:
  std::shared_ptr<Gate> gate_;
};

TEST(BackgroundTest, TickIsTwentyMilliseconds) {
  EXPECT_EQ(Background::Get().tick(), std::chrono::milliseconds(20));
  EXPECT_EQ(&Background::Get(), &Background::Get());
}

TEST(BackgroundTest, RegisteredClientIsTickedRepeatedly) {
  auto state = std::make_shared<CountingClient::State>();
  auto client = std::make_shared<CountingClient>(state);
  Background::Get().Register(client);
  EXPECT_TRUE(Eventually([&] { return state->ticks.load() >= 5; }));
  EXPECT_FALSE(state->ticked_twice_at_once.load());
}

TEST(BackgroundTest, RegisteringTwiceTicksOnce) {
  auto state = std::make_shared<CountingClient::State>();
  auto client = std::make_shared<CountingClient>(state);
  Background::Get().Register(client);
  Background::Get().Register(client);
  Background::Get().Register(std::weak_ptr<BackgroundClient>(client));
  EXPECT_TRUE(Eventually([&] { return state->ticks.load() >= 10; }));
  EXPECT_FALSE(state->ticked_twice_at_once.load());
}

TEST(BackgroundTest, ExpiredClientIsIgnored) {
  std::weak_ptr<BackgroundClient> expired;
  {
    auto state = std::make_shared<CountingClient::State>();
    expired = std::make_shared<CountingClient>(state);
  }
  Background::Get().Register(expired);  // must not crash or throw
  Background::Get().Register(std::weak_ptr<BackgroundClient>());
}

TEST(BackgroundTest, DroppedClientIsNotKeptAlive) {
  auto state = std::make_shared<CountingClient::State>();
  auto client = std::make_shared<CountingClient>(state);
  std::weak_ptr<CountingClient> weak = client;
  Background::Get().Register(client);
  ASSERT_TRUE(Eventually([&] { return state->ticks.load() >= 2; }));

  client.reset();
  // The tick thread may be inside OnTick right now, holding it for that call.
  EXPECT_TRUE(Eventually([&] { return weak.expired(); }));
  EXPECT_TRUE(Eventually([&] { return state->destroyed.load(); }));

  // Gone for good: it is not ticked again (that would also be a
  // use-after-free, which AddressSanitizer reports).
  const int ticks = state->ticks.load();
  auto other = std::make_shared<CountingClient::State>();
  auto witness = std::make_shared<CountingClient>(other);
  Background::Get().Register(witness);
  ASSERT_TRUE(Eventually([&] { return other->ticks.load() >= 5; }));
  EXPECT_EQ(state->ticks.load(), ticks);
}

TEST(BackgroundTest, BlockedJobsDoNotStopTicksOrOtherJobs) {
  auto gate = std::make_shared<Gate>();
  GateGuard guard(gate);
  // Every worker but one hangs, like commits to a hung object store.
  for (int i = 0; i < Background::kWorkers - 1; i++) {
    Background::Get().Submit(gate->BlockingJob(gate));
  }
  ASSERT_TRUE(Eventually([&] { return gate->entered.load() == Background::kWorkers - 1; }));

  auto state = std::make_shared<CountingClient::State>();
  auto client = std::make_shared<CountingClient>(state);
  Background::Get().Register(client);
  EXPECT_TRUE(Eventually([&] { return state->ticks.load() >= 5; }));

  auto done = std::make_shared<std::atomic<int>>(0);
  for (int i = 0; i < 50; i++) Background::Get().Submit([done] { (*done)++; });
  EXPECT_TRUE(Eventually([&] { return done->load() == 50; }));
  EXPECT_EQ(gate->left.load(), 0);
}

TEST(BackgroundTest, ExceptionsStopNothing) {
  auto thrower_state = std::make_shared<CountingClient::State>();
  auto thrower = std::make_shared<CountingClient>(thrower_state, /*throws=*/true);
  auto quiet_state = std::make_shared<CountingClient::State>();
  auto quiet = std::make_shared<CountingClient>(quiet_state);
  Background::Get().Register(thrower);
  Background::Get().Register(quiet);
  EXPECT_TRUE(Eventually([&] { return thrower_state->ticks.load() >= 5; }));
  EXPECT_TRUE(Eventually([&] { return quiet_state->ticks.load() >= 5; }));

  // More throwing jobs than workers: had any worker died, the jobs after
  // them would not all run.
  for (int i = 0; i < 2 * Background::kWorkers; i++) {
    Background::Get().Submit([] { throw Error(Code::kIOError, "commit failed"); });
    Background::Get().Submit([] { throw 42; });
  }
  auto done = std::make_shared<std::atomic<int>>(0);
  for (int i = 0; i < 2 * Background::kWorkers; i++) {
    Background::Get().Submit([done] { (*done)++; });
  }
  EXPECT_TRUE(Eventually([&] { return done->load() == 2 * Background::kWorkers; }));
}

TEST(BackgroundTest, SubmitOnceSkipsWhileItsJobIsQueuedOrRunning) {
  auto queued = std::make_shared<std::atomic<bool>>(false);
  auto gate = std::make_shared<Gate>();
  auto runs = std::make_shared<std::atomic<int>>(0);
  {
    GateGuard guard(gate);
    Background::Get().SubmitOnce(queued, gate->BlockingJob(gate));
    ASSERT_TRUE(Eventually([&] { return gate->entered.load() == 1; }));
    for (int i = 0; i < 5; i++) Background::Get().SubmitOnce(queued, [runs] { (*runs)++; });
    EXPECT_TRUE(queued->load());
  }
  EXPECT_TRUE(Eventually([&] { return !queued->load(); }));
  EXPECT_EQ(runs->load(), 0);  // skipped: the blocking job held the flag

  // A job that throws clears the flag too.
  Background::Get().SubmitOnce(queued, [] { throw Error(Code::kIOError, "flush failed"); });
  EXPECT_TRUE(Eventually([&] { return !queued->load(); }));
  Background::Get().SubmitOnce(queued, [runs] { (*runs)++; });
  EXPECT_TRUE(Eventually([&] { return runs->load() == 1; }));
}

TEST(BackgroundTest, EmptyJobIsRejected) {
  try {
    Background::Get().Submit(nullptr);
    FAIL() << "expected kv0::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
  }
}

// From inside OnTick, submits a job that submits another job, and registers a
// second client: the shape of "a tick finds a flush due".
class ReentrantClient : public BackgroundClient {
 public:
  struct State {
    std::mutex mu;
    std::thread::id tick_thread;
    std::thread::id job_thread;
    std::atomic<bool> nested_job_ran{false};
    std::shared_ptr<CountingClient::State> child = std::make_shared<CountingClient::State>();
    std::shared_ptr<CountingClient> child_client = std::make_shared<CountingClient>(child);
  };

  explicit ReentrantClient(std::shared_ptr<State> state) : state_(std::move(state)) {}

  void OnTick(Clock::time_point) override {
    if (fired_) return;
    fired_ = true;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->tick_thread = std::this_thread::get_id();
    }
    Background::Get().Register(state_->child_client);
    Background::Get().Submit([state = state_] {
      {
        std::lock_guard<std::mutex> lock(state->mu);
        state->job_thread = std::this_thread::get_id();
      }
      Background::Get().Submit([state] { state->nested_job_ran = true; });
    });
  }

 private:
  std::shared_ptr<State> state_;
  bool fired_ = false;
};

TEST(BackgroundTest, OnTickAndJobsMayRegisterAndSubmit) {
  auto state = std::make_shared<ReentrantClient::State>();
  auto client = std::make_shared<ReentrantClient>(state);
  Background::Get().Register(client);
  EXPECT_TRUE(Eventually([&] { return state->nested_job_ran.load(); }));
  EXPECT_TRUE(Eventually([&] { return state->child->ticks.load() >= 3; }));

  std::lock_guard<std::mutex> lock(state->mu);
  EXPECT_NE(state->tick_thread, std::thread::id());
  EXPECT_NE(state->job_thread, std::thread::id());
  EXPECT_NE(state->job_thread, state->tick_thread) << "jobs must never run on the tick thread";
}

// The exit tests run in a fresh process each (the "threadsafe" style re-runs
// the test binary), because exit stops the process-wide threads.

TEST(BackgroundExitTest, QueuedJobsRunAtExit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        static std::latch* const gate = new std::latch(1);  // used during exit
        // Every worker is busy until exit begins, and a while after, so the
        // last job is still queued when the shutdown hook stops the pool.
        for (int i = 0; i < Background::kWorkers; i++) {
          Background::Get().Submit([] {
            gate->wait();
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          });
        }
        Background::Get().Submit([] { std::fputs("queued job ran\n", stderr); });
        // Registered after the shutdown hook, so it runs just before it.
        std::atexit([] { gate->count_down(); });
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "queued job ran");
}

TEST(BackgroundExitTest, ExitFromAJob) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Background::Get().Submit([] { std::exit(7); });
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      ::testing::ExitedWithCode(7), "");
}

class ExitingClient : public BackgroundClient {
 public:
  void OnTick(Clock::time_point) override { std::exit(8); }
};

TEST(BackgroundExitTest, ExitFromOnTick) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto client = std::make_shared<ExitingClient>();
        Background::Get().Register(client);
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      ::testing::ExitedWithCode(8), "");
}

TEST(BackgroundExitTest, SubmitAfterShutdownRunsInline) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // Registered before the shutdown hook, so it runs after it, like the
        // destructor of a static object created before Background was used.
        std::atexit([] {
          const auto caller = std::this_thread::get_id();
          bool inline_run = false;
          Background::Get().Submit([&] { inline_run = std::this_thread::get_id() == caller; });
          std::fputs(inline_run ? "ran inline\n" : "did not run inline\n", stderr);
          // Registering after shutdown is harmless and ticks nothing.
          Background::Get().Register(std::make_shared<ExitingClient>());
        });
        Background::Get().Submit([] {});  // starts the threads and the hook
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "ran inline");
}

#if !defined(__SANITIZE_THREAD__)
// ThreadSanitizer does not support starting threads after a fork of a
// multi-threaded process, which is exactly what this checks.
TEST(BackgroundTest, ForkedChildStartsAfresh) {
  auto state = std::make_shared<CountingClient::State>();
  auto client = std::make_shared<CountingClient>(state);
  Background::Get().Register(client);
  ASSERT_TRUE(Eventually([&] { return state->ticks.load() >= 1; }));

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: no gtest assertions, only an exit code.
    const int ticks_at_fork = state->ticks.load();
    auto ran = std::make_shared<std::atomic<bool>>(false);
    Background::Get().Submit([ran] { *ran = true; });
    bool ok = Eventually([&] { return ran->load(); });
    auto fresh = std::make_shared<CountingClient::State>();
    auto fresh_client = std::make_shared<CountingClient>(fresh);
    Background::Get().Register(fresh_client);
    ok = ok && Eventually([&] { return fresh->ticks.load() >= 3; });
    // The parent's client lives on in the child's memory, but ticking it
    // here would repeat the parent's work.
    ok = ok && state->ticks.load() == ticks_at_fork;
    std::exit(ok ? 0 : 1);  // static destruction must not join the parent's threads
  }

  int status = 0;
  pid_t waited = 0;
  Eventually([&] {
    waited = waitpid(pid, &status, WNOHANG);
    return waited != 0;
  });
  if (waited == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the forked child hung";
  }
  ASSERT_EQ(waited, pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
#endif

}  // namespace
}  // namespace kv0
