// Strict UTF-8, as Rust's str and JSON text require: no overlong forms, no
// surrogates, nothing past U+10FFFF. One definition for every place where a
// user's bytes must become a string column or JSON text, so that what one
// accepts the other accepts too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kv0 {

// The offset of the first byte that does not start a valid sequence, or
// std::string_view::npos when all of `s` is valid.
inline size_t FindInvalidUtf8(std::string_view s) {
  static constexpr uint32_t kMinCodePoint[] = {0, 0, 0x80, 0x800, 0x10000};
  for (size_t i = 0; i < s.size();) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = len != 0 && s.size() - i >= len;
    uint32_t cp = c & (0x7F >> len);
    for (size_t k = 1; ok && k < len; k++) {
      uint8_t cc = s[i + k];
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok || cp < kMinCodePoint[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

inline bool IsValidUtf8(std::string_view s) { return FindInvalidUtf8(s) == std::string_view::npos; }

}  // namespace kv0
