#include "kv/op_log.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kv0/error.h"

namespace kv0::kv {
namespace {

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

const arrow::Schema& OpLogSchema() {
  static const arrow::Schema schema = {
      {"seq", arrow::Type::kUInt64, false},
      {"op", arrow::Type::kUInt8, false},
      {"key", arrow::Type::kBinary, false},
      {"value", arrow::Type::kBinary, true},
  };
  return schema;
}

void OpBuffer::Add(uint64_t seq, OpKind kind, std::string_view key, std::string_view value) {
  if (key.size() > UINT32_MAX || value.size() > UINT32_MAX) {
    throw Error(Code::kInvalidArgument, "key or value longer than 4 GiB");
  }
  char header[kOpHeaderSize];
  uint32_t key_size = static_cast<uint32_t>(key.size());
  uint32_t value_size = static_cast<uint32_t>(value.size());
  std::memcpy(header, &seq, 8);
  header[8] = static_cast<char>(kind);
  std::memcpy(header + 9, &key_size, 4);
  std::memcpy(header + 13, &value_size, 4);
  data_.reserve(data_.size() + kOpHeaderSize + key.size() + value.size());
  data_.append(header, kOpHeaderSize);
  data_.append(key);
  data_.append(value);
  ++count_;
  max_seq_ = std::max(max_seq_, seq);
  min_seq_ = std::min(min_seq_, seq);
}

void OpBuffer::Append(const OpBuffer& other) {
  data_.append(other.data_);
  count_ += other.count_;
  max_seq_ = std::max(max_seq_, other.max_seq_);
  min_seq_ = std::min(min_seq_, other.min_seq_);
}

void OpBuffer::Clear() {
  data_.clear();
  count_ = 0;
  max_seq_ = 0;
  min_seq_ = UINT64_MAX;
}

std::string OpBuffer::WalRecord() const {
  std::string record;
  record.reserve(1 + data_.size());
  record.push_back(static_cast<char>(kWalRecordKv));
  record.append(data_);
  return record;
}

bool OpBuffer::Next(size_t* pos, Op* op) const {
  if (*pos >= data_.size()) return false;
  const char* p = data_.data() + *pos;
  op->seq = Load<uint64_t>(p);
  op->kind = static_cast<OpKind>(p[8]);
  uint32_t key_size = Load<uint32_t>(p + 9);
  uint32_t value_size = Load<uint32_t>(p + 13);
  op->key = {p + kOpHeaderSize, key_size};
  op->value = {p + kOpHeaderSize + key_size, value_size};
  *pos += kOpHeaderSize + key_size + value_size;
  return true;
}

OpBuffer OpBuffer::FromBytes(std::string_view bytes) {
  OpBuffer out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < kOpHeaderSize) throw Error(Code::kCorruption, "truncated operation");
    const char* p = bytes.data() + pos;
    uint8_t kind = static_cast<uint8_t>(p[8]);
    uint64_t size = kOpHeaderSize + uint64_t{Load<uint32_t>(p + 9)} + Load<uint32_t>(p + 13);
    if (kind > static_cast<uint8_t>(OpKind::kDeleteRange) || bytes.size() - pos < size) {
      throw Error(Code::kCorruption, "malformed operation in a WAL record");
    }
    uint64_t seq = Load<uint64_t>(p);
    ++out.count_;
    out.max_seq_ = std::max(out.max_seq_, seq);
    out.min_seq_ = std::min(out.min_seq_, seq);
    pos += size;
  }
  out.data_.assign(bytes);
  return out;
}

arrow::OwnedStream OpsToStream(const OpBuffer& ops, const std::map<std::string, uint64_t>& marks) {
  // Batches are bounded so that no binary column reaches Arrow's 2 GiB limit
  // (a key and a value hold at most 1 GiB each) and a commit never holds a
  // second copy of a large buffer in memory.
  constexpr size_t kBatchRows = size_t{1} << 20;
  constexpr size_t kBatchBytes = size_t{256} << 20;
  struct State {
    const OpBuffer* ops;
    std::vector<std::pair<std::string, uint64_t>> marks;
    size_t pos = 0;
    bool marks_done = false;
  };
  auto state = std::make_shared<State>();
  state->ops = &ops;
  state->marks.assign(marks.begin(), marks.end());
  auto next = [state](ArrowArray* out) -> bool {
    if (state->marks_done) return false;
    arrow::BatchBuilder builder(OpLogSchema());
    size_t rows = 0, bytes = 0;
    Op op;
    size_t pos = state->pos;
    while (rows < kBatchRows && state->ops->Next(&pos, &op)) {
      size_t size = op.key.size() + op.value.size();
      if (rows > 0 && bytes + size > kBatchBytes) break;
      builder.uint64(0).Append(op.seq);
      builder.uint8(1).Append(static_cast<uint8_t>(op.kind));
      builder.binary(2).Append(op.key);
      if (op.kind == OpKind::kDelete) {
        builder.binary(3).AppendNull();
      } else {
        builder.binary(3).Append(op.value);
      }
      state->pos = pos;
      ++rows;
      bytes += size;
    }
    if (state->pos >= state->ops->bytes()) {
      // The marks come last, after every operation.
      for (const auto& [writer, seq] : state->marks) {
        builder.uint64(0).Append(seq);
        builder.uint8(1).Append(static_cast<uint8_t>(OpKind::kMark));
        builder.binary(2).Append(writer);
        builder.binary(3).AppendNull();
        ++rows;
      }
      state->marks_done = true;
    }
    if (rows == 0) return false;
    builder.Finish(out);
    return true;
  };
  arrow::OwnedStream stream;
  arrow::MakeStream(OpLogSchema(), std::move(next), &stream);
  return stream;
}

}  // namespace kv0::kv
