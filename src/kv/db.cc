// The public DB and WriteBatch: thin forwarding to DB::Impl.

#include "kv/db_impl.h"
#include "kv/iterator.h"

namespace kv0::kv {

void WriteBatch::Put(std::string_view key, std::string_view value) {
  ops_.push_back({Kind::kPut, std::string(key), std::string(value)});
}

void WriteBatch::Delete(std::string_view key) {
  ops_.push_back({Kind::kDelete, std::string(key), {}});
}

void WriteBatch::DeleteRange(std::string_view begin, std::string_view end) {
  ops_.push_back({Kind::kDeleteRange, std::string(begin), std::string(end)});
}

DB::DB(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

DB::Impl& DB::live() const {
  impl_->owner().Check("database", impl_->uri());
  return *impl_;
}

DB::~DB() {
  if (impl_->owner().Inherited()) {
    // A fork's child: closing would flush and remove the parent's WAL.
    Abandon(std::move(impl_));
    return;
  }
  try {
    impl_->Close();
  } catch (...) {
    // The WAL keeps what could not be committed; the next open replays it.
  }
}

std::unique_ptr<DB> DB::Open(const std::string& uri, const Options& options) {
  return std::unique_ptr<DB>(new DB(Impl::Open(uri, options)));
}

void DB::Put(std::string_view key, std::string_view value, const WriteOptions& options) {
  WriteBatch batch;
  batch.Put(key, value);
  live().Write(batch, options);
}

void DB::Delete(std::string_view key, const WriteOptions& options) {
  WriteBatch batch;
  batch.Delete(key);
  live().Write(batch, options);
}

void DB::DeleteRange(std::string_view begin, std::string_view end, const WriteOptions& options) {
  WriteBatch batch;
  batch.DeleteRange(begin, end);
  live().Write(batch, options);
}

void DB::Write(const WriteBatch& batch, const WriteOptions& options) {
  live().Write(batch, options);
}

std::optional<std::string> DB::Get(std::string_view key) { return live().Get(key); }

std::vector<std::optional<std::string>> DB::MultiGet(std::span<const std::string_view> keys) {
  return live().MultiGet(keys);
}

bool DB::KeyMayExist(std::string_view key) { return live().KeyMayExist(key); }

DB::Probe DB::TryGet(std::string_view key, FoundFn fn, void* found) {
  // A multi-get of one key; the count found tells found from absent.
  std::string_view keys[] = {key};
  size_t found_count = 0;
  Probe probe = live().TryMultiGet(keys, fn, found, &found_count);
  return probe == Probe::kFound && found_count == 0 ? Probe::kAbsent : probe;
}

DB::Probe DB::TryMultiGet(std::span<const std::string_view> keys, FoundFn fn, void* found) {
  size_t found_count = 0;
  return live().TryMultiGet(keys, fn, found, &found_count);
}

std::unique_ptr<Iterator> DB::NewIterator() {
  impl_->CheckOpen();
  impl_->MaybeRefresh();
  return std::make_unique<ViewIterator>(impl_);
}

void DB::Flush() {
  impl_->CheckOpen();
  impl_->Flush();
}

void DB::CompactRange() { live().CompactRange(); }
void DB::Refresh() { live().Refresh(); }
uint64_t DB::version() const { return live().version(); }
std::vector<VersionInfo> DB::Versions() { return live().Versions(); }

uint64_t DB::CleanupOldVersions(std::chrono::seconds older_than) {
  return live().CleanupOldVersions(older_than);
}

void DB::CreateTag(const std::string& tag, uint64_t version) { live().CreateTag(tag, version); }
void DB::DeleteTag(const std::string& tag) { live().DeleteTag(tag); }
std::map<std::string, uint64_t> DB::Tags() { return live().Tags(); }
Stats DB::GetStats() { return live().GetStats(); }
const std::string& DB::uri() const { return live().uri(); }
void DB::Close() { live().Close(); }

// --- Impl's version, tag and statistics calls -------------------------------

std::vector<VersionInfo> DB::Impl::Versions() {
  CheckOpen();
  std::vector<VersionInfo> out;
  for (const auto& v : dataset_->Versions()) out.push_back({v.version, v.timestamp_us});
  return out;
}

uint64_t DB::Impl::CleanupOldVersions(std::chrono::seconds older_than) {
  CheckOpen();
  if (read_only_) throw Error(Code::kNotSupported, uri_ + " is open read-only");
  return dataset_->CleanupOldVersions(older_than).old_versions;
}

void DB::Impl::CreateTag(const std::string& tag, uint64_t version) {
  CheckOpen();
  if (read_only_) throw Error(Code::kNotSupported, uri_ + " is open read-only");
  if (tag.empty()) throw Error(Code::kInvalidArgument, "a tag needs a name");
  dataset_->CreateTag(tag, version == 0 ? dataset_->LatestVersion() : version);
}

void DB::Impl::DeleteTag(const std::string& tag) {
  CheckOpen();
  if (read_only_) throw Error(Code::kNotSupported, uri_ + " is open read-only");
  dataset_->DeleteTag(tag);
}

std::map<std::string, uint64_t> DB::Impl::Tags() {
  CheckOpen();
  return dataset_->Tags();
}

Stats DB::Impl::GetStats() {
  CheckOpen();
  Stats stats;
  stats.version = dataset_->version();
  {
    // A batch being committed is not committed yet.
    auto locked = pipeline_.Lock();
    for (const KvBatch* batch : {&locked.pending<KvBatch>(), locked.in_flight<KvBatch>()}) {
      if (batch == nullptr) continue;
      stats.buffered_ops += batch->ops.count();
      stats.buffered_bytes += batch->ops.bytes();
    }
  }
  std::shared_lock lock(view_mu_);
  stats.entries = view_.live();
  stats.tombstones = view_.tombstones();
  stats.range_tombstones = view_.ranges().size();
  stats.lazy_values = view_.lazy();
  stats.fragments = applied_.size();
  for (const auto& [id, f] : applied_)
    stats.stored_rows += f.info.physical_rows - f.info.deleted_rows;
  stats.flushes = flushes_;
  stats.compactions = compactions_;
  stats.view_reloads = view_reloads_;
  stats.opened_from_snapshot = opened_from_snapshot_;
  return stats;
}

}  // namespace kv0::kv
