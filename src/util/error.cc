#include "kv0/error.h"

namespace kv0 {

std::string_view CodeName(Code code) noexcept {
  switch (code) {
    case Code::kNotFound:
      return "NotFound";
    case Code::kNotSupported:
      return "NotSupported";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kCorruption:
      return "Corruption";
    case Code::kIOError:
      return "IOError";
    case Code::kConflict:
      return "Conflict";
    case Code::kBusy:
      return "Busy";
  }
  return "Unknown";
}

Error::Error(Code code, const std::string& message)
    : std::runtime_error(std::string(CodeName(code)) + ": " + message), code_(code) {}

}  // namespace kv0
