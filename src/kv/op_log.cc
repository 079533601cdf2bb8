#include "kv/op_log.h"

#include <algorithm>
#include <cstring>

#include "kv0/error.h"

namespace kv0::kv {
namespace {

constexpr size_t kOpHeader = 8 + 1 + 4 + 4;

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
  char header[kOpHeader];
  uint32_t key_size = static_cast<uint32_t>(key.size());
  uint32_t value_size = static_cast<uint32_t>(value.size());
  std::memcpy(header, &seq, 8);
  header[8] = static_cast<char>(kind);
  std::memcpy(header + 9, &key_size, 4);
  std::memcpy(header + 13, &value_size, 4);
  data_.reserve(data_.size() + kOpHeader + key.size() + value.size());
  data_.append(header, kOpHeader);
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
  op->key = {p + kOpHeader, key_size};
  op->value = {p + kOpHeader + key_size, value_size};
  *pos += kOpHeader + key_size + value_size;
  return true;
}

OpBuffer OpBuffer::FromBytes(std::string_view bytes) {
  OpBuffer out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < kOpHeader) throw Error(Code::kCorruption, "truncated operation");
    const char* p = bytes.data() + pos;
    uint8_t kind = static_cast<uint8_t>(p[8]);
    uint64_t size = kOpHeader + uint64_t{Load<uint32_t>(p + 9)} + Load<uint32_t>(p + 13);
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

arrow::OwnedStream OpsToStream(const OpBuffer& ops, std::string_view writer_id, uint64_t mark_seq) {
  arrow::BatchBuilder builder(OpLogSchema());
  ops.ForEach([&](const Op& op) {
    builder.uint64(0).Append(op.seq);
    builder.uint8(1).Append(static_cast<uint8_t>(op.kind));
    builder.binary(2).Append(op.key);
    if (op.kind == OpKind::kDelete) {
      builder.binary(3).AppendNull();
    } else {
      builder.binary(3).Append(op.value);
    }
  });
  if (!writer_id.empty()) {
    builder.uint64(0).Append(mark_seq);
    builder.uint8(1).Append(static_cast<uint8_t>(OpKind::kMark));
    builder.binary(2).Append(writer_id);
    builder.binary(3).AppendNull();
  }
  std::vector<arrow::OwnedArray> batches(1);
  builder.Finish(batches[0].get());
  arrow::OwnedStream stream;
  arrow::MakeStream(OpLogSchema(), std::move(batches), &stream);
  return stream;
}

}  // namespace kv0::kv
