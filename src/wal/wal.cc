#include "wal/wal.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <system_error>
#include <utility>

#include "kv0/error.h"
#include "wal/files.h"
#include "wal/mapped_segment.h"
#include "wal/segment.h"

namespace kv0 {

WalSync ParseWalSync(std::string_view name) {
  if (name == "none") return WalSync::kNone;
  if (name == "batch") return WalSync::kBatch;
  if (name == "always") return WalSync::kAlways;
  throw Error(Code::kInvalidArgument, "wal_sync must be \"none\", \"batch\" or \"always\", not \"" +
                                          std::string(name) + "\"");
}

std::string_view WalSyncName(WalSync mode) noexcept {
  switch (mode) {
    case WalSync::kNone:
      return "none";
    case WalSync::kBatch:
      return "batch";
    case WalSync::kAlways:
      return "always";
  }
  return "unknown";
}

}  // namespace kv0

namespace kv0::wal {

namespace {

constexpr const char* kLockFile = "/LOCK";

std::string Hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016" PRIx64, v);
  return text;
}

bool IsWriterId(std::string_view name) {
  return name.size() == 16 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string RandomWriterId() {
  std::random_device device;
  uint64_t v = (static_cast<uint64_t>(device()) << 32) ^ device();
  return Hex64(v);
}

const char* NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

std::string HomeDir() {
  if (const char* home = NonEmptyEnv("HOME")) return home;
  std::vector<char> buffer(16384);
  passwd entry;
  passwd* found = nullptr;
  if (getpwuid_r(getuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr && *found->pw_dir != '\0') {
    return found->pw_dir;
  }
  throw Error(Code::kInvalidArgument,
              "no home directory to keep the WAL in: set wal_dir or KV0_WAL_DIR");
}

bool HasRecordBytes(const std::vector<Segment>& segments) {
  return std::any_of(segments.begin(), segments.end(), [](const Segment& s) { return s.size > 0; });
}

void RemoveFile(const std::string& path) {
  int err = CurrentFiles().Remove(path);
  if (err != 0 && err != ENOENT) ThrowIOError(path, "cannot delete", err);
}

}  // namespace

std::string ResolveRoot(const std::string& wal_dir_option) {
  if (!wal_dir_option.empty()) return wal_dir_option;
  if (const char* dir = NonEmptyEnv("KV0_WAL_DIR")) return dir;
#ifdef __APPLE__
  return HomeDir() + "/Library/Caches/kv0/wal";
#else
  if (const char* cache = NonEmptyEnv("XDG_CACHE_HOME")) return std::string(cache) + "/kv0/wal";
  return HomeDir() + "/.cache/kv0/wal";
#endif
}

std::string DatasetDir(const std::string& root, std::string_view key) {
  return root + "/" + Hex64(XXH3_64bits(key.data(), key.size()));
}

Log::Log(std::string dir, std::string writer_id, WalSync mode, bool mapped, uint64_t capacity,
         FileLock lock)
    : dir_(std::move(dir)),
      writer_id_(std::move(writer_id)),
      mode_(mode),
      mapped_(mapped),
      // A multiple of kMappedAlign, with room for a small record at least.
      capacity_(std::max((capacity + kMappedAlign - 1) / kMappedAlign * kMappedAlign,
                         MappedRecordSize(1))),
      lock_(std::move(lock)) {}

std::unique_ptr<Log> Log::Open(const std::string& dataset_dir, WalSync mode, bool mapped,
                               uint64_t mapped_capacity) {
  CreateDirs(dataset_dir, mode != WalSync::kNone);

  std::unique_ptr<Log> log;
  auto names = ListDirIfExists(dataset_dir);
  if (!names) ThrowIOError(dataset_dir, "cannot list WAL directory", ENOENT);
  std::sort(names->begin(), names->end());
  for (const std::string& name : *names) {
    std::string dir = dataset_dir + "/" + name;
    if (!IsWriterId(name) || !IsDirectory(dir)) continue;
    auto lock = FileLock::TryAcquire(dir + kLockFile, /*create=*/false);
    if (!lock) continue;
    auto segments = ListSegments(dir);
    if (HasRecordBytes(segments)) continue;  // left for ClaimAbandoned
    for (const Segment& segment : segments) RemoveFile(segment.path);
    log.reset(new Log(dir, name, mode, mapped, mapped_capacity, std::move(*lock)));
    break;
  }

  // A fresh directory can be adopted by a concurrent Open between our mkdir
  // and our lock; then we simply try another id.
  for (int attempt = 0; !log && attempt < 100; ++attempt) {
    std::string id = RandomWriterId();
    std::string dir = dataset_dir + "/" + id;
    if (int err = CurrentFiles().MakeDir(dir)) {
      if (err == EEXIST) continue;
      ThrowIOError(dir, "cannot create WAL writer directory", err);
    }
    auto lock = FileLock::TryAcquire(dir + kLockFile, /*create=*/true);
    if (!lock) continue;
    if (mode != WalSync::kNone) {
      if (int err = SyncDir(dataset_dir)) ThrowIOError(dataset_dir, "cannot sync directory", err);
    }
    log.reset(new Log(dir, id, mode, mapped, mapped_capacity, std::move(*lock)));
  }
  if (!log) throw Error(Code::kIOError, dataset_dir + ": cannot create a WAL writer directory");

  std::lock_guard<std::mutex> guard(log->mu_);
  log->OpenSegmentLocked();
  return log;
}

Log::~Log() {
  map_.reset();
  if (fd_ >= 0) close(fd_);
}

void Log::Append(std::string_view payload) {
  // A mapped segment's data ends at the first zero length.
  if (payload.empty()) throw Error(Code::kInvalidArgument, dir_ + ": a WAL record cannot be empty");
  if (payload.size() > kMaxPayload) {
    throw Error(Code::kInvalidArgument, dir_ + ": a WAL record holds at most " +
                                            std::to_string(kMaxPayload) + " bytes, not " +
                                            std::to_string(payload.size()));
  }
  char header[kHeaderSize];
  EncodeHeader(payload, header);

  std::lock_guard<std::mutex> guard(mu_);
  if (mapped_) {
    AppendMappedLocked(header, payload);
    return;
  }
  CheckAppendableLocked();
  const uint64_t total = kHeaderSize + payload.size();
  uint64_t done = 0;
  while (done < total) {
    iovec parts[2];
    int count = 0;
    if (done < kHeaderSize) parts[count++] = {header + done, kHeaderSize - done};
    uint64_t skip = done < kHeaderSize ? 0 : done - kHeaderSize;
    if (skip < payload.size()) {
      parts[count++] = {const_cast<char*>(payload.data()) + skip, payload.size() - skip};
    }
    // Written at our own offset: after a failed append is truncated away, the
    // descriptor's file position would point past the end.
    size_t n = 0;
    int err = CurrentFiles().Write(fd_, parts, count, size_ + done, &n);
    done += n;
    if (err != 0) FailAppendLocked("cannot append record", err, done > 0);
    if (n == 0) FailAppendLocked("cannot append record", EIO, done > 0);
  }
  if (mode_ == WalSync::kAlways) {
    if (int err = SyncData(fd_)) FailAppendLocked("cannot sync record", err, true);
  }
  size_ += total;
  ++appended_;
  if (mode_ == WalSync::kAlways) synced_ = appended_;
}

void Log::AppendMappedLocked(const char* header, std::string_view payload) {
  if (closed_) throw Error(Code::kNotSupported, dir_ + ": the log is closed");
  if (bad_tail_) CheckAppendableLocked();  // throws
  const uint64_t need = MappedRecordSize(payload.size());
  if (map_ && size_ + need > map_->size()) CloseMappedLocked();
  if (!map_) OpenSegmentLocked(need);
  if (size_ + need > zeroed_) ZeroAheadLocked(size_ + need);
  char* at = map_->data() + size_;
  WriteMappedRecord(at, header, payload);
  if (mode_ == WalSync::kAlways) {
    if (int err = map_->Sync(size_, size_ + need)) FailMappedAppendLocked(err, need);
  }
  size_ += need;
  ++appended_;
  if (mode_ == WalSync::kAlways) {
    synced_ = appended_;
    map_synced_ = size_;
  }
}

void Log::ZeroAheadLocked(uint64_t end) {
  // Chunks double from 64 KiB to 1 MiB: a segment that ends after a few
  // records (a short flush) writes little, a long one seldom.
  const uint64_t chunk = std::clamp<uint64_t>(zeroed_, 64 << 10, 1 << 20);
  const uint64_t to = std::min(map_->size(), std::max(end, zeroed_ + chunk));
  // A failure leaves the stores to fault their pages in, as without it, and
  // stops the writes ahead for this segment rather than failing each append.
  zeroed_ = WriteZerosAhead(fd_, zeroed_, to) == 0 ? to : map_->size();
}

void Log::CloseMappedLocked() {
  if (mode_ != WalSync::kNone) {
    if (int err = map_->Sync(map_synced_, size_)) {
      ThrowIOError(segment_path_, "cannot sync segment", err);
    }
    synced_ = appended_;
  }
  map_.reset();
  // Readers stop at the first zero length, so a zero tail left by a failed
  // cut costs only disk space.
  CurrentFiles().Truncate(fd_, size_);
  close(std::exchange(fd_, -1));
}

void Log::FailMappedAppendLocked(int err, uint64_t record_size) {
  std::string message =
      segment_path_ + ": cannot sync record: " + std::generic_category().message(err);
  // The record may have reached the disk in part or whole; a zero length
  // there, once synced, makes it unused space again.
  EraseMappedRecord(map_->data() + size_, record_size);
  if (map_->Sync(size_, size_ + record_size) == 0) throw Error(Code::kIOError, message);
  map_.reset();
  bad_tail_ = true;
  if (TruncateTailLocked()) {
    close(std::exchange(fd_, -1));
    throw Error(Code::kIOError, message +
                                    "; the segment was cut where the record started, and the log "
                                    "continues in a new one");
  }
  if (MarkTailLocked()) {
    throw Error(Code::kIOError,
                message + "; the segment was fenced off, and the log continues in a new one");
  }
  throw Error(Code::kIOError, message +
                                  "; the failed record could not be cut out either, so appends "
                                  "are refused until Seal() succeeds");
}

bool Log::Sync() {
  if (mapped_) {
    std::shared_ptr<Mapping> map;
    uint64_t from, to, target;
    std::string path;
    {
      std::lock_guard<std::mutex> guard(mu_);
      // Closing a segment syncs it: what is unsynced is in the current one.
      if (mode_ == WalSync::kNone || closed_ || !map_ || synced_ == appended_) return false;
      // Our reference keeps the bytes mapped if Seal moves on meanwhile.
      map = map_;
      from = map_synced_;
      to = size_;
      target = appended_;
      path = segment_path_;
    }
    if (int err = map->Sync(from, to)) ThrowIOError(path, "cannot sync segment", err);
    std::lock_guard<std::mutex> guard(mu_);
    synced_ = std::max(synced_, target);
    if (map_ == map) map_synced_ = std::max(map_synced_, to);
    return true;
  }
  int fd;
  uint64_t target;
  std::string path;
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (mode_ == WalSync::kNone || closed_ || fd_ < 0 || synced_ == appended_) return false;
    // A private descriptor lets Seal close the segment while we wait for the
    // disk, without the appenders waiting on us.
    fd = dup(fd_);
    if (fd < 0) ThrowIOError(segment_path_, "cannot sync segment", errno);
    target = appended_;
    path = segment_path_;
  }
  int err = SyncData(fd);
  close(fd);
  if (err != 0) ThrowIOError(path, "cannot sync segment", err);
  std::lock_guard<std::mutex> guard(mu_);
  synced_ = std::max(synced_, target);
  return true;
}

void Log::SyncIfDue(std::chrono::steady_clock::time_point now) {
  if (mode_ != WalSync::kBatch) return;
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (now - last_due_sync_ < kBatchSyncInterval) return;
    last_due_sync_ = now;
  }
  Sync();
}

uint64_t Log::Seal() {
  std::lock_guard<std::mutex> guard(mu_);
  if (closed_) throw Error(Code::kNotSupported, dir_ + ": the log is closed");
  if (fd_ >= 0 && bad_tail_) {
    // A renamed segment has a fixed length: it can only be closed.
    bool renamed = segment_path_ != dir_ + "/" + SegmentFileName(number_, mapped_);
    if (!(!renamed && TruncateTailLocked()) && !MarkTailLocked()) {
      throw Error(Code::kIOError, segment_path_ +
                                      ": cannot cut a failed record out of the segment; appends "
                                      "stay refused");
    }
  }
  if (mapped_) {
    if (map_) {
      if (size_ == 0) return number_ - 1;
      CloseMappedLocked();
    } else if (fd_ >= 0) {
      // A failed record was cut out of it above, after it was unmapped.
      close(std::exchange(fd_, -1));
    } else {
      // The next segment could not be created (a full disk, most likely):
      // every record is in a closed segment already. Trying again here would
      // fail the same way and keep the flush from committing them and
      // deleting their segments, which is what frees the disk.
      number_ = next_number_;
      return number_ - 1;
    }
    OpenSegmentLocked();
    return number_ - 1;
  }
  if (fd_ >= 0) {
    if (size_ == 0) return number_ - 1;
    if (mode_ != WalSync::kNone) {
      if (int err = SyncData(fd_)) ThrowIOError(segment_path_, "cannot sync segment", err);
      synced_ = appended_;
    }
    close(std::exchange(fd_, -1));
  }
  OpenSegmentLocked();
  return number_ - 1;
}

void Log::DeleteSealed(uint64_t upto) {
  uint64_t limit;
  {
    std::lock_guard<std::mutex> guard(mu_);
    if (closed_) return;
    // The segment numbered number_ holds unsealed records, also when a failure
    // has closed it.
    limit = std::min(upto, number_ - 1);
  }
  bool deleted = false;
  for (const Segment& segment : ListSegmentFiles(dir_)) {
    if (segment.name.number > limit) break;
    RemoveFile(segment.path);
    deleted = true;
  }
  if (deleted && mode_ != WalSync::kNone) {
    if (int err = SyncDir(dir_)) ThrowIOError(dir_, "cannot sync directory", err);
  }
}

void Log::CloseClean() {
  std::lock_guard<std::mutex> guard(mu_);
  if (closed_) return;
  closed_ = true;
  map_.reset();
  if (fd_ >= 0) close(std::exchange(fd_, -1));
  for (const Segment& segment : ListSegmentFiles(dir_)) RemoveFile(segment.path);
  if (mode_ != WalSync::kNone) {
    if (int err = SyncDir(dir_)) ThrowIOError(dir_, "cannot sync directory", err);
  }
  lock_.Release();
}

void Log::Abandon() {
  std::lock_guard<std::mutex> guard(mu_);
  if (closed_) return;
  closed_ = true;
  map_.reset();
  if (fd_ >= 0) close(std::exchange(fd_, -1));
  lock_.Release();
}

uint64_t Log::segment_bytes() const {
  std::lock_guard<std::mutex> guard(mu_);
  return fd_ >= 0 ? size_ : 0;
}

void Log::CheckAppendableLocked() const {
  if (closed_) throw Error(Code::kNotSupported, dir_ + ": the log is closed");
  if (fd_ < 0 || bad_tail_) {
    throw Error(Code::kIOError,
                dir_ +
                    ": appends are refused after a write failure that could not be cleaned "
                    "up; they resume once Seal() opens a new segment");
  }
}

void Log::OpenSegmentLocked(uint64_t capacity) {
  // Numbers are never retried: a failed attempt may have left its file.
  uint64_t number = next_number_++;
  std::string path = dir_ + "/" + SegmentFileName(number, mapped_);
  int fd;
  std::shared_ptr<Mapping> map;
  if (mapped_) {
    MappedFile file = CreateMappedSegment(path, std::max(capacity, capacity_));
    fd = file.fd;
    map = std::move(file.map);
  } else {
    if (int err = CurrentFiles().Create(path, /*read_write=*/false, &fd)) {
      ThrowIOError(path, "cannot create segment", err);
    }
  }
  if (mode_ != WalSync::kNone) {
    if (int err = SyncDir(dir_)) {
      map.reset();
      close(fd);
      CurrentFiles().Remove(path);
      ThrowIOError(dir_, "cannot sync directory after creating a segment", err);
    }
  }
  fd_ = fd;
  map_ = std::move(map);
  map_synced_ = 0;
  zeroed_ = 0;
  segment_path_ = std::move(path);
  number_ = number;
  size_ = 0;
  bad_tail_ = false;
}

void Log::FailAppendLocked(std::string_view what, int err, bool wrote) {
  std::string message =
      segment_path_ + ": " + std::string(what) + ": " + std::generic_category().message(err);
  if (!wrote) throw Error(Code::kIOError, message);
  bad_tail_ = true;
  if (TruncateTailLocked()) throw Error(Code::kIOError, message);
  if (!MarkTailLocked()) {
    throw Error(Code::kIOError, message +
                                    "; the partial record could not be cut out either, so "
                                    "appends are refused until Seal() succeeds");
  }
  try {
    OpenSegmentLocked();
  } catch (const Error& e) {
    throw Error(Code::kIOError, message +
                                    "; the segment was fenced off, and no new one could be "
                                    "opened, so appends are refused until Seal() "
                                    "succeeds (" +
                                    e.what() + ")");
  }
  throw Error(Code::kIOError,
              message + "; the segment was fenced off and the log continues in " + segment_path_);
}

bool Log::TruncateTailLocked() {
  if (CurrentFiles().Truncate(fd_, size_) != 0) return false;
  // In kAlways the record may have reached the disk before its fsync failed;
  // an undurable cut could bring a record reported as failed back after a
  // power loss.
  if (mode_ == WalSync::kAlways && SyncData(fd_) != 0) return false;
  bad_tail_ = false;
  return true;
}

bool Log::MarkTailLocked() {
  // The name tells recovery where the good bytes end, so the bad tail can
  // neither be replayed nor hide the records of later segments.
  std::string cut_path = dir_ + "/" + CutSegmentFileName(number_, size_, mapped_);
  if (segment_path_ != cut_path) {
    if (CurrentFiles().Rename(segment_path_, cut_path) != 0) return false;
    segment_path_ = cut_path;
  }
  if (mode_ != WalSync::kNone && SyncDir(dir_) != 0) return false;
  // The segment's length is fixed now. A failed sync of its good records goes
  // unreported: the failed append already tells the caller the disk is in
  // trouble.
  if (mode_ != WalSync::kNone && SyncData(fd_) == 0) synced_ = appended_;
  close(std::exchange(fd_, -1));
  bad_tail_ = false;
  return true;
}

void Abandoned::Remove() {
  for (const Segment& segment : ListSegmentFiles(dir)) RemoveFile(segment.path);
  RemoveFile(dir + kLockFile);
  if (int err = CurrentFiles().RemoveDir(dir); err != 0 && err != ENOENT) {
    ThrowIOError(dir, "cannot delete", err);
  }
  lock.Release();
  std::string parent = dir.substr(0, dir.rfind('/'));
  if (int err = SyncDir(parent)) ThrowIOError(parent, "cannot sync directory", err);
}

std::vector<Abandoned> ClaimAbandoned(const std::string& dataset_dir,
                                      const std::string& own_writer_id) {
  std::vector<Abandoned> claimed;
  auto names = ListDirIfExists(dataset_dir);
  if (!names) return claimed;
  std::sort(names->begin(), names->end());
  for (const std::string& name : *names) {
    std::string dir = dataset_dir + "/" + name;
    if (name == own_writer_id || !IsWriterId(name) || !IsDirectory(dir)) continue;
    auto lock = FileLock::TryAcquire(dir + kLockFile, /*create=*/false);
    if (!lock) continue;  // a running writer
    auto segments = ListSegments(dir);
    if (!HasRecordBytes(segments)) continue;  // idle, for a later Open to adopt
    Abandoned abandoned{dir, name, {}, std::move(*lock)};
    ReadRecords(segments, abandoned.records);
    claimed.push_back(std::move(abandoned));
  }
  return claimed;
}

}  // namespace kv0::wal
