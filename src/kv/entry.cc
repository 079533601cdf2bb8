#include "kv/entry.h"

#include <cstdlib>
#include <new>

#include "kv0/error.h"

namespace kv0::kv {

Entry* Entry::Allocate(uint64_t seq, std::string_view key, uint32_t size_and_flags,
                       std::string_view payload) {
  if (key.size() > UINT32_MAX) throw Error(Code::kInvalidArgument, "key longer than 4 GiB");
  size_t bytes = kHeader + key.size() + payload.size();
  char* p = static_cast<char*>(std::malloc(bytes));
  if (p == nullptr) throw std::bad_alloc();
  uint32_t key_size = static_cast<uint32_t>(key.size());
  std::memcpy(p, &seq, 8);
  std::memcpy(p + 8, &key_size, 4);
  std::memcpy(p + 12, &size_and_flags, 4);
  if (!key.empty()) std::memcpy(p + kHeader, key.data(), key.size());
  if (!payload.empty()) std::memcpy(p + kHeader + key.size(), payload.data(), payload.size());
  return reinterpret_cast<Entry*>(p);
}

Entry* Entry::NewValue(uint64_t seq, std::string_view key, std::string_view value) {
  if (value.size() > kMaxValueSize) {
    throw Error(Code::kInvalidArgument,
                "value of " + std::to_string(value.size()) + " bytes is over kv0's limit of 1 GiB");
  }
  return Allocate(seq, key, static_cast<uint32_t>(value.size()), value);
}

Entry* Entry::NewTombstone(uint64_t seq, std::string_view key) {
  return Allocate(seq, key, kTombstone, {});
}

Entry* Entry::NewLazy(uint64_t seq, std::string_view key, uint32_t value_size, LazyRef ref) {
  char payload[16];
  std::memcpy(payload, &ref.version, 8);
  std::memcpy(payload + 8, &ref.address, 8);
  return Allocate(seq, key, (value_size & kSizeMask) | kLazy, {payload, sizeof(payload)});
}

void Entry::Free(Entry* entry) noexcept { std::free(entry); }

LazyRef Entry::lazy_ref() const {
  LazyRef ref;
  ref.version = Load<uint64_t>(kHeader + key().size());
  ref.address = Load<uint64_t>(kHeader + key().size() + 8);
  return ref;
}

size_t Entry::allocated() const {
  size_t payload = is_tombstone() ? 0 : is_lazy() ? 16 : value_size();
  return kHeader + key().size() + payload;
}

}  // namespace kv0::kv
