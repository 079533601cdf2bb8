#include "util/clock.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>

#include "kv0/error.h"

namespace kv0 {

uint64_t WallNanosAgo(std::chrono::nanoseconds age) {
  uint64_t now = WallNanos();
  uint64_t span = age.count() > 0 ? static_cast<uint64_t>(age.count()) : 0;
  return now > span ? now - span : 0;
}

int64_t SteadyNanos(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

uint64_t WallNanos() {
  auto since_epoch = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  return since_epoch.count() < 0 ? 0 : static_cast<uint64_t>(since_epoch.count());
}

uint64_t HybridClock::Next() {
  const uint64_t wall = WallNanos();
  uint64_t last = last_.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    uint64_t floor = std::max(wall, last);
    if (floor == std::numeric_limits<uint64_t>::max()) {
      throw Error(Code::kCorruption, "hybrid clock exhausted: observed sequence number " +
                                         std::to_string(last) + " leaves no larger number");
    }
    next = floor + 1;
    // On failure `last` is reloaded; the wall reading stays valid because
    // the result only has to exceed the clock as read during the call.
  } while (!last_.compare_exchange_weak(last, next, std::memory_order_relaxed));
  return next;
}

void HybridClock::Observe(uint64_t seen) {
  uint64_t last = last_.load(std::memory_order_relaxed);
  while (seen > last && !last_.compare_exchange_weak(last, seen, std::memory_order_relaxed)) {
  }
}

}  // namespace kv0
