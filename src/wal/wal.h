// The local write-ahead log, shared by the key-value and tracking layers.
//
// Layout on local disk:
//
//   <root>/<16 hex digits of xxh3(key)>/<writer id>/LOCK
//                                                   000000000001.wal ...
//                                                   (or 000000000001.wmap ...)
//
// The key is the dataset URI (key-value layer) or "repo:<uri>" (tracking).
// Each open Log is one writer: a directory named by a random 64-bit id, kept
// exclusively flock'ed for as long as the writer runs. A directory whose lock
// can be taken belongs to a writer that is gone; the next writer either adopts
// it (when it holds no records) or claims its records for replay.
//
// This layer sees records as opaque byte strings. Deciding what a record
// means, what is already committed and what to replay is the caller's job.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kv0/wal_sync.h"
#include "util/file_lock.h"

namespace kv0::wal {

class Mapping;

// How far Append goes before it returns is the log's WalSync mode (see
// kv0/wal_sync.h); in a mapped log, "fsync" is an msync of the mapped bytes.

// The WAL root: wal_dir_option if set, else $KV0_WAL_DIR, else the platform
// cache directory ($XDG_CACHE_HOME/kv0/wal or ~/.cache/kv0/wal; on macOS
// ~/Library/Caches/kv0/wal).
std::string ResolveRoot(const std::string& wal_dir_option);

// The directory under root that holds the writers of one dataset or repo.
std::string DatasetDir(const std::string& root, std::string_view key);

// One open writer.
//
// Records are appended to the current segment; Seal() closes it and starts the
// next, so the caller can delete exactly the segments its Lance commit covers.
//
// A log writes its records in one of two ways, chosen at Open:
//
// - With write calls (the default): one write call per record, into
//   "<number>.wal" segments.
//
//   Failed appends: Append writes a record with one write call and, on
//   failure, truncates the segment back to where the record started before it
//   throws kIOError, so a reported failure is never replayed, and a partial
//   record never sits in front of later acknowledged ones (recovery would take
//   it for a torn tail and drop them). If the truncation itself fails, the
//   segment is renamed to record how many of its bytes are good and the log
//   continues in a new segment. If that fails too, every Append throws
//   kIOError until a Seal() succeeds.
//
// - Mapped: a segment is a "<number>.wmap" file of mapped_capacity bytes
//   (more if one record needs it), allocated on disk when it is created and
//   mapped shared. Append copies the record into the mapping and, unless
//   mode() is kAlways, makes no system call. Once the copy is done the bytes
//   are in the OS's page cache, so in every mode an acknowledged record
//   survives the process dying, however it dies; msync stands in for fsync
//   in the sync modes, so a power loss or kernel crash loses what was not
//   synced, as with write calls. A process that dies inside Append leaves its
//   record whole or not at all: the length is stored last, and a zero length
//   ends a segment's data.
//
//   When a record does not fit in the rest of the current segment, Append
//   closes the segment as Seal() would (synced unless kNone) and continues in
//   a new one; Seal()'s numbers keep their meaning. Creating a segment
//   allocates its disk space, so a full disk is reported then, as kIOError
//   from Append (or Open or Seal) with nothing written; the next Append tries
//   again. In kAlways, a record whose msync fails is zeroed out of the
//   mapping before Append throws kIOError; if that cannot be synced either,
//   the segment is cut where the record started and the log continues in a
//   new one, and if even the cut fails, appends are refused until a Seal()
//   succeeds, as above.
//
// Thread-safe. Records land in the order their Append calls are made under
// the log's internal mutex; a caller that needs a specific order appends under
// its own lock. Sync() may run concurrently with Append: it does not hold the
// mutex while it waits for the disk.
class Log {
 public:
  static constexpr uint64_t kDefaultMappedCapacity = 8 << 20;

  // Creates dataset_dir if needed. Adopts an idle writer directory (unlocked,
  // no records) and its writer id if there is one, so a machine's writer ids
  // stay few; otherwise creates a directory with a fresh id. Throws kIOError
  // naming the path if the directory cannot be created or written. With
  // mapped, the log is a mapped one (above), whose segments hold
  // mapped_capacity bytes (a test sets it small).
  static std::unique_ptr<Log> Open(const std::string& dataset_dir, WalSync mode,
                                   bool mapped = false,
                                   uint64_t mapped_capacity = kDefaultMappedCapacity);

  // Without CloseClean(), leaves the segments for a later ClaimAbandoned, as
  // a crash would (a mapped segment keeps its zero tail). Unsynced records
  // are not fsynced.
  ~Log();

  Log(const Log&) = delete;
  Log& operator=(const Log&) = delete;

  // Appends one record, durable as mode() says. Throws kInvalidArgument for an
  // empty payload or one over 4 GiB - 1 (nothing is written), kIOError on
  // failure (see above), kNotSupported after CloseClean().
  void Append(std::string_view payload);

  // fsyncs the current segment if anything was appended since the last sync,
  // and returns whether it did. Does nothing in kNone mode (and in kAlways
  // there is never anything left to sync). Throws kIOError; the records since
  // the last successful sync may then not be durable.
  bool Sync();

  // The batch mode's clock: in kBatch, Sync()s when kBatchSyncInterval has
  // passed since the last time it did (the background thread calls it on
  // every tick); otherwise does nothing.
  static constexpr std::chrono::milliseconds kBatchSyncInterval{100};
  void SyncIfDue(std::chrono::steady_clock::time_point now);

  // Closes the current segment, fsynced unless mode() is kNone (a mapped one
  // is also unmapped and cut after its last record), and starts a new one.
  // Returns N such that every record appended before the call is in a segment
  // numbered <= N and every later record in one numbered > N. An empty
  // current segment is kept. Throws kIOError if the segment cannot be synced
  // (nothing changes) or no new segment can be created (appends are refused
  // until a later Seal() succeeds, or in a mapped log until an Append creates
  // one; N covers these records too). A mapped log left with no segment open
  // that way has nothing to close: Seal returns N at once and leaves the next
  // segment to the next Append, so that a flush can commit and delete what a
  // full disk holds.
  uint64_t Seal();

  // Deletes the segments numbered <= upto, once a commit covers them. Never
  // deletes the current segment.
  void DeleteSealed(uint64_t upto);

  // Everything appended is committed: deletes all segments, keeps the empty
  // directory for a later Open to adopt, and releases the lock. The log
  // accepts no more appends.
  void CloseClean();

  // Stops without cleaning up, as a crash would: every segment stays for a
  // later ClaimAbandoned and the lock is released. The log accepts no more
  // appends.
  void Abandon();

  const std::string& writer_id() const { return writer_id_; }
  const std::string& dir() const { return dir_; }
  WalSync mode() const { return mode_; }
  bool mapped() const { return mapped_; }
  // Bytes of records in the current segment (with their padding, if mapped).
  uint64_t segment_bytes() const;

 private:
  Log(std::string dir, std::string writer_id, WalSync mode, bool mapped, uint64_t capacity,
      FileLock lock);

  void CheckAppendableLocked() const;
  // Creates the next segment; a mapped one holds at least capacity bytes.
  void OpenSegmentLocked(uint64_t capacity = 0);
  // header holds the record header EncodeHeader wrote.
  void AppendMappedLocked(const char* header, std::string_view payload);
  // Writes zeros ahead of the records of the mapped segment up to at least
  // `end` (mapped_segment.h, WriteZerosAhead, says why).
  void ZeroAheadLocked(uint64_t end);
  // Syncs (unless kNone), unmaps, cuts and closes the current mapped segment.
  // Throws kIOError if it cannot be synced; nothing changes then.
  void CloseMappedLocked();
  [[noreturn]] void FailMappedAppendLocked(int err, uint64_t record_size);
  // Throws for a failed append; wrote says whether part of the record may be
  // in the file.
  [[noreturn]] void FailAppendLocked(std::string_view what, int err, bool wrote);
  bool TruncateTailLocked();
  bool MarkTailLocked();

  const std::string dir_;
  const std::string writer_id_;
  const WalSync mode_;
  const bool mapped_;
  const uint64_t capacity_;  // of a mapped segment

  mutable std::mutex mu_;
  FileLock lock_;
  int fd_ = -1;               // current segment, or -1 if none could be opened
  std::string segment_path_;  // its path (it changes when the segment is renamed)
  uint64_t number_ = 0;       // its number
  uint64_t next_number_ = 1;
  uint64_t size_ = 0;      // bytes of whole records in it
  bool bad_tail_ = false;  // it ends in a failed record that is still there
  // A mapped log's current segment is mapped here, unless a failure closed it
  // (fd_ < 0) or it awaits a cut (bad_tail_).
  std::shared_ptr<Mapping> map_;
  uint64_t map_synced_ = 0;  // bytes of it known durable
  uint64_t zeroed_ = 0;      // bytes of it written ahead as zeros (or given up on)
  uint64_t appended_ = 0;    // records appended over the log's life
  uint64_t synced_ = 0;      // how many of them are known durable
  bool closed_ = false;
  std::chrono::steady_clock::time_point last_due_sync_{};  // SyncIfDue's clock
};

// The records of a writer that is gone, with its lock held so no one else
// claims them. Destroying it releases the lock and leaves the files.
struct Abandoned {
  std::string dir;
  std::string writer_id;
  std::vector<std::string> records;  // in write order
  FileLock lock;

  // Deletes the directory (once its records are safe elsewhere) and releases
  // the lock.
  void Remove();
};

// Locks and reads every writer directory under dataset_dir, except
// own_writer_id's, whose lock can be taken and that holds at least one
// segment with bytes in it. Directories of running writers are skipped.
//
// Segments of both kinds are read in number order. A record cut off by the
// end of a directory's last segment (empty ones aside) is a torn write: it is
// dropped and truncated away. A mapped segment's records end at the first
// zero length; the rest of the file is cut off as well, and in the last
// segment a damaged record followed only by zeros counts as torn. A checksum
// mismatch or a record running past the end of a file anywhere else throws
// kCorruption naming the file and offset. Gaps in segment numbers are normal
// (sealed segments are deleted).
std::vector<Abandoned> ClaimAbandoned(const std::string& dataset_dir,
                                      const std::string& own_writer_id);

}  // namespace kv0::wal
