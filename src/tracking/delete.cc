// Deleting runs: tombstones first, then every other row of the runs; and the
// bookkeeping that makes every handle ignore a deleted run.

#include <algorithm>
#include <unordered_map>

#include "tracking/levels.h"
#include "tracking/repo_impl.h"
#include "tracking/schema.h"

namespace kv0::tracking {
namespace {

// Values per IN filter; longer lists are split into several statements.
constexpr size_t kInChunk = 500;

std::string Tombstones() { return "fields = " + std::to_string(kFieldDeleted); }

std::string RunIdIn(const std::vector<std::string>& ids) {
  std::string out = "run_id IN (";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + SqlString(ids[i]);
  return out + ")";
}

// Deletes the rows filter selects, unless there are none (no empty commit).
void DeleteWhere(lance::Dataset& dataset, const std::string& filter) {
  if (dataset.CountRows(filter) > 0) dataset.Delete(filter);
}

}  // namespace

RecordsStore::Hidden RepoImpl::HiddenRuns() {
  LoadTombstones(true);
  return [this](const std::string& run_id) { return IsDeleted(run_id); };
}

bool RepoImpl::IsDeleted(const std::string& run_id) {
  std::lock_guard lock(deleted_mu_);
  return deleted_.count(run_id) > 0;
}

std::vector<uint64_t> RepoImpl::WithoutDeletedRuns(std::vector<uint64_t> ids) {
  LoadTombstones(true);
  {
    std::lock_guard lock(deleted_mu_);
    if (deleted_.empty()) return ids;
  }
  // The run of each series: this handle's own series first, then the series
  // table (every point's series row is committed before the point).
  std::unordered_map<uint64_t, std::string> run_of;
  std::vector<uint64_t> unknown;
  {
    auto locked = pipeline_.Lock();
    for (uint64_t id : ids) {
      auto known = series_.find(id);
      if (known != series_.end() && !known->second.run_id.empty()) {
        run_of[id] = known->second.run_id;
      } else {
        unknown.push_back(id);
      }
    }
  }
  for (const auto& part : Chunks(unknown, kInChunk)) {
    lance::ScanOptions scan;
    scan.columns = {"series_id", "run_id"};
    scan.filter = SqlIn("series_id", part);
    auto reader = Latest(kSeries).Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::UInt64Column id(*batch, "series_id");
      arrow::Utf8Column run_id(*batch, "run_id");
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        run_of.try_emplace(id.value(i), run_id.value(i));
      }
    }
  }
  std::lock_guard lock(deleted_mu_);
  std::erase_if(ids, [&](uint64_t id) {
    auto run = run_of.find(id);
    return run == run_of.end() || deleted_.count(run->second) > 0;
  });
  return ids;
}

void RepoImpl::LoadTombstones(bool force) {
  int64_t now = SteadyNanos();
  {
    std::lock_guard lock(deleted_mu_);
    if (!force && now - tombstone_check_ns_ < 1'000'000'000) return;
    tombstone_check_ns_ = now;
  }
  lance::Dataset& runs = *tables_[kRuns];
  uint64_t latest = runs.LatestVersion();
  {
    std::lock_guard lock(deleted_mu_);
    if (latest == tombstone_version_) return;
  }
  lance::Dataset& at = Latest(kRuns);
  std::vector<uint64_t> fresh;
  std::vector<lance::FragmentInfo> fragments = at.Fragments();
  {
    std::lock_guard lock(deleted_mu_);
    for (const auto& f : fragments) {
      if (!tombstone_fragments_.count(f.id)) fresh.push_back(f.id);
    }
  }
  std::vector<std::string> found;
  if (!fresh.empty()) {
    lance::ScanOptions scan;
    scan.columns = {"run_id"};
    scan.filter = Tombstones();
    scan.fragment_ids = fresh;
    auto reader = at.Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::Utf8Column run_id(*batch, "run_id");
      for (int64_t i = 0; i < batch->num_rows(); ++i) found.emplace_back(run_id.value(i));
    }
  }
  auto locked = pipeline_.Lock();
  std::lock_guard lock(deleted_mu_);
  tombstone_fragments_.insert(fresh.begin(), fresh.end());
  tombstone_version_ = std::max(tombstone_version_, latest);
  for (auto& id : found) {
    if (auto state = run_states_.find(id); state != run_states_.end()) {
      if (auto live = state->second.lock()) live->deleted = true;
    }
    deleted_.insert(std::move(id));
  }
}

void RepoImpl::DropDeletedLocked(WriteBuffer* buf) {
  std::lock_guard lock(deleted_mu_);
  if (deleted_.empty()) return;
  auto gone = [&](const std::string& run_id) { return deleted_.count(run_id) > 0; };
  std::erase_if(buf->runs, [&](const RunRow& r) { return gone(r.record.run_id); });
  std::erase_if(buf->params, [&](const ParamChange& p) { return gone(p.run_id); });
  std::erase_if(buf->series, [&](const SeriesInfo& s) { return gone(s.run_id); });
  std::unordered_set<uint64_t> dropped;
  for (const auto& [id, delta] : buf->points.deltas) {
    auto known = series_.find(id);
    // A series this handle does not know only has points here when they
    // were replayed for a series deleted since; an empty delta is a
    // recompute request (RecomputeSeriesStats) and stays.
    bool orphan = known == series_.end() && !delta.empty();
    if (orphan || (known != series_.end() && gone(known->second.run_id))) dropped.insert(id);
  }
  if (dropped.empty()) return;
  PointBuffer kept;
  const PointBuffer& all = buf->points;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!dropped.count(all.series_ids[i])) kept.AppendPointOf(all, i);
  }
  for (auto& [id, delta] : buf->points.deltas) {
    if (!dropped.count(id)) kept.deltas.emplace(id, delta);
  }
  buf->points = std::move(kept);
  buf->generation++;  // SeriesState::delta pointers into it are stale
}

void RepoImpl::DeleteRuns(std::span<const std::string> run_ids) {
  CheckOpen();
  std::vector<std::string> ids;
  for (const auto& id : run_ids) {
    if (!id.empty() && !IsMarkRunId(id)) ids.push_back(id);
  }
  if (ids.empty()) return;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());

  // This handle forgets the runs first, so no buffered row of theirs is
  // committed after the tombstones.
  {
    auto locked = pipeline_.Lock();
    std::lock_guard lock(deleted_mu_);
    for (const auto& id : ids) {
      deleted_.insert(id);
      if (auto state = run_states_.find(id); state != run_states_.end()) {
        if (auto live = state->second.lock()) live->deleted = true;
      }
    }
  }
  Flush();
  auto flushes = pipeline_.LockFlushes();
  std::vector<RunRow> tombstones;
  int64_t now_us = static_cast<int64_t>(WallNanos() / 1000);
  for (const auto& id : ids) tombstones.push_back(Tombstone(id, pipeline_.clock().Next(), now_us));
  auto commit = tables_[kRuns]->Append(RunsStream(tombstones, {}));
  {
    std::lock_guard lock(deleted_mu_);
    tombstone_fragments_.insert(commit.fragment_ids.begin(), commit.fragment_ids.end());
  }
  DeleteRowsOfRuns(ids);
}

void RepoImpl::DeleteRowsOfRuns(const std::vector<std::string>& run_ids) {
  for (int t = 0; t < kTableCount; ++t) Latest(t);
  // Points first: while their series rows exist, a crash here leaves rows
  // that the next delete or optimize still finds.
  std::vector<uint64_t> series;
  for (const auto& chunk : Chunks(run_ids, kInChunk)) {
    lance::ScanOptions scan;
    scan.columns = {"series_id"};
    scan.filter = "series_id <> 0 AND " + RunIdIn(chunk);
    auto reader = tables_[kSeries]->Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::UInt64Column id(*batch, "series_id");
      for (int64_t i = 0; i < batch->num_rows(); ++i) series.push_back(id.value(i));
    }
  }
  std::sort(series.begin(), series.end());
  series.erase(std::unique(series.begin(), series.end()), series.end());
  for (const auto& chunk : Chunks(series, kInChunk)) {
    DeleteWhere(*tables_[kMetrics], SqlIn("series_id", chunk));
    // Their statistics, level and directory rows (levels.h,
    // point_directory.h); not WAL marks.
    DeleteWhere(*tables_[kMetrics], "series_id = 0 AND (epoch IS NULL OR value >= " +
                                        std::to_string(static_cast<int>(kLevelRowValue)) +
                                        ") AND " + ReservedStepIn(chunk));
  }
  for (const auto& chunk : Chunks(run_ids, kInChunk)) {
    DeleteWhere(*tables_[kSeries], RunIdIn(chunk));
    DeleteWhere(*tables_[kParams], RunIdIn(chunk));
    DeleteWhere(*tables_[kRuns],
                RunIdIn(chunk) + " AND (fields IS NULL OR NOT " + Tombstones() + ")");
  }
  records_->DeleteRunRows(run_ids);
}

}  // namespace kv0::tracking
