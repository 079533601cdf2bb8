// One key of the in-memory view, in a single heap allocation.
//
// Layout: seq (8 bytes) | key length (4) | value length and flags (4) |
// key bytes | value bytes. A lazy entry's value bytes are the 16-byte
// reference (dataset version, row address) of a value that stays in Lance;
// its value length is still the real value's. The flags live in the top two
// bits of the value length, which caps a value at 1 GiB.
#pragma once

#include <absl/hash/hash.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

namespace kv0::kv {

// Where a committed value lives in Lance: the version whose fragment holds
// the row, and the row's address (fragment id << 32 | row offset).
struct LazyRef {
  uint64_t version = 0;
  uint64_t address = 0;
};

class Entry {
 public:
  static constexpr uint32_t kMaxValueSize = (1u << 30) - 1;

  // Allocates an entry; Free releases it. Allocation failure throws.
  static Entry* NewValue(uint64_t seq, std::string_view key, std::string_view value);
  static Entry* NewTombstone(uint64_t seq, std::string_view key);
  static Entry* NewLazy(uint64_t seq, std::string_view key, uint32_t value_size, LazyRef ref);
  static void Free(Entry* entry) noexcept;

  uint64_t seq() const { return Load<uint64_t>(0); }
  std::string_view key() const {
    return {reinterpret_cast<const char*>(this) + kHeader, Load<uint32_t>(8)};
  }
  bool is_tombstone() const { return flags() & kTombstone; }
  bool is_lazy() const { return flags() & kLazy; }
  // The value's length, also for a lazy entry.
  uint32_t value_size() const { return Load<uint32_t>(12) & kSizeMask; }
  // The value bytes of an inline (not lazy, not tombstone) entry.
  std::string_view value() const {
    return {reinterpret_cast<const char*>(this) + kHeader + key().size(), value_size()};
  }
  LazyRef lazy_ref() const;
  // Bytes this entry allocated.
  size_t allocated() const;

 private:
  static constexpr size_t kHeader = 16;
  static constexpr uint32_t kTombstone = 1u << 31;
  static constexpr uint32_t kLazy = 1u << 30;
  static constexpr uint32_t kSizeMask = kLazy - 1;

  static Entry* Allocate(uint64_t seq, std::string_view key, uint32_t size_and_flags,
                         std::string_view payload);
  uint32_t flags() const { return Load<uint32_t>(12) & ~kSizeMask; }
  template <typename T>
  T Load(size_t offset) const {
    T v;
    std::memcpy(&v, reinterpret_cast<const char*>(this) + offset, sizeof(T));
    return v;
  }

  Entry() = delete;
};

// The key an entry or a lookup stands for, for the comparators below.
inline std::string_view KeyOf(const Entry* e) { return e->key(); }
inline std::string_view KeyOf(std::string_view key) { return key; }

// Orders entries, and lookups by key, byte-wise.
struct EntryLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return KeyOf(a) < KeyOf(b);
  }
};

// Hashing and equality of entries by key, for the view's point index.
struct EntryHash {
  using is_transparent = void;
  template <typename A>
  size_t operator()(const A& a) const {
    return absl::Hash<std::string_view>{}(KeyOf(a));
  }
};
struct EntryEq {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return KeyOf(a) == KeyOf(b);
  }
};

}  // namespace kv0::kv
