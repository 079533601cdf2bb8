// Segment files of the write-ahead log: the record format, file names, and
// reading records back during recovery. Used only inside src/wal.
//
// A segment is a sequence of records, each
//
//   length: u32 LE | xxh3-64 of the payload: u64 LE | payload (length bytes)
//
// written with one write call. The length has no checksum of its own: a
// damaged length shows up as a payload checksum mismatch or as a record that
// runs past the end of the file.
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

void EncodeHeader(std::string_view payload, char (&header)[kHeaderSize]);

// A segment is named by its number, zero-padded: "000000000001.wal". A segment
// that ends in a failed record which could not be truncated away is renamed to
// "<number>.wal.<bytes>": only its first <bytes> bytes hold records.
struct SegmentName {
  uint64_t number = 0;
  std::optional<uint64_t> valid_bytes;
};
std::string SegmentFileName(uint64_t number);
std::string CutSegmentFileName(uint64_t number, uint64_t valid_bytes);
std::optional<SegmentName> ParseSegmentName(std::string_view file_name);

struct Segment {
  std::string path;
  SegmentName name;
  uint64_t size = 0;
};

// The segment files in dir, in number order. Throws kIOError.
std::vector<Segment> ListSegments(const std::string& dir);

// Appends the records of segments (in number order, as ListSegments returns
// them) to records. A record cut off by the end of the last segment that has
// bytes is a torn write from a crash: it is dropped and cut from the file.
// Damage anywhere else throws kCorruption naming the file and offset.
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
// power loss. Returns 0 or an errno value.
int SyncDir(const std::string& dir) noexcept;

// Makes a file's data durable. Returns 0 or an errno value.
int SyncData(int fd) noexcept;

}  // namespace kv0::wal
