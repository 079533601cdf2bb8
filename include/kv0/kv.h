// kv0::kv: an ordered key-value store on one Lance dataset.
//
// Keys and values are byte strings; keys sort byte-wise (memcmp). Writes are
// applied at once to an in-memory view that serves every read, logged to a
// local write-ahead log, and committed to Lance in batches: when the buffer
// passes write_buffer_size, every flush_interval, on Flush(), on a sync write,
// and on close. A DB is thread-safe; reads see every write made through it,
// flushed or not.
//
// Several handles, in one process or many, may open one database. Appends
// never conflict; each handle sees the others' committed writes when it
// refreshes (at most every refresh_interval, or on Refresh()). Conflicting
// writes to one key resolve last-writer-wins by sequence number, a hybrid
// logical clock in nanoseconds.
//
// Fork. A handle belongs to the process that opened it. In the child of a
// fork() every call on a handle (or iterator) the parent opened throws
// NotSupported, and destroying it does nothing: no flush, no close, no
// change to the parent's write-ahead log, locks or files (the child's copy
// of it stays allocated). The child opens handles of its own and uses them
// as any process would, on the same database as the parent or another.
//
// Slow stores. Reads are answered from the in-memory view and never wait on
// the object store for what the view holds: the refresh a read finds due
// runs in the background (the read answers from the view as it is), and
// no lock a read takes is held across object-store I/O by a flush, refresh,
// compaction or cleanup. Only values that stay in Lance (over
// lazy_value_threshold, not cached) are read from the store. A write waits
// on the store only if it is a sync write, or if the buffer has grown past
// twice write_buffer_size (it then tries one flush itself, unless flushes
// are backing off after failures). Every wait is bounded: request_timeout
// per request, commit_timeout per commit.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kv0/error.h"
#include "kv0/wal_sync.h"

namespace kv0::kv {

using kv0::WalSync;

// Limits, checked before a write is logged (it fails with InvalidArgument
// and changes nothing): a key or a value holds at most kMaxKeySize or
// kMaxValueSize bytes, and one write (a batch, with 17 bytes per operation)
// at most kMaxWriteSize bytes, the most one WAL record holds. A commit of
// more than 2 GiB is split into several Arrow batches of one fragment, so
// everything these limits admit can be committed.
inline constexpr size_t kMaxKeySize = (size_t{1} << 30) - 1;
inline constexpr size_t kMaxValueSize = (size_t{1} << 30) - 1;
inline constexpr size_t kMaxWriteSize = (size_t{1} << 32) - 2;

struct Options {
  // --- Opening -------------------------------------------------------------
  bool create_if_missing = true;
  // Read only: writes fail with NotSupported.
  bool read_only = false;
  // Open this version (non-zero) or tag, read-only.
  uint64_t version = 0;
  std::string tag;
  // Object-store settings handed to Lance unchanged (aws_endpoint, ...).
  std::map<std::string, std::string> storage_options;

  // --- Writing -------------------------------------------------------------
  size_t write_buffer_size = 4 << 20;  // bytes buffered before a commit
  std::chrono::milliseconds flush_interval{5000};
  // Compact after a flush that leaves more fragments under 2^20 rows (the
  // size compaction merges toward; full fragments are never rewritten).
  size_t max_fragments = 32;

  // --- Memory and reopen ---------------------------------------------------
  // Committed values longer than this stay in Lance; the view keeps their
  // address and reads them through a cache of value_cache_size bytes.
  size_t lazy_value_threshold = 4096;
  size_t value_cache_size = 64 << 20;
  // A handle closing with at least this many entries saves its view.
  size_t snapshot_min_entries = 100000;

  // --- Object stores ---------------------------------------------------------
  // A bound on each object-store request, and how often a failed one is
  // retried (the storage options "timeout" and "client_max_retries"
  // override them). Local directories and memory:// need neither.
  std::chrono::milliseconds request_timeout{30000};
  uint32_t request_retries = 3;
  // A bound on each commit (a flush's append, a compaction), races lost to
  // other writers' commits and retried included: one that takes longer
  // fails, its writes stay buffered and logged, and later flushes retry
  // them. Close() takes at most about this long. 0: no bound.
  std::chrono::milliseconds commit_timeout{60000};

  // --- Consistency -----------------------------------------------------------
  std::chrono::seconds tombstone_grace{3600};
  std::chrono::milliseconds refresh_interval{1000};
  // Versions older than this are removed in the background, within a tenth
  // of it after they expire (src/lance/auto_cleanup.h); never inside a commit.
  std::chrono::seconds version_retention{7 * 24 * 3600};

  // --- Write-ahead log ---------------------------------------------------------
  // Root of the local WAL directories: this, else $KV0_WAL_DIR, else the
  // platform cache directory (~/.cache/kv0/wal).
  std::string wal_dir;
  WalSync wal_sync = WalSync::kBatch;
  // Marks older than this are dropped by compaction; a WAL with an older
  // operation and no mark fails the open unless replay_stale_wal is set.
  std::chrono::seconds mark_ttl{30 * 24 * 3600};
  bool replay_stale_wal = false;
};

struct WriteOptions {
  // Committed to Lance before the call returns.
  bool sync = false;
  // Not logged: lost if the process dies before the next commit.
  bool disable_wal = false;
};

// Writes applied atomically: all or none, for local readers and in storage.
class WriteBatch {
 public:
  enum class Kind : uint8_t { kPut = 0, kDelete = 1, kDeleteRange = 2 };
  struct Op {
    Kind kind;
    std::string key;    // the key, or the inclusive start of a range
    std::string value;  // the value, or the exclusive end of a range
  };

  void Put(std::string_view key, std::string_view value);
  void Delete(std::string_view key);
  // Deletes every key in [begin, end).
  void DeleteRange(std::string_view begin, std::string_view end);
  void Clear() { ops_.clear(); }
  size_t Count() const { return ops_.size(); }
  const std::vector<Op>& ops() const { return ops_; }

 private:
  std::vector<Op> ops_;
};

// A position in the store's key order. Iterators are not snapshots: they read
// the view in chunks, so they see writes beyond their position made before
// the next chunk is read, and never return a key twice or out of order.
// Not thread-safe; use one per thread.
class Iterator {
 public:
  virtual ~Iterator() = default;
  virtual bool Valid() const = 0;
  virtual void SeekToFirst() = 0;
  virtual void SeekToLast() = 0;
  // The first key >= target.
  virtual void Seek(std::string_view target) = 0;
  // The last key <= target.
  virtual void SeekForPrev(std::string_view target) = 0;
  virtual void Next() = 0;
  virtual void Prev() = 0;
  // Valid() must be true. The views stay valid until the iterator moves.
  virtual std::string_view key() const = 0;
  virtual std::string_view value() = 0;
};

struct VersionInfo {
  uint64_t version = 0;
  int64_t timestamp_us = 0;  // commit time
};

// Counters a caller can show: what the handle holds and has done.
struct Stats {
  uint64_t version = 0;           // dataset version the handle reads
  uint64_t entries = 0;           // live keys in the view
  uint64_t tombstones = 0;        // point tombstones in the view
  uint64_t range_tombstones = 0;  // range tombstone pieces in the view
  uint64_t lazy_values = 0;       // values that stay in Lance
  uint64_t buffered_ops = 0;      // operations not yet committed
  uint64_t buffered_bytes = 0;
  uint64_t fragments = 0;
  uint64_t stored_rows = 0;
  uint64_t flushes = 0;
  uint64_t compactions = 0;
  // Refreshes that rebuilt the view from every fragment, because another
  // writer's compaction dropped rows it held (see docs/decisions.md).
  uint64_t view_reloads = 0;
  bool opened_from_snapshot = false;
};

class DB {
 public:
  // Opens (or creates) the database at a path or URI. Opening a missing
  // database read-only, or at a version, fails with NotFound. A writable
  // open replays the WAL of writers that are gone; if committing the
  // replayed writes fails, they stay buffered (visible to reads) and the
  // open succeeds: a later flush commits them.
  static std::unique_ptr<DB> Open(const std::string& uri, const Options& options = {});

  // Flushes and closes (see Close).
  ~DB();
  DB(const DB&) = delete;
  DB& operator=(const DB&) = delete;

  void Put(std::string_view key, std::string_view value, const WriteOptions& options = {});
  void Delete(std::string_view key, const WriteOptions& options = {});
  void DeleteRange(std::string_view begin, std::string_view end, const WriteOptions& options = {});
  void Write(const WriteBatch& batch, const WriteOptions& options = {});

  std::optional<std::string> Get(std::string_view key);
  std::vector<std::optional<std::string>> MultiGet(std::span<const std::string_view> keys);
  // False only if the key is certainly absent. Answered from the view.
  bool KeyMayExist(std::string_view key);

  // Reads that never wait, for a caller that must not block (a binding that
  // holds an interpreter lock other threads need). They answer only from
  // values the view holds in memory, taking its lock only if it is free.
  // `found(value)` (for TryMultiGet, `found(i, value)` for keys[i]) is
  // called while the view is locked for reading: it copies what it keeps
  // and calls nothing on this handle. kWouldWait: answering needs the store
  // (a value that stays in Lance) or a lock another thread holds; call Get
  // or MultiGet instead. TryMultiGet may have called `found` for some keys
  // before it gives up with kWouldWait. Closed or inherited handles throw
  // as Get does.
  enum class Probe { kFound, kAbsent, kWouldWait };
  template <class Found>
  Probe TryGet(std::string_view key, Found&& found) {
    return TryGet(key, &CallFound<Found>, &found);
  }
  // kFound once every key was answered (the absent ones by no call).
  template <class Found>
  Probe TryMultiGet(std::span<const std::string_view> keys, Found&& found) {
    return TryMultiGet(keys, &CallFoundAt<Found>, &found);
  }
  std::unique_ptr<Iterator> NewIterator();

  // Commits every buffered write to Lance.
  void Flush();
  // Flushes, then rewrites the whole store as its live rows. Losing a race
  // to another handle's compaction, it starts again (three tries, then
  // Conflict).
  void CompactRange();
  // Reads what other writers committed since the last refresh.
  void Refresh();

  uint64_t version() const;
  std::vector<VersionInfo> Versions();
  // Deletes versions older than `older_than` (never a tagged one); returns
  // how many it removed.
  uint64_t CleanupOldVersions(std::chrono::seconds older_than);
  // Names a version (0: the latest); tags survive cleanup.
  void CreateTag(const std::string& tag, uint64_t version = 0);
  void DeleteTag(const std::string& tag);
  std::map<std::string, uint64_t> Tags();

  // What Purge did.
  struct PurgeStats {
    uint64_t versions_removed = 0;
    uint64_t bytes_removed = 0;             // bytes of the files it deleted
    std::vector<std::string> tags_deleted;  // tags force removed
  };
  // Makes deleted data unrecoverable from the dataset. Flushes, then
  // rewrites the store as its live rows (so no fragment holds a deleted or
  // overwritten value), then removes every version no tag names except the
  // latest. Before changing anything it checks every tag: a tag whose
  // version holds a put of a key that is deleted now fails the purge with
  // Busy naming the tag, unless `force`, which deletes such tags. Tagged
  // versions that pass keep the values they hold (also overwritten ones).
  //
  // Not reached: the keys of recent deletions (tombstones within
  // tombstone_grace keep the key, never a value), writes other handles have
  // not committed, and other machines' WALs and saved views. This handle's
  // saved view is removed.
  PurgeStats Purge(bool force = false);

  Stats GetStats();
  const std::string& uri() const;

  // Flushes, saves the view for a fast reopen when it is large, and releases
  // the write-ahead log. Further calls fail with NotSupported. Errors are
  // reported here; the destructor swallows them (the WAL keeps the writes).
  void Close();

  class Impl;

 private:
  explicit DB(std::shared_ptr<Impl> impl);
  using FoundFn = void (*)(void* found, size_t index, std::string_view value);
  template <class Found>
  static void CallFound(void* found, size_t, std::string_view value) {
    (*static_cast<std::remove_reference_t<Found>*>(found))(value);
  }
  template <class Found>
  static void CallFoundAt(void* found, size_t index, std::string_view value) {
    (*static_cast<std::remove_reference_t<Found>*>(found))(index, value);
  }
  Probe TryGet(std::string_view key, FoundFn fn, void* found);
  Probe TryMultiGet(std::span<const std::string_view> keys, FoundFn fn, void* found);
  // The handle, after checking that this process opened it.
  Impl& live() const;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kv0::kv
