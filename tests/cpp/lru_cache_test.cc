// Tests of the byte-bounded LRU cache and its deduplicated loads.

#include "util/lru_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kv0/error.h"

namespace kv0 {
namespace {

using Cache = ByteLruCache<std::string>;
using Value = Cache::Value;

constexpr auto kPatience = std::chrono::seconds(10);

Value Make(size_t size, char fill = 'x') { return std::make_shared<const std::string>(size, fill); }
Value Make(const std::string& text) { return std::make_shared<const std::string>(text); }

// A value's text, or "<null>", so a failed check reports instead of crashing.
std::string Text(const Value& value) { return value ? *value : "<null>"; }

// Capacity for exactly n values of the given size.
size_t RoomFor(size_t n, size_t size) { return n * (size + Cache::kEntryOverhead); }

TEST(ByteLruCacheTest, LookupMissAndHit) {
  Cache cache(RoomFor(4, 10));
  EXPECT_EQ(cache.Lookup("a"), nullptr);
  Value a = Make(10, 'a');
  cache.Insert("a", a);
  EXPECT_EQ(cache.Lookup("a"), a);  // the same object, not a copy
  EXPECT_EQ(cache.size_bytes(), Cache::Charge(*a));
}

TEST(ByteLruCacheTest, EvictsLeastRecentlyUsed) {
  Cache cache(RoomFor(3, 10));
  cache.Insert("a", Make(10));
  cache.Insert("b", Make(10));
  cache.Insert("c", Make(10));
  EXPECT_EQ(cache.size_bytes(), RoomFor(3, 10));

  ASSERT_NE(cache.Lookup("a"), nullptr);  // order now a, c, b
  cache.Insert("d", Make(10));            // evicts b
  EXPECT_EQ(cache.Lookup("b"), nullptr);
  EXPECT_NE(cache.Lookup("c"), nullptr);  // order now c, d, a
  cache.Insert("e", Make(10));            // evicts a
  EXPECT_EQ(cache.Lookup("a"), nullptr);
  EXPECT_NE(cache.Lookup("c"), nullptr);
  EXPECT_NE(cache.Lookup("d"), nullptr);
  EXPECT_NE(cache.Lookup("e"), nullptr);
  EXPECT_EQ(cache.size_bytes(), RoomFor(3, 10));
}

TEST(ByteLruCacheTest, BoundedByBytesNotEntries) {
  Cache cache(RoomFor(4, 100));
  cache.Insert("small1", Make(100));
  cache.Insert("small2", Make(100));
  cache.Insert("small3", Make(100));
  // Charged as much as three small entries, so two of them must go.
  cache.Insert("big", Make(300 + 2 * Cache::kEntryOverhead));
  EXPECT_EQ(cache.Lookup("small1"), nullptr);
  EXPECT_EQ(cache.Lookup("small2"), nullptr);
  EXPECT_NE(cache.Lookup("small3"), nullptr);
  EXPECT_NE(cache.Lookup("big"), nullptr);
  EXPECT_LE(cache.size_bytes(), cache.capacity_bytes());

  std::mt19937 random(7);
  for (int i = 0; i < 1000; i++) {
    cache.Insert(std::to_string(random() % 50), Make(random() % 300));
    ASSERT_LE(cache.size_bytes(), cache.capacity_bytes());
  }
}

TEST(ByteLruCacheTest, InsertReplacesAndRecharges) {
  Cache cache(RoomFor(4, 100));
  cache.Insert("k", Make(100));
  Value smaller = Make(10);
  cache.Insert("k", smaller);
  EXPECT_EQ(cache.Lookup("k"), smaller);
  EXPECT_EQ(cache.size_bytes(), Cache::Charge(*smaller));
}

TEST(ByteLruCacheTest, EraseAndClear) {
  Cache cache(RoomFor(4, 10));
  cache.Insert("a", Make(10));
  cache.Insert("b", Make(10));
  cache.Erase("a");
  cache.Erase("missing");
  EXPECT_EQ(cache.Lookup("a"), nullptr);
  EXPECT_NE(cache.Lookup("b"), nullptr);
  EXPECT_EQ(cache.size_bytes(), RoomFor(1, 10));
  cache.Clear();
  EXPECT_EQ(cache.Lookup("b"), nullptr);
  EXPECT_EQ(cache.size_bytes(), 0u);
}

TEST(ByteLruCacheTest, NullInsertDropsTheKey) {
  Cache cache(RoomFor(4, 10));
  cache.Insert("a", Make(10));
  cache.Insert("a", nullptr);
  EXPECT_EQ(cache.Lookup("a"), nullptr);
  EXPECT_EQ(cache.size_bytes(), 0u);
}

TEST(ByteLruCacheTest, CapacityZeroStoresNothing) {
  Cache cache(0);
  cache.Insert("a", Make(1));
  EXPECT_EQ(cache.Lookup("a"), nullptr);
  EXPECT_EQ(cache.size_bytes(), 0u);

  int loads = 0;
  auto loader = [&] {
    loads++;
    return Make("value");
  };
  EXPECT_EQ(Text(cache.GetOrLoad("a", loader)), "value");
  EXPECT_EQ(Text(cache.GetOrLoad("a", loader)), "value");
  EXPECT_EQ(loads, 2);
  EXPECT_EQ(cache.size_bytes(), 0u);
}

TEST(ByteLruCacheTest, OversizeValueReturnedButNotCached) {
  Cache cache(RoomFor(2, 100));
  cache.Insert("keep", Make(100));
  cache.Insert("big", Make(100));
  cache.Insert("big", Make(cache.capacity_bytes()));  // charge exceeds capacity by the overhead
  EXPECT_EQ(cache.Lookup("big"), nullptr) << "the replaced value must not linger";
  EXPECT_NE(cache.Lookup("keep"), nullptr) << "an oversize value must not evict anything";

  int loads = 0;
  auto loader = [&] {
    loads++;
    return Make(cache.capacity_bytes(), 'z');
  };
  Value value = cache.GetOrLoad("huge", loader);
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(value->size(), cache.capacity_bytes());
  EXPECT_EQ(cache.Lookup("huge"), nullptr);
  cache.GetOrLoad("huge", loader);
  EXPECT_EQ(loads, 2);
  EXPECT_NE(cache.Lookup("keep"), nullptr);
}

TEST(ByteLruCacheTest, GetOrLoadCachesAndHits) {
  Cache cache(RoomFor(4, 10));
  int loads = 0;
  auto loader = [&] {
    loads++;
    return Make("loaded");
  };
  Value first = cache.GetOrLoad("k", loader);
  Value second = cache.GetOrLoad("k", loader);
  EXPECT_EQ(first, second);
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(cache.Lookup("k"), first);
}

TEST(ByteLruCacheTest, GetOrLoadNullIsNotCached) {
  Cache cache(RoomFor(4, 10));
  int loads = 0;
  auto loader = [&]() -> Value {
    loads++;
    return nullptr;
  };
  EXPECT_EQ(cache.GetOrLoad("k", loader), nullptr);
  EXPECT_EQ(cache.GetOrLoad("k", loader), nullptr);
  EXPECT_EQ(loads, 2);
}

// Runs kThreads concurrent GetOrLoad calls of one key whose loader blocks
// until every thread has started (and a little longer, so that they are
// likely to be waiting, not merely to hit the cache afterwards).
constexpr int kThreads = 16;

TEST(ByteLruCacheTest, ConcurrentMissesShareOneLoad) {
  Cache cache(RoomFor(4, 100));
  std::atomic<int> started{0};
  std::atomic<int> loads{0};
  auto loader = [&] {
    loads++;
    auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (started.load() < kThreads && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return Make(100, 'v');
  };

  std::vector<Value> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; i++) {
    threads.emplace_back([&, i] {
      started++;
      results[i] = cache.GetOrLoad("key", loader);
    });
  }
  for (auto& thread : threads) thread.join();

  EXPECT_EQ(loads.load(), 1);
  ASSERT_NE(results[0], nullptr);
  EXPECT_EQ(*results[0], std::string(100, 'v'));
  for (const Value& result : results) EXPECT_EQ(result, results[0]);  // one object for all
}

TEST(ByteLruCacheTest, LoaderExceptionReachesEveryWaiterAndIsNotCached) {
  Cache cache(RoomFor(4, 100));
  std::atomic<int> started{0};
  std::atomic<int> loads{0};
  auto failing = [&]() -> Value {
    int load = ++loads;
    auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (started.load() < kThreads && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    throw Error(Code::kIOError, "load " + std::to_string(load) + " failed");
  };

  // What each thread caught. Holding every exception until the threads are
  // joined makes the main thread free them: ThreadSanitizer cannot see the
  // (correct) synchronisation of exception_ptr's reference count inside the
  // uninstrumented libstdc++, and reports a false race when one thread frees
  // an exception object that another has read.
  std::vector<std::exception_ptr> caught(kThreads);
  std::vector<std::string> messages(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; i++) {
    threads.emplace_back([&, i] {
      started++;
      try {
        cache.GetOrLoad("key", failing);
        messages[i] = "no exception";
      } catch (const Error& e) {
        caught[i] = std::current_exception();
        messages[i] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();

  // Normally one load. A thread descheduled past the whole load may start a
  // second one after the failure (the documented retry), so count the loads
  // rather than insist on one: each load's exception object reached the
  // thread that ran it and every thread that waited on it, and no other.
  std::vector<std::exception_ptr> distinct;
  for (const auto& error : caught) {
    if (std::find(distinct.begin(), distinct.end(), error) == distinct.end()) {
      distinct.push_back(error);
    }
  }
  EXPECT_GE(loads.load(), 1);
  EXPECT_EQ(distinct.size(), static_cast<size_t>(loads.load()));
  EXPECT_EQ(std::set<std::string>(messages.begin(), messages.end()).size(), distinct.size());
  for (const std::string& message : messages) {
    EXPECT_TRUE(message.starts_with("IOError: load ")) << message;
  }
  EXPECT_EQ(cache.Lookup("key"), nullptr);
  EXPECT_EQ(cache.size_bytes(), 0u);

  // The failure is not remembered: the next call loads again.
  Value value = cache.GetOrLoad("key", [] { return Make("recovered"); });
  EXPECT_EQ(Text(value), "recovered");
  EXPECT_EQ(cache.Lookup("key"), value);
}

TEST(ByteLruCacheTest, EraseDuringLoadSupersedesIt) {
  Cache cache(RoomFor(4, 100));
  std::promise<void> loading;
  std::promise<void> release;
  auto slow = [&, released = release.get_future().share()] {
    loading.set_value();
    released.wait();
    return Make("stale");
  };
  auto first = std::async(std::launch::async, [&] { return cache.GetOrLoad("k", slow); });
  ASSERT_EQ(loading.get_future().wait_for(kPatience), std::future_status::ready);

  cache.Erase("k");
  // A call after Erase does not join the superseded load; it loads afresh.
  auto fresh = std::async(std::launch::async,
                          [&] { return cache.GetOrLoad("k", [] { return Make("fresh"); }); });
  const bool fresh_done = fresh.wait_for(kPatience) == std::future_status::ready;
  release.set_value();
  ASSERT_TRUE(fresh_done) << "a call after Erase waited for the superseded load";
  EXPECT_EQ(Text(fresh.get()), "fresh");
  ASSERT_EQ(first.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(Text(first.get()), "stale");        // its caller still gets its result
  EXPECT_EQ(Text(cache.Lookup("k")), "fresh");  // but it did not overwrite the newer value
}

TEST(ByteLruCacheTest, InsertDuringLoadWins) {
  Cache cache(RoomFor(4, 100));
  std::promise<void> loading;
  std::promise<void> release;
  auto slow = [&, released = release.get_future().share()] {
    loading.set_value();
    released.wait();
    return Make("loaded");
  };
  auto first = std::async(std::launch::async, [&] { return cache.GetOrLoad("k", slow); });
  ASSERT_EQ(loading.get_future().wait_for(kPatience), std::future_status::ready);
  cache.Insert("k", Make("inserted"));
  release.set_value();
  ASSERT_EQ(first.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(Text(first.get()), "loaded");
  EXPECT_EQ(Text(cache.Lookup("k")), "inserted");
}

TEST(ByteLruCacheTest, IntegerKeysAndCustomHash) {
  struct Address {
    uint64_t version;
    uint64_t row;
    bool operator==(const Address&) const = default;
  };
  struct AddressHash {
    size_t operator()(const Address& a) const {
      return std::hash<uint64_t>()(a.version * 31 + a.row);
    }
  };
  ByteLruCache<Address, AddressHash> cache(1 << 20);
  cache.Insert({1, 2}, Make("one-two"));
  EXPECT_EQ(Text(cache.Lookup({1, 2})), "one-two");
  EXPECT_EQ(cache.Lookup({2, 1}), nullptr);
}

// Mixed concurrent use; meant to run under ThreadSanitizer. Every value
// encodes its key, so a value under the wrong key would show.
TEST(ByteLruCacheTest, ConcurrentMixedUse) {
  constexpr int kWorkers = 4;
  constexpr int kOps = 20'000;
  constexpr int kKeys = 64;
  Cache cache(RoomFor(16, 64));
  auto value_for = [](int key) {
    return Make("value-" + std::to_string(key) + std::string(key, '.'));
  };

  std::atomic<bool> mismatch{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; w++) {
    threads.emplace_back([&, w] {
      std::mt19937 random(w);
      for (int i = 0; i < kOps; i++) {
        int key = static_cast<int>(random() % kKeys);
        std::string name = std::to_string(key);
        Value got;
        int op = static_cast<int>(random() % 100);
        if (op < 1) {
          cache.Clear();
        } else if (op < 10) {
          cache.Erase(name);
        } else if (op < 30) {
          cache.Insert(name, value_for(key));
        } else if (op < 60) {
          got = cache.Lookup(name);
        } else {
          try {
            got = cache.GetOrLoad(name, [&]() -> Value {
              if (random() % 10 == 0) throw Error(Code::kIOError, "flaky");
              return value_for(key);
            });
          } catch (const Error&) {
          }
        }
        if (got && *got != *value_for(key)) mismatch = true;
        if (cache.size_bytes() > cache.capacity_bytes()) mismatch = true;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_FALSE(mismatch.load());
  EXPECT_LE(cache.size_bytes(), cache.capacity_bytes());
}

}  // namespace
}  // namespace kv0
