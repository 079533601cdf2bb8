// Tests of the hybrid logical clock that issues sequence numbers.

#include "util/clock.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "kv0/error.h"

namespace kv0 {
namespace {

// Far enough from the wall clock that a slow machine cannot blur the checks.
constexpr uint64_t kOneSecond = 1'000'000'000;

TEST(HybridClockTest, NextExceedsWallClockAndStaysClose) {
  HybridClock clock;
  EXPECT_EQ(clock.Last(), 0u);
  for (int i = 0; i < 1000; i++) {
    uint64_t before = WallNanos();
    uint64_t value = clock.Next();
    uint64_t after = WallNanos();
    ASSERT_GT(value, before);
    // Numbers run ahead of the wall clock only by one per call in a burst.
    ASSERT_LT(value, after + kOneSecond);
    ASSERT_EQ(clock.Last(), value);
  }
}

TEST(HybridClockTest, WallNanosIsAfter2020) {
  // 2020-01-01T00:00:00Z; guards against a unit mistake (micro- for nanoseconds).
  EXPECT_GT(WallNanos(), uint64_t{1'577'836'800} * kOneSecond);
}

TEST(HybridClockTest, StrictlyIncreasingInOneThread) {
  HybridClock clock;
  uint64_t previous = clock.Next();
  for (int i = 0; i < 100'000; i++) {
    uint64_t value = clock.Next();
    ASSERT_GT(value, previous);
    previous = value;
  }
}

TEST(HybridClockTest, DistinctAndIncreasingAcrossThreads) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100'000;
  HybridClock clock;
  std::vector<std::vector<uint64_t>> issued(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&clock, &out = issued[t]] {
      out.reserve(kPerThread);
      for (int i = 0; i < kPerThread; i++) out.push_back(clock.Next());
    });
  }
  for (auto& thread : threads) thread.join();

  std::vector<uint64_t> all;
  for (const auto& sequence : issued) {
    ASSERT_EQ(sequence.size(), static_cast<size_t>(kPerThread));
    EXPECT_TRUE(std::adjacent_find(sequence.begin(), sequence.end(), std::greater_equal<>()) ==
                sequence.end())
        << "a thread saw a number that did not increase";
    all.insert(all.end(), sequence.begin(), sequence.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end())
      << "a number was issued twice";
  // Contention alone must not push the clock far ahead of wall time.
  EXPECT_LT(all.back(), WallNanos() + kOneSecond);
}

TEST(HybridClockTest, ObserveFarFutureValue) {
  HybridClock clock;
  const uint64_t future = WallNanos() + 3600 * kOneSecond;  // another writer's clock, an hour ahead
  clock.Observe(future);
  EXPECT_EQ(clock.Last(), future);
  uint64_t first = clock.Next();
  EXPECT_GT(first, future);
  EXPECT_GT(clock.Next(), first);
}

TEST(HybridClockTest, ObserveOlderValueChangesNothing) {
  HybridClock clock;
  uint64_t value = clock.Next();
  clock.Observe(value - 10);
  clock.Observe(0);
  EXPECT_EQ(clock.Last(), value);
  uint64_t before = WallNanos();
  uint64_t next = clock.Next();
  EXPECT_GT(next, value);
  EXPECT_GT(next, before);
  EXPECT_LT(next, WallNanos() + kOneSecond);
}

TEST(HybridClockTest, ObserveConcurrentWithNext) {
  HybridClock clock;
  const uint64_t future = WallNanos() + 3600 * kOneSecond;
  std::thread observer([&] {
    for (uint64_t i = 0; i < 10'000; i++) clock.Observe(future + i);
  });
  uint64_t previous = 0;
  for (int i = 0; i < 10'000; i++) {
    uint64_t value = clock.Next();
    ASSERT_GT(value, previous);
    previous = value;
  }
  observer.join();
  EXPECT_GT(clock.Next(), future + 9'999);
}

TEST(HybridClockTest, ExhaustedClockThrows) {
  HybridClock clock;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  clock.Observe(kMax - 1);
  EXPECT_EQ(clock.Next(), kMax);
  try {
    clock.Next();
    FAIL() << "expected kv0::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kCorruption);
  }
  EXPECT_EQ(clock.Last(), kMax);  // unchanged by the failed call
}

}  // namespace
}  // namespace kv0
