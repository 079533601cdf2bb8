// Records tables: one Lance dataset per table, <repo>/records/<escaped>.lance,
// with the columns of RecordsSchema(). Rows are keyed by (run_id, item_id);
// a key's newest seq wins, at read time always and physically after
// Optimize folds superseded rows.
//
// RecordsStore keeps no state besides its arguments: every call opens the
// datasets it needs at their latest version (or the version a query names),
// so it is thread-safe and sees every other writer's commits.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv0/arrow_c.h"
#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "util/clock.h"

namespace kv0::tracking {

// A table name as a directory name: bytes in [A-Za-z0-9_-] are kept, every
// other byte becomes %XX (uppercase hex), so distinct names never share a
// directory and no name escapes records/. Throws kInvalidArgument for an
// empty name.
std::string EscapeTableName(std::string_view name);
// The inverse, for a directory name with or without its ".lance" suffix;
// nullopt for anything EscapeTableName does not produce.
std::optional<std::string> UnescapeTableName(std::string_view dir);

// For a range filter: the least string greater than every string starting
// with prefix (its last code point incremented, after dropping trailing
// U+10FFFF), or nullopt if there is none (or prefix is not valid UTF-8).
std::optional<std::string> PrefixUpperBound(std::string_view prefix);

// IN filters hold at most this many values; longer lists take several scans.
inline constexpr size_t kRecordsInChunk = 500;

// Names of the BTREE indices Optimize keeps.
inline constexpr const char* kRecordsItemIndex = "item_id_idx";
inline constexpr const char* kRecordsRunIndex = "run_id_idx";

// The metadata key (value "1") marking records.lance as migrated.
inline constexpr const char* kLegacyMigratedKey = "kv0.migrated";

struct StoredRecord;  // a row as stored (records.cc)

class RecordsStore {
 public:
  // Run ids for which `hidden` returns true are deleted: their rows are
  // skipped by reads and dropped by Optimize.
  using Hidden = std::function<bool(const std::string& run_id)>;

  // repo_uri is the repository's location as Repo names it (a normalized
  // path or a URI); clock issues the rows' seq and outlives the store.
  RecordsStore(std::string repo_uri, lance::StorageOptions options, HybridClock* clock,
               std::chrono::seconds version_retention);

  // The dataset URI of a table (kInvalidArgument for an empty name).
  std::string TableUri(const std::string& table) const;

  // Appends rows in one commit, creating the table on first use, and returns
  // the table's new version (for no rows: its current version, 0 if none,
  // creating nothing). seq comes from the clock, created_at_us 0 becomes
  // now. kInvalidArgument for an empty table name or item id, or text that
  // is not UTF-8; nothing is written then.
  uint64_t Append(const std::string& table, std::span<const Record> rows);

  // The newest row of every key the query selects, rows of hidden runs
  // skipped, ordered by run_id (rows without one first) then item_id. A
  // missing table has no rows at its latest version; a version or tag that
  // does not exist (or a table that does not, with either) is NotFound.
  // kInvalidArgument for a query setting two run selectors, two item
  // selectors, or both version and tag.
  std::vector<Record> Read(const std::string& table, const RecordQuery& query,
                           const Hidden& hidden);
  // The same as an Arrow stream of RecordsSchema() batches. *out is released
  // first if set; the caller owns it afterwards.
  void ReadStream(const std::string& table, const RecordQuery& query, const Hidden& hidden,
                  ArrowArrayStream* out);

  // The table's latest version in storage; 0 if it does not exist.
  uint64_t Version(const std::string& table);
  // The names of the tables, sorted (one listing of records/).
  std::vector<std::string> Tables();
  // Every table's dataset URI, in the order of Tables().
  std::vector<std::string> TableUris();
  // The URI of the legacy records.lance (which may not exist).
  std::string LegacyUri() const;

  // Tags of one table. version 0 means the latest. NotFound for a table that
  // does not exist (and a tag or version that does not).
  void CreateTag(const std::string& table, const std::string& tag, uint64_t version = 0);
  void DeleteTag(const std::string& table, const std::string& tag);
  std::map<std::string, uint64_t> Tags(const std::string& table);

  // True if the repository holds records.lance (one listing of its root).
  bool HasLegacy();
  // Copies the rows of records.lance into the per-table datasets, keeping
  // each row's seq and created_at, then marks records.lance as migrated (it
  // is kept). Does nothing if there is none or it is marked. Interrupted, it
  // is simply run again: rows copied twice have the same seq and key, and
  // reads keep one.
  void MigrateLegacy();

  // Deletes the rows of these runs from every table that has some, and from
  // records.lance if there is one.
  void DeleteRunRows(std::span<const std::string> run_ids);

  // Per table: rewrites its rows without superseded rows and rows of hidden
  // runs, as one fragment, removing exactly the fragments it read (rows
  // appended meanwhile survive); skipped for a table that already is one
  // fragment without such rows or deletions. Then builds the BTREE indices
  // on item_id and run_id, or extends them to newer fragments. Run again
  // with nothing new, it commits nothing. A concurrent delete or optimize of
  // a table makes it read that table again (kConflict after three tries).
  void Optimize(const Hidden& hidden);

 private:
  std::string RecordsDirUri() const;
  void RemoveTagStaging(const std::string& table) const;
  // The table's dataset for a write, with the table's automatic cleanup.
  lance::Dataset OpenOrCreate(const std::string& uri);
  std::vector<StoredRecord> ReadStored(const std::string& table, const RecordQuery& query,
                                       const Hidden& hidden);
  // Throws kConflict if a concurrent commit rewrote a fragment it read.
  void OptimizeTable(const std::string& table, const Hidden& hidden);

  std::string repo_uri_;
  lance::StorageOptions options_;
  HybridClock* clock_;
  std::chrono::seconds version_retention_;
  // Each table's AutoCleanup outlives the handles a write opens, so that its
  // schedule (and a running job) belongs to the store, by dataset URI.
  std::mutex cleanups_mu_;
  std::map<std::string, std::shared_ptr<lance::AutoCleanup>> cleanups_;
};

}  // namespace kv0::tracking
