// Segment files of the write-ahead log: the record formats, file names, and
// reading records back during recovery. Used only inside src/wal.
//
// A segment written with write calls ("<number>.wal") is a sequence of records,
// each
//
//   length: u32 LE | xxh3-64 of the payload: u64 LE | payload (length bytes)
//
// written with one write call. The length has no checksum of its own: a
// damaged length shows up as a payload checksum mismatch or as a record that
// runs past the end of the file.
//
// A mapped segment ("<number>.wmap") holds the same records, each padded with
// zeros to a multiple of kMappedAlign bytes, so every length sits at an
// aligned offset. The file is preallocated and the records are copied into a
// shared mapping of it; the length is stored last, so a length of zero marks
// the end of the data: the rest of the file is unused capacity or a record
// whose copy never finished. A sealed mapped segment is truncated after its
// last record; one left by a crash keeps its zero tail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kv0::wal {

inline constexpr size_t kHeaderSize = 12;
inline constexpr uint64_t kMaxPayload = UINT32_MAX;
inline constexpr uint64_t kMappedAlign = 8;

void EncodeHeader(std::string_view payload, char (&header)[kHeaderSize]);

// The bytes a record of payload_size bytes takes in a mapped segment.
constexpr uint64_t MappedRecordSize(uint64_t payload_size) {
  return (kHeaderSize + payload_size + kMappedAlign - 1) / kMappedAlign * kMappedAlign;
}

// A segment is named by its number, zero-padded, and its kind:
// "000000000001.wal" or "000000000001.wmap"; both kinds share one sequence of
// numbers. A segment that ends in a failed record which could not be truncated
// away is renamed to "<number>.wal.<bytes>" (or ".wmap.<bytes>"): only its
// first <bytes> bytes hold records.
struct SegmentName {
  uint64_t number = 0;
  bool mapped = false;
  std::optional<uint64_t> valid_bytes;
};
std::string SegmentFileName(uint64_t number, bool mapped = false);
std::string CutSegmentFileName(uint64_t number, uint64_t valid_bytes, bool mapped = false);
std::optional<SegmentName> ParseSegmentName(std::string_view file_name);

struct Segment {
  std::string path;
  SegmentName name;
  // The file's size; 0 for a mapped segment whose first length is zero (it
  // holds no record, only unused capacity).
  uint64_t size = 0;
};

// The segment files in dir, in number order, with their sizes (a mapped
// segment's first record read to tell unused capacity from damage). Throws
// kIOError.
std::vector<Segment> ListSegments(const std::string& dir);
// The same files, by name only (sizes left 0): for deleting them, which
// runs after every flush and must not read a mapped segment's capacity.
std::vector<Segment> ListSegmentFiles(const std::string& dir);

// Appends the records of segments (in number order, as ListSegments returns
// them) to records. A record cut off by the end of the last segment that has
// bytes is a torn write from a crash, if no record that reads back whole
// follows it: it is dropped and cut from the file. A mapped segment's data
// ends at the first zero length, and what follows it is cut from the file too;
// a damaged record there followed only by zeros is torn as well. Damage
// anywhere else, and any damage (a zero length included) followed by a
// readable record, throws kCorruption naming the file and offset, before
// anything is cut.
void ReadRecords(const std::vector<Segment>& segments, std::vector<std::string>& records);

// File helpers shared by the WAL. Failures throw kIOError naming the path.

[[noreturn]] void ThrowIOError(const std::string& path, std::string_view what, int err);

// Names of the entries in dir, without "." and "..". Returns nullopt if dir
// does not exist.
std::optional<std::vector<std::string>> ListDirIfExists(const std::string& dir);

bool IsDirectory(const std::string& path);

// Creates path and missing parents; with sync, makes each new entry durable.
void CreateDirs(const std::string& path, bool sync);

// fsync of a directory, so that entries created or removed in it survive a
// power loss, through CurrentFiles(). Returns 0 or an errno value.
int SyncDir(const std::string& dir) noexcept;

// Makes a file's data durable, through CurrentFiles(). Returns 0 or an errno
// value.
int SyncData(int fd) noexcept;

}  // namespace kv0::wal
