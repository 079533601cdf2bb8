#include "lance/dataset.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "kv0/arrow_c.h"
#include "lance/auto_cleanup.h"
#include "lance_c.h"

namespace kv0::lance {
namespace {

// Turns a lance-c status into an exception. `what` names the object, so
// messages read "open s3://b/db: ...".
void Check(int status, const std::string& what) {
  if (status == LANCE_OK) return;
  Code code = Code::kIOError;
  switch (status) {
    case LANCE_NOT_FOUND:
      code = Code::kNotFound;
      break;
    case LANCE_CONFLICT:
    case LANCE_ALREADY_EXISTS:
      code = Code::kConflict;
      break;
    case LANCE_INVALID_ARGUMENT:
      code = Code::kInvalidArgument;
      break;
    case LANCE_NOT_SUPPORTED:
      code = Code::kNotSupported;
      break;
    case LANCE_CORRUPTION:
      code = Code::kCorruption;
      break;
    default:  // LANCE_IO_ERROR, LANCE_TIMEOUT (worth retrying), LANCE_INTERNAL
      code = Code::kIOError;
      break;
  }
  throw Error(code, what + ": " + lance_last_error());
}

// Storage options as the C array of pointers into `options` (which must
// outlive the array).
std::vector<LanceKeyValue> KeyValues(const StorageOptions& options) {
  std::vector<LanceKeyValue> out;
  out.reserve(options.size());
  for (const auto& [key, value] : options) out.push_back({key.c_str(), value.c_str()});
  return out;
}

std::vector<LanceKeyValue> Changes(const std::map<std::string, std::optional<std::string>>& map) {
  std::vector<LanceKeyValue> out;
  out.reserve(map.size());
  for (const auto& [key, value] : map) {
    out.push_back({key.c_str(), value ? value->c_str() : nullptr});
  }
  return out;
}

std::vector<const char*> Pointers(const std::vector<std::string>& strings) {
  std::vector<const char*> out;
  out.reserve(strings.size());
  for (const auto& s : strings) out.push_back(s.c_str());
  return out;
}

// Takes over an id list allocated by lance-c.
std::vector<uint64_t> TakeIds(uint64_t* ids, size_t len) {
  std::vector<uint64_t> out(ids, ids + len);
  lance_ids_free(ids, len);
  return out;
}

// Reads a small (key utf8, value utf8) stream into a map.
std::map<std::string, std::string> ReadMap(arrow::OwnedStream stream) {
  std::map<std::string, std::string> out;
  arrow::StreamReader reader(std::move(stream));
  while (auto batch = reader.Next()) {
    arrow::Utf8Column keys(*batch, 0);
    arrow::Utf8Column values(*batch, 1);
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      out.emplace(keys.value(i), values.value(i));
    }
  }
  return out;
}

}  // namespace

namespace {

// The utf8 column "name" of every batch of `stream`.
std::vector<std::string> Names(arrow::OwnedStream stream) {
  std::vector<std::string> out;
  arrow::StreamReader reader(std::move(stream));
  while (auto batch = reader.Next()) {
    arrow::Utf8Column names(*batch, "name");
    for (int64_t i = 0; i < batch->num_rows(); ++i) out.emplace_back(names.value(i));
  }
  return out;
}

}  // namespace

std::vector<std::string> ListDir(const std::string& uri, const StorageOptions& options) {
  auto kv = KeyValues(options);
  arrow::OwnedStream stream;
  Check(lance_list_dir(uri.c_str(), kv.data(), kv.size(), stream.get()), "list " + uri);
  return Names(std::move(stream));
}

// Takes over text allocated by lance-c.
std::string TakeText(char* text) {
  std::string out(text);
  lance_text_free(text);
  return out;
}

void PutObject(const std::string& uri, const StorageOptions& options, const std::string& content) {
  auto kv = KeyValues(options);
  Check(lance_object_put(uri.c_str(), kv.data(), kv.size(), content.c_str()), "write " + uri);
}

std::optional<std::string> GetObject(const std::string& uri, const StorageOptions& options) {
  auto kv = KeyValues(options);
  char* content = nullptr;
  int status = lance_object_get(uri.c_str(), kv.data(), kv.size(), &content);
  if (status == LANCE_NOT_FOUND) return std::nullopt;
  Check(status, "read " + uri);
  return TakeText(content);
}

std::vector<ListedObject> ListObjects(const std::string& dir_uri, const StorageOptions& options) {
  auto kv = KeyValues(options);
  arrow::OwnedStream stream;
  Check(lance_objects_list(dir_uri.c_str(), kv.data(), kv.size(), stream.get()), "list " + dir_uri);
  std::vector<ListedObject> out;
  arrow::StreamReader reader(std::move(stream));
  while (auto batch = reader.Next()) {
    arrow::Utf8Column names(*batch, "name");
    arrow::Int64Column times(*batch, "modified_ms");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      out.push_back({std::string(names.value(i)), times.value(i)});
    }
  }
  return out;
}

void DeleteObjects(const std::string& dir_uri, const StorageOptions& options,
                   const std::vector<std::string>& names) {
  if (names.empty()) return;
  auto kv = KeyValues(options);
  std::vector<const char*> raw;
  raw.reserve(names.size());
  for (const std::string& name : names) raw.push_back(name.c_str());
  Check(lance_objects_delete(dir_uri.c_str(), kv.data(), kv.size(), raw.data(), raw.size()),
        "delete " + std::to_string(names.size()) + " objects in " + dir_uri);
}

void UncommittedFragments::Free::operator()(LanceFragments* raw) const {
  lance_fragments_free(raw);
}

std::string UncommittedFragments::ToJson() const {
  char* json = nullptr;
  Check(lance_fragments_to_json(raw_.get(), &json), "describe written fragments");
  return TakeText(json);
}

UncommittedFragments UncommittedFragments::FromJson(const std::string& json) {
  LanceFragments* raw = nullptr;
  Check(lance_fragments_from_json(json.c_str(), &raw), "read fragment metadata");
  return UncommittedFragments(raw);
}

std::vector<std::string> UncommittedFragments::DataFiles() const {
  arrow::OwnedStream stream;
  Check(lance_fragments_data_files(raw_.get(), stream.get()), "list written fragments' files");
  return Names(std::move(stream));
}

void UncommittedFragments::Extend(UncommittedFragments other) {
  if (!raw_) {
    raw_ = std::move(other.raw_);
    return;
  }
  Check(lance_fragments_extend(raw_.get(), other.release()), "collect written fragments");
}

void Dataset::Free::operator()(LanceDataset* raw) const { lance_dataset_free(raw); }

Dataset::Dataset(std::string uri, StorageOptions options, LanceDataset* raw)
    : uri_(std::move(uri)), options_(std::move(options)), raw_(raw) {}

Dataset::~Dataset() = default;

Dataset Dataset::Open(const std::string& uri, const StorageOptions& options, uint64_t version,
                      const std::string& tag) {
  auto kv = KeyValues(options);
  LanceDataset* raw = nullptr;
  Check(lance_dataset_open(uri.c_str(), kv.data(), kv.size(), version,
                           tag.empty() ? nullptr : tag.c_str(), &raw),
        "open " + uri);
  return Dataset(uri, options, raw);
}

Dataset Dataset::Create(const std::string& uri, const StorageOptions& options,
                        const arrow::Schema& schema) {
  arrow::OwnedSchema c_schema;
  arrow::ExportSchema(schema, c_schema.get());
  return Create(uri, options, *c_schema.get());
}

Dataset Dataset::Create(const std::string& uri, const StorageOptions& options,
                        const ArrowSchema& schema) {
  auto kv = KeyValues(options);
  LanceDataset* raw = nullptr;
  Check(lance_dataset_create(uri.c_str(), kv.data(), kv.size(), &schema, &raw), "create " + uri);
  return Dataset(uri, options, raw);
}

bool Dataset::Exists(const std::string& uri, const StorageOptions& options) {
  auto kv = KeyValues(options);
  bool exists = false;
  Check(lance_dataset_exists(uri.c_str(), kv.data(), kv.size(), &exists), "look for " + uri);
  return exists;
}

Dataset Dataset::Clone() const {
  LanceDataset* raw = nullptr;
  Check(lance_dataset_clone(raw_.get(), &raw), "clone the handle of " + uri_);
  return Dataset(uri_, options_, raw);
}

uint64_t Dataset::version() const { return lance_dataset_version(raw_.get()); }

uint64_t Dataset::LatestVersion() const {
  uint64_t version = 0;
  Check(lance_dataset_latest_version(raw_.get(), &version), "latest version of " + uri_);
  return version;
}

void Dataset::CheckoutLatest() {
  Check(lance_dataset_checkout_latest(raw_.get()), "check out latest version of " + uri_);
}

std::vector<VersionInfo> Dataset::Versions() const {
  arrow::OwnedStream stream;
  Check(lance_dataset_versions(raw_.get(), stream.get()), "list versions of " + uri_);
  std::vector<VersionInfo> out;
  arrow::StreamReader reader(std::move(stream));
  while (auto batch = reader.Next()) {
    arrow::UInt64Column versions(*batch, "version");
    arrow::TimestampColumn times(*batch, "timestamp");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      out.push_back({versions.value(i), times.value(i)});
    }
  }
  return out;
}

VersionInfo Dataset::OldestVersion() const {
  VersionInfo oldest;
  Check(lance_dataset_oldest_version(raw_.get(), &oldest.version, &oldest.timestamp_us),
        "find the oldest version of " + uri_);
  return oldest;
}

std::vector<FragmentInfo> Dataset::Fragments() const {
  arrow::OwnedStream stream;
  Check(lance_dataset_fragments(raw_.get(), stream.get()), "list fragments of " + uri_);
  std::vector<FragmentInfo> out;
  arrow::StreamReader reader(std::move(stream));
  while (auto batch = reader.Next()) {
    arrow::UInt64Column ids(*batch, "id");
    arrow::Utf8Column files(*batch, "data_file");
    arrow::UInt64Column rows(*batch, "physical_rows");
    arrow::Utf8Column deletions(*batch, "deletion_file");
    arrow::UInt64Column deleted(*batch, "deleted_rows");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      out.push_back({ids.value(i), std::string(files.value(i)), rows.value(i),
                     std::string(deletions.value(i)), deleted.value(i)});
    }
  }
  return out;
}

arrow::OwnedSchema Dataset::Schema() const {
  arrow::OwnedSchema schema;
  Check(lance_dataset_schema(raw_.get(), schema.get()), "read schema of " + uri_);
  return schema;
}

uint64_t Dataset::CountRows(const std::string& filter) const {
  uint64_t count = 0;
  Check(lance_dataset_count_rows(raw_.get(), filter.empty() ? nullptr : filter.c_str(), &count),
        "count rows of " + uri_);
  return count;
}

arrow::StreamReader Dataset::Scan(const ScanOptions& options) const {
  return arrow::StreamReader(ScanStream(options));
}

arrow::StreamReader Dataset::Take(std::span<const uint64_t> addresses,
                                  const std::vector<std::string>& columns) const {
  return arrow::StreamReader(TakeStream(addresses, columns));
}

arrow::StreamReader Dataset::ReadRanges(uint64_t fragment_id,
                                        std::span<const std::pair<uint64_t, uint64_t>> ranges,
                                        const std::vector<std::string>& columns) const {
  std::vector<uint64_t> bounds;
  bounds.reserve(ranges.size() * 2);
  for (const auto& [start, stop] : ranges) {
    bounds.push_back(start);
    bounds.push_back(stop);
  }
  auto names = Pointers(columns);
  arrow::OwnedStream stream;
  Check(lance_dataset_read_ranges(raw_.get(), fragment_id, bounds.data(), bounds.size(),
                                  names.data(), names.size(), stream.get()),
        "read row ranges of fragment " + std::to_string(fragment_id) + " of " + uri_);
  return arrow::StreamReader(std::move(stream));
}

arrow::OwnedStream Dataset::ScanStream(const ScanOptions& options) const {
  auto columns = Pointers(options.columns);
  LanceScanOptions scan{};
  scan.columns = columns.data();
  scan.columns_len = columns.size();
  scan.filter = options.filter.empty() ? nullptr : options.filter.c_str();
  if (options.fragment_ids) {
    scan.fragment_ids = options.fragment_ids->data();
    scan.fragment_ids_len = options.fragment_ids->size();
    scan.use_fragment_ids = true;
  }
  scan.with_row_address = options.with_row_address;
  scan.batch_size = options.batch_size;
  arrow::OwnedStream stream;
  Check(lance_dataset_scan(raw_.get(), &scan, stream.get()), "scan " + uri_);
  return stream;
}

arrow::OwnedStream Dataset::TakeStream(std::span<const uint64_t> addresses,
                                       const std::vector<std::string>& columns) const {
  auto names = Pointers(columns);
  arrow::OwnedStream stream;
  Check(lance_dataset_take(raw_.get(), addresses.data(), addresses.size(), names.data(),
                           names.size(), stream.get()),
        "take rows from " + uri_);
  return stream;
}

namespace {

// The hook commits run. No lock on this path, so that a fork's child never
// finds one held by a parent thread; replaced hooks are kept (in all_hooks,
// under its own lock) because a commit may still be running one.
std::atomic<const CommitHook*> commit_hook{nullptr};
std::mutex all_hooks_mu;
std::vector<std::unique_ptr<const CommitHook>> all_hooks;

}  // namespace

template <typename Commit>
auto Dataset::Committing(std::string_view operation, Commit&& commit) {
  const CommitHook* hook = commit_hook.load(std::memory_order_acquire);
  if (hook) (*hook)(uri_, operation, false);
  uint64_t before = cleanup_ ? version() : 0;
  if constexpr (std::is_void_v<decltype(commit())>) {
    commit();
    if (hook) (*hook)(uri_, operation, true);
    if (cleanup_) cleanup_->Committed(*this, before);
  } else {
    auto result = commit();
    if (hook) (*hook)(uri_, operation, true);
    if (cleanup_) cleanup_->Committed(*this, before);
    return result;
  }
}

bool IsOffsetOverflow(const Error& e) {
  std::string_view message = e.what();
  return message.find("Offset overflow") != std::string_view::npos ||
         message.find("offset overflow") != std::string_view::npos;
}

void SetCommitHookForTesting(CommitHook hook) {
  const CommitHook* installed = nullptr;
  if (hook) {
    std::lock_guard lock(all_hooks_mu);
    installed = all_hooks.emplace_back(std::make_unique<const CommitHook>(std::move(hook))).get();
  }
  commit_hook.store(installed, std::memory_order_release);
}

void Dataset::SetCommitTimeout(std::chrono::milliseconds timeout) {
  Check(lance_dataset_set_commit_timeout(raw_.get(), static_cast<uint64_t>(timeout.count())),
        "set the commit timeout of " + uri_);
}

StorageOptions WithClientDefaults(StorageOptions options, std::chrono::milliseconds request_timeout,
                                  uint32_t request_retries) {
  if (request_timeout.count() > 0) {
    options.try_emplace("timeout", std::to_string(request_timeout.count()) + "ms");
  }
  options.try_emplace("client_max_retries", std::to_string(request_retries));
  // Lance retries a request its client gave up on once more per throttle
  // retry, which would multiply the bound; request_retries counts them all.
  options.try_emplace("lance_aimd_max_retries", "0");
  return options;
}

namespace {

// The outcome of a commit call that reports the new version and the ids of
// the fragments it added.
template <typename Call>
CommitResult Reported(const std::string& what, Call call) {
  CommitResult result;
  uint64_t* ids = nullptr;
  size_t len = 0;
  Check(call(&result.version, &ids, &len), what);
  result.fragment_ids = TakeIds(ids, len);
  return result;
}

}  // namespace

CommitResult Dataset::Append(arrow::OwnedStream rows) {
  return Committing("append", [&] {
    return Reported("append to " + uri_, [&](uint64_t* version, uint64_t** ids, size_t* len) {
      return lance_dataset_append(raw_.get(), rows.get(), version, ids, len);
    });
  });
}

UncommittedFragments Dataset::WriteFragments(arrow::OwnedStream rows) {
  LanceFragments* raw = nullptr;
  Check(lance_dataset_write_fragments(raw_.get(), rows.get(), &raw), "write fragments of " + uri_);
  return UncommittedFragments(raw);
}

CommitResult Dataset::CommitUpdate(std::span<const uint64_t> removed, UncommittedFragments added) {
  return Committing("update", [&] {
    return Reported("commit update of " + uri_,
                    [&](uint64_t* version, uint64_t** ids, size_t* len) {
                      return lance_dataset_commit_update(raw_.get(), removed.data(), removed.size(),
                                                         added.release(), version, ids, len);
                    });
  });
}

CommitResult Dataset::CommitShared(UncommittedFragments fragments) {
  return Committing("shared commit", [&] {
    return Reported(
        "shared commit to " + uri_, [&](uint64_t* version, uint64_t** ids, size_t* len) {
          return lance_dataset_commit_shared(raw_.get(), fragments.release(), version, ids, len);
        });
  });
}

size_t MergeableFragments(const std::vector<FragmentInfo>& fragments) {
  return std::count_if(fragments.begin(), fragments.end(),
                       [](const FragmentInfo& f) { return f.physical_rows < kCompactTargetRows; });
}

CompactResult Dataset::Compact(const CompactOptions& options) {
  LanceCompactOptions c_options{
      .target_rows_per_fragment = options.target_rows_per_fragment,
      .materialize_deletions = options.materialize_deletions,
      .materialize_deletions_threshold = options.materialize_deletions_threshold,
  };
  uint64_t* removed = nullptr;
  uint64_t* added = nullptr;
  size_t removed_len = 0, added_len = 0;
  auto kv = KeyValues(options_);
  const char* protected_dir =
      options.protected_dir.empty() ? nullptr : options.protected_dir.c_str();
  Committing("compact", [&] {
    Check(lance_dataset_compact(raw_.get(), &c_options, protected_dir, kv.data(), kv.size(),
                                &removed, &removed_len, &added, &added_len),
          "compact " + uri_);
  });
  CompactResult result;
  result.removed = TakeIds(removed, removed_len);
  result.added = TakeIds(added, added_len);
  return result;
}

void Dataset::Delete(const std::string& predicate) {
  Committing("delete", [&] {
    Check(lance_dataset_delete(raw_.get(), predicate.c_str()), "delete from " + uri_);
  });
}

void Dataset::AddNullColumns(const arrow::Schema& columns) {
  arrow::OwnedSchema schema;
  arrow::ExportSchema(columns, schema.get());
  Committing("add_columns", [&] {
    Check(lance_dataset_add_null_columns(raw_.get(), schema.get()), "add columns to " + uri_);
  });
}

void Dataset::CreateScalarIndex(const std::string& column, const std::string& name,
                                IndexKind kind) {
  const char* type = kind == IndexKind::kZoneMap ? "ZONEMAP" : "BTREE";
  Check(lance_dataset_create_scalar_index(raw_.get(), column.c_str(), name.c_str(), type),
        "create index " + name + " on " + uri_);
}

void Dataset::DropIndex(const std::string& name) {
  Committing("drop_index", [&] {
    Check(lance_dataset_drop_index(raw_.get(), name.c_str()), "drop index " + name + " of " + uri_);
  });
}

std::map<std::string, std::string> Dataset::Indices() const {
  arrow::OwnedStream stream;
  Check(lance_dataset_indices(raw_.get(), stream.get()), "list indices of " + uri_);
  return ReadMap(std::move(stream));
}

void Dataset::CreateTag(const std::string& tag, uint64_t version) {
  Check(lance_dataset_tag_create(raw_.get(), tag.c_str(), version),
        "create tag " + tag + " on " + uri_);
}

void Dataset::DeleteTag(const std::string& tag) {
  Check(lance_dataset_tag_delete(raw_.get(), tag.c_str()), "delete tag " + tag + " of " + uri_);
}

std::map<std::string, uint64_t> Dataset::Tags() const {
  arrow::OwnedStream stream;
  Check(lance_dataset_tags(raw_.get(), stream.get()), "list tags of " + uri_);
  std::map<std::string, uint64_t> out;
  arrow::StreamReader reader(std::move(stream));
  while (auto batch = reader.Next()) {
    arrow::Utf8Column names(*batch, "name");
    arrow::UInt64Column versions(*batch, "version");
    for (int64_t i = 0; i < batch->num_rows(); ++i) out.emplace(names.value(i), versions.value(i));
  }
  return out;
}

void Dataset::SetAutoCleanup(std::shared_ptr<AutoCleanup> cleanup) {
  std::map<std::string, std::optional<std::string>> lances;
  for (const auto& [key, value] : Config()) {
    if (key.starts_with("lance.auto_cleanup.")) lances[key] = std::nullopt;
  }
  if (!lances.empty()) UpdateConfig(lances);
  cleanup_ = std::move(cleanup);
}

CleanupStats Dataset::CleanupOldVersions(std::chrono::seconds older_than, bool error_if_tagged) {
  LanceCleanupStats stats{};
  Check(lance_dataset_cleanup(raw_.get(), older_than.count(), error_if_tagged, &stats),
        "clean up old versions of " + uri_);
  return {stats.old_versions, stats.bytes_removed};
}

std::map<std::string, std::string> Dataset::Config() const {
  arrow::OwnedStream stream;
  Check(lance_dataset_map(raw_.get(), LANCE_MAP_KIND_CONFIG, stream.get()),
        "read config of " + uri_);
  return ReadMap(std::move(stream));
}

std::map<std::string, std::string> Dataset::Metadata() const {
  arrow::OwnedStream stream;
  Check(lance_dataset_map(raw_.get(), LANCE_MAP_KIND_METADATA, stream.get()),
        "read metadata of " + uri_);
  return ReadMap(std::move(stream));
}

void Dataset::UpdateConfig(const std::map<std::string, std::optional<std::string>>& changes) {
  auto kv = Changes(changes);
  Check(lance_dataset_update_map(raw_.get(), LANCE_MAP_KIND_CONFIG, kv.data(), kv.size()),
        "update config of " + uri_);
}

void Dataset::UpdateMetadata(const std::map<std::string, std::optional<std::string>>& changes) {
  auto kv = Changes(changes);
  Check(lance_dataset_update_map(raw_.get(), LANCE_MAP_KIND_METADATA, kv.data(), kv.size()),
        "update metadata of " + uri_);
}

void SetLogCallback(LogCallback callback, void* user, int max_level) {
  lance_set_log_callback(callback, user, max_level);
}

std::string LanceVersion() { return lance_c_version(); }

}  // namespace kv0::lance
