// The write path: log, apply, buffer; and the flush that commits the buffer.

#include <chrono>

#include "kv/db_impl.h"
#include "util/clock.h"

namespace kv0::kv {
namespace {

// Rejects what the view or Lance could not hold, before anything is logged.
void Validate(const WriteBatch& batch) {
  for (const auto& op : batch.ops()) {
    if (op.key.size() > UINT32_MAX) throw Error(Code::kInvalidArgument, "key longer than 4 GiB");
    if (op.value.size() > Entry::kMaxValueSize) {
      throw Error(Code::kInvalidArgument, "value of " + std::to_string(op.value.size()) +
                                              " bytes is over kv0's limit of 1 GiB");
    }
    if (op.kind == WriteBatch::Kind::kDeleteRange && op.key > op.value) {
      throw Error(Code::kInvalidArgument, "delete_range: begin is after end");
    }
  }
}

}  // namespace

void DB::Impl::ApplyToView(const OpBuffer& ops) {
  std::unique_lock lock(view_mu_);
  ops.ForEach([&](const Op& op) {
    switch (op.kind) {
      case OpKind::kPut:
        view_.ApplyPut(op.seq, op.key, op.value);
        break;
      case OpKind::kDelete:
        view_.ApplyDelete(op.seq, op.key);
        break;
      case OpKind::kDeleteRange:
        view_.ApplyDeleteRange(op.seq, op.key, op.value);
        break;
      case OpKind::kMark:
        break;
    }
  });
}

void DB::Impl::Write(const WriteBatch& batch, const WriteOptions& options) {
  CheckOpen();
  if (read_only_) throw Error(Code::kNotSupported, uri_ + " is open read-only");
  Validate(batch);
  if (batch.Count() == 0) return;

  size_t pending_bytes;
  {
    std::lock_guard lock(write_mu_);
    OpBuffer ops;
    for (const auto& op : batch.ops()) {
      ops.Add(clock_.Next(), static_cast<OpKind>(op.kind), op.key, op.value);
    }
    // Logged before it is applied: a failed append changes nothing.
    if (wal_ && !options.disable_wal) wal_->Append(ops.WalRecord());
    ApplyToView(ops);
    pending_.Append(ops);
    pending_bytes = pending_.bytes();
  }

  if (options.sync) {
    Flush();
  } else if (pending_bytes >= 2 * options_.write_buffer_size) {
    // The background flush is not keeping up: this writer waits for one.
    Flush();
  } else if (pending_bytes >= options_.write_buffer_size) {
    ScheduleFlush();
  }
}

void DB::Impl::ScheduleFlush() {
  // A failed flush puts the operations back in the buffer for the next one,
  // so the job's error needs no reporting.
  std::weak_ptr<Impl> weak = weak_from_this();
  Background::Get().SubmitOnce(flush_queued_, [weak] {
    auto self = weak.lock();
    if (self && !self->closed_) self->Flush();
  });
}

void DB::Impl::OnTick(SteadyTime now) {
  if (closed_) return;
  int64_t now_ns = SteadyNanos(now);
  if (wal_ && wal_->mode() == wal::SyncMode::kBatch && now_ns - last_wal_sync_ns_ >= 100'000'000) {
    last_wal_sync_ns_ = now_ns;
    wal_->Sync();
  }
  auto interval = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.flush_interval);
  if (now_ns - last_flush_ns_ >= interval.count()) {
    bool has_pending;
    {
      std::lock_guard lock(write_mu_);
      has_pending = !pending_.empty();
    }
    if (has_pending) ScheduleFlush();
  }
}

void DB::Impl::Flush() {
  CheckOpen();
  std::lock_guard lock(flush_mu_);
  FlushLocked();
}

void DB::Impl::FlushLocked() {
  last_flush_ns_ = SteadyNanos();
  OpBuffer ops;
  uint64_t sealed = 0;
  {
    std::lock_guard lock(write_mu_);
    if (pending_.empty()) return;
    std::swap(ops, pending_);
    // Sealing under the lock that took the operations makes the sealed
    // segments hold exactly what this commit covers.
    if (wal_) sealed = wal_->Seal();
  }

  std::string writer_id = wal_ ? wal_->writer_id() : std::string();
  lance::CommitResult commit;
  try {
    commit = dataset_->Append(OpsToStream(ops, writer_id, ops.max_seq()));
  } catch (...) {
    // Back to the front of the buffer, so the next flush retries them in
    // order. The sealed segments still hold them.
    std::lock_guard lock(write_mu_);
    ops.Append(pending_);
    std::swap(ops, pending_);
    throw;
  }
  if (wal_) {
    try {
      wal_->DeleteSealed(sealed);
    } catch (const Error&) {
      // Harmless: the mark row committed with the data makes a replay skip
      // these operations, and the next flush deletes the segments.
    }
  }
  flushes_++;

  // Bookkeeping: the new fragment is in the view, the mark moved, and large
  // values can now be read back from Lance instead of memory.
  auto fragments = dataset_->Fragments();
  std::unique_lock view_lock(view_mu_);
  for (const auto& f : fragments) {
    if (!commit.fragment_ids.empty() && f.id == commit.fragment_ids[0]) applied_[f.id] = f;
  }
  if (!writer_id.empty()) {
    uint64_t& mark = marks_[writer_id];
    mark = std::max(mark, ops.max_seq());
  }
  if (!commit.fragment_ids.empty()) {
    uint64_t base = commit.fragment_ids[0] << 32;
    uint64_t row = 0;
    ops.ForEach([&](const Op& op) {
      if (op.kind == OpKind::kPut && op.value.size() > options_.lazy_value_threshold) {
        view_.SetLazy(op.key, op.seq, LazyRef{commit.version, base | row});
      }
      ++row;
    });
  }
  view_lock.unlock();
  MaybeCompact(fragments);
}

}  // namespace kv0::kv
