// The in-memory view of a key-value store: every key's newest entry (values,
// lazy references and point tombstones) plus the range deletions.
//
// Applying is idempotent and order-independent, so rows can be applied as
// Lance decodes them, fragments in any order, and a row seen twice changes
// nothing. An operation is ignored when the key already holds a newer entry
// or a newer range deletion covers it. The invariant every read relies on: no
// entry is covered by a newer range deletion (applying a range removes the
// older entries it covers), so a read looks at one entry and nothing else.
//
// Every entry is in two containers: an ordered set, which iterators, range
// deletions and snapshots walk, and a hash index by key, which answers Find
// (every point read, and the check each applied operation makes) with about
// two cache misses where the ordered set takes one per comparison. The index
// costs about 9 to 12 bytes per entry. Both hold the same pointers; the
// ordered set owns the entries.
//
// Not synchronised: the DB guards it with a reader-writer lock.
#pragma once

#include <absl/container/btree_set.h>
#include <absl/container/flat_hash_set.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "kv/entry.h"
#include "kv/range_tombstones.h"

namespace kv0::kv {

class View {
 public:
  using Set = absl::btree_set<Entry*, EntryLess>;
  using Index = absl::flat_hash_set<Entry*, EntryHash, EntryEq>;

  View() = default;
  ~View();
  View(const View&) = delete;
  View& operator=(const View&) = delete;

  // Each returns whether the view changed.
  bool ApplyPut(uint64_t seq, std::string_view key, std::string_view value);
  bool ApplyLazy(uint64_t seq, std::string_view key, uint32_t value_size, LazyRef ref);
  bool ApplyDelete(uint64_t seq, std::string_view key);
  bool ApplyDeleteRange(uint64_t seq, std::string_view begin, std::string_view end);

  // The entry for key (possibly a tombstone), or nullptr.
  const Entry* Find(std::string_view key) const;
  // Starts loading what Find(key) will read first, for a caller about to
  // look up many keys.
  void Prefetch(std::string_view key) const { index_.prefetch(key); }

  // Replaces the entry for key, if it still is the one written at seq, by a
  // lazy reference (after its value was committed, or moved by a rewrite).
  // Returns whether it did.
  bool SetLazy(std::string_view key, uint64_t seq, LazyRef ref);

  // Drops point tombstones and range pieces older than cutoff; returns how
  // many it dropped.
  size_t DropTombstonesOlderThan(uint64_t cutoff);

  // Loading a snapshot, in two halves that may run on two threads at once
  // (they touch different containers): AppendSorted adds a run of entries in
  // ascending key order, with no range deletions in between, to the ordered
  // set, and IndexSorted adds the same run to the index. The entries must
  // sort after every entry already in the view. The view may be used once
  // every run went through both. AppendSorted takes ownership of every entry
  // of the run, also when it throws (those not added are freed).
  void AppendSorted(std::span<Entry* const> run);
  void IndexSorted(std::span<Entry* const> run);
  // Makes room in the index for this many entries in all (a snapshot's
  // count).
  void Reserve(size_t entries) { index_.reserve(entries); }

  // Exchanges the contents of two views (a loaded snapshot goes in whole).
  void Swap(View& other) noexcept;

  const Set& entries() const { return entries_; }
  const RangeTombstones& ranges() const { return ranges_; }
  RangeTombstones& mutable_ranges() { return ranges_; }

  uint64_t live() const { return entries_.size() - tombstones_; }
  uint64_t tombstones() const { return tombstones_; }
  uint64_t lazy() const { return lazy_; }
  uint64_t max_seq() const { return max_seq_; }
  // Bytes of entries (headers, keys, values held in memory).
  uint64_t entry_bytes() const { return entry_bytes_; }

 private:
  bool Replace(Entry* fresh);
  // Puts `fresh` in the place of the entry at `slot` (the same key) in both
  // containers, and frees that entry.
  void Substitute(Index::iterator slot, Entry* fresh);
  // Takes the entry at `it` out of both containers and frees it; returns the
  // next position.
  Set::iterator Erase(Set::iterator it);
  void Count(const Entry* e, int sign);

  Set entries_;
  Index index_;
  RangeTombstones ranges_;
  uint64_t tombstones_ = 0;
  uint64_t lazy_ = 0;
  uint64_t max_seq_ = 0;
  uint64_t entry_bytes_ = 0;
};

}  // namespace kv0::kv
