// Iterators over the view, read in chunks of kChunk entries.
//
// A chunk is copied out of the view under its read lock, so writers are
// never held up for longer than one chunk, and values that stay in Lance are
// read for the whole chunk in one request when a value is first asked for.
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

  explicit ViewIterator(std::shared_ptr<DB::Impl> db) : db_(std::move(db)) {}

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
  struct Item {
    std::string key;
    std::string value;           // inline value, or filled in by Resolve
    std::optional<LazyRef> ref;  // set until the stored value is read
  };

  // Fills the chunk with the entries at or after `from` (none: the first),
  // strictly after it when `exclusive`; positions at its first item.
  void LoadForward(const std::string* from, bool exclusive);
  // Fills the chunk with the entries at or before `from` (none: the last),
  // strictly before it when `exclusive`; positions at its last item.
  void LoadBackward(const std::string* from, bool exclusive);
  // Copies an entry out of the view (a lazy one as its reference).
  Item MakeItem(const Entry* e);
  void Resolve();

  std::shared_ptr<DB::Impl> db_;
  std::vector<Item> items_;  // ascending key order
  size_t pos_ = 0;
  bool resolved_ = true;
};

}  // namespace kv0::kv
