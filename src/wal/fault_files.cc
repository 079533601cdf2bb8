#include "wal/fault_files.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

namespace kv0::wal {

void FaultInjectingFiles::FailNth(Op op, uint64_t n, int err, bool tear) {
  std::lock_guard lock(mu_);
  Rule& rule = rules_[static_cast<int>(op)];
  rule = Rule{counts_[static_cast<int>(op)] + n, false, tear, err};
}

void FaultInjectingFiles::FailAll(Op op, int err) {
  std::lock_guard lock(mu_);
  rules_[static_cast<int>(op)] = Rule{0, true, false, err};
}

void FaultInjectingFiles::Clear() {
  std::lock_guard lock(mu_);
  rules_.fill(Rule{});
}

uint64_t FaultInjectingFiles::count(Op op) const {
  std::lock_guard lock(mu_);
  return counts_[static_cast<int>(op)];
}

int FaultInjectingFiles::Check(Op op, const std::string& path, bool* tear) {
  std::lock_guard lock(mu_);
  if (path.compare(0, prefix_.size(), prefix_) != 0) return 0;
  uint64_t number = ++counts_[static_cast<int>(op)];
  Rule& rule = rules_[static_cast<int>(op)];
  if (rule.all) return rule.err;
  if (rule.fail_at == 0 || number != rule.fail_at) return 0;
  if (tear != nullptr) *tear = rule.tear;
  int err = rule.err;
  rule = Rule{};
  return err;
}

std::string FaultInjectingFiles::PathOf(int fd) {
  char link[64], path[4096];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof(path));
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

int FaultInjectingFiles::Create(const std::string& path, bool read_write, int* fd) {
  if (int err = Check(Op::kCreate, path)) return err;
  return Files::Create(path, read_write, fd);
}

int FaultInjectingFiles::Write(int fd, const iovec* parts, int count, uint64_t offset,
                               size_t* written) {
  bool tear = false;
  *written = 0;
  int err = Check(Op::kWrite, PathOf(fd), &tear);
  if (err == 0) return Files::Write(fd, parts, count, offset, written);
  if (!tear) return err;
  // Half of the bytes reach the file before the failure.
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += parts[i].iov_len;
  size_t keep = total / 2;
  std::vector<iovec> half;
  for (int i = 0; i < count && keep > 0; ++i) {
    size_t take = std::min(keep, parts[i].iov_len);
    half.push_back({parts[i].iov_base, take});
    keep -= take;
  }
  if (!half.empty()) Files::Write(fd, half.data(), static_cast<int>(half.size()), offset, written);
  return err;
}

int FaultInjectingFiles::SyncData(int fd) {
  if (int err = Check(Op::kSync, PathOf(fd))) return err;
  return Files::SyncData(fd);
}

int FaultInjectingFiles::SyncDir(const std::string& dir) {
  if (int err = Check(Op::kSync, dir)) return err;
  return Files::SyncDir(dir);
}

int FaultInjectingFiles::SyncMapped(const std::string& path, void* data, size_t size) {
  if (int err = Check(Op::kSync, path)) return err;
  return Files::SyncMapped(path, data, size);
}

int FaultInjectingFiles::Truncate(int fd, uint64_t size) {
  if (int err = Check(Op::kTruncate, PathOf(fd))) return err;
  return Files::Truncate(fd, size);
}

int FaultInjectingFiles::Allocate(int fd, uint64_t size) {
  if (int err = Check(Op::kAllocate, PathOf(fd))) return err;
  return Files::Allocate(fd, size);
}

int FaultInjectingFiles::Rename(const std::string& from, const std::string& to) {
  if (int err = Check(Op::kRename, from)) return err;
  return Files::Rename(from, to);
}

int FaultInjectingFiles::Remove(const std::string& path) {
  if (int err = Check(Op::kRemove, path)) return err;
  return Files::Remove(path);
}

int FaultInjectingFiles::RemoveDir(const std::string& path) {
  if (int err = Check(Op::kRemove, path)) return err;
  return Files::RemoveDir(path);
}

int FaultInjectingFiles::MakeDir(const std::string& path) {
  if (int err = Check(Op::kMakeDir, path)) return err;
  return Files::MakeDir(path);
}

}  // namespace kv0::wal
