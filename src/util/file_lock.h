// An exclusive advisory lock on a file, held for the lifetime of the object.
//
// The lock is flock(2) on an open file description, so two FileLocks on the
// same file exclude each other also inside one process, and the kernel drops
// the lock when the process dies: a lock that can be taken means its previous
// owner is gone.
//
// A forked child shares its parent's open file descriptions, and with them
// the parent's locks: a child that outlived its parent would keep the lock,
// and with it the parent's WAL out of reach of recovery. So in the child
// every inherited lock's descriptor is closed at once (which leaves the
// parent's lock in place), and the inherited FileLock holds nothing.
//
// Not thread-safe: one owner uses a FileLock at a time.
#pragma once

#include <optional>
#include <string>

#include "util/owner_process.h"

namespace kv0 {

class FileLock {
 public:
  // Takes the lock on path without waiting. Returns nullopt when someone else
  // holds it, or when create is false and the file does not exist (or was
  // deleted by its holder while we waited for it). Other failures throw
  // kv0::Error(kIOError) naming the path.
  static std::optional<FileLock> TryAcquire(const std::string& path, bool create);

  FileLock() = default;  // holds nothing
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

  bool held() const { return fd_ >= 0 && !owner_.Inherited(); }
  const std::string& path() const { return path_; }

  // Gives the lock up early; the destructor then does nothing.
  void Release() noexcept;

 private:
  FileLock(std::string path, int fd);

  std::string path_;
  int fd_ = -1;
  OwnerProcess owner_;
};

}  // namespace kv0
