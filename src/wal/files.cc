#include "wal/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace kv0::wal {

namespace {

std::atomic<Files*> installed{nullptr};

}  // namespace

int Files::Create(const std::string& path, bool read_write, int* fd) {
  int flags = (read_write ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL | O_CLOEXEC;
  *fd = open(path.c_str(), flags, 0644);
  return *fd >= 0 ? 0 : errno;
}

int Files::Write(int fd, const iovec* parts, int count, uint64_t offset, size_t* written) {
  *written = 0;
  for (;;) {
    ssize_t n = pwritev(fd, parts, count, static_cast<off_t>(offset));
    if (n >= 0) {
      *written = static_cast<size_t>(n);
      return 0;
    }
    if (errno != EINTR) return errno;
  }
}

int Files::SyncData(int fd) {
#ifdef __APPLE__
  return fsync(fd) == 0 ? 0 : errno;
#else
  return fdatasync(fd) == 0 ? 0 : errno;
#endif
}

int Files::SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return err;
}

int Files::SyncMapped(const std::string&, void* data, size_t size) {
  return msync(data, size, MS_SYNC) == 0 ? 0 : errno;
}

int Files::Truncate(int fd, uint64_t size) {
  return ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
}

int Files::Allocate(int fd, uint64_t size) {
#ifdef __APPLE__
  fstore_t store = {F_ALLOCATECONTIG | F_ALLOCATEALL, F_PEOFPOSMODE, 0, static_cast<off_t>(size),
                    0};
  if (fcntl(fd, F_PREALLOCATE, &store) != 0) {
    store.fst_flags = F_ALLOCATEALL;
    if (fcntl(fd, F_PREALLOCATE, &store) != 0) return errno;
  }
  return ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
#else
  int err;
  do {
    err = posix_fallocate(fd, 0, static_cast<off_t>(size));
  } while (err == EINTR);
  return err;
#endif
}

int Files::Rename(const std::string& from, const std::string& to) {
  return rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
}

int Files::Remove(const std::string& path) { return unlink(path.c_str()) == 0 ? 0 : errno; }

int Files::RemoveDir(const std::string& path) { return rmdir(path.c_str()) == 0 ? 0 : errno; }

int Files::MakeDir(const std::string& path) { return mkdir(path.c_str(), 0755) == 0 ? 0 : errno; }

Files& CurrentFiles() {
  static Files os;
  Files* files = installed.load(std::memory_order_acquire);
  return files != nullptr ? *files : os;
}

void SetFilesForTesting(Files* files) { installed.store(files, std::memory_order_release); }

}  // namespace kv0::wal
