// Keeping the dataset small: after a flush leaves more than max_fragments
// fragments that compaction can merge (below lance::kCompactTargetRows rows),
// either rewrite the whole store as its live rows (when most stored rows are
// shadowed) or let Lance merge small fragments.
//
// Both run holding the pipeline's flush lock, right after a flush, so nothing
// they write is still buffered: a rewrite also holds the pipeline's lock
// (writers wait) and gives up if a write slipped in between the flush and the
// rewrite.

#include <algorithm>
#include <chrono>
#include <optional>
#include <tuple>

#include "kv/db_impl.h"
#include "util/clock.h"

namespace kv0::kv {
namespace {

// A rewrite's Arrow batches: at most this many rows, and past the first row
// at most kRewriteBatchBytes of keys and values (no binary column may reach
// Arrow's 2 GiB limit).
constexpr size_t kRewriteBatchRows = 4096;
constexpr size_t kRewriteBatchBytes = size_t{256} << 20;

}  // namespace

void DB::Impl::MaybeCompact(const std::vector<lance::FragmentInfo>& fragments) {
  if (read_only_) return;
  if (lance::MergeableFragments(fragments) <= options_.max_fragments) return;
  uint64_t stored = 0;
  for (const auto& f : fragments) stored += f.physical_rows - f.deleted_rows;
  uint64_t live;
  {
    std::shared_lock lock(view_mu_);
    live = view_.live();
  }
  try {
    if (stored > 2 * live + 1024) {
      Materialize();
    } else {
      RewriteFragments();
    }
  } catch (const Error&) {
    // The flush before this succeeded and its writes are committed, so the
    // caller must not see an error: a concurrent compaction won (Conflict) or
    // storage failed, and a later flush tries again. CompactRange reports.
  }
}

void DB::Impl::CompactRange() {
  CheckOpen();
  if (read_only_) throw Error(Code::kNotSupported, uri_ + " is open read-only");
  auto flushes = pipeline_.LockFlushes();
  pipeline_.FlushLocked();
  // Another writer's compaction of the same fragments wins a race: the
  // rewrite then starts again from what storage holds now.
  for (int attempt = 1;; ++attempt) {
    try {
      Materialize();
      return;
    } catch (const Error& e) {
      if (e.code() != Code::kConflict || attempt == 3) throw;
    }
  }
}

// Writes the view (live values, tombstones within their grace period, range
// pieces, the latest mark of every writer) as new fragments and commits one
// Update that removes every fragment the view was read from.
void DB::Impl::Materialize() {
  std::lock_guard refresh_lock(refresh_mu_);
  auto writes = pipeline_.Lock();
  if (!writes.pending<KvBatch>().empty()) return;  // a write slipped in after the flush
  // Rewrite what storage holds now, not older.
  RefreshLocked({.flushes = true, .writes = &writes});

  uint64_t tombstone_cutoff = WallNanosAgo(options_.tombstone_grace);
  uint64_t mark_cutoff = WallNanosAgo(options_.mark_ttl);
  std::vector<uint64_t> removed;
  std::vector<std::pair<std::string, uint64_t>> marks;
  std::vector<std::tuple<std::string, std::string, uint64_t>> ranges;
  {
    // Dropping old tombstones from the view too keeps it equal to what a
    // reopen loads from the rewritten dataset.
    std::unique_lock lock(view_mu_);
    view_.DropTombstonesOlderThan(tombstone_cutoff);
    for (const auto& [id, applied] : applied_) removed.push_back(id);
    for (const auto& [writer, seq] : marks_) {
      if (seq >= mark_cutoff) marks.emplace_back(writer, seq);
    }
    for (const auto& [begin, piece] : view_.ranges().pieces()) {
      ranges.emplace_back(begin, piece.end, piece.seq);
    }
  }
  if (removed.empty()) return;

  // Rows go out in this order: entries by key, then range pieces, then
  // marks; row i of the single fragment written is address (id << 32) | i.
  // The generator runs on a Lance thread. Writers are held off by the
  // pipeline's lock and refreshes by refresh_mu_, so the view only changes
  // here.
  struct Row {
    uint64_t seq;
    OpKind kind;
    std::string key;
    std::optional<std::string> value;
    std::optional<LazyRef> stored;  // the value is still in Lance
  };
  std::string resume;  // the last key written; the next batch starts after it
  bool started = false, entries_done = false, tail_done = false;
  uint64_t rows_written = 0;
  std::vector<std::pair<std::string, uint64_t>> lazy_keys;  // key, seq of values over threshold
  std::vector<uint64_t> lazy_rows;                          // their row numbers

  auto collect_entries = [&] {
    std::vector<Row> rows;
    std::shared_lock lock(view_mu_);
    auto it =
        started ? view_.entries().upper_bound(std::string_view(resume)) : view_.entries().begin();
    started = true;
    size_t bytes = 0;
    for (; it != view_.entries().end() && rows.size() < kRewriteBatchRows; ++it) {
      const Entry* e = *it;
      bytes += e->key().size() + (e->is_tombstone() ? 0 : e->value_size());
      if (!rows.empty() && bytes > kRewriteBatchBytes) break;
      Row row{e->seq(), OpKind::kPut, std::string(e->key()), std::nullopt, std::nullopt};
      if (e->is_tombstone()) {
        row.kind = OpKind::kDelete;
      } else if (e->is_lazy()) {
        row.stored = e->lazy_ref();
      } else {
        row.value = std::string(e->value());
      }
      if (!e->is_tombstone() && e->value_size() > options_.lazy_value_threshold) {
        lazy_keys.emplace_back(row.key, row.seq);
        lazy_rows.push_back(rows_written + rows.size());
      }
      rows.push_back(std::move(row));
    }
    if (it == view_.entries().end()) entries_done = true;
    if (!rows.empty()) resume = rows.back().key;
    return rows;
  };

  auto next = [&](ArrowArray* out) -> bool {
    std::vector<Row> rows;
    if (!entries_done) rows = collect_entries();
    if (rows.empty() && entries_done) {
      if (tail_done) return false;
      tail_done = true;
      for (const auto& [begin, end, seq] : ranges) {
        rows.push_back({seq, OpKind::kDeleteRange, begin, end, std::nullopt});
      }
      for (const auto& [writer, seq] : marks) {
        rows.push_back({seq, OpKind::kMark, writer, std::nullopt, std::nullopt});
      }
      if (rows.empty()) return false;
    }
    // Stored values come back one batch at a time, never all at once.
    std::vector<LazyRef> refs;
    for (const auto& r : rows) {
      if (r.stored) refs.push_back(*r.stored);
    }
    std::vector<std::string> values = lazy_->ReadUncached(refs);
    arrow::BatchBuilder builder(OpLogSchema());
    size_t next_value = 0;
    for (auto& r : rows) {
      builder.uint64(0).Append(r.seq);
      builder.uint8(1).Append(static_cast<uint8_t>(r.kind));
      builder.binary(2).Append(r.key);
      if (r.stored) {
        builder.binary(3).Append(values[next_value++]);
      } else if (r.value) {
        builder.binary(3).Append(*r.value);
      } else {
        builder.binary(3).AppendNull();
      }
    }
    rows_written += rows.size();
    builder.Finish(out);
    return true;
  };

  arrow::OwnedStream stream;
  arrow::MakeStream(OpLogSchema(), next, &stream);
  lance::UncommittedFragments written = dataset_->WriteFragments(std::move(stream));
  lance::CommitResult commit = dataset_->CommitUpdate(removed, std::move(written));
  compactions_++;

  // Nothing moves the dataset meanwhile: the flush lock and refresh_mu_ are
  // held.
  auto at = versions_->Current();
  std::vector<lance::FragmentInfo> added;
  for (const auto& f : at->fragments()) {
    if (std::find(commit.fragment_ids.begin(), commit.fragment_ids.end(), f.id) !=
        commit.fragment_ids.end()) {
      added.push_back(f);
    }
  }
  std::unique_lock lock(view_mu_);
  for (uint64_t id : removed) applied_.erase(id);
  // Large values now live at their new rows; keep references, not bytes.
  if (commit.fragment_ids.size() == 1) {
    for (const auto& f : added) applied_[f.id] = {f, at->version()};
    uint64_t base = commit.fragment_ids[0] << 32;
    for (size_t i = 0; i < lazy_keys.size(); ++i) {
      view_.SetLazy(lazy_keys[i].first, lazy_keys[i].second,
                    LazyRef{at->version(), base | lazy_rows[i]});
    }
  } else {
    lock.unlock();
    // More than one fragment (a very large store): find the rows instead.
    RebindFragments(*at, added, nullptr);
  }
}

// Lance's own compaction: merges small fragments without changing rows.
// Rows move, so references into the replaced fragments are rebound.
void DB::Impl::RewriteFragments() {
  std::lock_guard refresh_lock(refresh_mu_);
  lance::CompactResult result = dataset_->Compact({});
  if (result.removed.empty()) return;
  compactions_++;
  auto at = versions_->Current();
  std::vector<lance::FragmentInfo> added;
  for (const auto& f : at->fragments()) {
    if (std::find(result.added.begin(), result.added.end(), f.id) != result.added.end()) {
      added.push_back(f);
    }
  }
  {
    std::unique_lock lock(view_mu_);
    for (uint64_t id : result.removed) applied_.erase(id);
  }
  // A Rewrite keeps every row, also of fragments the view had not read.
  RebindFragments(*at, added, nullptr);
  // The handle is at the version its compaction made; read the rest of it
  // too, so that the view is that version's.
  RefreshLocked({.flushes = true});
}

}  // namespace kv0::kv
