// The read path (served from the view) and refresh (bringing other writers'
// commits into the view).

#include <algorithm>
#include <chrono>
#include <set>

#include "kv/db_impl.h"

namespace kv0::kv {
void DB::Impl::CheckOpen() const {
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
  Refresh();
}

void DB::Impl::Refresh() {
  CheckOpen();
  if (pinned_) return;
  std::lock_guard lock(refresh_mu_);
  RefreshLocked();
}

void DB::Impl::RefreshLocked() {
  last_refresh_ns_ = SteadyNanos();
  if (dataset_->LatestVersion() != dataset_->version()) dataset_->CheckoutLatest();
  auto fragments = dataset_->Fragments();

  std::vector<lance::FragmentInfo> fresh;
  bool any_removed = false;
  {
    std::shared_lock view_lock(view_mu_);
    std::set<uint64_t> present;
    for (const auto& f : fragments) {
      present.insert(f.id);
      auto it = applied_.find(f.id);
      if (it == applied_.end()) fresh.push_back(f);
    }
    for (const auto& [id, info] : applied_) {
      if (!present.count(id)) any_removed = true;
    }
  }
  if (any_removed) {
    // Another writer rewrote fragments this view holds. Their rows are in
    // the new fragments: rebind references and read only what is new.
    RebindFragments(fresh);
    std::unique_lock view_lock(view_mu_);
    std::erase_if(applied_, [&](const auto& kv) {
      return std::none_of(fragments.begin(), fragments.end(),
                          [&](const auto& f) { return f.id == kv.first; });
    });
  } else if (!fresh.empty()) {
    ApplyFragments(fresh);
  }
  uint64_t max_seq;
  {
    std::shared_lock view_lock(view_mu_);
    max_seq = view_.max_seq();
  }
  pipeline_.clock().Observe(max_seq);
}

// Applies one stored row (holding view_mu_). A large value becomes a
// reference to its row, `where`.
void DB::Impl::ApplyStoredRow(uint64_t seq, OpKind kind, std::string_view key,
                              std::string_view value, LazyRef where) {
  switch (kind) {
    case OpKind::kPut:
      if (value.size() > options_.lazy_value_threshold) {
        view_.ApplyLazy(seq, key, static_cast<uint32_t>(value.size()), where);
      } else {
        view_.ApplyPut(seq, key, value);
      }
      break;
    case OpKind::kDelete:
      view_.ApplyDelete(seq, key);
      break;
    case OpKind::kDeleteRange:
      view_.ApplyDeleteRange(seq, key, value);
      break;
    case OpKind::kMark: {
      uint64_t& mark = marks_[std::string(key)];
      mark = std::max(mark, seq);
      break;
    }
  }
}

// Applies every row of `fragments` to the view, batch by batch as Lance
// decodes them. Large values become references to their rows.
void DB::Impl::ApplyFragments(const std::vector<lance::FragmentInfo>& fragments) {
  if (fragments.empty()) return;
  try {
    ApplyFragments(fragments, 0);
  } catch (const Error& e) {
    // Some rows decoded together hold more than 2 GiB of values. Applying a
    // row twice changes nothing, so read again, one row per batch (a value
    // is at most 1 GiB).
    if (!lance::IsOffsetOverflow(e)) throw;
    ApplyFragments(fragments, 1);
  }
}

void DB::Impl::ApplyFragments(const std::vector<lance::FragmentInfo>& fragments,
                              size_t batch_size) {
  lance::ScanOptions scan;
  scan.columns = {"seq", "op", "key", "value"};
  scan.with_row_address = true;
  scan.batch_size = batch_size;
  scan.fragment_ids.emplace();
  for (const auto& f : fragments) scan.fragment_ids->push_back(f.id);
  uint64_t version = dataset_->version();
  arrow::StreamReader reader = dataset_->Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt64Column seq(*batch, "seq");
    arrow::UInt8Column op(*batch, "op");
    arrow::BinaryColumn key(*batch, "key");
    arrow::BinaryColumn value(*batch, "value");
    arrow::UInt64Column address(*batch, lance::kRowAddress);
    std::unique_lock lock(view_mu_);
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      ApplyStoredRow(seq.value(i), static_cast<OpKind>(op.value(i)), key.value(i), value.value(i),
                     LazyRef{version, address.value(i)});
    }
  }
  std::unique_lock lock(view_mu_);
  for (const auto& f : fragments) applied_[f.id] = f;
}

// Reads the rows of rewritten `fragments` without their values first: rows
// the view already holds only need their references moved; the values of
// the rest are then taken by address.
void DB::Impl::RebindFragments(const std::vector<lance::FragmentInfo>& fragments) {
  if (fragments.empty()) return;
  lance::ScanOptions scan;
  scan.columns = {"seq", "op", "key"};
  scan.with_row_address = true;
  scan.fragment_ids.emplace();
  for (const auto& f : fragments) scan.fragment_ids->push_back(f.id);
  uint64_t version = dataset_->version();
  std::vector<uint64_t> unknown;  // addresses of rows the view has not seen
  arrow::StreamReader reader = dataset_->Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt64Column seq(*batch, "seq");
    arrow::UInt8Column op(*batch, "op");
    arrow::BinaryColumn key(*batch, "key");
    arrow::UInt64Column address(*batch, lance::kRowAddress);
    std::unique_lock lock(view_mu_);
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      auto kind = static_cast<OpKind>(op.value(i));
      if (kind == OpKind::kPut) {
        const Entry* e = view_.Find(key.value(i));
        if (e != nullptr && e->seq() == seq.value(i)) {
          if (e->is_lazy()) {
            view_.SetLazy(key.value(i), seq.value(i), LazyRef{version, address.value(i)});
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
  if (!unknown.empty()) {
    // Taking by address reads exactly these rows; their fragments are part
    // of the current version, so the addresses are valid here.
    auto take = [&](std::span<const uint64_t> addresses) {
      arrow::StreamReader taken = dataset_->Take(addresses, {"seq", "op", "key", "value"});
      size_t next = 0;
      while (auto batch = taken.Next()) {
        arrow::UInt64Column seq(*batch, "seq");
        arrow::UInt8Column op(*batch, "op");
        arrow::BinaryColumn key(*batch, "key");
        arrow::BinaryColumn value(*batch, "value");
        std::unique_lock lock(view_mu_);
        for (int64_t i = 0; i < batch->num_rows(); ++i, ++next) {
          ApplyStoredRow(seq.value(i), static_cast<OpKind>(op.value(i)), key.value(i),
                         value.value(i), LazyRef{version, addresses[next]});
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
  for (const auto& f : fragments) applied_[f.id] = f;
}

}  // namespace kv0::kv
