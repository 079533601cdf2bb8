// How the write-ahead log reaches the disk: every call that changes a file
// or a directory goes through Files, so a test (or `kv0 stress`) can make a
// chosen call fail, the way RocksDB's FaultInjectionTestFS or LevelDB's Env
// do. Reads during recovery go straight to the OS: a failed read changes
// nothing on disk and is reported as it is.
//
// Each method returns 0 or an errno value and leaves errno alone.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kv0::wal {

class Files {
 public:
  virtual ~Files() = default;

  // Creates path, which must not exist, open for writing (and reading, with
  // read_write); *fd receives the descriptor.
  virtual int Create(const std::string& path, bool read_write, int* fd);
  // Writes the parts at offset; *written receives how many bytes reached the
  // file (possibly some even when an error is returned).
  virtual int Write(int fd, const iovec* parts, int count, uint64_t offset, size_t* written);
  // Makes the file's data durable.
  virtual int SyncData(int fd);
  // Makes the entries created or removed in dir durable.
  virtual int SyncDir(const std::string& dir);
  // msync of the mapped bytes [data, data + size) of the file at path.
  virtual int SyncMapped(const std::string& path, void* data, size_t size);
  virtual int Truncate(int fd, uint64_t size);
  // Allocates disk space for the file's first size bytes (zeros).
  virtual int Allocate(int fd, uint64_t size);
  virtual int Rename(const std::string& from, const std::string& to);
  // Deletes a file (ENOENT is returned as such).
  virtual int Remove(const std::string& path);
  virtual int RemoveDir(const std::string& path);
  // Creates one directory (EEXIST is returned as such).
  virtual int MakeDir(const std::string& path);
};

// The Files every log uses: the operating system's, unless a test installed
// others. Logs take it when they open.
Files& CurrentFiles();

// Installs files for logs opened from now on (nullptr: the OS's again). The
// caller keeps it alive while any such log is open.
void SetFilesForTesting(Files* files);

}  // namespace kv0::wal
