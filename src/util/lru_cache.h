// A thread-safe LRU cache of immutable strings, bounded by bytes.
//
// Holds large values read back from Lance. Values are shared_ptr<const
// std::string>, so a value handed out stays valid after it is evicted, and
// eviction never waits for readers.
//
// Each entry is charged its value's size plus kEntryOverhead. When an insert
// takes the total above the capacity, the least recently used entries are
// evicted until it fits again. A value whose charge alone exceeds the capacity
// is never stored (and a capacity of 0 stores nothing), but is still returned
// to whoever asked for it.
//
// GetOrLoad deduplicates misses: while one caller runs the loader for a key,
// other callers of GetOrLoad for that key wait for its result instead of
// loading again, so concurrent reads of one value cost one read of storage.
// This holds whether or not the value then fits in the cache.
//
// All methods may be called concurrently. Loaders run without the cache's
// lock held, so a loader may use the cache, except that it must not call
// GetOrLoad for its own key: it would wait for itself.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace kv0 {

// Key must be copyable and comparable with ==; Hash hashes it.
template <typename Key, typename Hash = std::hash<Key>>
class ByteLruCache {
 public:
  using Value = std::shared_ptr<const std::string>;
  using Loader = std::function<Value()>;

  // Added to each entry's charge for the bookkeeping the value's size does not
  // show: list and hash-table nodes, the key, the shared_ptr control block and
  // the string header. It is a rough figure for small keys; its purpose is
  // that many tiny values cannot grow the cache without bound.
  static constexpr size_t kEntryOverhead = 128;

  // What an entry holding value costs against the capacity.
  static size_t Charge(const std::string& value) { return value.size() + kEntryOverhead; }

  explicit ByteLruCache(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  ByteLruCache(const ByteLruCache&) = delete;
  ByteLruCache& operator=(const ByteLruCache&) = delete;

  // Returns the cached value and marks it most recently used, or null on a
  // miss. Never waits for a load in progress.
  Value Lookup(const Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return FindLocked(key);
  }

  // Stores value under key, replacing any older entry. A null value, or one
  // that does not fit, leaves the key uncached: the old entry is dropped
  // either way, so Lookup never returns what was replaced. A load of key in
  // progress still hands its result to its waiters, but does not cache it.
  void Insert(const Key& key, Value value) {
    std::lock_guard<std::mutex> lock(mu_);
    flights_.erase(key);
    InsertLocked(key, std::move(value));
  }

  // Drops key's entry, if any. A load of key in progress still hands its
  // result to its waiters but does not cache it, and later GetOrLoad calls
  // start a new load: what was loaded before Erase may be stale.
  void Erase(const Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    flights_.erase(key);
    RemoveLocked(key);
  }

  // Drops every entry. Loads in progress are treated as by Erase.
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    flights_.clear();
    index_.clear();
    entries_.clear();
    usage_ = 0;
  }

  // Returns the cached value for key, or else loads it with loader, caches it
  // (if it fits) and returns it. If another GetOrLoad is already loading key,
  // waits for that load and returns its result (its loader runs; this one
  // does not).
  //
  // If the loader throws, the exception is rethrown to the caller that ran it
  // and to every caller waiting on that load, and nothing is cached; the next
  // call loads again. A null result is likewise returned to all of them and
  // not cached.
  //
  // The callers share one exception object, as std::exception_ptr allows.
  // ThreadSanitizer, with libstdc++ uninstrumented, cannot see the atomic
  // reference count that orders the object's destruction after their reads,
  // and may report a false race on it; a test can keep the exception_ptr
  // alive until its threads are joined, or suppress the report.
  Value GetOrLoad(const Key& key, const Loader& loader) {
    std::unique_lock<std::mutex> lock(mu_);
    if (Value hit = FindLocked(key)) return hit;
    if (auto it = flights_.find(key); it != flights_.end()) {
      std::shared_future<Value> result = it->second->result;
      lock.unlock();
      return result.get();  // rethrows the loader's exception
    }
    auto flight = std::make_shared<Flight>();
    flights_.emplace(key, flight);
    lock.unlock();

    Value value;
    try {
      value = loader();
    } catch (...) {
      lock.lock();
      LandLocked(key, flight);
      lock.unlock();
      flight->promise.set_exception(std::current_exception());
      throw;
    }
    lock.lock();
    // Cache only if no Insert, Erase or Clear superseded this load meanwhile.
    if (LandLocked(key, flight) && value) InsertLocked(key, value);
    lock.unlock();
    flight->promise.set_value(value);
    return value;
  }

  // Bytes charged by the entries now cached; at most capacity_bytes().
  size_t size_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return usage_;
  }

  size_t capacity_bytes() const { return capacity_; }

 private:
  struct Entry {
    Key key;
    Value value;
    size_t charge;
  };
  using EntryList = std::list<Entry>;  // most recently used first

  // One load in progress. Waiters hold copies of result; the loading caller
  // fulfils promise after taking the flight out of flights_.
  struct Flight {
    std::promise<Value> promise;
    std::shared_future<Value> result = promise.get_future().share();
  };

  Value FindLocked(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    entries_.splice(entries_.begin(), entries_, it->second);
    return it->second->value;
  }

  void InsertLocked(const Key& key, Value value) {
    RemoveLocked(key);
    if (!value) return;
    const size_t charge = Charge(*value);
    if (charge > capacity_) return;  // would evict everything and still not fit
    entries_.push_front(Entry{key, std::move(value), charge});
    index_[key] = entries_.begin();
    usage_ += charge;
    while (usage_ > capacity_) {
      const Entry& oldest = entries_.back();
      usage_ -= oldest.charge;
      index_.erase(oldest.key);
      entries_.pop_back();
    }
  }

  void RemoveLocked(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    usage_ -= it->second->charge;
    entries_.erase(it->second);
    index_.erase(it);
  }

  // Takes flight out of flights_. Returns false if it was no longer there,
  // meaning an Insert, Erase or Clear of its key came after the load began.
  bool LandLocked(const Key& key, const std::shared_ptr<Flight>& flight) {
    auto it = flights_.find(key);
    if (it == flights_.end() || it->second != flight) return false;
    flights_.erase(it);
    return true;
  }

  const size_t capacity_;
  mutable std::mutex mu_;
  EntryList entries_;
  std::unordered_map<Key, typename EntryList::iterator, Hash> index_;
  std::unordered_map<Key, std::shared_ptr<Flight>, Hash> flights_;
  size_t usage_ = 0;
};

}  // namespace kv0
