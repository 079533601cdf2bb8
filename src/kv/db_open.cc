// Opening and closing a database: the dataset, the view (from a snapshot
// and/or a scan), the WAL and its replay, and the snapshot saved on close.

#include <algorithm>
#include <filesystem>

#include "kv/db_impl.h"
#include "kv/snapshot.h"
#include "lance/auto_cleanup.h"
#include "util/clock.h"
#include "util/location.h"

namespace kv0::kv {

namespace {

pipeline::Options PipelineOptions(const std::string& uri, const Options& options, bool read_only,
                                  const std::string& wal_dir) {
  pipeline::Options out;
  out.name = "database " + uri;
  if (!read_only) out.wal_dir = wal_dir;
  out.wal_sync = options.wal_sync;
  // Mapped, so a logged write is a memory copy rather than a system call,
  // and still survives the process dying once the copy is done.
  out.mapped_wal = true;
  out.flush_interval = options.flush_interval;
  out.mark_ttl = options.mark_ttl;
  out.replay_stale_wal = options.replay_stale_wal;
  return out;
}

// The options with kv0's object-store client defaults in the storage options.
Options WithClientDefaults(Options options) {
  options.storage_options = lance::WithClientDefaults(
      std::move(options.storage_options), options.request_timeout, options.request_retries);
  return options;
}

}  // namespace

DB::Impl::Impl(std::string uri, const Options& options)
    : uri_(std::move(uri)),
      options_(WithClientDefaults(options)),
      read_only_(options.read_only || options.version != 0 || !options.tag.empty()),
      pinned_(options.version != 0 || !options.tag.empty()),
      wal_dir_(IsMemoryUri(uri_) ? std::string()
                                 : wal::DatasetDir(wal::ResolveRoot(options.wal_dir), uri_)),
      pipeline_(*this, PipelineOptions(uri_, options, read_only_, wal_dir_)) {}

std::shared_ptr<DB::Impl> DB::Impl::Open(const std::string& location, const Options& options) {
  std::string uri = NormalizeLocation(location);
  std::shared_ptr<Impl> db(new Impl(uri, options));
  const auto& storage = db->options_.storage_options;

  if (db->read_only_ || !options.create_if_missing) {
    // NotFound propagates: a missing database is not created here.
    db->dataset_ = std::make_unique<lance::Dataset>(
        lance::Dataset::Open(uri, storage, options.version, options.tag));
  } else {
    try {
      db->dataset_ = std::make_unique<lance::Dataset>(lance::Dataset::Open(uri, storage));
    } catch (const Error& e) {
      if (e.code() != Code::kNotFound) throw;
      try {
        db->dataset_ =
            std::make_unique<lance::Dataset>(lance::Dataset::Create(uri, storage, OpLogSchema()));
      } catch (const Error& again) {
        if (again.code() != Code::kConflict) throw;  // another handle created it first
        db->dataset_ = std::make_unique<lance::Dataset>(lance::Dataset::Open(uri, storage));
      }
    }
  }
  db->dataset_->SetCommitTimeout(options.commit_timeout);
  if (!db->read_only_) {
    db->dataset_->SetAutoCleanup(std::make_shared<lance::AutoCleanup>(options.version_retention));
  }
  db->versions_ = std::make_unique<PinnedVersions>(*db->dataset_);
  db->lazy_ = std::make_unique<LazyValues>(*db->versions_, options.value_cache_size);

  db->LoadView();
  // The WAL, and the replay of abandoned ones (their marks are in the view).
  db->pipeline_.Open(db);
  Background::Get().Register(db);
  return db;
}

std::string DB::Impl::SnapshotPath() const { return wal_dir_ + "/view.snap"; }

void DB::Impl::LoadView() {
  std::lock_guard lock(refresh_mu_);
  if (!wal_dir_.empty() && !pinned_) opened_from_snapshot_ = LoadSnapshot();
  if (pinned_) {
    auto at = versions_->Current();
    ApplyFragments(*at, at->fragments());
  } else {
    // Nothing can flush before the pipeline opens.
    RefreshLocked({.flushes = true, .opening = true});
  }
  std::shared_lock view_lock(view_mu_);
  pipeline_.clock().Observe(view_.max_seq());
  for (const auto& [writer, seq] : marks_) pipeline_.clock().Observe(seq);
}

namespace {

bool SameFragments(std::vector<lance::FragmentInfo> a, std::vector<lance::FragmentInfo> b) {
  auto by_id = [](const auto& x, const auto& y) { return x.id < y.id; };
  std::sort(a.begin(), a.end(), by_id);
  std::sort(b.begin(), b.end(), by_id);
  return a == b;
}

}  // namespace

// Loads view.snap if it is a view of exactly the fragments of the version it
// records (only such views are saved, and only in this format) and all of
// them are still here, unchanged; afterwards only newer fragments need
// reading.
bool DB::Impl::LoadSnapshot() {
  View loaded;
  std::optional<SnapshotHeader> header;
  try {
    header = ReadSnapshot(SnapshotPath(), &loaded);
  } catch (const Error&) {
    return false;  // damaged, or an older format: a full scan rebuilds everything it held
  }
  if (!header || header->lazy_value_threshold != options_.lazy_value_threshold) return false;
  auto current = dataset_->Fragments();
  try {
    auto recorded = header->dataset_version == dataset_->version()
                        ? current
                        : versions_->At(header->dataset_version)->fragments();
    if (!SameFragments(recorded, header->fragments)) return false;
  } catch (const Error&) {
    return false;  // the version is gone: nothing left to check the view against
  }
  std::map<uint64_t, lance::FragmentInfo> by_id;
  for (const auto& f : current) by_id[f.id] = f;
  for (const auto& f : header->fragments) {
    auto it = by_id.find(f.id);
    if (it == by_id.end() || !(it->second == f)) return false;
  }
  std::unique_lock lock(view_mu_);
  view_.Swap(loaded);
  for (const auto& f : header->fragments) applied_[f.id] = {f, header->dataset_version};
  marks_ = header->marks;
  return true;
}

// Saves the view when it is known to equal storage at the version it
// records: refreshed to the latest version under the flush lock (after
// close, so nothing is pending or in flight), with applied_ exactly that
// version's fragments. The snapshot then holds committed state only.
void DB::Impl::SaveSnapshot() {
  {
    std::shared_lock lock(view_mu_);
    if (view_.entries().size() < options_.snapshot_min_entries) return;
  }
  auto flushes = pipeline_.LockFlushes();
  std::lock_guard refresh_lock(refresh_mu_);
  RefreshLocked({.flushes = true});
  {
    auto writes = pipeline_.Lock();
    if (!writes.pending<KvBatch>().empty()) return;
  }
  // Nothing moves the dataset while both locks are held.
  SnapshotHeader header;
  header.dataset_version = dataset_->version();
  header.lazy_value_threshold = options_.lazy_value_threshold;
  header.fragments = dataset_->Fragments();
  std::shared_lock lock(view_mu_);
  std::vector<lance::FragmentInfo> applied;
  for (const auto& [id, f] : applied_) applied.push_back(f.info);
  if (!SameFragments(applied, header.fragments)) return;
  header.marks = marks_;
  WriteSnapshot(SnapshotPath(), header, view_);
}

void DB::Impl::Close() {
  owner_.Check("database", uri_);  // a fork's child must not flush or release the parent's WAL
  if (closed_.exchange(true)) return;
  pipeline_.Close();  // throws with the writes still logged
  // Snapshots hold committed state only, and only writers save them (a
  // read-only handle leaves the WAL directory alone).
  if (pipeline_.has_wal()) {
    try {
      SaveSnapshot();
    } catch (const Error&) {
      // Only a faster reopen is lost.
    }
  }
}

DB::Impl::~Impl() {
  try {
    Close();
  } catch (...) {
    // The WAL still holds the writes; the next open replays them.
  }
}

}  // namespace kv0::kv
