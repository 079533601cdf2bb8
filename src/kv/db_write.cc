// The write path: log, apply, buffer; and what the key-value layer plugs into
// the write pipeline: committing a batch, and replaying WAL records.

#include <chrono>

#include "kv/db_impl.h"

namespace kv0::kv {
namespace {

// Rejects what the view or Lance could not hold, before anything is logged.
void Validate(const WriteBatch& batch) {
  uint64_t total = 0;
  for (const auto& op : batch.ops()) {
    total += kOpHeaderSize + op.key.size() + op.value.size();
    if (op.key.size() > kMaxKeySize) {
      throw Error(Code::kInvalidArgument, "key of " + std::to_string(op.key.size()) +
                                              " bytes is over kv0's limit of 1 GiB");
    }
    if (op.value.size() > kMaxValueSize) {
      throw Error(Code::kInvalidArgument, "value of " + std::to_string(op.value.size()) +
                                              " bytes is over kv0's limit of 1 GiB");
    }
    if (op.kind == WriteBatch::Kind::kDeleteRange && op.key > op.value) {
      throw Error(Code::kInvalidArgument, "delete_range: begin is after end");
    }
  }
  if (total > kMaxWriteSize) {
    throw Error(Code::kInvalidArgument,
                "a write of " + std::to_string(total) + " bytes is over kv0's limit of 4 GiB - 2");
  }
}

}  // namespace

void DB::Impl::ApplyOps(const OpBuffer& ops, View& view) {
  ops.ForEach([&](const Op& op) {
    switch (op.kind) {
      case OpKind::kPut:
        view.ApplyPut(op.seq, op.key, op.value);
        break;
      case OpKind::kDelete:
        view.ApplyDelete(op.seq, op.key);
        break;
      case OpKind::kDeleteRange:
        view.ApplyDeleteRange(op.seq, op.key, op.value);
        break;
      case OpKind::kMark:
        break;
    }
  });
}

void DB::Impl::ApplyToView(const OpBuffer& ops) {
  std::unique_lock lock(view_mu_);
  ApplyOps(ops, view_);
}

void DB::Impl::Write(const WriteBatch& batch, const WriteOptions& options) {
  CheckOpen();
  if (read_only_) throw Error(Code::kNotSupported, uri_ + " is open read-only");
  Validate(batch);
  if (batch.Count() == 0) return;

  size_t pending_bytes;
  uint64_t ticket;
  {
    auto write = pipeline_.BeginWrite();
    OpBuffer ops;
    for (const auto& op : batch.ops()) {
      ops.Add(pipeline_.clock().Next(), static_cast<OpKind>(op.kind), op.key, op.value);
    }
    // Logged before it is applied: a failed append changes nothing.
    if (!options.disable_wal) write.Log(ops.WalRecord(), kOpsTable, ops.max_seq());
    ApplyToView(ops);
    auto& pending = write.pending<KvBatch>();
    pending.ops.Append(ops);
    pending_bytes = pending.ops.bytes();
    ticket = write.ticket();
  }

  if (options.sync) {
    pipeline_.FlushThrough(ticket);
  } else if (pending_bytes >= 2 * options_.write_buffer_size) {
    pipeline_.FlushForBackpressure();
  } else if (pending_bytes >= options_.write_buffer_size) {
    pipeline_.FlushSoon();
  }
}

void DB::Impl::OnTick(SteadyTime now) {
  if (!closed_) pipeline_.OnTick(now);
}

void DB::Impl::Flush() {
  CheckOpen();
  pipeline_.Flush();
}

void DB::Impl::Commit(pipeline::Batch& batch) {
  auto& kv = static_cast<KvBatch&>(batch);
  kv.commit = dataset_->Append(OpsToStream(kv.ops, kv.marks(kOpsTable)));
}

void DB::Impl::AfterCommit(pipeline::Batch& batch) {
  auto& kv = static_cast<KvBatch&>(batch);
  const lance::CommitResult& commit = kv.commit;
  flushes_++;
  // Bookkeeping: the new fragment is in the view, the marks moved, and large
  // values can now be read back from Lance instead of memory.
  auto fragments = dataset_->Fragments();
  std::unique_lock view_lock(view_mu_);
  for (const auto& f : fragments) {
    if (!commit.fragment_ids.empty() && f.id == commit.fragment_ids[0]) {
      applied_[f.id] = {f, commit.version};
    }
  }
  for (const auto& [writer, seq] : kv.marks(kOpsTable)) {
    uint64_t& mark = marks_[writer];
    mark = std::max(mark, seq);
  }
  if (!commit.fragment_ids.empty()) {
    uint64_t base = commit.fragment_ids[0] << 32;
    uint64_t row = 0;
    kv.ops.ForEach([&](const Op& op) {
      if (op.kind == OpKind::kPut && op.value.size() > options_.lazy_value_threshold) {
        view_.SetLazy(op.key, op.seq, LazyRef{commit.version, base | row});
      }
      ++row;
    });
  }
  view_lock.unlock();
  // A closing handle leaves compaction to the next one: close takes only
  // its flush's commit.
  if (!closed_) MaybeCompact(fragments);
}

pipeline::Layer::RecordInfo DB::Impl::Describe(std::string_view record) {
  if (record.empty() || static_cast<uint8_t>(record[0]) != kWalRecordKv) {
    throw Error(Code::kCorruption, "a WAL record of " + uri_ + " is not a key-value record");
  }
  OpBuffer ops = OpBuffer::FromBytes(record.substr(1));
  return {kOpsTable, ops.min_seq(), ops.max_seq()};
}

std::vector<pipeline::Batch::Marks> DB::Impl::StoredMarks() {
  std::shared_lock lock(view_mu_);
  return {marks_};
}

void DB::Impl::Replay(std::string_view record, pipeline::Batch& pending) {
  OpBuffer ops = OpBuffer::FromBytes(record.substr(1));
  ApplyToView(ops);
  static_cast<KvBatch&>(pending).ops.Append(ops);
}

}  // namespace kv0::kv
