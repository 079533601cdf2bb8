// Which process made an object, for objects that must not act in a fork's
// child.
//
// A child of fork() holds a copy of every object of its parent but none of
// its threads, and the files, locks and WAL segments those objects name are
// still the parent's, in use by the parent. A handle that acted there would
// write the parent's WAL under the parent's feet, or wait forever for a
// thread that does not exist. So every handle records the process that
// opened it; in any other process its calls throw NotSupported, and its
// destructor leaves everything alone (Abandon below).
//
// Knowing costs one relaxed atomic load: a fork handler counts forks, and a
// handle compares the count it was made at with the current one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

namespace kv0 {

class OwnerProcess {
 public:
  // The current process.
  OwnerProcess();

  // True in the child of a fork made after this object (or in its children).
  bool Inherited() const noexcept { return forks_ != forks.load(std::memory_order_relaxed); }

  // Throws kv0::Error(kNotSupported) naming the handle ("database", its
  // URI) when Inherited().
  void Check(std::string_view kind, std::string_view name) const {
    if (Inherited()) ThrowInherited(kind, name);
  }

 private:
  [[noreturn]] static void ThrowInherited(std::string_view kind, std::string_view name);

  // Forks this process descends from since the first OwnerProcess was made.
  static std::atomic<uint64_t> forks;
  uint64_t forks_;
};

// Keeps the object alive for the rest of the process, for a handle found
// inherited: its destructor would close, flush or delete what belongs to
// the parent. Leaks only in the child, only what it inherited (kept
// reachable, so leak checkers stay quiet).
void Abandon(std::shared_ptr<void> owner);

}  // namespace kv0
