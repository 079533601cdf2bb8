// Compact integers for kv0's own binary formats (the cells of levels, the
// point directory): LEB128 varints, zigzag for signed values, and a reader
// that turns any read past the end into Corruption.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "kv0/error.h"

namespace kv0 {

inline void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

inline uint64_t Zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t Unzigzag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// Differences and sums that wrap, as two's complement does: a difference of
// two int64 values may not fit, yet adds back exactly.
inline int64_t WrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t WrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

// Reads encoded bytes; a read past the end, or a varint longer than ten
// bytes, throws Corruption with the message the reader was made with.
class ByteReader {
 public:
  ByteReader(std::string_view bytes, const char* corrupt)
      : at_(bytes.data()), end_(at_ + bytes.size()), corrupt_(corrupt) {}

  bool done() const { return at_ == end_; }

  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (at_ == end_) Fail();
      const auto byte = static_cast<uint8_t>(*at_++);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (byte < 0x80) return v;
    }
    Fail();
  }

  double Double() {
    if (end_ - at_ < 8) Fail();
    double v;
    std::memcpy(&v, at_, 8);
    at_ += 8;
    return v;
  }

  [[noreturn]] void Fail() const { throw Error(Code::kCorruption, corrupt_); }

 private:
  const char* at_;
  const char* end_;
  const char* corrupt_;
};

}  // namespace kv0
