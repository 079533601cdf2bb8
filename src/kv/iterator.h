// Iterators over the view, read in chunks of up to kChunk entries.
//
// A chunk is copied out of the view under its read lock, so writers are
// never held up for longer than one chunk, and values that stay in Lance are
// read for the whole chunk in one request when a value is first asked for.
// The first chunk after a seek is small, because most seeks read a few
// entries; each further chunk doubles, up to kChunk.
// The next chunk starts strictly after (or before) the current key, which is
// why an iterator never returns a key twice or out of order.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kv/db_impl.h"
#include "kv0/kv.h"

namespace kv0::kv {

class ViewIterator final : public Iterator {
 public:
  static constexpr size_t kChunk = 256;
  static constexpr size_t kFirstChunk = 16;

  explicit ViewIterator(std::shared_ptr<DB::Impl> db) : db_(std::move(db)) {}
  ~ViewIterator() override;

  bool Valid() const override { return pos_ < items_.size(); }
  void SeekToFirst() override;
  void SeekToLast() override;
  void Seek(std::string_view target) override;
  void SeekForPrev(std::string_view target) override;
  void Next() override;
  void Prev() override;
  std::string_view key() const override;
  std::string_view value() override;

 private:
  // An entry of the chunk. Keys and inline values are copied into one
  // buffer per chunk (one allocation, not two per entry); a stored value is
  // a reference until Resolve reads it into stored_.
  struct Item {
    size_t key_pos;
    uint32_t key_size;
    size_t value_pos;  // into bytes_, or into refs_ and stored_ when lazy
    uint32_t value_size;
    bool lazy;
  };

  // Fills the chunk with the entries at or after `from` (none: the first),
  // strictly after it when `exclusive`; positions at its first item.
  void LoadForward(const std::string* from, bool exclusive);
  // Fills the chunk with the entries at or before `from` (none: the last),
  // strictly before it when `exclusive`; positions at its last item.
  void LoadBackward(const std::string* from, bool exclusive);
  // Adds the entries `step` hands out (nullptr: no more), tombstones
  // skipped, until the chunk holds limit_ entries.
  template <class Step>
  void Collect(Step&& step);
  // Copies an entry out of the view (a lazy one as its reference).
  void Add(const Entry* e);
  void Clear();
  std::string_view KeyOf(const Item& item) const {
    return {bytes_.data() + item.key_pos, item.key_size};
  }
  void Resolve();

  std::shared_ptr<DB::Impl> db_;
  std::vector<Item> items_;          // ascending key order
  std::string bytes_;                // the chunk's keys and inline values
  std::vector<LazyRef> refs_;        // lazy items' references, by value_pos
  std::vector<std::string> stored_;  // their values, once resolved
  size_t pos_ = 0;
  size_t limit_ = kFirstChunk;  // entries the next chunk may hold
  bool resolved_ = true;
};

}  // namespace kv0::kv
