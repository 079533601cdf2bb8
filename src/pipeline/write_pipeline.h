// How a write becomes durable, in both layers.
//
// A write (a key-value batch, a tracked point, a run change) goes through
// these steps, all owned by WritePipeline:
//
//   1. Under the pipeline's lock (BeginWrite), the layer takes sequence
//      numbers from the pipeline's hybrid clock, logs one WAL record per
//      change (Locked::Log) and adds the change to the pending batch. Once
//      the lock is released the write is acknowledged.
//   2. A flush (at the layer's size threshold, every flush_interval from the
//      background thread, on Flush() and on Close()) seals the WAL segment
//      and swaps the pending batch out, both under the lock, so the sealed
//      segments hold exactly the records of the batch and of batches before
//      it that are not committed yet.
//   3. Without the lock, the layer commits the batch to Lance (Layer::Commit)
//      with one mark row per WAL writer and table: "this writer's records up
//      to this seq are in storage".
//   4. Only then are the sealed segments deleted. If the commit fails, the
//      batch goes back in front of the writes made meanwhile and its
//      segments stay; the next flush commits both. Flushes the pipeline
//      starts itself (the background ones, and a writer's when the buffer
//      runs over) back off after failures: the n-th consecutive failure
//      waits min(2^(n-1), 60) seconds before the next try. Flush(), sync
//      writes and Close() always try.
//
// Opening replays the WALs of writers that are gone: it claims their
// directories, skips every record their marks say is committed, applies the
// rest to the layer and the pending batch (keeping their sequence numbers
// and their writer's id for the marks), commits them, and only then removes
// the claimed directories; if that commit fails the open still succeeds,
// with the records pending and the directories claimed until a flush
// commits them. Closing refuses new writes, flushes, and deletes the WAL
// only when the flush committed everything.
//
// Invariants, each tested with an injected fault (tests/cpp/pipeline_test.cc):
//
//   - A failed seal, commit or replay leaves every write both in the pending
//     batch and in a WAL file: nothing acknowledged is dropped, and the next
//     flush (or open) commits it.
//   - A WAL file is removed only when committed marks cover every record in
//     it: sealed segments after the commit of their batch, claimed
//     directories after the commit of their replayed records, the whole log
//     after a close whose flush succeeded.
//   - Replayed records carry the id of the writer that logged them, and their
//     commit writes that writer's mark: they stay replayable until committed,
//     whatever writer id the replaying handle holds (it may have adopted an
//     id whose mark is newer than them).
//   - A write racing Close() is either committed by the close or refused with
//     NotSupported; none is acknowledged and then dropped. A close whose flush
//     fails leaves the WAL on disk, unlocked, for the next open to replay.
//   - A record that cannot be read while readable records follow it fails
//     the open with Corruption naming the file and offset; only a damaged end
//     of a writer's last segment is a torn write. A WAL that failed to read
//     is never deleted.
//
// Locks, in order: the flush lock (LockFlushes: one flush or maintenance
// commit at a time), then the pipeline's lock (Lock, BeginWrite: the pending
// batch, the in-flight batch and whatever the layer guards with it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv0/wal_sync.h"
#include "util/clock.h"
#include "wal/wal.h"

namespace kv0::pipeline {

// Writes of one layer that are not committed yet: the pending batch, or the
// batch a flush is committing. Each layer derives its own.
class Batch {
 public:
  // Per WAL writer id, the highest seq of its records in a batch.
  using Marks = std::map<std::string, uint64_t>;

  Batch() = default;
  Batch(const Batch&) = delete;  // last_mark_ points into marks_
  Batch& operator=(const Batch&) = delete;
  virtual ~Batch() = default;
  virtual bool empty() const = 0;

  // Moves later's writes after this batch's, keeping the order they were
  // made in: a batch whose commit failed takes back the writes made since.
  void Append(Batch&& later);

  // The mark rows a commit of the batch's rows of `table` writes.
  const Marks& marks(int table) const;
  void NoteMark(int table, const std::string& writer_id, uint64_t seq);
  // A layer that committed a table's rows clears its marks with them.
  void ClearMarks(int table);

 protected:
  virtual void AppendWrites(Batch&& later) = 0;

 private:
  std::vector<Marks> marks_;  // by table
  // The entry NoteMark changed last: every record a write logs notes a
  // mark, nearly always the same writer's in the same table.
  struct LastMark {
    int table = -1;
    const std::string* writer_id = nullptr;  // the key of *seq's entry
    uint64_t* seq = nullptr;
  } last_mark_;
};

// What a layer plugs into the pipeline.
class Layer {
 public:
  virtual ~Layer() = default;

  // An empty batch. Called under the pipeline's lock.
  virtual std::unique_ptr<Batch> NewBatch() = 0;

  // Commits the batch to Lance, each table's rows with batch.marks(table).
  // Called under the flush lock, without the pipeline's lock, so writes go
  // on meanwhile. On failure it throws and leaves in the batch exactly what
  // it did not commit (a layer whose readers look at the in-flight batch
  // removes committed parts under the pipeline's lock).
  virtual void Commit(Batch& batch) = 0;

  // After a successful Commit and the WAL's cleanup, still under the flush
  // lock: bookkeeping and compaction. Errors are ignored: the batch is
  // committed.
  virtual void AfterCommit(Batch& batch) { (void)batch; }

  // For replay: the table a WAL record belongs to (an index the layer
  // chooses, below kMaxTables) and the range of seqs it holds. Throws
  // Corruption for a record the layer did not write.
  struct RecordInfo {
    int table = 0;
    uint64_t min_seq = 0;
    uint64_t max_seq = 0;
  };
  virtual RecordInfo Describe(std::string_view record) = 0;

  // The marks in storage, by table: per writer, the highest seq committed.
  virtual std::vector<Batch::Marks> StoredMarks() = 0;

  // Called once before replay applies records (not under the pipeline's
  // lock), with every record that will be applied, in order.
  virtual void PrepareReplay(std::span<const std::string_view> records) { (void)records; }

  // Applies one replayed record to the layer's state and to the pending
  // batch. Called under the pipeline's lock; the pipeline notes the mark.
  virtual void Replay(std::string_view record, Batch& pending) = 0;
};

inline constexpr int kMaxTables = 4;

struct Options {
  // What the handle is, for messages ("database /data/my.db").
  std::string name;
  // The dataset's WAL directory; empty for a handle without a WAL
  // (read-only, memory://).
  std::string wal_dir;
  WalSync wal_sync = WalSync::kBatch;
  bool mapped_wal = false;
  std::chrono::milliseconds flush_interval{5000};
  // A claimed WAL whose writer left no mark and that holds a record older
  // than mark_ttl fails the open, unless replay_stale_wal.
  std::chrono::seconds mark_ttl{30 * 24 * 3600};
  bool replay_stale_wal = false;
};

class WritePipeline {
 public:
  WritePipeline(Layer& layer, Options options);
  // Without Close(), leaves the WAL on disk as a crash would.
  ~WritePipeline();

  WritePipeline(const WritePipeline&) = delete;
  WritePipeline& operator=(const WritePipeline&) = delete;

  // Opens the WAL (adopting an idle writer id, if any) and replays the WALs
  // of writers that are gone. Background flushes keep `owner` (the handle
  // that owns this pipeline) alive while they run and skip once it is gone.
  // On failure the pipeline is closed, its WAL released untouched, and the
  // claimed directories left as they were.
  void Open(std::weak_ptr<void> owner);

  HybridClock& clock() { return clock_; }
  // This handle's WAL writer id; empty without a WAL.
  const std::string& writer_id() const;
  bool has_wal() const { return wal_ != nullptr; }
  bool is_open() const;

  // The pipeline's lock, with what it guards.
  class Locked {
   public:
    template <typename T>
    T& pending() {
      return static_cast<T&>(*pipeline_->pending_);
    }
    // The batch a flush is committing, or nullptr.
    template <typename T>
    T* in_flight() {
      return static_cast<T*>(pipeline_->in_flight_);
    }
    // Appends record to the WAL as this handle's (nothing without a WAL) and
    // notes in the pending batch that the commit of `table` must write a
    // mark at seq or above. Throws what wal::Log::Append throws; nothing is
    // logged then.
    void Log(std::string_view record, int table, uint64_t seq);
    // BeginWrite's ticket for this write (0 for Lock()).
    uint64_t ticket() const { return ticket_; }

   private:
    friend class WritePipeline;
    Locked(WritePipeline* pipeline, uint64_t ticket);
    WritePipeline* pipeline_;
    std::unique_lock<std::mutex> lock_;
    uint64_t ticket_;
  };

  // Takes the lock for reading or changing what it guards.
  Locked Lock();
  // Takes the lock for one write, which gets a ticket for FlushThrough.
  // Throws NotSupported once Close() has begun.
  Locked BeginWrite();

  // Commits everything buffered. Throws NotSupported after Close().
  void Flush();
  // The flush lock, for a layer's maintenance (compaction, optimize, purge)
  // that must not interleave with a flush; FlushLocked flushes while it is
  // held.
  std::unique_lock<std::mutex> LockFlushes();
  void FlushLocked();
  // Returns once the write with this ticket is committed, flushing if
  // needed. Throws the flush's error, or IOError if a failed Close() left
  // the write in the WAL only.
  void FlushThrough(uint64_t ticket);
  // Queues a background flush, unless one is queued already.
  void FlushSoon();
  // Flushes on the caller's thread (the background flush is not keeping up)
  // and ignores a failure: the caller's write is logged and buffered, and
  // stays so until a flush succeeds. Does nothing while backing off.
  void FlushForBackpressure();

  // How long to wait after the n-th consecutive failed flush (n >= 1).
  static std::chrono::milliseconds Backoff(int failures);

  // The background thread's tick: the WAL's batch-mode fsync and the
  // flush_interval flush.
  void OnTick(std::chrono::steady_clock::time_point now);

  // Refuses new writes, flushes, and deletes the WAL. If the flush fails,
  // the pipeline is closed anyway, its WAL left on disk and unlocked for the
  // next open, and the error is thrown. Later calls do nothing.
  void Close();

 private:
  enum class State { kNew, kOpen, kClosing, kClosed };

  void Replay();
  // Whether automatic flushes wait (after failures) for retry_at_.
  bool BackingOff() const;
  // Under mu_: stop, keep every WAL file, release the locks.
  void AbandonLocked();

  Layer& layer_;
  const Options options_;
  HybridClock clock_;
  std::unique_ptr<wal::Log> wal_;  // never reset once open: the tick thread uses it
  std::weak_ptr<void> owner_;
  std::shared_ptr<std::atomic<bool>> flush_queued_ = std::make_shared<std::atomic<bool>>(false);

  std::mutex flush_mu_;

  mutable std::mutex mu_;
  State state_ = State::kNew;
  std::unique_ptr<Batch> pending_;
  Batch* in_flight_ = nullptr;
  std::vector<wal::Abandoned> claims_;  // replayed, not committed yet
  uint64_t written_ = 0;                // tickets handed out
  uint64_t committed_through_ = 0;      // every ticket up to this is committed
  std::chrono::steady_clock::time_point last_flush_;
  int failures_ = 0;                                  // consecutive failed flushes
  std::chrono::steady_clock::time_point retry_at_{};  // no automatic flush before this
};

}  // namespace kv0::pipeline
