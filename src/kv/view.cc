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
  auto [it, inserted] = entries_.insert(fresh);
  if (!inserted) {
    Entry* old = *it;
    if (old->seq() >= fresh->seq()) {
      Entry::Free(fresh);
      return false;
    }
    // The btree keeps its slot; only the pointer changes (same key).
    Count(old, -1);
    const_cast<Entry*&>(*it) = fresh;
    Entry::Free(old);
  }
  Count(fresh, +1);
  return true;
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
    Entry* e = *it;
    if (e->seq() < seq) {
      Count(e, -1);
      it = entries_.erase(it);
      Entry::Free(e);
      changed = true;
    } else {
      ++it;
    }
  }
  return changed;
}

const Entry* View::Find(std::string_view key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : *it;
}

bool View::SetLazy(std::string_view key, uint64_t seq, LazyRef ref) {
  auto it = entries_.find(key);
  if (it == entries_.end() || (*it)->seq() != seq || (*it)->is_tombstone()) return false;
  Entry* old = *it;
  Entry* fresh = Entry::NewLazy(seq, key, old->value_size(), ref);
  Count(old, -1);
  const_cast<Entry*&>(*it) = fresh;
  Entry::Free(old);
  Count(fresh, +1);
  return true;
}

size_t View::DropTombstonesOlderThan(uint64_t cutoff) {
  size_t dropped = ranges_.DropOlderThan(cutoff);
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry* e = *it;
    if (e->is_tombstone() && e->seq() < cutoff) {
      Count(e, -1);
      it = entries_.erase(it);
      Entry::Free(e);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

void View::Swap(View& other) noexcept {
  std::swap(entries_, other.entries_);
  std::swap(ranges_, other.ranges_);
  std::swap(tombstones_, other.tombstones_);
  std::swap(lazy_, other.lazy_);
  std::swap(max_seq_, other.max_seq_);
  std::swap(entry_bytes_, other.entry_bytes_);
}

void View::AppendSorted(Entry* entry) {
  max_seq_ = std::max(max_seq_, entry->seq());
  entries_.insert(entries_.end(), entry);
  Count(entry, +1);
}

}  // namespace kv0::kv
