#include "kv/iterator.h"

#include <algorithm>

namespace kv0::kv {

ViewIterator::Item ViewIterator::MakeItem(const Entry* e) {
  Item item{std::string(e->key()), {}, std::nullopt};
  if (e->is_lazy()) {
    item.ref = e->lazy_ref();
    resolved_ = false;
  } else {
    item.value.assign(e->value());
  }
  return item;
}

void ViewIterator::LoadForward(const std::string* from, bool exclusive) {
  db_->CheckOpen();
  items_.clear();
  resolved_ = true;
  {
    std::shared_lock lock(db_->view_mu());
    const auto& entries = db_->view().entries();
    auto it = from == nullptr ? entries.begin()
              : exclusive     ? entries.upper_bound(std::string_view(*from))
                              : entries.lower_bound(std::string_view(*from));
    for (; it != entries.end() && items_.size() < kChunk; ++it) {
      if (!(*it)->is_tombstone()) items_.push_back(MakeItem(*it));
    }
  }
  pos_ = 0;
}

void ViewIterator::LoadBackward(const std::string* from, bool exclusive) {
  db_->CheckOpen();
  items_.clear();
  resolved_ = true;
  {
    std::shared_lock lock(db_->view_mu());
    const auto& entries = db_->view().entries();
    // `it` is one past the newest candidate.
    auto it = from == nullptr ? entries.end()
              : exclusive     ? entries.lower_bound(std::string_view(*from))
                              : entries.upper_bound(std::string_view(*from));
    while (it != entries.begin() && items_.size() < kChunk) {
      --it;
      if (!(*it)->is_tombstone()) items_.push_back(MakeItem(*it));
    }
  }
  std::reverse(items_.begin(), items_.end());
  pos_ = items_.empty() ? 0 : items_.size() - 1;
}

void ViewIterator::SeekToFirst() {
  db_->MaybeRefresh();
  LoadForward(nullptr, false);
}

void ViewIterator::SeekToLast() {
  db_->MaybeRefresh();
  LoadBackward(nullptr, false);
}

void ViewIterator::Seek(std::string_view target) {
  db_->MaybeRefresh();
  std::string t(target);
  LoadForward(&t, false);
}

void ViewIterator::SeekForPrev(std::string_view target) {
  db_->MaybeRefresh();
  std::string t(target);
  LoadBackward(&t, false);
}

void ViewIterator::Next() {
  if (!Valid()) return;
  if (pos_ + 1 < items_.size()) {
    ++pos_;
    return;
  }
  std::string last = items_[pos_].key;
  LoadForward(&last, true);
}

void ViewIterator::Prev() {
  if (!Valid()) return;
  if (pos_ > 0) {
    --pos_;
    return;
  }
  std::string first = items_[pos_].key;
  LoadBackward(&first, true);
}

std::string_view ViewIterator::key() const {
  if (!Valid()) throw Error(Code::kInvalidArgument, "iterator is not positioned at an entry");
  return items_[pos_].key;
}

std::string_view ViewIterator::value() {
  if (!Valid()) throw Error(Code::kInvalidArgument, "iterator is not positioned at an entry");
  if (!resolved_) Resolve();
  return items_[pos_].value;
}

// Reads every stored value of the chunk in one request.
void ViewIterator::Resolve() {
  std::vector<std::string> keys;
  std::vector<LazyRef> refs;
  std::vector<size_t> positions;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (items_[i].ref) {
      keys.push_back(items_[i].key);
      refs.push_back(*items_[i].ref);
      positions.push_back(i);
    }
  }
  auto values = db_->ReadLazy(keys, refs);
  for (size_t j = 0; j < positions.size(); ++j) {
    Item& item = items_[positions[j]];
    // A key deleted since the chunk was read keeps an empty value here; it
    // is gone at the next chunk.
    if (values[j]) item.value = *values[j];
    item.ref.reset();
  }
  resolved_ = true;
}

}  // namespace kv0::kv
