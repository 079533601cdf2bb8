#include "util/file_lock.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <system_error>
#include <utility>
#include <vector>

#include "kv0/error.h"

namespace kv0 {

namespace {

[[noreturn]] void ThrowIOError(const std::string& path, const char* what, int err) {
  throw Error(Code::kIOError, path + ": " + what + ": " + std::generic_category().message(err));
}

// The descriptors of every lock this process holds, for the fork handler.
// Held across fork() so that the child's copy is consistent.
class HeldLocks {
 public:
  static HeldLocks& Get() {
    static HeldLocks* const instance = [] {
      auto* held = new HeldLocks;  // never destroyed: locks may outlive statics
      pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); },
                     [] { Get().CloseInChild(); });
      return held;
    }();
    return *instance;
  }

  void Add(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(fd);
  }

  void Remove(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase(fds_, fd);
  }

 private:
  // The only thread of the child, holding mu_ since the prepare handler.
  void CloseInChild() {
    for (int fd : fds_) close(fd);
    fds_.clear();
    mu_.unlock();
  }

  std::mutex mu_;
  std::vector<int> fds_;
};

}  // namespace

FileLock::FileLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
  HeldLocks::Get().Add(fd);
}

std::optional<FileLock> FileLock::TryAcquire(const std::string& path, bool create) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
  if (fd < 0) {
    int err = errno;
    if (!create && (err == ENOENT || err == ENOTDIR)) return std::nullopt;
    ThrowIOError(path, "cannot open lock file", err);
  }
  FileLock lock(path, fd);
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    if (err == EINTR) continue;
    if (err == EWOULDBLOCK) return std::nullopt;
    ThrowIOError(path, "cannot lock", err);
  }
  // A holder that deletes its directory unlinks the lock file while holding
  // it; whoever opened the file just before and locks it just after would hold
  // a lock nobody else can see. Only a lock on the file still at path counts.
  struct stat held, current;
  if (fstat(fd, &held) != 0) ThrowIOError(path, "cannot stat lock file", errno);
  if (stat(path.c_str(), &current) != 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) return std::nullopt;
    ThrowIOError(path, "cannot stat lock file", err);
  }
  if (held.st_dev != current.st_dev || held.st_ino != current.st_ino) return std::nullopt;
  return lock;
}

FileLock::FileLock(FileLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), owner_(other.owner_) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    owner_ = other.owner_;
  }
  return *this;
}

FileLock::~FileLock() { Release(); }

void FileLock::Release() noexcept {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  // In a fork's child the descriptor was closed already, and its number may
  // name another file by now.
  if (owner_.Inherited()) return;
  // Closing the only descriptor of the open file description drops the lock.
  HeldLocks::Get().Remove(fd);
  close(fd);
}

}  // namespace kv0
