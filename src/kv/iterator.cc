#include "kv/iterator.h"

#include <algorithm>

namespace kv0::kv {

void ViewIterator::Clear() {
  items_.clear();
  bytes_.clear();
  refs_.clear();
  stored_.clear();
  resolved_ = true;
}

void ViewIterator::Add(const Entry* e) {
  Item item{bytes_.size(), static_cast<uint32_t>(e->key().size()), 0, e->value_size(),
            e->is_lazy()};
  bytes_.append(e->key());
  if (item.lazy) {
    item.value_pos = refs_.size();
    refs_.push_back(e->lazy_ref());
    resolved_ = false;
  } else {
    item.value_pos = bytes_.size();
    bytes_.append(e->value());
  }
  items_.push_back(item);
}

// Entries sit wherever the allocator put them, so copying a chunk misses the
// cache once per entry. The set's pointers are read a batch ahead and the
// entries prefetched, so that those misses overlap.
template <class Step>
void ViewIterator::Collect(Step&& step) {
  const Entry* batch[kChunk];
  bool more = true;
  while (more && items_.size() < limit_) {
    const size_t want = limit_ - items_.size();
    size_t n = 0;
    while (n < want) {
      const Entry* e = step();
      if (e == nullptr) {
        more = false;
        break;
      }
      __builtin_prefetch(e);
      batch[n++] = e;
    }
    for (size_t i = 0; i < n; ++i) {
      if (!batch[i]->is_tombstone()) Add(batch[i]);
    }
  }
}

void ViewIterator::LoadForward(const std::string* from, bool exclusive) {
  db_->CheckOpen();
  Clear();
  {
    std::shared_lock lock(db_->view_mu());
    const auto& entries = db_->view().entries();
    auto it = from == nullptr ? entries.begin()
              : exclusive     ? entries.upper_bound(std::string_view(*from))
                              : entries.lower_bound(std::string_view(*from));
    Collect([&]() -> const Entry* { return it == entries.end() ? nullptr : *it++; });
  }
  pos_ = 0;
}

void ViewIterator::LoadBackward(const std::string* from, bool exclusive) {
  db_->CheckOpen();
  Clear();
  {
    std::shared_lock lock(db_->view_mu());
    const auto& entries = db_->view().entries();
    // `it` is one past the newest candidate.
    auto it = from == nullptr ? entries.end()
              : exclusive     ? entries.lower_bound(std::string_view(*from))
                              : entries.upper_bound(std::string_view(*from));
    Collect([&]() -> const Entry* { return it == entries.begin() ? nullptr : *--it; });
  }
  std::reverse(items_.begin(), items_.end());
  pos_ = items_.empty() ? 0 : items_.size() - 1;
}

void ViewIterator::SeekToFirst() {
  db_->CheckOpen();
  db_->MaybeRefresh();
  limit_ = kFirstChunk;
  LoadForward(nullptr, false);
}

void ViewIterator::SeekToLast() {
  db_->CheckOpen();
  db_->MaybeRefresh();
  limit_ = kFirstChunk;
  LoadBackward(nullptr, false);
}

void ViewIterator::Seek(std::string_view target) {
  db_->CheckOpen();
  db_->MaybeRefresh();
  limit_ = kFirstChunk;
  std::string t(target);
  LoadForward(&t, false);
}

void ViewIterator::SeekForPrev(std::string_view target) {
  db_->CheckOpen();
  db_->MaybeRefresh();
  limit_ = kFirstChunk;
  std::string t(target);
  LoadBackward(&t, false);
}

void ViewIterator::Next() {
  db_->owner().Check("database", db_->uri());
  if (!Valid()) return;
  if (pos_ + 1 < items_.size()) {
    ++pos_;
    return;
  }
  std::string last(KeyOf(items_[pos_]));
  limit_ = std::min(limit_ * 2, kChunk);
  LoadForward(&last, true);
}

void ViewIterator::Prev() {
  db_->owner().Check("database", db_->uri());
  if (!Valid()) return;
  if (pos_ > 0) {
    --pos_;
    return;
  }
  std::string first(KeyOf(items_[pos_]));
  limit_ = std::min(limit_ * 2, kChunk);
  LoadBackward(&first, true);
}

ViewIterator::~ViewIterator() {
  // In a fork's child the database may be the parent's: never close it here.
  if (db_->owner().Inherited()) Abandon(std::move(db_));
}

std::string_view ViewIterator::key() const {
  if (!Valid()) throw Error(Code::kInvalidArgument, "iterator is not positioned at an entry");
  return KeyOf(items_[pos_]);
}

std::string_view ViewIterator::value() {
  if (!Valid()) throw Error(Code::kInvalidArgument, "iterator is not positioned at an entry");
  const Item& item = items_[pos_];
  if (!item.lazy) return {bytes_.data() + item.value_pos, item.value_size};
  db_->owner().Check("database", db_->uri());
  if (!resolved_) Resolve();
  return stored_[item.value_pos];
}

// Reads every stored value of the chunk in one request.
void ViewIterator::Resolve() {
  std::vector<std::string> keys(refs_.size());  // in refs_ order
  for (const Item& item : items_) {
    if (item.lazy) keys[item.value_pos] = KeyOf(item);
  }
  auto values = db_->ReadLazy(keys, refs_);
  stored_.clear();
  for (auto& v : values) {
    // A key deleted since the chunk was read reads as empty here; it is gone
    // at the next chunk.
    stored_.push_back(v ? *v : std::string());
  }
  resolved_ = true;
}

}  // namespace kv0::kv
