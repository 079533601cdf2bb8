// Errors reported by every kv0 API.
//
// A failed operation throws kv0::Error. Its code says what kind of failure it
// was; the message says which object and why, in words meant for a person.
// Absence of a value is never an error: lookups return std::optional.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace kv0 {

enum class Code {
  kNotFound,         // the database, repository, run, version or tag does not exist
  kNotSupported,     // the call is not available here (for example a write to a read-only handle)
  kInvalidArgument,  // the caller passed something kv0 cannot accept; nothing was changed
  kCorruption,       // stored bytes failed a check (checksum, format)
  kIOError,          // storage (a local disk or an object store) failed
  kConflict,         // a concurrent commit changed what this commit replaces
  kBusy,             // a resource is held by someone else (a lock, a running flush)
};

// The name of a code, such as "NotFound".
std::string_view CodeName(Code code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& message);

  Code code() const noexcept { return code_; }

 private:
  Code code_;
};

}  // namespace kv0
