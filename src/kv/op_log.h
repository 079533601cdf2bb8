// The key-value store's storage format and the encoding of its operations.
//
// In Lance a database is an operation log with four columns:
//
//   seq    uint64   hybrid-logical-clock sequence number; the newest wins
//   op     uint8    0 put, 1 delete, 2 delete range, 3 WAL mark
//   key    binary   the key, the inclusive start of a range, or a writer id
//   value  binary?  the value, the exclusive end of a range, null otherwise
//
// A mark row (op 3) says that the WAL writer named by `key` has committed
// every operation up to `seq`; it travels in the same fragment as the data
// it covers.
//
// In memory and in the WAL, operations are packed into one byte string
// (OpBuffer): per op, seq (8 bytes LE) | op (1) | key length (4 LE) | value
// length (4 LE) | key | value. A WAL record is one kind byte followed by an
// OpBuffer's bytes, so a batch is one record and replays all or nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "lance/arrow.h"

namespace kv0::kv {

enum class OpKind : uint8_t { kPut = 0, kDelete = 1, kDeleteRange = 2, kMark = 3 };

struct Op {
  uint64_t seq;
  OpKind kind;
  std::string_view key;
  std::string_view value;  // a range's end; empty for a delete
};

// The Lance schema of a key-value dataset.
const arrow::Schema& OpLogSchema();

// Bytes of an operation's header in an OpBuffer.
inline constexpr size_t kOpHeaderSize = 8 + 1 + 4 + 4;

// WAL record kind of a key-value write (the tracking layer uses 20 to 23).
inline constexpr uint8_t kWalRecordKv = 1;

// A packed run of operations.
class OpBuffer {
 public:
  OpBuffer() = default;
  // Adopts bytes written by data() (a WAL record body). Throws Corruption if
  // they do not parse.
  static OpBuffer FromBytes(std::string_view bytes);

  void Add(uint64_t seq, OpKind kind, std::string_view key, std::string_view value);
  // Appends every op of other (keeping order).
  void Append(const OpBuffer& other);
  void Clear();

  size_t count() const { return count_; }
  size_t bytes() const { return data_.size(); }
  bool empty() const { return count_ == 0; }
  const std::string& data() const { return data_; }
  uint64_t max_seq() const { return max_seq_; }
  uint64_t min_seq() const { return min_seq_; }

  // The WAL record of these ops: the kind byte, then data().
  std::string WalRecord() const;

  // Calls fn(const Op&) for each op in order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    size_t pos = 0;
    Op op;
    while (Next(&pos, &op)) fn(op);
  }
  // The op at *pos (a byte offset, 0 for the first), moving *pos past it;
  // false at the end.
  bool Next(size_t* pos, Op* op) const;

 private:
  std::string data_;
  size_t count_ = 0;
  uint64_t max_seq_ = 0;
  uint64_t min_seq_ = UINT64_MAX;
};

// Exports ops, then a mark row per WAL writer (its id and highest seq), as an
// Arrow stream for an append: row i of the fragment is the i-th operation.
// The stream reads ops as Lance consumes it, so ops must outlive it.
arrow::OwnedStream OpsToStream(const OpBuffer& ops, const std::map<std::string, uint64_t>& marks);

}  // namespace kv0::kv
