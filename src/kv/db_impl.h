// The machinery behind kv0::kv::DB. One Impl per open handle.
//
// Following a write: DB::Put -> Impl::Write (db_write.cc) takes a sequence
// number from the pipeline's clock, logs the operations to the WAL, applies
// them to the view and adds them to the pending batch, under the write
// pipeline's lock (src/pipeline/write_pipeline.h says how a write becomes
// durable). A flush commits the batch as one Lance append with its mark rows
// (Impl::Commit); after it, compaction.cc may rewrite the dataset. Reads
// (db_read.cc) are served from the view; values that stay in Lance are read
// through LazyValues. Opening (db_open.cc) loads the view from a snapshot
// and/or the dataset, then lets the pipeline replay abandoned WALs.
//
// The view's invariant: it is what a fresh open would build from the
// fragments in applied_ (each read at the version recorded with it), plus
// this handle's writes that are not in storage yet. A refresh that finds some
// of those fragments removed (another writer's Rewrite or Update) restores it
// (db_read.cc says how), and a view is saved to view.snap only when applied_
// is exactly the fragment list of the version it records.
//
// Locks, always taken in this order: the pipeline's flush lock (one flush or
// compaction at a time), refresh_mu_ (one refresh at a time; compaction
// holds it so the view only changes by its own hand), the pipeline's lock
// (writers), view_mu_ (the view and the fragment bookkeeping; readers share
// it).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_set>

#include "kv/lazy_values.h"
#include "kv/op_log.h"
#include "kv/pinned_versions.h"
#include "kv/view.h"
#include "kv0/kv.h"
#include "lance/dataset.h"
#include "pipeline/write_pipeline.h"
#include "util/background.h"
#include "util/owner_process.h"

namespace kv0::kv {

// Operations not committed yet, and after a commit where it put them.
struct KvBatch : pipeline::Batch {
  OpBuffer ops;
  lance::CommitResult commit;

  bool empty() const override { return ops.empty(); }

 protected:
  void AppendWrites(Batch&& later) override { ops.Append(static_cast<KvBatch&>(later).ops); }
};

// The one table of a key-value store, for the pipeline's marks.
inline constexpr int kOpsTable = 0;

// A fragment the view holds, and a version that lists it (the one it was
// read or committed at), where its rows can be read again.
struct AppliedFragment {
  lance::FragmentInfo info;
  uint64_t version = 0;
};

// What a view is built from: the entries, the fragments they came from and
// every WAL writer's highest committed seq.
struct ViewState {
  View view;
  std::map<uint64_t, AppliedFragment> applied;
  std::map<std::string, uint64_t> marks;
};

class DB::Impl : public BackgroundClient,
                 public pipeline::Layer,
                 public std::enable_shared_from_this<DB::Impl> {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;

  // db_open.cc
  static std::shared_ptr<Impl> Open(const std::string& uri, const Options& options);
  void Close();
  ~Impl() override;

  // db_write.cc
  void Write(const WriteBatch& batch, const WriteOptions& options);
  void Flush();
  void OnTick(SteadyTime now) override;

  // What the key-value layer plugs into the write pipeline (db_write.cc).
  std::unique_ptr<pipeline::Batch> NewBatch() override { return std::make_unique<KvBatch>(); }
  void Commit(pipeline::Batch& batch) override;
  void AfterCommit(pipeline::Batch& batch) override;
  RecordInfo Describe(std::string_view record) override;
  std::vector<pipeline::Batch::Marks> StoredMarks() override;
  void Replay(std::string_view record, pipeline::Batch& pending) override;

  // db_read.cc
  std::optional<std::string> Get(std::string_view key);
  std::vector<std::optional<std::string>> MultiGet(std::span<const std::string_view> keys);
  bool KeyMayExist(std::string_view key);
  // DB::TryMultiGet (kv.h), which DB::TryGet also calls: kFound once every
  // key was answered, with *found_count the keys found; never kAbsent.
  DB::Probe TryMultiGet(std::span<const std::string_view> keys, DB::FoundFn fn, void* found,
                        size_t* found_count);
  // Brings the view to the latest version. May wait for a flush in progress
  // (a reload must see every write not in storage).
  void Refresh();
  void MaybeRefresh();
  // Reads the values of refs; on a failure, refreshes once (another writer
  // may have compacted and cleaned up) and reads the keys' new references.
  std::vector<std::shared_ptr<const std::string>> ReadLazy(std::span<const std::string> keys,
                                                           std::span<const LazyRef> refs);

  // compaction.cc
  void CompactRange();

  // purge.cc
  PurgeStats Purge(bool force);

  // Everything else (db.cc)
  uint64_t version() const { return dataset_->version(); }
  std::vector<VersionInfo> Versions();
  uint64_t CleanupOldVersions(std::chrono::seconds older_than);
  void CreateTag(const std::string& tag, uint64_t version);
  void DeleteTag(const std::string& tag);
  std::map<std::string, uint64_t> Tags();
  Stats GetStats();
  const std::string& uri() const { return uri_; }

  // For iterators (iterator.cc): the view, shared-locked by the caller.
  std::shared_mutex& view_mu() { return view_mu_; }
  const View& view() const { return view_; }
  // Throws NotSupported if the handle is closed or was opened by another
  // process (this one is a fork's child).
  void CheckOpen() const;
  // The process that opened the handle: in any other, the handle does
  // nothing at all (util/owner_process.h).
  const OwnerProcess& owner() const { return owner_; }

 private:
  Impl(std::string uri, const Options& options);

  // db_open.cc
  void LoadView();
  bool LoadSnapshot();
  void SaveSnapshot();
  std::string SnapshotPath() const;

  // db_read.cc, all holding refresh_mu_.
  //
  // What a caller of RefreshLocked holds besides refresh_mu_.
  struct Held {
    // The pipeline's flush lock: no batch is between its commit and its
    // bookkeeping, so the pending batch holds every write of this handle
    // that storage does not.
    bool flushes = false;
    // The pipeline's lock, if the caller holds it (compaction's rewrite).
    pipeline::WritePipeline::Locked* writes = nullptr;
    // The handle is opening: the pipeline is not open and nothing is pending.
    bool opening = false;
  };
  // Brings the view to the latest version. Returns false when the view must
  // be reloaded and !held.flushes: the caller then takes the flush lock and
  // calls again. The view may hold some rows of the new version by then, as
  // it does while any refresh runs (rows of other writers are applied batch
  // by batch).
  bool RefreshLocked(const Held& held);
  // Rows of stored fragments, keyed by their identity (seq, op, key).
  using RowSet = std::unordered_set<std::string>;
  // The rows of the removed fragments, read at the versions the view read
  // them at; nullopt if one of those versions is gone.
  std::optional<RowSet> StoredRows(const std::vector<AppliedFragment>& fragments);
  // Applies every row of `fragments` of `at`, into `into` (a view being
  // built aside) or, if null, into the handle's own view.
  void ApplyFragments(const PinnedVersion& at, const std::vector<lance::FragmentInfo>& fragments,
                      ViewState* into = nullptr);
  void ApplyFragments(const PinnedVersion& at, const std::vector<lance::FragmentInfo>& fragments,
                      ViewState* into, size_t batch_size);
  // Reads the rows of `fragments` of `at`, which hold rows of fragments the
  // view read before (a compaction's output), into the view without reading
  // again the values it holds. With `expected`, every row found is erased
  // from it first; if rows remain (the compaction dropped them), returns
  // false before reading any value or recording the fragments.
  bool RebindFragments(const PinnedVersion& at, const std::vector<lance::FragmentInfo>& fragments,
                       RowSet* expected);
  // Replaces the view by one built from every fragment of `at`, plus the
  // pending batch. Needs held.flushes.
  void Reload(const PinnedVersion& at, const Held& held);

  // db_write.cc
  void ApplyToView(const OpBuffer& ops);
  static void ApplyOps(const OpBuffer& ops, View& view);

  // compaction.cc (holding the flush lock)
  // `fragments`: the dataset's fragments, as the flush just listed them.
  void MaybeCompact(const std::vector<lance::FragmentInfo>& fragments);
  void Materialize();
  void RewriteFragments();

  // purge.cc: whether the version `tag` names holds a put of a key the view
  // does not hold now.
  bool TagHoldsDeletedKeys(const std::string& tag);

  const std::string uri_;
  const OwnerProcess owner_;
  const Options options_;
  const bool read_only_;
  const bool pinned_;  // opened at a version or tag: never refreshes

  std::unique_ptr<lance::Dataset>
      dataset_;  // moves: commits and refreshes check out newer versions
  std::unique_ptr<PinnedVersions> versions_;  // every read of stored rows goes through these
  std::unique_ptr<LazyValues> lazy_;

  std::mutex refresh_mu_;
  bool reload_due_ = false;  // a refresh found rows gone that the view holds (refresh_mu_)
  // This dataset's WAL directory (empty for memory://), where view.snap is
  // kept.
  std::string wal_dir_;

  mutable std::shared_mutex view_mu_;
  View view_;
  std::map<uint64_t, AppliedFragment> applied_;  // fragments the view holds
  std::map<std::string, uint64_t> marks_;        // WAL writer -> highest committed seq

  std::atomic<bool> closed_{false};
  std::atomic<int64_t> last_refresh_ns_{0};  // steady clock
  // Set while a background refresh is queued or running (MaybeRefresh).
  std::shared_ptr<std::atomic<bool>> refresh_queued_ = std::make_shared<std::atomic<bool>>(false);
  std::atomic<uint64_t> flushes_{0};
  std::atomic<uint64_t> compactions_{0};
  std::atomic<uint64_t> view_reloads_{0};
  bool opened_from_snapshot_ = false;

  // Last member: destroyed first, while everything its layer callbacks touch
  // still exists.
  pipeline::WritePipeline pipeline_;
};

}  // namespace kv0::kv
