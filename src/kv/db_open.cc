// Opening and closing a database: the dataset, the view (from a snapshot
// and/or a scan), the WAL and its replay, and the snapshot saved on close.

#include <filesystem>

#include "kv/db_impl.h"
#include "kv/snapshot.h"
#include "util/clock.h"
#include "util/location.h"

namespace kv0::kv {

DB::Impl::Impl(std::string uri, const Options& options)
    : uri_(std::move(uri)),
      options_(options),
      read_only_(options.read_only || options.version != 0 || !options.tag.empty()),
      pinned_(options.version != 0 || !options.tag.empty()) {}

std::shared_ptr<DB::Impl> DB::Impl::Open(const std::string& location, const Options& options) {
  std::string uri = NormalizeLocation(location);
  std::shared_ptr<Impl> db(new Impl(uri, options));
  const auto& storage = options.storage_options;

  if (db->read_only_ || !options.create_if_missing) {
    // NotFound propagates: a missing database is not created here.
    db->dataset_ = std::make_unique<lance::Dataset>(
        lance::Dataset::Open(uri, storage, options.version, options.tag));
  } else {
    try {
      db->dataset_ = std::make_unique<lance::Dataset>(lance::Dataset::Open(uri, storage));
    } catch (const Error& e) {
      if (e.code() != Code::kNotFound) throw;
      lance::CreateOptions create{
          .auto_cleanup_interval = 20,
          .auto_cleanup_older_than = options.version_retention,
      };
      try {
        db->dataset_ = std::make_unique<lance::Dataset>(
            lance::Dataset::Create(uri, storage, OpLogSchema(), create));
      } catch (const Error& again) {
        if (again.code() != Code::kConflict) throw;  // another handle created it first
        db->dataset_ = std::make_unique<lance::Dataset>(lance::Dataset::Open(uri, storage));
      }
    }
  }
  db->lazy_ = std::make_unique<LazyValues>(*db->dataset_, options.value_cache_size);

  if (!IsMemoryUri(uri)) db->wal_dir_ = wal::DatasetDir(wal::ResolveRoot(options.wal_dir), uri);
  db->LoadView();
  if (!db->read_only_ && !IsMemoryUri(uri)) {
    db->wal_ = wal::Log::Open(db->wal_dir_, ToSyncMode(options.wal_sync));
    db->ReplayAbandonedWals();
  }
  Background::Get().Register(db);
  return db;
}

std::string DB::Impl::SnapshotPath() const { return wal_dir_ + "/view.snap"; }

void DB::Impl::LoadView() {
  std::lock_guard lock(refresh_mu_);
  if (!wal_dir_.empty() && !pinned_) opened_from_snapshot_ = LoadSnapshot();
  if (pinned_) {
    ApplyFragments(dataset_->Fragments());
  } else {
    RefreshLocked();
  }
  std::shared_lock view_lock(view_mu_);
  clock_.Observe(view_.max_seq());
  for (const auto& [writer, seq] : marks_) clock_.Observe(seq);
}

// Loads view.snap if it describes fragments that are all still here,
// unchanged; afterwards only newer fragments need reading.
bool DB::Impl::LoadSnapshot() {
  View loaded;
  std::optional<SnapshotHeader> header;
  try {
    header = ReadSnapshot(SnapshotPath(), &loaded);
  } catch (const Error&) {
    return false;  // damaged: a full scan rebuilds everything it held
  }
  if (!header || header->lazy_value_threshold != options_.lazy_value_threshold) return false;
  std::map<uint64_t, lance::FragmentInfo> current;
  for (const auto& f : dataset_->Fragments()) current[f.id] = f;
  for (const auto& f : header->fragments) {
    auto it = current.find(f.id);
    if (it == current.end() || !(it->second == f)) return false;
  }
  std::unique_lock lock(view_mu_);
  view_.Swap(loaded);
  for (const auto& f : header->fragments) applied_[f.id] = f;
  marks_ = header->marks;
  return true;
}

void DB::Impl::SaveSnapshot() {
  std::shared_lock lock(view_mu_);
  if (view_.entries().size() < options_.snapshot_min_entries) return;
  SnapshotHeader header;
  header.dataset_version = dataset_->version();
  header.lazy_value_threshold = options_.lazy_value_threshold;
  for (const auto& [id, info] : applied_) header.fragments.push_back(info);
  header.marks = marks_;
  WriteSnapshot(SnapshotPath(), header, view_);
}

// Claims the WALs of writers that are gone, applies what they logged and
// Lance does not hold yet (everything above their mark), logs it again in
// this handle's WAL, removes theirs and commits.
void DB::Impl::ReplayAbandonedWals() {
  auto abandoned = wal::ClaimAbandoned(wal_dir_, wal_->writer_id());
  if (abandoned.empty()) return;
  uint64_t stale_before = WallNanosAgo(options_.mark_ttl);
  for (auto& claimed : abandoned) {
    uint64_t mark = 0;
    bool has_mark = false;
    {
      std::shared_lock lock(view_mu_);
      auto it = marks_.find(claimed.writer_id);
      if (it != marks_.end()) {
        mark = it->second;
        has_mark = true;
      }
    }
    std::vector<OpBuffer> records;
    for (const auto& record : claimed.records) {
      if (record.empty() || static_cast<uint8_t>(record[0]) != kWalRecordKv) {
        throw Error(Code::kCorruption, "WAL " + claimed.dir + " holds a record of another kind");
      }
      OpBuffer all = OpBuffer::FromBytes(std::string_view(record).substr(1));
      // Without a mark, only an operation older than mark_ttl is ambiguous:
      // a committed operation's mark is at least its seq, and marks live
      // that long.
      if (!has_mark && all.min_seq() < stale_before && !options_.replay_stale_wal) {
        throw Error(Code::kCorruption,
                    "WAL " + claimed.dir +
                        " holds operations older than mark_ttl and its writer left no mark; "
                        "open with replay_stale_wal to replay it anyway (writes may be stored "
                        "twice), or move the directory away");
      }
      OpBuffer fresh;
      all.ForEach([&](const Op& op) {
        if (op.seq > mark) fresh.Add(op.seq, op.kind, op.key, op.value);
      });
      if (!fresh.empty()) records.push_back(std::move(fresh));
    }
    {
      std::lock_guard lock(write_mu_);
      for (const auto& ops : records) {
        wal_->Append(ops.WalRecord());
        clock_.Observe(ops.max_seq());
        ApplyToView(ops);
        pending_.Append(ops);
      }
    }
  }
  // The operations are in this handle's WAL: make that durable before the
  // claimed directories go.
  wal_->Sync();
  for (auto& claimed : abandoned) claimed.Remove();
  Flush();
}

void DB::Impl::Close() {
  if (closed_) return;
  std::lock_guard lock(flush_mu_);
  if (!read_only_) FlushLocked();  // throws with the writes still logged
  closed_ = true;
  bool clean;
  {
    std::lock_guard write_lock(write_mu_);
    clean = pending_.empty();
  }
  if (wal_ && clean) {
    wal_->CloseClean();
    // Snapshots hold committed state only, and only writers save them (a
    // read-only handle leaves the WAL directory alone).
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
