#include "wal/mapped_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "kv0/error.h"
#include "wal/files.h"

namespace kv0::wal {

namespace {

uint64_t PageSize() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

Mapping::~Mapping() { munmap(data_, size_); }

int Mapping::Sync(uint64_t from, uint64_t to) const noexcept {
  if (to <= from) return 0;
  uint64_t start = from / PageSize() * PageSize();
  return CurrentFiles().SyncMapped(path_, data_ + start, to - start);
}

MappedFile CreateMappedSegment(const std::string& path, uint64_t capacity) {
  int fd = -1;
  if (int err = CurrentFiles().Create(path, /*read_write=*/true, &fd)) {
    ThrowIOError(path, "cannot create segment", err);
  }
  // Allocated disk space makes a full disk show up here rather than as a
  // SIGBUS when a store into the mapping needs a block.
  const char* what = "cannot allocate space for segment";
  int err = CurrentFiles().Allocate(fd, capacity);
  void* data = MAP_FAILED;
  if (err == 0) {
    what = "cannot map segment";
    data = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) err = errno;
  }
  if (err == 0) {
    // The segment is written front to back and read only by a replay, which
    // maps it anew. Without this hint the first store faults in a whole
    // readahead window of zeroes: the device's read_ahead_kb, which on some
    // machines is the full segment, so the first record after every flush
    // paid for zeroing megabytes. A hint that fails changes nothing else.
    madvise(data, capacity, MADV_RANDOM);
  }
  if (err != 0) {
    close(fd);
    CurrentFiles().Remove(path);
    ThrowIOError(path, what, err);
  }
  return {fd, std::make_shared<Mapping>(static_cast<char*>(data), capacity, path)};
}

int WriteZerosAhead(int fd, uint64_t from, uint64_t to) {
  static constexpr size_t kPart = 64 << 10;
  static const char zeros[kPart] = {};
  while (from < to) {
    iovec parts[16];
    int count = 0;
    for (uint64_t at = from; at < to && count < 16; at += kPart) {
      parts[count++] = {const_cast<char*>(zeros),
                        static_cast<size_t>(std::min<uint64_t>(kPart, to - at))};
    }
    size_t written = 0;
    int err = CurrentFiles().Write(fd, parts, count, from, &written);
    if (err != 0) return err;
    if (written == 0) return EIO;
    from += written;
  }
  return 0;
}

void WriteMappedRecord(char* at, const char* header, std::string_view payload) {
  std::memcpy(at + 4, header + 4, kHeaderSize - 4);
  std::memcpy(at + kHeaderSize, payload.data(), payload.size());
  uint64_t end = kHeaderSize + payload.size();
  std::memset(at + end, 0, MappedRecordSize(payload.size()) - end);
  // The length in the byte order of the header (little endian), as a value
  // whose native store writes those bytes.
  uint32_t length;
  std::memcpy(&length, header, sizeof(length));
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(at))
      .store(length, std::memory_order_release);
}

void EraseMappedRecord(char* at, uint64_t size) {
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(at)).store(0, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_release);
  std::memset(at + 4, 0, size - 4);
}

}  // namespace kv0::wal
