// purge(): makes deleted runs' bytes unreachable in storage. Every fragment
// holding deleted rows is rewritten (Lance compaction with deletions
// materialised) and every version no tag names is removed, except the
// latest. A tag keeps its version's files, so one that still holds rows of a
// deleted run fails the purge, or is deleted with force.

#include <algorithm>
#include <unordered_set>

#include "tracking/repo_impl.h"
#include "tracking/schema.h"
#include "util/location.h"

namespace kv0::tracking {
namespace {

constexpr size_t kInChunk = 500;

// One dataset to purge, and how to tell whether a version of it holds rows
// of a deleted run.
struct Target {
  std::string label;  // for messages: "runs", "records/evals", ...
  std::shared_ptr<lance::Dataset> dataset;
  std::function<bool(const lance::Dataset& at)> holds_deleted;
};

std::vector<std::string> RunIdFilters(const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  for (size_t i = 0; i < ids.size(); i += kInChunk) {
    std::string filter = "run_id IN (";
    for (size_t j = i; j < std::min(ids.size(), i + kInChunk); ++j) {
      filter += (j > i ? ", " : "") + SqlString(ids[j]);
    }
    out.push_back(filter + ")");
  }
  return out;
}

bool AnyRow(const lance::Dataset& at, const std::vector<std::string>& filters,
            const std::string& also = "") {
  for (const auto& f : filters) {
    if (at.CountRows(also.empty() ? f : f + " AND " + also) > 0) return true;
  }
  return false;
}

}  // namespace

PurgeStats RepoImpl::Purge(bool force) {
  CheckOpen();
  Flush();
  auto flushes = pipeline_.LockFlushes();
  LoadTombstones(true);
  std::vector<std::string> deleted;
  {
    std::lock_guard deleted_lock(deleted_mu_);
    deleted.assign(deleted_.begin(), deleted_.end());
  }
  std::sort(deleted.begin(), deleted.end());
  // Rows only hidden so far (a writer racing a delete, records appended
  // under a deleted run's id) are deleted first, so the rewrite drops them.
  if (!deleted.empty()) DeleteRowsOfRuns(deleted);
  std::vector<std::string> filters = RunIdFilters(deleted);
  std::unordered_set<uint64_t> live;
  for (const auto& s : ReadSeries("")) live.insert(s.series_id);

  std::vector<Target> targets;
  auto by_run = [filters](std::string also) {
    return [filters, also](const lance::Dataset& at) { return AnyRow(at, filters, also); };
  };
  targets.push_back(
      {"runs", tables_[kRuns],
       by_run("(fields IS NULL OR fields <> " + std::to_string(kFieldDeleted) + ")")});
  targets.push_back({"params", tables_[kParams], by_run("")});
  targets.push_back({"series", tables_[kSeries], by_run("")});
  // Points name no run: a version holds a deleted run's points when it has
  // points of a series that no live run names.
  targets.push_back({"metrics", tables_[kMetrics], [&live](const lance::Dataset& at) {
                       lance::ScanOptions scan;
                       scan.columns = {"series_id"};
                       scan.filter = "series_id <> 0";
                       auto reader = at.Scan(scan);
                       while (auto batch = reader.Next()) {
                         arrow::UInt64Column id(*batch, "series_id");
                         for (int64_t i = 0; i < batch->num_rows(); ++i) {
                           if (!live.count(id.value(i))) return true;
                         }
                       }
                       return false;
                     }});
  std::vector<std::string> uris = records_->TableUris();
  std::vector<std::string> names = records_->Tables();
  if (!IsMemoryUri(uri_) && records_->HasLegacy()) {
    uris.push_back(records_->LegacyUri());
    names.push_back(std::string(kLegacyRecordsTable));
  }
  for (size_t i = 0; i < uris.size(); ++i) {
    auto dataset =
        std::make_shared<lance::Dataset>(lance::Dataset::Open(uris[i], options_.storage_options));
    targets.push_back({"records/" + names[i], dataset, by_run("")});
  }

  // Every tag is checked, the latest version's included: the rewrite below
  // makes it an older version that would keep the deleted rows' files.
  std::vector<std::pair<Target*, std::string>> offending;
  if (!deleted.empty() || !live.empty()) {
    for (auto& target : targets) {
      target.dataset->CheckoutLatest();
      for (const auto& [tag, version] : target.dataset->Tags()) {
        lance::Dataset at =
            lance::Dataset::Open(target.dataset->uri(), options_.storage_options, 0, tag);
        if (target.holds_deleted(at)) offending.emplace_back(&target, tag);
      }
    }
  }
  PurgeStats stats;
  if (!offending.empty() && !force) {
    std::string names_list;
    for (const auto& [target, tag] : offending) {
      names_list += (names_list.empty() ? "" : ", ") + target->label + ":" + tag;
    }
    throw Error(Code::kBusy, "purge of " + uri_ + " refused: tag(s) " + names_list +
                                 " hold rows of deleted runs; delete them or purge with force");
  }
  for (const auto& [target, tag] : offending) {
    target->dataset->DeleteTag(tag);
    stats.tags_deleted.push_back(target->label + ":" + tag);
  }
  for (auto& target : targets) {
    lance::Dataset& dataset = *target.dataset;
    dataset.CheckoutLatest();
    for (int t = 0; t < kTableCount; ++t) {
      if (target.label == TableName(t)) RetireAnnounced(t);
    }
    bool has_deletions = false;
    for (const auto& f : dataset.Fragments()) has_deletions |= f.deleted_rows > 0;
    if (has_deletions) {
      lance::CompactOptions compact;
      compact.materialize_deletions = true;
      compact.materialize_deletions_threshold = 0.0f;
      for (int t = 0; t < kTableCount; ++t) {
        if (target.label == TableName(t)) compact = CompactionOf(t, compact);
      }
      dataset.Compact(compact);
    }
    auto cleaned = dataset.CleanupOldVersions(std::chrono::seconds(0));
    stats.datasets++;
    stats.versions_removed += cleaned.old_versions;
    stats.bytes_removed += cleaned.bytes_removed;
  }
  return stats;
}

}  // namespace kv0::tracking
