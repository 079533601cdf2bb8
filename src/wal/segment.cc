#include "wal/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <system_error>

#include "kv0/error.h"
#include "wal/files.h"

namespace kv0::wal {

namespace {

constexpr std::string_view kSuffix = ".wal";
constexpr std::string_view kMappedSuffix = ".wmap";

uint32_t DecodeU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t DecodeU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::optional<uint64_t> ParseNumber(std::string_view s) {
  uint64_t v = 0;
  if (s.empty() || s.size() > 20) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The first `limit` bytes of the file at path (all of it, if shorter), or
// nullopt if it does not exist.
std::optional<std::string> ReadSegmentFile(const std::string& path, uint64_t limit = UINT64_MAX) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    ThrowIOError(path, "cannot open segment", errno);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    ThrowIOError(path, "cannot stat segment", err);
  }
  std::string out(std::min(static_cast<uint64_t>(st.st_size), limit), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    int err = n < 0 ? errno : EIO;
    if (n <= 0) {
      close(fd);
      ThrowIOError(path, n < 0 ? "cannot read segment" : "segment shrank while being read", err);
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return out;
}

void TruncateFile(const std::string& path, uint64_t size) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) ThrowIOError(path, "cannot open segment to cut it after its last record", errno);
  int err = CurrentFiles().Truncate(fd, size);
  if (err == 0) err = SyncData(fd);
  close(fd);
  if (err != 0) ThrowIOError(path, "cannot cut the segment after its last record", err);
}

// The first record length of a mapped segment, or nullopt if the file is gone.
std::optional<uint32_t> FirstLength(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    ThrowIOError(path, "cannot open segment", errno);
  }
  char bytes[4] = {};
  ssize_t n;
  do {
    n = pread(fd, bytes, sizeof(bytes), 0);
  } while (n < 0 && errno == EINTR);
  int err = errno;
  close(fd);
  if (n < 0) ThrowIOError(path, "cannot read segment", err);
  // A file too short for a length is not empty: reading it reports it.
  if (n < static_cast<ssize_t>(sizeof(bytes))) return UINT32_MAX;
  return DecodeU32(bytes);
}

// A crash can leave a file longer than the data that reached the disk, padded
// with zeros; such a tail is as torn as a short one.
bool AllZero(const std::string& data, size_t from) {
  return std::all_of(data.begin() + static_cast<std::ptrdiff_t>(from), data.end(),
                     [](char c) { return c == 0; });
}

// Whether a record that reads back whole starts at or after `from` (at an
// offset that is a multiple of `align`). A crash leaves at most the record it
// interrupted incomplete, with nothing after it, so damage followed by a good
// record is not a torn tail. Checking a candidate means hashing its payload;
// when that would take more than a bounded amount of work (a long damaged
// stretch of random bytes), the answer is yes: an open that fails with
// Corruption loses nothing, dropping records silently would.
bool ReadableRecordFollows(const std::string& data, size_t from, size_t align) {
  // A record's length is not zero, so none starts in the trailing zeros.
  size_t end = data.size();
  while (end > from && data[end - 1] == 0) --end;
  uint64_t budget = (uint64_t{1} << 30) + 16 * uint64_t{data.size()};
  for (size_t pos = (from + align - 1) / align * align; pos < end; pos += align) {
    if (data.size() - pos < kHeaderSize) break;
    uint32_t length = DecodeU32(&data[pos]);
    if (length == 0 || length > data.size() - pos - kHeaderSize) continue;
    if (length > budget) return true;
    budget -= length;
    if (XXH3_64bits(&data[pos + kHeaderSize], length) == DecodeU64(&data[pos + 4])) return true;
  }
  return false;
}

// Whether a mapped segment that starts with a zero length holds a readable
// record after it (the file is read whole: this happens only for a writer's
// unused last segment, or for damage).
bool MappedRecordAfterZeroLength(const std::string& path) {
  std::optional<std::string> data = ReadSegmentFile(path);
  return data && ReadableRecordFollows(*data, kMappedAlign, kMappedAlign);
}

// Parses the records of a segment written with write calls. Returns where
// the good records end.
size_t ParseRecords(const std::string& path, const std::string& data, bool last,
                    std::vector<std::string>& records) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t left = data.size() - pos;
    std::string problem;
    bool reaches_end = true;  // the damaged record extends to the end of the file
    if (left < kHeaderSize) {
      problem = "incomplete record header";
    } else {
      uint32_t length = DecodeU32(&data[pos]);
      uint64_t checksum = DecodeU64(&data[pos + 4]);
      if (length > left - kHeaderSize) {
        problem = "record length " + std::to_string(length) + " runs past the end of the file";
      } else if (XXH3_64bits(&data[pos + kHeaderSize], length) != checksum) {
        problem = "checksum mismatch";
        reaches_end = length == left - kHeaderSize;
      } else {
        records.emplace_back(data, pos + kHeaderSize, length);
        pos += kHeaderSize + length;
        continue;
      }
    }
    if (!last || !(reaches_end || AllZero(data, pos)) || ReadableRecordFollows(data, pos + 1, 1)) {
      throw Error(Code::kCorruption,
                  path + ": corrupt record at offset " + std::to_string(pos) + ": " + problem);
    }
    // The tail was being written when the writer stopped, so it was never
    // acknowledged.
    break;
  }
  return pos;
}

// Parses the records of a mapped segment, up to the first zero length.
// Returns where the good records end.
size_t ParseMappedRecords(const std::string& path, const std::string& data, bool last,
                          std::vector<std::string>& records) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t left = data.size() - pos;
    std::string problem;
    size_t damaged_end = data.size();  // where the damaged record ends
    if (left < kHeaderSize) {
      if (AllZero(data, pos)) break;
      problem = "incomplete record header";
    } else {
      uint32_t length = DecodeU32(&data[pos]);
      if (length == 0) {
        // The end of the data, unless records follow: a page that never
        // reached the disk reads as zeros in the middle of a segment.
        if (ReadableRecordFollows(data, pos + kMappedAlign, kMappedAlign)) {
          throw Error(Code::kCorruption, path + ": corrupt record at offset " +
                                             std::to_string(pos) +
                                             ": zero length before readable records");
        }
        break;
      }
      uint64_t checksum = DecodeU64(&data[pos + 4]);
      uint64_t record_end = pos + MappedRecordSize(length);
      if (length > left - kHeaderSize) {
        problem = "record length " + std::to_string(length) + " runs past the end of the file";
      } else if (XXH3_64bits(&data[pos + kHeaderSize], length) != checksum) {
        problem = "checksum mismatch";
        damaged_end = static_cast<size_t>(std::min<uint64_t>(record_end, data.size()));
      } else {
        records.emplace_back(data, pos + kHeaderSize, length);
        // Padding cut off by the end of the file holds no data.
        pos = static_cast<size_t>(std::min<uint64_t>(record_end, data.size()));
        continue;
      }
    }
    if (!last || !AllZero(data, damaged_end) ||
        ReadableRecordFollows(data, pos + kMappedAlign, kMappedAlign)) {
      throw Error(Code::kCorruption,
                  path + ": corrupt record at offset " + std::to_string(pos) + ": " + problem);
    }
    break;  // torn, as in ParseRecords
  }
  return pos;
}

// Appends the segment's records; returns how many bytes of it hold them
// (what follows is a torn tail or a mapped segment's unused capacity) and
// the file's size.
std::pair<uint64_t, uint64_t> ReadSegment(const Segment& segment, bool last,
                                          std::vector<std::string>& records) {
  const std::string& path = segment.path;
  // ListSegments found no record in it: its first length is zero.
  if (segment.name.mapped && segment.size == 0) return {0, 0};
  std::optional<std::string> read =
      ReadSegmentFile(path, segment.name.valid_bytes.value_or(UINT64_MAX));
  if (!read) ThrowIOError(path, "cannot open segment", ENOENT);
  const std::string& data = *read;

  size_t good = segment.name.mapped ? ParseMappedRecords(path, data, last, records)
                                    : ParseRecords(path, data, last, records);
  return {good, data.size()};
}

}  // namespace

void EncodeHeader(std::string_view payload, char (&header)[kHeaderSize]) {
  uint64_t length = payload.size();
  uint64_t checksum = XXH3_64bits(payload.data(), payload.size());
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>(length >> (8 * i));
  for (int i = 0; i < 8; ++i) header[4 + i] = static_cast<char>(checksum >> (8 * i));
}

std::string SegmentFileName(uint64_t number, bool mapped) {
  char name[40];
  std::snprintf(name, sizeof(name), "%012" PRIu64 "%s", number,
                mapped ? kMappedSuffix.data() : kSuffix.data());
  return name;
}

std::string CutSegmentFileName(uint64_t number, uint64_t valid_bytes, bool mapped) {
  return SegmentFileName(number, mapped) + "." + std::to_string(valid_bytes);
}

std::optional<SegmentName> ParseSegmentName(std::string_view file_name) {
  size_t dot = file_name.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  SegmentName name;
  auto number = ParseNumber(file_name.substr(0, dot));
  if (!number) return std::nullopt;
  name.number = *number;
  std::string_view rest = file_name.substr(dot);
  if (rest.substr(0, kMappedSuffix.size()) == kMappedSuffix) {
    name.mapped = true;
    rest.remove_prefix(kMappedSuffix.size());
  } else if (rest.substr(0, kSuffix.size()) == kSuffix) {
    rest.remove_prefix(kSuffix.size());
  } else {
    return std::nullopt;
  }
  if (!rest.empty()) {
    if (rest[0] != '.') return std::nullopt;
    name.valid_bytes = ParseNumber(rest.substr(1));
    if (!name.valid_bytes) return std::nullopt;
  }
  return name;
}

std::vector<Segment> ListSegmentFiles(const std::string& dir) {
  auto names = ListDirIfExists(dir);
  if (!names) ThrowIOError(dir, "cannot list WAL directory", ENOENT);
  std::vector<Segment> segments;
  for (const std::string& file_name : *names) {
    auto name = ParseSegmentName(file_name);
    if (name) segments.push_back(Segment{dir + "/" + file_name, *name, 0});
  }
  std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) {
    return a.name.number != b.name.number ? a.name.number < b.name.number : a.path < b.path;
  });
  return segments;
}

std::vector<Segment> ListSegments(const std::string& dir) {
  std::vector<Segment> segments;
  for (Segment& segment : ListSegmentFiles(dir)) {
    struct stat st;
    if (stat(segment.path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;  // deleted by the writer after we listed it
      ThrowIOError(segment.path, "cannot stat segment", errno);
    }
    if (!S_ISREG(st.st_mode)) continue;
    segment.size = static_cast<uint64_t>(st.st_size);
    if (segment.name.mapped && segment.size > 0) {
      auto first = FirstLength(segment.path);
      if (!first) continue;
      // Unused capacity holds nothing; a first length of zero with records
      // after it is damage, which reading the segment reports.
      if (*first == 0 && !MappedRecordAfterZeroLength(segment.path)) segment.size = 0;
    }
    segments.push_back(std::move(segment));
  }
  return segments;
}

void ReadRecords(const std::vector<Segment>& segments, std::vector<std::string>& records) {
  // Empty segments after a torn one hide no records, so the tail rule applies
  // to the last segment with bytes (a writer stopped right after a Seal).
  size_t last = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (std::min(segments[i].size, segments[i].name.valid_bytes.value_or(UINT64_MAX)) > 0) {
      last = i;
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  for (size_t i = 0; i < segments.size(); ++i) {
    extents.push_back(ReadSegment(segments[i], i >= last, records));
  }
  // Only once every segment has read back: cutting a torn tail (or a mapped
  // segment's unused capacity) leaves well-formed files for the next reader,
  // and a WAL that failed to read keeps every byte for whoever looks at it.
  for (size_t i = 0; i < segments.size(); ++i) {
    if (extents[i].first < extents[i].second) TruncateFile(segments[i].path, extents[i].first);
  }
}

void ThrowIOError(const std::string& path, std::string_view what, int err) {
  throw Error(Code::kIOError,
              path + ": " + std::string(what) + ": " + std::generic_category().message(err));
}

std::optional<std::vector<std::string>> ListDirIfExists(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return std::nullopt;
    ThrowIOError(dir, "cannot list directory", errno);
  }
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    dirent* entry = readdir(d);
    if (entry == nullptr) {
      int err = errno;
      closedir(d);
      if (err != 0) ThrowIOError(dir, "cannot list directory", err);
      return names;
    }
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void CreateDirs(const std::string& path, bool sync) {
  if (path.empty()) throw Error(Code::kInvalidArgument, "empty WAL directory path");
  if (IsDirectory(path)) return;
  size_t end = 0;
  while (end != std::string::npos) {
    end = path.find('/', end + 1);
    std::string prefix = path.substr(0, end);
    if (prefix.empty() || prefix.back() == '/') continue;  // root, or a doubled slash
    int err = CurrentFiles().MakeDir(prefix);
    if (err == 0) {
      if (sync) {
        size_t slash = prefix.rfind('/');
        std::string parent = slash == std::string::npos ? "." : prefix.substr(0, slash + 1);
        if (int err = SyncDir(parent)) ThrowIOError(parent, "cannot sync directory", err);
      }
      continue;
    }
    if (err != EEXIST) ThrowIOError(prefix, "cannot create directory", err);
    if (!IsDirectory(prefix)) ThrowIOError(prefix, "cannot create directory", ENOTDIR);
  }
}

int SyncDir(const std::string& dir) noexcept { return CurrentFiles().SyncDir(dir); }

int SyncData(int fd) noexcept { return CurrentFiles().SyncData(fd); }

}  // namespace kv0::wal
