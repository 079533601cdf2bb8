// Reads values that stay in Lance, through a byte-bounded LRU cache.
//
// A batch of references (one get, one multi_get, one iterator chunk) costs
// at most one take from Lance; concurrent misses on one address share one
// read. A row address names the same row in every version whose fragment
// list still holds its fragment (Lance never reuses fragment ids, and
// deletions do not move rows), so a reference is read through the current
// dataset when its fragment is there, else through the version it came from.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kv/entry.h"
#include "lance/dataset.h"
#include "util/lru_cache.h"

namespace kv0::kv {

class LazyValues {
 public:
  LazyValues(const lance::Dataset& current, size_t cache_bytes)
      : current_(current), cache_(cache_bytes) {}

  // The values of refs, in order. Throws IOError if Lance cannot read them
  // (the caller then refreshes and tries again with the new references).
  std::vector<std::shared_ptr<const std::string>> Read(std::span<const LazyRef> refs);

  // Reads refs straight from Lance, bypassing the cache (for rewrites, which
  // would only evict what readers use).
  std::vector<std::string> ReadUncached(std::span<const LazyRef> refs);

  void Clear() { cache_.Clear(); }

 private:
  // Takes refs from Lance: from the current dataset, else (when a
  // fragment is gone from it) from the versions the refs came from.
  std::vector<std::string> Take(std::span<const LazyRef> refs);
  // One take of refs from dataset, or one take per ref if together they
  // are more than one Arrow batch holds.
  std::vector<std::string> TakeFrom(const lance::Dataset& dataset, std::span<const LazyRef> refs);
  std::vector<std::string> TakeAll(const lance::Dataset& dataset, std::span<const LazyRef> refs);
  const lance::Dataset& AtVersion(uint64_t version);

  const lance::Dataset& current_;
  ByteLruCache<uint64_t> cache_;  // row address -> value

  std::mutex versions_mu_;
  std::map<uint64_t, std::unique_ptr<lance::Dataset>> versions_;  // older versions opened
};

}  // namespace kv0::kv
