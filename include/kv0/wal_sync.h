// How a handle's write-ahead log reaches the disk; shared by both layers,
// the Python bindings and the command-line tool.
#pragma once

#include <string_view>

namespace kv0 {

enum class WalSync {
  // Every write is handed to the OS before it returns, and nothing is ever
  // fsynced: a write survives the process dying, not a power loss or a
  // kernel crash.
  kNone,
  // As kNone, and the log is fsynced about every 100 ms from the background
  // thread: a power loss loses at most the last ~100 ms of writes.
  kBatch,
  // Every write is fsynced before it returns.
  kAlways,
};

// "none", "batch" or "always"; anything else throws kv0::Error
// (kInvalidArgument) naming the value.
WalSync ParseWalSync(std::string_view name);
std::string_view WalSyncName(WalSync mode) noexcept;

}  // namespace kv0
