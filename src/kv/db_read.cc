// The read path (served from the view) and refresh (bringing other writers'
// commits into the view).

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "kv/db_impl.h"

namespace kv0::kv {
namespace {

// How many keys ahead a lookup of many keys prefetches: about as many index
// misses as a core keeps in flight.
constexpr size_t kPrefetchAhead = 4;

}  // namespace

void DB::Impl::CheckOpen() const {
  owner_.Check("database", uri_);
  if (closed_) throw Error(Code::kNotSupported, uri_ + " is closed");
}

std::optional<std::string> DB::Impl::Get(std::string_view key) {
  CheckOpen();
  MaybeRefresh();
  LazyRef ref;
  {
    std::shared_lock lock(view_mu_);
    const Entry* e = view_.Find(key);
    if (e == nullptr || e->is_tombstone()) return std::nullopt;
    if (!e->is_lazy()) return std::string(e->value());
    ref = e->lazy_ref();
  }
  std::string k(key);
  auto values = ReadLazy(std::span<const std::string>(&k, 1), std::span<const LazyRef>(&ref, 1));
  if (!values[0]) return std::nullopt;
  return *values[0];
}

std::vector<std::optional<std::string>> DB::Impl::MultiGet(std::span<const std::string_view> keys) {
  CheckOpen();
  MaybeRefresh();
  std::vector<std::optional<std::string>> out(keys.size());
  std::vector<size_t> lazy_positions;
  std::vector<std::string> lazy_keys;
  std::vector<LazyRef> refs;
  {
    std::shared_lock lock(view_mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i + kPrefetchAhead < keys.size()) view_.Prefetch(keys[i + kPrefetchAhead]);
      const Entry* e = view_.Find(keys[i]);
      if (e == nullptr || e->is_tombstone()) continue;
      if (e->is_lazy()) {
        lazy_positions.push_back(i);
        lazy_keys.emplace_back(keys[i]);
        refs.push_back(e->lazy_ref());
      } else {
        out[i] = std::string(e->value());
      }
    }
  }
  if (!refs.empty()) {
    auto values = ReadLazy(lazy_keys, refs);
    for (size_t j = 0; j < lazy_positions.size(); ++j) {
      if (values[j]) out[lazy_positions[j]] = *values[j];
    }
  }
  return out;
}

DB::Probe DB::Impl::TryMultiGet(std::span<const std::string_view> keys, DB::FoundFn fn, void* found,
                                size_t* found_count) {
  CheckOpen();
  MaybeRefresh();  // queues the refresh; never runs it here
  std::shared_lock lock(view_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return DB::Probe::kWouldWait;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kPrefetchAhead < keys.size()) view_.Prefetch(keys[i + kPrefetchAhead]);
    const Entry* e = view_.Find(keys[i]);
    if (e == nullptr || e->is_tombstone()) continue;
    if (e->is_lazy()) return DB::Probe::kWouldWait;
    fn(found, i, e->value());
    ++*found_count;
  }
  return DB::Probe::kFound;
}

bool DB::Impl::KeyMayExist(std::string_view key) {
  CheckOpen();
  MaybeRefresh();
  std::shared_lock lock(view_mu_);
  const Entry* e = view_.Find(key);
  return e != nullptr && !e->is_tombstone();
}

std::vector<std::shared_ptr<const std::string>> DB::Impl::ReadLazy(
    std::span<const std::string> keys, std::span<const LazyRef> refs) {
  try {
    return lazy_->Read(refs);
  } catch (const Error&) {
    if (pinned_) throw;
  }
  // The rows may have moved (another writer compacted, then cleaned up the
  // versions they were in): refresh, which rebinds references to the rows'
  // new places, and look the keys up again. A key deleted meanwhile reads as
  // absent; a live key never does.
  Refresh();
  std::vector<std::shared_ptr<const std::string>> out(keys.size());
  std::vector<size_t> positions;
  std::vector<LazyRef> fresh;
  {
    std::shared_lock lock(view_mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      const Entry* e = view_.Find(keys[i]);
      if (e == nullptr || e->is_tombstone()) continue;
      if (e->is_lazy()) {
        positions.push_back(i);
        fresh.push_back(e->lazy_ref());
      } else {
        out[i] = std::make_shared<const std::string>(e->value());
      }
    }
  }
  auto values = lazy_->Read(fresh);  // a second failure is a real storage error
  for (size_t j = 0; j < positions.size(); ++j) out[positions[j]] = std::move(values[j]);
  return out;
}

void DB::Impl::MaybeRefresh() {
  if (pinned_) return;
  auto interval = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.refresh_interval);
  int64_t now = SteadyNanos();
  if (now - last_refresh_ns_ < interval.count()) return;
  // In the background: a read answers from the view as it is rather than
  // wait for the store (which may be slow, or down), and sees what the
  // refresh brings once it is done. A failed refresh is retried at the next
  // read after refresh_interval.
  std::weak_ptr<Impl> weak = weak_from_this();
  Background::Get().SubmitOnce(refresh_queued_, [weak] {
    auto self = weak.lock();
    if (!self || self->closed_) return;
    self->last_refresh_ns_ = SteadyNanos();
    self->Refresh();
  });
}

void DB::Impl::Refresh() {
  CheckOpen();
  if (pinned_) return;
  {
    std::lock_guard lock(refresh_mu_);
    if (RefreshLocked({})) return;
  }
  // A reload must see every write of this handle that storage does not
  // hold; under the flush lock they are all in the pending batch. The lock
  // order puts the flush lock first.
  auto flushes = pipeline_.LockFlushes();
  std::lock_guard lock(refresh_mu_);
  RefreshLocked({.flushes = true});
}

// Refreshing, in three cases:
//
//   - Only new fragments (other writers' appends): their rows are applied.
//   - Fragments the view holds were removed, and every row they held is in
//     the new fragments (Lance's Rewrite, which moves rows unchanged): the new
//     fragments' rows are applied without reading again the values the view
//     has, and references move to the rows' new addresses. Finding out
//     means reading the keys of the removed fragments once more, at the
//     versions the view read them at.
//   - Rows the view holds are gone (kv0's Update, which keeps only live rows
//     and young tombstones, or a Rewrite that could not be checked): the
//     view is reloaded from every fragment of the version, and the pending
//     batch applied on top. Rows cannot be taken out of a view, since it
//     keeps only the newest entry of each key: a dropped tombstone may have
//     hidden an older put that another fragment still holds.
//
// When the removed fragments hold at least half the rows the view was read
// from (every Update, and any Rewrite of a store of small fragments), the
// check would read about as much as the reload and is skipped;
// docs/decisions.md has the measurements.
bool DB::Impl::RefreshLocked(const Held& held) {
  last_refresh_ns_ = SteadyNanos();
  if (dataset_->LatestVersion() != dataset_->version()) dataset_->CheckoutLatest();

  auto differs = [&](const std::vector<lance::FragmentInfo>& fragments) {
    std::shared_lock view_lock(view_mu_);
    if (fragments.size() != applied_.size()) return true;
    for (const auto& f : fragments) {
      if (!applied_.count(f.id)) return true;
    }
    return false;
  };
  // Most refreshes find nothing new: look at the handle's dataset first, and
  // pin a version only for work to do.
  if (differs(dataset_->Fragments()) || reload_due_) {
    auto at = versions_->Current();
    std::vector<lance::FragmentInfo> fresh;
    std::vector<AppliedFragment> removed;
    uint64_t removed_rows = 0, applied_rows = 0;
    {
      std::shared_lock view_lock(view_mu_);
      for (const auto& f : at->fragments()) {
        if (!applied_.count(f.id)) fresh.push_back(f);
      }
      for (const auto& [id, applied] : applied_) {
        uint64_t rows = applied.info.physical_rows - applied.info.deleted_rows;
        applied_rows += rows;
        if (!at->Lists(id)) {
          removed.push_back(applied);
          removed_rows += rows;
        }
      }
    }
    if (removed.empty() && !reload_due_) {
      ApplyFragments(*at, fresh);
    } else {
      bool reload = reload_due_ || 2 * removed_rows >= applied_rows;
      if (!reload) {
        std::optional<RowSet> expected = StoredRows(removed);
        reload = !expected || !RebindFragments(*at, fresh, &*expected);
      }
      if (reload) {
        reload_due_ = true;
        if (!held.flushes) return false;
        Reload(*at, held);
        reload_due_ = false;
        view_reloads_++;
      } else {
        std::unique_lock view_lock(view_mu_);
        for (const auto& r : removed) applied_.erase(r.info.id);
      }
    }
  }
  uint64_t max_seq;
  {
    std::shared_lock view_lock(view_mu_);
    max_seq = view_.max_seq();
  }
  pipeline_.clock().Observe(max_seq);
  return true;
}

namespace {

// The identity of a stored row: no two rows share it (each operation has its
// own seq, and replay never stores one twice), and a compaction that keeps a
// row keeps it. A range deletion's end is left out: kv0's rewrite stores the
// view's range pieces, each of which keeps the begin and seq of the deletion
// it comes from, and where it is shorter a newer piece covers the rest.
std::string RowIdentity(uint64_t seq, OpKind kind, std::string_view key) {
  std::string id;
  id.reserve(9 + key.size());
  id.append(reinterpret_cast<const char*>(&seq), sizeof(seq));
  id.push_back(static_cast<char>(kind));
  id.append(key);
  return id;
}

// Applies one stored row. A large value becomes a reference to its row,
// `where`.
void ApplyStoredRow(View& view, std::map<std::string, uint64_t>& marks, size_t lazy_threshold,
                    uint64_t seq, OpKind kind, std::string_view key, std::string_view value,
                    LazyRef where) {
  switch (kind) {
    case OpKind::kPut:
      if (value.size() > lazy_threshold) {
        view.ApplyLazy(seq, key, static_cast<uint32_t>(value.size()), where);
      } else {
        view.ApplyPut(seq, key, value);
      }
      break;
    case OpKind::kDelete:
      view.ApplyDelete(seq, key);
      break;
    case OpKind::kDeleteRange:
      view.ApplyDeleteRange(seq, key, value);
      break;
    case OpKind::kMark: {
      uint64_t& mark = marks[std::string(key)];
      mark = std::max(mark, seq);
      break;
    }
  }
}

}  // namespace

std::optional<DB::Impl::RowSet> DB::Impl::StoredRows(
    const std::vector<AppliedFragment>& fragments) {
  std::map<uint64_t, std::vector<uint64_t>> by_version;
  for (const auto& f : fragments) by_version[f.version].push_back(f.info.id);
  RowSet rows;
  try {
    for (const auto& [version, ids] : by_version) {
      auto at = versions_->At(version);
      for (uint64_t id : ids) {
        if (!at->Lists(id)) return std::nullopt;
      }
      lance::ScanOptions scan;
      scan.columns = {"seq", "op", "key"};
      scan.fragment_ids = ids;
      arrow::StreamReader reader = at->Scan(scan);
      while (auto batch = reader.Next()) {
        arrow::UInt64Column seq(*batch, "seq");
        arrow::UInt8Column op(*batch, "op");
        arrow::BinaryColumn key(*batch, "key");
        for (int64_t i = 0; i < batch->num_rows(); ++i) {
          rows.insert(RowIdentity(seq.value(i), static_cast<OpKind>(op.value(i)), key.value(i)));
        }
      }
    }
  } catch (const Error&) {
    return std::nullopt;  // cleaned up since: the reload reads what is there now
  }
  return rows;
}

// Applies every row of `fragments`, batch by batch as Lance decodes them.
// Large values become references to their rows.
void DB::Impl::ApplyFragments(const PinnedVersion& at,
                              const std::vector<lance::FragmentInfo>& fragments, ViewState* into) {
  if (fragments.empty()) return;
  try {
    ApplyFragments(at, fragments, into, 0);
  } catch (const Error& e) {
    // Some rows decoded together hold more than 2 GiB of values. Applying a
    // row twice changes nothing, so read again, one row per batch (a value
    // is at most 1 GiB).
    if (!lance::IsOffsetOverflow(e)) throw;
    ApplyFragments(at, fragments, into, 1);
  }
}

void DB::Impl::ApplyFragments(const PinnedVersion& at,
                              const std::vector<lance::FragmentInfo>& fragments, ViewState* into,
                              size_t batch_size) {
  lance::ScanOptions scan;
  scan.columns = {"seq", "op", "key", "value"};
  scan.with_row_address = true;
  scan.batch_size = batch_size;
  scan.fragment_ids.emplace();
  for (const auto& f : fragments) scan.fragment_ids->push_back(f.id);
  View& view = into ? into->view : view_;
  auto& marks = into ? into->marks : marks_;
  auto& applied = into ? into->applied : applied_;
  // A view being built aside is this thread's alone.
  auto lock = [&] {
    return into ? std::unique_lock<std::shared_mutex>() : std::unique_lock(view_mu_);
  };
  arrow::StreamReader reader = at.Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt64Column seq(*batch, "seq");
    arrow::UInt8Column op(*batch, "op");
    arrow::BinaryColumn key(*batch, "key");
    arrow::BinaryColumn value(*batch, "value");
    arrow::UInt64Column address(*batch, lance::kRowAddress);
    auto locked = lock();
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      ApplyStoredRow(view, marks, options_.lazy_value_threshold, seq.value(i),
                     static_cast<OpKind>(op.value(i)), key.value(i), value.value(i),
                     LazyRef{at.version(), address.value(i)});
    }
  }
  auto locked = lock();
  for (const auto& f : fragments) applied[f.id] = {f, at.version()};
}

bool DB::Impl::RebindFragments(const PinnedVersion& at,
                               const std::vector<lance::FragmentInfo>& fragments,
                               RowSet* expected) {
  lance::ScanOptions scan;
  scan.columns = {"seq", "op", "key"};
  scan.with_row_address = true;
  scan.fragment_ids.emplace();
  for (const auto& f : fragments) scan.fragment_ids->push_back(f.id);
  std::vector<uint64_t> unknown;  // addresses of rows the view has not seen
  if (!fragments.empty()) {
    arrow::StreamReader reader = at.Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::UInt64Column seq(*batch, "seq");
      arrow::UInt8Column op(*batch, "op");
      arrow::BinaryColumn key(*batch, "key");
      arrow::UInt64Column address(*batch, lance::kRowAddress);
      std::unique_lock lock(view_mu_);
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        auto kind = static_cast<OpKind>(op.value(i));
        if (expected != nullptr) expected->erase(RowIdentity(seq.value(i), kind, key.value(i)));
        // Everything below applies a row of storage, so it is right whether
        // or not the caller goes on to reload.
        if (kind == OpKind::kPut) {
          const Entry* e = view_.Find(key.value(i));
          if (e != nullptr && e->seq() == seq.value(i)) {
            if (e->is_lazy()) {
              view_.SetLazy(key.value(i), seq.value(i), LazyRef{at.version(), address.value(i)});
            }
            continue;
          }
          if (e != nullptr && e->seq() > seq.value(i)) continue;
          if (view_.ranges().Covering(key.value(i)) > seq.value(i)) continue;
        } else if (kind == OpKind::kDelete) {
          view_.ApplyDelete(seq.value(i), key.value(i));
          continue;
        } else if (kind == OpKind::kMark) {
          uint64_t& mark = marks_[std::string(key.value(i))];
          mark = std::max(mark, seq.value(i));
          continue;
        }
        unknown.push_back(address.value(i));  // a put not seen yet, or a range (end in value)
      }
    }
  }
  if (expected != nullptr && !expected->empty()) return false;
  if (!unknown.empty()) {
    // Taking by address reads exactly these rows; `at` lists their
    // fragments, and takes want them in order.
    std::sort(unknown.begin(), unknown.end());
    auto take = [&](std::span<const uint64_t> addresses) {
      arrow::StreamReader taken = at.Take(addresses, {"seq", "op", "key", "value"});
      size_t next = 0;
      while (auto batch = taken.Next()) {
        arrow::UInt64Column seq(*batch, "seq");
        arrow::UInt8Column op(*batch, "op");
        arrow::BinaryColumn key(*batch, "key");
        arrow::BinaryColumn value(*batch, "value");
        std::unique_lock lock(view_mu_);
        for (int64_t i = 0; i < batch->num_rows(); ++i, ++next) {
          ApplyStoredRow(view_, marks_, options_.lazy_value_threshold, seq.value(i),
                         static_cast<OpKind>(op.value(i)), key.value(i), value.value(i),
                         LazyRef{at.version(), addresses[next]});
        }
      }
    };
    try {
      take(unknown);
    } catch (const Error& e) {
      // More than 2 GiB of values at once: row by row (applying twice is
      // harmless).
      if (!lance::IsOffsetOverflow(e)) throw;
      for (uint64_t address : unknown) take(std::span<const uint64_t>(&address, 1));
    }
  }
  std::unique_lock lock(view_mu_);
  for (const auto& f : fragments) applied_[f.id] = {f, at.version()};
  return true;
}

void DB::Impl::Reload(const PinnedVersion& at, const Held& held) {
  ViewState fresh;
  ApplyFragments(at, at.fragments(), &fresh);
  std::optional<pipeline::WritePipeline::Locked> own;
  pipeline::WritePipeline::Locked* writes = held.writes;
  if (writes == nullptr && !held.opening) writes = &own.emplace(pipeline_.Lock());
  {
    std::unique_lock view_lock(view_mu_);
    // With the flush lock held nothing is in flight: the pending batch is
    // every write of this handle that `at` may lack. Applying one that it
    // holds changes nothing.
    if (writes != nullptr) ApplyOps(writes->pending<KvBatch>().ops, fresh.view);
    view_.Swap(fresh.view);
    applied_.swap(fresh.applied);
    marks_.swap(fresh.marks);
  }
  own.reset();
  // `fresh` now holds the old view, freed here without any lock.
}

}  // namespace kv0::kv
