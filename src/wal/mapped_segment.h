// Writing mapped segments ("<number>.wmap", see segment.h): a preallocated
// file mapped shared, into which records are copied. Used only inside src/wal.
//
// A store into a shared file mapping lands in the page cache, so a record is
// safe from the process dying as soon as its copy is done, without a system
// call; msync makes it safe from a power loss.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "wal/segment.h"

namespace kv0::wal {

// A shared mapping of a segment file, unmapped when the last reference goes
// (Sync may still be using it when the log moves to the next segment).
class Mapping {
 public:
  Mapping(char* data, uint64_t size, std::string path)
      : data_(data), size_(size), path_(std::move(path)) {}
  ~Mapping();

  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }

  // msync(MS_SYNC) of the bytes [from, to), widened to whole pages. Returns 0
  // or an errno value.
  int Sync(uint64_t from, uint64_t to) const noexcept;

 private:
  char* const data_;
  const uint64_t size_;
  const std::string path_;  // the segment file, for its name in errors and faults
};

struct MappedFile {
  int fd = -1;
  std::shared_ptr<Mapping> map;
};

// Creates the file at path (it must not exist), allocates capacity bytes of
// disk for it (zeros) and maps them. Throws kIOError naming the path, a full
// disk included, and then leaves no file behind.
MappedFile CreateMappedSegment(const std::string& path, uint64_t capacity);

// Writes zeros through the file descriptor into the mapped bytes [from, to)
// of a segment that holds no record there, so that the stores which later
// fill those bytes find their pages in the page cache. A first store into a
// page of freshly allocated space otherwise faults it in from the filesystem
// (reading the unwritten extent, preparing it for writing): in a profile of
// Track() those faults were 36 % of its samples, and 6 % with the zeros
// written ahead (docs/benchmarks.md). Returns 0 or an errno value; a failure
// changes nothing, since the bytes were zeros already.
int WriteZerosAhead(int fd, uint64_t from, uint64_t to);

// Writes a record at `at`, an offset of a mapping that is a multiple of
// kMappedAlign, with MappedRecordSize(payload.size()) bytes of zeros there.
// header holds the kHeaderSize bytes EncodeHeader wrote. The length is stored last, with one
// aligned atomic store after a release fence: a crash before it leaves a zero length, which ends
// the segment's data.
void WriteMappedRecord(char* at, const char* header, std::string_view payload);

// Undoes WriteMappedRecord: zeros the length first, then the rest of the
// size bytes, so they read as unused capacity again.
void EraseMappedRecord(char* at, uint64_t size);

}  // namespace kv0::wal
