#include "kv/view.h"

#include <algorithm>

namespace kv0::kv {

View::~View() {
  for (Entry* e : entries_) Entry::Free(e);
}

void View::Count(const Entry* e, int sign) {
  if (e->is_tombstone()) tombstones_ += sign;
  if (e->is_lazy()) lazy_ += sign;
  entry_bytes_ += sign * static_cast<int64_t>(e->allocated());
}

// Puts `fresh` in place of the key's entry unless that one is as new or
// newer, or a newer range deletion covers the key. Takes ownership of fresh.
bool View::Replace(Entry* fresh) {
  max_seq_ = std::max(max_seq_, fresh->seq());
  if (!ranges_.empty() && ranges_.Covering(fresh->key()) > fresh->seq()) {
    Entry::Free(fresh);
    return false;
  }
  // One probe of the index for both cases: insert finds the key's slot, or
  // makes one.
  std::pair<Index::iterator, bool> slot;
  try {
    slot = index_.insert(fresh);
  } catch (...) {
    Entry::Free(fresh);
    throw;
  }
  if (!slot.second) {
    if ((*slot.first)->seq() >= fresh->seq()) {
      Entry::Free(fresh);
      return false;
    }
    Substitute(slot.first, fresh);
    return true;
  }
  try {
    entries_.insert(fresh);
  } catch (...) {
    index_.erase(slot.first);
    Entry::Free(fresh);
    throw;
  }
  Count(fresh, +1);
  return true;
}

void View::Substitute(Index::iterator slot, Entry* fresh) {
  // Both containers keep their slots; only the pointer changes (same key,
  // so the same hash and the same place in the order).
  Entry* old = *slot;
  const_cast<Entry*&>(*slot) = fresh;
  const_cast<Entry*&>(*entries_.find(old->key())) = fresh;
  Count(old, -1);
  Count(fresh, +1);
  Entry::Free(old);
}

View::Set::iterator View::Erase(Set::iterator it) {
  Entry* e = *it;
  Count(e, -1);
  index_.erase(e->key());
  it = entries_.erase(it);
  Entry::Free(e);
  return it;
}

bool View::ApplyPut(uint64_t seq, std::string_view key, std::string_view value) {
  // Cheap rejection before allocating: an existing newer entry.
  if (const Entry* e = Find(key); e != nullptr && e->seq() >= seq) return false;
  return Replace(Entry::NewValue(seq, key, value));
}

bool View::ApplyLazy(uint64_t seq, std::string_view key, uint32_t value_size, LazyRef ref) {
  if (const Entry* e = Find(key); e != nullptr && e->seq() >= seq) return false;
  return Replace(Entry::NewLazy(seq, key, value_size, ref));
}

bool View::ApplyDelete(uint64_t seq, std::string_view key) {
  if (const Entry* e = Find(key); e != nullptr && e->seq() >= seq) return false;
  return Replace(Entry::NewTombstone(seq, key));
}

bool View::ApplyDeleteRange(uint64_t seq, std::string_view begin, std::string_view end) {
  max_seq_ = std::max(max_seq_, seq);
  if (begin >= end) return false;
  ranges_.Add(begin, end, seq);
  bool changed = false;
  for (auto it = entries_.lower_bound(begin); it != entries_.end() && (*it)->key() < end;) {
    if ((*it)->seq() < seq) {
      it = Erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  return changed;
}

const Entry* View::Find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : *it;
}

bool View::SetLazy(std::string_view key, uint64_t seq, LazyRef ref) {
  auto it = index_.find(key);
  if (it == index_.end() || (*it)->seq() != seq || (*it)->is_tombstone()) return false;
  Substitute(it, Entry::NewLazy(seq, key, (*it)->value_size(), ref));
  return true;
}

size_t View::DropTombstonesOlderThan(uint64_t cutoff) {
  size_t dropped = ranges_.DropOlderThan(cutoff);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if ((*it)->is_tombstone() && (*it)->seq() < cutoff) {
      it = Erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

void View::Swap(View& other) noexcept {
  std::swap(entries_, other.entries_);
  std::swap(index_, other.index_);
  std::swap(ranges_, other.ranges_);
  std::swap(tombstones_, other.tombstones_);
  std::swap(lazy_, other.lazy_);
  std::swap(max_seq_, other.max_seq_);
  std::swap(entry_bytes_, other.entry_bytes_);
}

void View::AppendSorted(std::span<Entry* const> run) {
  size_t added = 0;
  try {
    for (; added < run.size(); ++added) {
      Entry* e = run[added];
      entries_.insert(entries_.end(), e);
      max_seq_ = std::max(max_seq_, e->seq());
      Count(e, +1);
    }
  } catch (...) {
    for (size_t i = added; i < run.size(); ++i) Entry::Free(run[i]);
    throw;
  }
}

void View::IndexSorted(std::span<Entry* const> run) {
  // Each insert misses the cache once; asking for the slot a few entries
  // ahead overlaps those misses.
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < std::min(kAhead, run.size()); ++i) index_.prefetch(run[i]->key());
  for (size_t i = 0; i < run.size(); ++i) {
    if (i + kAhead < run.size()) index_.prefetch(run[i + kAhead]->key());
    index_.insert(run[i]);
  }
}

}  // namespace kv0::kv
