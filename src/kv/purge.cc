// Purge: making deleted data unrecoverable from the dataset.
//
// Deleting a key only appends a tombstone; the put it shadows stays in its
// fragment, and every version that lists that fragment keeps it readable.
// Purge first checks the tags (a tagged version survives cleanup, so a tag
// on a version holding a put of a now-deleted key would keep that value),
// then rewrites the store as its view (Materialize: live values, tombstones
// within their grace period, range pieces, marks; tombstones and ranges hold
// keys, never values) and removes every untagged version but the latest,
// which deletes the files only they used.
//
// Every tag is checked, also one on the latest version: the rewrite makes a
// new latest version, and the tagged one would keep the old fragments.

#include <filesystem>
#include <system_error>

#include "kv/db_impl.h"

namespace kv0::kv {
namespace {

// Flushes and rewrites that lose to a concurrent write before giving up.
constexpr int kMaterializeAttempts = 10;

std::string Quoted(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += "'" + names[i] + "'";
  }
  return out;
}

}  // namespace

DB::PurgeStats DB::Purge(bool force) { return impl_->Purge(force); }

// Streams the tagged version's puts, keys only (values are never read), and
// stops at the first key the view does not hold.
bool DB::Impl::TagHoldsDeletedKeys(const std::string& tag) {
  lance::Dataset tagged = lance::Dataset::Open(uri_, options_.storage_options, 0, tag);
  lance::ScanOptions scan;
  scan.columns = {"op", "key"};
  scan.filter = "op = " + std::to_string(static_cast<int>(OpKind::kPut));
  arrow::StreamReader reader = tagged.Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt8Column op(*batch, "op");
    arrow::BinaryColumn key(*batch, "key");
    std::shared_lock lock(view_mu_);
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      if (static_cast<OpKind>(op.value(i)) != OpKind::kPut) continue;
      const Entry* e = view_.Find(key.value(i));
      if (e == nullptr || e->is_tombstone()) return true;
    }
  }
  return false;
}

DB::PurgeStats DB::Impl::Purge(bool force) {
  CheckOpen();
  if (read_only_) throw Error(Code::kNotSupported, uri_ + " is open read-only");
  auto flushes = pipeline_.LockFlushes();
  pipeline_.FlushLocked();
  {
    // Other handles' committed deletions count too.
    std::lock_guard refresh_lock(refresh_mu_);
    RefreshLocked({.flushes = true});
  }

  // The check comes before any change: a refused purge removes nothing.
  std::vector<std::string> holding;
  for (const auto& [tag, version] : dataset_->Tags()) {
    if (TagHoldsDeletedKeys(tag)) holding.push_back(tag);
  }
  if (!holding.empty() && !force) {
    throw Error(Code::kBusy, "cannot purge " + uri_ + ": " +
                                 (holding.size() == 1 ? "tag " : "tags ") + Quoted(holding) +
                                 (holding.size() == 1 ? " holds" : " hold") +
                                 " values of keys deleted since; delete " +
                                 (holding.size() == 1 ? "it" : "them") + " or purge with force");
  }

  // Materialize gives up when a write slipped in after the flush; flush
  // again and retry. It writes nothing when the store has no fragments.
  for (int attempt = 1;; ++attempt) {
    uint64_t before = compactions_;
    Materialize();
    if (compactions_ != before) break;
    bool empty;
    {
      std::shared_lock view_lock(view_mu_);
      empty = applied_.empty();
    }
    if (empty) break;
    if (attempt == kMaterializeAttempts) {
      throw Error(Code::kBusy,
                  "cannot purge " + uri_ + ": writes keep arriving during the rewrite");
    }
    pipeline_.FlushLocked();
  }

  PurgeStats stats;
  for (const auto& tag : holding) {
    dataset_->DeleteTag(tag);
    stats.tags_deleted.push_back(tag);
  }
  lance::CleanupStats cleanup = dataset_->CleanupOldVersions(std::chrono::seconds(0));
  stats.versions_removed = cleanup.old_versions;
  stats.bytes_removed = cleanup.bytes_removed;

  // A view saved by an earlier close may hold values deleted since; the
  // rewrite made it stale anyway (it names fragments that are gone).
  if (!wal_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove(SnapshotPath(), ignored);
  }
  return stats;
}

}  // namespace kv0::kv
