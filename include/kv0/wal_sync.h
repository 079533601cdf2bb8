// How a handle's write-ahead log reaches the disk; shared by both layers.
#pragma once

namespace kv0 {

enum class WalSync {
  kNone,    // written to the OS on every write, never fsynced: survives a process crash
  kBatch,   // also fsynced about every 100 ms: a power loss can lose the last ~100 ms
  kAlways,  // fsynced before every write returns
};

}  // namespace kv0
