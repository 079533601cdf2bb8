#include "pipeline/write_pipeline.h"

#include "kv0/error.h"
#include "util/background.h"

namespace kv0::pipeline {

// --- Batch ---------------------------------------------------------------------

void Batch::Append(Batch&& later) {
  for (size_t table = 0; table < later.marks_.size(); ++table) {
    for (const auto& [writer, seq] : later.marks_[table]) {
      NoteMark(static_cast<int>(table), writer, seq);
    }
  }
  later.marks_.clear();
  later.last_mark_ = {};
  AppendWrites(std::move(later));
}

const Batch::Marks& Batch::marks(int table) const {
  static const Marks kNone;
  return static_cast<size_t>(table) < marks_.size() ? marks_[table] : kNone;
}

void Batch::NoteMark(int table, const std::string& writer_id, uint64_t seq) {
  if (table != last_mark_.table || *last_mark_.writer_id != writer_id) {
    if (static_cast<size_t>(table) >= marks_.size()) marks_.resize(table + 1);
    auto entry = marks_[table].try_emplace(writer_id, 0).first;
    last_mark_ = {table, &entry->first, &entry->second};  // a map's entries stay put
  }
  *last_mark_.seq = std::max(*last_mark_.seq, seq);
}

void Batch::ClearMarks(int table) {
  if (static_cast<size_t>(table) < marks_.size()) marks_[table].clear();
  if (table == last_mark_.table) last_mark_ = {};
}

// --- Locked ----------------------------------------------------------------------

WritePipeline::Locked::Locked(WritePipeline* pipeline, uint64_t ticket)
    : pipeline_(pipeline), lock_(pipeline->mu_), ticket_(ticket) {}

void WritePipeline::Locked::Log(std::string_view record, int table, uint64_t seq) {
  if (!pipeline_->wal_) return;
  pipeline_->wal_->Append(record);
  pipeline_->pending_->NoteMark(table, pipeline_->wal_->writer_id(), seq);
}

WritePipeline::Locked WritePipeline::Lock() { return Locked(this, 0); }

WritePipeline::Locked WritePipeline::BeginWrite() {
  Locked locked(this, 0);
  if (state_ != State::kOpen) throw Error(Code::kNotSupported, options_.name + " is closed");
  locked.ticket_ = ++written_;
  return locked;
}

// --- Opening and replay --------------------------------------------------------

WritePipeline::WritePipeline(Layer& layer, Options options)
    : layer_(layer), options_(std::move(options)), last_flush_(std::chrono::steady_clock::now()) {}

WritePipeline::~WritePipeline() {
  std::lock_guard lock(mu_);
  AbandonLocked();
}

const std::string& WritePipeline::writer_id() const {
  static const std::string kNone;
  return wal_ ? wal_->writer_id() : kNone;
}

bool WritePipeline::is_open() const {
  std::lock_guard lock(mu_);
  return state_ == State::kOpen;
}

void WritePipeline::Open(std::weak_ptr<void> owner) {
  owner_ = std::move(owner);
  pending_ = layer_.NewBatch();
  try {
    if (!options_.wal_dir.empty()) {
      wal_ = wal::Log::Open(options_.wal_dir, options_.wal_sync, options_.mapped_wal);
    }
    {
      std::lock_guard lock(mu_);
      state_ = State::kOpen;
    }
    if (wal_) Replay();
  } catch (...) {
    std::lock_guard lock(mu_);
    AbandonLocked();
    throw;
  }
}

void WritePipeline::AbandonLocked() {
  state_ = State::kClosed;
  if (wal_) wal_->Abandon();
  // Destroying a claim releases its lock and leaves its files.
  claims_.clear();
}

void WritePipeline::Replay() {
  std::vector<wal::Abandoned> claimed = wal::ClaimAbandoned(options_.wal_dir, wal_->writer_id());
  if (claimed.empty()) return;

  // Decide everything before changing anything, so a refused replay leaves
  // the layer and the claimed directories as they were.
  std::vector<Batch::Marks> marks = layer_.StoredMarks();
  marks.resize(kMaxTables);
  uint64_t stale_before = WallNanosAgo(options_.mark_ttl);
  struct Fresh {
    const std::string* writer_id;
    std::string_view record;
    Layer::RecordInfo info;
  };
  std::vector<Fresh> fresh;
  for (const wal::Abandoned& claim : claimed) {
    for (const std::string& record : claim.records) {
      Layer::RecordInfo info = layer_.Describe(record);
      const Batch::Marks& table = marks.at(info.table);
      auto mark = table.find(claim.writer_id);
      if (mark == table.end()) {
        // Without a mark, only a record older than mark_ttl is ambiguous: a
        // committed record's mark is at least its seq, and marks live that
        // long.
        if (info.min_seq < stale_before && !options_.replay_stale_wal) {
          throw Error(Code::kCorruption,
                      "WAL " + claim.dir +
                          " holds records older than mark_ttl and its writer left no mark; "
                          "open with replay_stale_wal to replay it anyway (writes may then be "
                          "stored twice), or move the directory away");
        }
      } else if (info.max_seq <= mark->second) {
        continue;  // committed
      }
      fresh.push_back({&claim.writer_id, record, info});
    }
  }
  std::vector<std::string_view> records;
  for (const Fresh& f : fresh) records.push_back(f.record);
  layer_.PrepareReplay(records);

  {
    std::lock_guard lock(mu_);
    for (const Fresh& f : fresh) {
      clock_.Observe(f.info.max_seq);
      layer_.Replay(f.record, *pending_);
      pending_->NoteMark(f.info.table, *f.writer_id, f.info.max_seq);
    }
    claims_ = std::move(claimed);
  }
  // The claimed directories go with the commit of what they hold (or now,
  // if everything in them was committed already). A commit that fails (a
  // busy or unreachable store) does not fail the open: the replayed records
  // are then pending, and the directories claimed, like any batch whose
  // commit failed, and a later flush commits them and removes them.
  auto flushes = LockFlushes();
  try {
    FlushLocked();
  } catch (const Error&) {
    return;
  }
  std::lock_guard lock(mu_);
  for (wal::Abandoned& claim : claims_) {
    try {
      claim.Remove();
    } catch (const Error&) {
      // Everything in it is committed: a later replay skips it.
    }
  }
  claims_.clear();
}

// --- Flushing ----------------------------------------------------------------------

std::unique_lock<std::mutex> WritePipeline::LockFlushes() {
  return std::unique_lock<std::mutex>(flush_mu_);
}

void WritePipeline::Flush() {
  auto flushes = LockFlushes();
  {
    std::lock_guard lock(mu_);
    if (state_ == State::kClosed) throw Error(Code::kNotSupported, options_.name + " is closed");
  }
  FlushLocked();
}

void WritePipeline::FlushLocked() {
  std::unique_ptr<Batch> batch;
  std::vector<wal::Abandoned> claims;
  uint64_t sealed = 0, through = 0;
  {
    std::lock_guard lock(mu_);
    last_flush_ = std::chrono::steady_clock::now();
    if (pending_->empty()) return;
    // Sealing under the lock that takes the batch makes the sealed segments
    // hold exactly what this commit covers. A failed seal throws here, with
    // the batch still pending.
    if (wal_) sealed = wal_->Seal();
    batch = std::move(pending_);
    pending_ = layer_.NewBatch();
    in_flight_ = batch.get();
    claims.swap(claims_);
    through = written_;
  }

  try {
    layer_.Commit(*batch);
  } catch (...) {
    // Back in front of the writes made meanwhile; the sealed segments and
    // the claimed directories still hold it.
    std::lock_guard lock(mu_);
    batch->Append(std::move(*pending_));
    pending_ = std::move(batch);
    in_flight_ = nullptr;
    for (wal::Abandoned& claim : claims) claims_.push_back(std::move(claim));
    ++failures_;
    retry_at_ = std::chrono::steady_clock::now() + Backoff(failures_);
    throw;
  }

  {
    std::lock_guard lock(mu_);
    in_flight_ = nullptr;
    committed_through_ = std::max(committed_through_, through);
    failures_ = 0;
    retry_at_ = {};
  }
  // Failures here are harmless: the marks just committed make a replay skip
  // these records, and a later flush deletes the segments.
  if (wal_) {
    try {
      wal_->DeleteSealed(sealed);
    } catch (const Error&) {
    }
  }
  for (wal::Abandoned& claim : claims) {
    try {
      claim.Remove();
    } catch (const Error&) {
    }
  }
  try {
    layer_.AfterCommit(*batch);
  } catch (const Error&) {
  }
}

void WritePipeline::FlushThrough(uint64_t ticket) {
  auto flushes = LockFlushes();
  {
    std::lock_guard lock(mu_);
    if (committed_through_ >= ticket) return;
    if (state_ == State::kClosed) {
      throw Error(Code::kIOError, options_.name +
                                      " closed before the write was committed; its WAL keeps "
                                      "it for the next open");
    }
  }
  FlushLocked();
}

void WritePipeline::FlushSoon() {
  // A failed flush puts its batch back for the next one, so the job's error
  // needs no reporting.
  std::weak_ptr<void> owner = owner_;
  Background::Get().SubmitOnce(flush_queued_, [this, owner] {
    auto keep = owner.lock();  // keeps this pipeline alive too
    if (!keep || !is_open() || BackingOff()) return;
    auto flushes = LockFlushes();
    FlushLocked();
  });
}

void WritePipeline::FlushForBackpressure() {
  if (BackingOff()) return;
  try {
    auto flushes = LockFlushes();
    FlushLocked();
  } catch (const Error&) {
  }
}

std::chrono::milliseconds WritePipeline::Backoff(int failures) {
  constexpr std::chrono::milliseconds kFirst{1000}, kMost{60000};
  if (failures >= 7) return kMost;
  return std::min(kMost, kFirst * (1 << (failures - 1)));
}

bool WritePipeline::BackingOff() const {
  std::lock_guard lock(mu_);
  return std::chrono::steady_clock::now() < retry_at_;
}

void WritePipeline::OnTick(std::chrono::steady_clock::time_point now) {
  bool due;
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kOpen) return;
    due = !pending_->empty() && now - last_flush_ >= options_.flush_interval && now >= retry_at_;
  }
  if (wal_) wal_->SyncIfDue(now);
  if (due) FlushSoon();
}

// --- Closing -----------------------------------------------------------------------

void WritePipeline::Close() {
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kOpen) return;
    state_ = State::kClosing;  // from here on BeginWrite refuses
  }
  auto flushes = LockFlushes();
  try {
    FlushLocked();
  } catch (...) {
    std::lock_guard lock(mu_);
    AbandonLocked();
    throw;
  }
  std::lock_guard lock(mu_);
  state_ = State::kClosed;
  claims_.clear();
  if (wal_) wal_->CloseClean();
}

}  // namespace kv0::pipeline
