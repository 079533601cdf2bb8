// kv0's view of one Lance dataset: RAII over the lance-c handle.
//
// Every method blocks until Lance is done and reports failures as
// kv0::Error (see MapStatus in dataset.cc for how Lance's codes map). A
// Dataset reads one version, its "current" version; commits made through it
// move it to the version they created (which may include other writers'
// commits, since Lance rebases an append onto the latest version). Methods
// may be called from several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv0/error.h"
#include "lance/arrow.h"

struct LanceDataset;
struct LanceFragments;

namespace kv0::lance {

class AutoCleanup;  // auto_cleanup.h

// Object-store settings handed to Lance unchanged (aws_endpoint, ...).
using StorageOptions = std::map<std::string, std::string>;

// A fragment's identity: its id plus the files that hold its rows and its
// deletions. Two fragments with equal identity hold the same rows.
struct FragmentInfo {
  uint64_t id = 0;
  std::string data_file;  // first data file; Lance names each uniquely
  uint64_t physical_rows = 0;
  std::string deletion_file;  // empty when no row is deleted
  uint64_t deleted_rows = 0;

  bool operator==(const FragmentInfo&) const = default;
};

struct VersionInfo {
  uint64_t version = 0;
  int64_t timestamp_us = 0;  // commit time, microseconds since the Unix epoch
};

// A commit's outcome: the version it created and the ids Lance gave to the
// fragments it added, in the order they were written. A row's address is
// (fragment id << 32) | its position in the fragment.
struct CommitResult {
  uint64_t version = 0;
  std::vector<uint64_t> fragment_ids;
};

struct CompactResult {
  std::vector<uint64_t> removed;  // fragments the rewrite replaced
  std::vector<uint64_t> added;    // fragments it wrote instead
};

struct ScanOptions {
  std::vector<std::string> columns;                   // empty: every column
  std::string filter;                                 // SQL predicate; empty: every row
  std::optional<std::vector<uint64_t>> fragment_ids;  // only these fragments
  bool with_row_address = false;                      // adds "_rowaddr" (uint64)
  size_t batch_size = 0;                              // 0: Lance's default
};

// Compaction merges fragments of fewer rows than this into fragments of about
// this many, and leaves larger ones alone (Lance's default target).
inline constexpr size_t kCompactTargetRows = size_t{1} << 20;

struct CompactOptions {
  size_t target_rows_per_fragment = kCompactTargetRows;
  bool materialize_deletions = true;
  float materialize_deletions_threshold = 0.1f;
  // A location whose objects name data files (announcements of fragments
  // waiting for a shared commit, tracking/shared_commits.h): the fragments
  // so named are left alone. It is listed after the version to compact is
  // loaded. Empty: none.
  std::string protected_dir;
};

// The fragments a compaction with the default target would merge. Counting
// these rather than all fragments keeps a large table, whose full fragments
// compaction never touches, from being compacted after every flush.
size_t MergeableFragments(const std::vector<FragmentInfo>& fragments);

struct CleanupStats {
  uint64_t old_versions = 0;
  uint64_t bytes_removed = 0;
};

// The name of Lance's row address column in scans.
inline constexpr const char* kRowAddress = "_rowaddr";

// Fragments written by WriteFragments and not yet committed.
class UncommittedFragments {
 public:
  UncommittedFragments() = default;
  explicit UncommittedFragments(LanceFragments* raw) : raw_(raw) {}
  LanceFragments* release() { return raw_.release(); }
  // Moves other's fragments after this one's, for a single commit of both.
  void Extend(UncommittedFragments other);
  // Their Lance metadata as JSON, and back: what a writer announces so that
  // another may commit them (tracking/shared_commits.h).
  std::string ToJson() const;
  static UncommittedFragments FromJson(const std::string& json);
  // The first data file of each, in order: Lance names each uniquely.
  std::vector<std::string> DataFiles() const;

 private:
  struct Free {
    void operator()(LanceFragments* raw) const;
  };
  std::unique_ptr<LanceFragments, Free> raw_;
};

class Dataset {
 public:
  // Opens the dataset at uri: the latest version, or `version` (non-zero),
  // or the version `tag` names. NotFound if there is none.
  static Dataset Open(const std::string& uri, const StorageOptions& options, uint64_t version = 0,
                      const std::string& tag = "");
  // Creates an empty dataset. Conflict if one exists already. Lance's own
  // automatic cleanup stays off (see auto_cleanup.h for kv0's).
  static Dataset Create(const std::string& uri, const StorageOptions& options,
                        const arrow::Schema& schema);
  // The same for a schema received over the C Data Interface (borrowed).
  static Dataset Create(const std::string& uri, const StorageOptions& options,
                        const ArrowSchema& schema);
  static bool Exists(const std::string& uri, const StorageOptions& options);

  Dataset(Dataset&&) noexcept = default;
  Dataset& operator=(Dataset&&) noexcept = default;
  ~Dataset();

  const std::string& uri() const { return uri_; }
  const StorageOptions& storage_options() const { return options_; }

  // A second handle at this one's version that moves on its own (no I/O;
  // memory:// datasets too). Neither the commit timeout nor the automatic
  // cleanup is copied.
  Dataset Clone() const;

  // --- Versions -----------------------------------------------------------
  uint64_t version() const;
  // The newest version in storage, found without loading it.
  uint64_t LatestVersion() const;
  // Moves to the newest version in storage.
  void CheckoutLatest();
  std::vector<VersionInfo> Versions() const;
  // The oldest stored version that no tag names: one listing of the
  // versions and one manifest read, where Versions() reads every manifest.
  VersionInfo OldestVersion() const;

  // --- Reading the current version -----------------------------------------
  std::vector<FragmentInfo> Fragments() const;
  arrow::OwnedSchema Schema() const;
  uint64_t CountRows(const std::string& filter = "") const;
  arrow::StreamReader Scan(const ScanOptions& options) const;
  // The rows at `addresses`, in that order, as one batch; a deleted row is
  // left out. Ask for kRowAddress among the columns to tell which came back.
  arrow::StreamReader Take(std::span<const uint64_t> addresses,
                           const std::vector<std::string>& columns) const;
  // The rows of fragment `fragment_id` whose physical offsets fall in
  // `ranges` ([start, stop) each, none empty, ascending, not overlapping),
  // in that order; a deleted row is left out. No columns: every column. Ask
  // for kRowAddress among the columns to tell which came back. Cheaper than
  // a Take of the same rows, which handles each row on its own: this decodes
  // each range once.
  arrow::StreamReader ReadRanges(uint64_t fragment_id,
                                 std::span<const std::pair<uint64_t, uint64_t>> ranges,
                                 const std::vector<std::string>& columns) const;
  // The same as raw streams, for callers that hand them on (to Python, say).
  // A stream stays readable after the Dataset is gone.
  arrow::OwnedStream ScanStream(const ScanOptions& options) const;
  arrow::OwnedStream TakeStream(std::span<const uint64_t> addresses,
                                const std::vector<std::string>& columns) const;

  // --- Writing ----------------------------------------------------------------
  // Bounds each later commit through this handle (Append, CommitUpdate,
  // CommitShared, Delete, AddNullColumns); zero lifts the bound. A commit that takes
  // longer is abandoned and throws kIOError saying it timed out: it may or
  // may not have taken effect. WriteFragments and Compact, which rewrite
  // data of any size, are not bounded.
  void SetCommitTimeout(std::chrono::milliseconds timeout);
  // Appends the stream's rows as one fragment in one commit. An empty stream
  // commits nothing and returns the current version.
  CommitResult Append(arrow::OwnedStream rows);
  // Writes fragments without committing them.
  UncommittedFragments WriteFragments(arrow::OwnedStream rows);
  // One commit that removes `removed` and adds `added`, read at the current
  // version. Appends committed meanwhile survive; Conflict if a commit since
  // then removed or changed one of `removed` (nothing is committed then).
  // This is checked on the latest version's fragments, not on the versions
  // in between, so it holds when another handle's cleanup removed them.
  // Appends, too, commit when their rebase range was cleaned (they commute
  // with every other commit), even mid-rebase (rust/lance-c/src/commit.rs).
  CommitResult CommitUpdate(std::span<const uint64_t> removed, UncommittedFragments added);
  // Commits `fragments` (some) read at the current version, as a shared
  // commit: Conflict, with nothing committed, when an append or another
  // shared commit was committed after that version. So of several writers
  // that may each commit the same fragments, one does (rust/lance-c/src/
  // shared.rs says how; tracking/shared_commits.h is the protocol).
  CommitResult CommitShared(UncommittedFragments fragments);
  // Lance's compaction (a Rewrite) of the latest version: rows move to new
  // fragments unchanged.
  CompactResult Compact(const CompactOptions& options);
  // Deletes the rows of the latest version that match `predicate`.
  void Delete(const std::string& predicate);
  // Adds nullable, all-null columns without rewriting data.
  void AddNullColumns(const arrow::Schema& columns);

  // --- Indices, tags, configuration, cleanup ------------------------------------
  // Creates the scalar index `name` on `column`, or brings it up to date: a
  // BTREE (exact lookups and ranges) or a ZONEMAP (min and max per zone of
  // rows, which lets a range filter skip zones; cheap, for sorted columns).
  enum class IndexKind { kBTree, kZoneMap };
  void CreateScalarIndex(const std::string& column, const std::string& name,
                         IndexKind kind = IndexKind::kBTree);
  // Drops the index `name`; NotFound if there is none.
  void DropIndex(const std::string& name);
  std::map<std::string, std::string> Indices() const;  // name -> column
  void CreateTag(const std::string& tag, uint64_t version);
  void DeleteTag(const std::string& tag);
  std::map<std::string, uint64_t> Tags() const;
  // After each later commit through this handle, lets `cleanup` decide
  // whether to remove old versions in the background. Datasets that still
  // carry Lance's automatic-cleanup settings (earlier kv0 builds created them
  // so) lose them here, in one commit: Lance would run it inside commits.
  void SetAutoCleanup(std::shared_ptr<AutoCleanup> cleanup);
  // Removes versions older than `older_than` that no tag names (never the
  // current one). With error_if_tagged, a tagged old version fails the call.
  CleanupStats CleanupOldVersions(std::chrono::seconds older_than, bool error_if_tagged = false);
  std::map<std::string, std::string> Config() const;
  std::map<std::string, std::string> Metadata() const;
  // Sets keys, or removes those mapped to nullopt, in one commit.
  void UpdateConfig(const std::map<std::string, std::optional<std::string>>& changes);
  void UpdateMetadata(const std::map<std::string, std::optional<std::string>>& changes);

 private:
  Dataset(std::string uri, StorageOptions options, LanceDataset* raw);

  // Runs one commit between the testing hook's calls, then the cleanup's
  // check.
  template <typename Commit>
  auto Committing(std::string_view operation, Commit&& commit);

  struct Free {
    void operator()(LanceDataset* raw) const;
  };
  std::string uri_;
  StorageOptions options_;
  std::unique_ptr<LanceDataset, Free> raw_;
  std::shared_ptr<AutoCleanup> cleanup_;
};

// Storage options with kv0's defaults for object-store clients added where
// `options` names none: a bound on each request ("timeout", in object_store's
// duration syntax), the number of retries of a failed request
// ("client_max_retries", Lance's key), and no further retries by Lance's
// request throttle ("lance_aimd_max_retries" 0), so that the two bound a
// request's whole wait. Local paths and memory:// ignore them.
StorageOptions WithClientDefaults(StorageOptions options, std::chrono::milliseconds request_timeout,
                                  uint32_t request_retries);

// The names of the immediate children of the location uri (files and
// directories; common prefixes on object stores), sorted. A location that
// does not exist has none.
std::vector<std::string> ListDir(const std::string& uri, const StorageOptions& options);

// Small objects beside the datasets, written and read whole: the
// announcements of fragments waiting for a shared commit. PutObject replaces
// an object; GetObject gives nullopt for none. ListObjects gives the objects
// directly under dir_uri, sorted by name, with the time the store wrote each
// (its own clock, so comparable across writers); DeleteObjects deletes some
// of them in as few requests as the store allows, and an object already gone
// counts as deleted.
struct ListedObject {
  std::string name;
  int64_t modified_ms = 0;  // since the Unix epoch
};
void PutObject(const std::string& uri, const StorageOptions& options, const std::string& content);
std::optional<std::string> GetObject(const std::string& uri, const StorageOptions& options);
std::vector<ListedObject> ListObjects(const std::string& dir_uri, const StorageOptions& options);
void DeleteObjects(const std::string& dir_uri, const StorageOptions& options,
                   const std::vector<std::string>& names);

// Receives Lance's log records: level 1 (error) to 5 (trace).
using LogCallback = void (*)(int level, const char* target, const char* message, void* user);
// Installs callback (nullptr removes it) for records up to max_level.
void SetLogCallback(LogCallback callback, void* user, int max_level);

// Arrow arrays address their bytes with 32-bit offsets, so a read that
// decodes more than 2 GiB of one binary column into one batch fails; this
// tells such a failure from others, for callers that can read fewer rows at
// a time.
bool IsOffsetOverflow(const Error& e);

// The lance-c crate's version string.
std::string LanceVersion();

// For tests and `kv0 stress`: a function called around every commit a
// Dataset makes (Append, CommitUpdate, CommitShared, Compact, Delete,
// AddNullColumns), once before it with committed false and once after it
// with committed true.
// Throwing kv0::Error before the commit fails it with nothing committed;
// throwing after it reports a failure for a commit that happened (what a
// timeout after the commit went through looks like). Exiting the process in
// it is a crash at that point. nullptr removes it.
using CommitHook =
    std::function<void(const std::string& uri, std::string_view operation, bool committed)>;
void SetCommitHookForTesting(CommitHook hook);

}  // namespace kv0::lance
