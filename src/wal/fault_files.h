// Files that fail on command, for tests and `kv0 stress`: the Nth call of a
// kind fails (a write may first write part of its bytes, as a full disk or a
// crash mid-write leaves it), or every call of a kind fails until cleared.
// Only paths under a chosen prefix are affected, so one handle's WAL can be
// damaged while another's works; a call on a descriptor counts against the
// file's current path.
//
// Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include "wal/files.h"

namespace kv0::wal {

class FaultInjectingFiles : public Files {
 public:
  enum class Op {
    kCreate,    // Create
    kWrite,     // Write
    kSync,      // SyncData, SyncDir, SyncMapped
    kTruncate,  // Truncate
    kAllocate,  // Allocate
    kRename,    // Rename
    kRemove,    // Remove, RemoveDir
    kMakeDir,   // MakeDir
  };
  static constexpr int kOps = 8;

  // Affects only paths that start with prefix (every path if empty).
  explicit FaultInjectingFiles(std::string prefix = "") : prefix_(std::move(prefix)) {}

  // The nth call of op from now (1 for the next) fails with err. With tear, a
  // failing write first writes half of its bytes.
  void FailNth(Op op, uint64_t n, int err = 5 /* EIO */, bool tear = false);
  // Every call of op fails with err until Clear.
  void FailAll(Op op, int err = 5 /* EIO */);
  // No more failures; counts keep going.
  void Clear();
  // Calls of op seen on affected paths, failed ones included.
  uint64_t count(Op op) const;

  int Create(const std::string& path, bool read_write, int* fd) override;
  int Write(int fd, const iovec* parts, int count, uint64_t offset, size_t* written) override;
  int SyncData(int fd) override;
  int SyncDir(const std::string& dir) override;
  int SyncMapped(const std::string& path, void* data, size_t size) override;
  int Truncate(int fd, uint64_t size) override;
  int Allocate(int fd, uint64_t size) override;
  int Rename(const std::string& from, const std::string& to) override;
  int Remove(const std::string& path) override;
  int RemoveDir(const std::string& path) override;
  int MakeDir(const std::string& path) override;

 private:
  struct Rule {
    uint64_t fail_at = 0;  // the call number that fails; 0: none
    bool all = false;
    bool tear = false;
    int err = 0;
  };
  // Counts a call on path; returns the errno it must fail with, or 0.
  int Check(Op op, const std::string& path, bool* tear = nullptr);
  static std::string PathOf(int fd);

  const std::string prefix_;
  mutable std::mutex mu_;
  std::array<Rule, kOps> rules_{};
  std::array<uint64_t, kOps> counts_{};
};

}  // namespace kv0::wal
