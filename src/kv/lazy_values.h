// Reads values that stay in Lance, through a byte-bounded LRU cache.
//
// A batch of references (one get, one multi_get, one iterator chunk) costs
// at most one take per version it reads from; concurrent misses on one
// address share one read. A row address names the same row in every version
// whose fragment list still holds its fragment (Lance never reuses fragment
// ids, and deletions do not move rows), so a reference is read through the
// newest version that lists its fragment, and through the version it came
// from once newer ones have compacted it away. Every take goes to a
// PinnedVersion that lists the fragments of all the addresses it is given
// (pinned_versions.h says why).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/entry.h"
#include "kv/pinned_versions.h"
#include "lance/dataset.h"
#include "util/lru_cache.h"

namespace kv0::kv {

class LazyValues {
 public:
  LazyValues(PinnedVersions& versions, size_t cache_bytes)
      : versions_(versions), cache_(cache_bytes) {}

  // The values of refs, in order. Throws if Lance cannot read them (a
  // version cleaned up, a file gone: the caller then refreshes and tries
  // again with the new references).
  std::vector<std::shared_ptr<const std::string>> Read(std::span<const LazyRef> refs);

  // Reads refs straight from Lance, bypassing the cache (for rewrites, which
  // would only evict what readers use).
  std::vector<std::string> ReadUncached(std::span<const LazyRef> refs);

  void Clear() { cache_.Clear(); }

 private:
  // Takes refs from Lance, grouped by the pinned version that serves them.
  std::vector<std::string> Take(std::span<const LazyRef> refs);
  // One take of refs from one version, or one take per ref if together they
  // are more than one Arrow batch holds.
  std::vector<std::string> TakeFrom(const PinnedVersion& at, std::span<const LazyRef> refs);
  std::vector<std::string> TakeAll(const PinnedVersion& at, std::span<const LazyRef> refs);

  PinnedVersions& versions_;
  ByteLruCache<uint64_t> cache_;  // row address -> value
};

}  // namespace kv0::kv
