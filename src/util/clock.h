// Sequence numbers for writes: a hybrid logical clock.
//
// A number is nanoseconds since the Unix epoch, bumped past anything this
// clock has issued or observed. Two properties follow. Numbers from one clock
// never repeat and only grow, even when the wall clock steps backwards or many
// threads ask at once. And a number issued after Observe(n) is greater than
// n, so a local write always orders after every row loaded from storage, while
// writers on different machines still order roughly by wall-clock time.
//
// Thread-safe and lock-free.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kv0 {

// The system (wall) clock in nanoseconds since the Unix epoch; 0 for a clock
// set before 1970.
uint64_t WallNanos();

// The wall clock `age` ago, in nanoseconds since the Unix epoch (0 if that is
// before 1970): the cutoff below which a sequence number is older than age.
uint64_t WallNanosAgo(std::chrono::nanoseconds age);

// The steady clock, in nanoseconds, for intervals.
int64_t SteadyNanos(std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now());

class HybridClock {
 public:
  HybridClock() = default;
  HybridClock(const HybridClock&) = delete;
  HybridClock& operator=(const HybridClock&) = delete;

  // Returns a number greater than the wall clock read during the call and
  // greater than every number this clock has returned or observed.
  //
  // Throws kv0::Error(kCorruption) when no such number exists, which happens
  // only after observing a number at the very top of the uint64 range (the
  // wall clock itself gets there in the year 2554): such a number cannot be a
  // real timestamp, so the bytes it came from are bad.
  uint64_t Next();

  // Records a number seen elsewhere (a sequence number loaded from storage),
  // so that every later Next() exceeds it. Smaller numbers change nothing.
  void Observe(uint64_t seen);

  // The largest number returned or observed so far; 0 if none.
  uint64_t Last() const { return last_.load(std::memory_order_relaxed); }

 private:
  // Only the order of the values matters and the clock publishes no other
  // data, so relaxed atomics suffice: every read-modify-write of one atomic
  // sees the latest value in its modification order.
  std::atomic<uint64_t> last_{0};
  static_assert(std::atomic<uint64_t>::is_always_lock_free);
};

}  // namespace kv0
