#ifndef LANCE_C_H
#define LANCE_C_H

/* Generated from rust/lance-c by cbindgen (cbindgen.toml). Do not edit; a test checks it. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
/* The Arrow C Data Interface structs; define them (arrow_c.h) before use. */
struct ArrowSchema;
struct ArrowArrayStream;


// The call succeeded.
#define LANCE_OK 0

// The dataset, version, tag, index or column does not exist.
#define LANCE_NOT_FOUND 1

// A concurrent commit changed what this commit replaces; nothing was committed.
#define LANCE_CONFLICT 2

// An argument was not acceptable (bad UTF-8, unknown column, bad filter, ...).
#define LANCE_INVALID_ARGUMENT 3

// Storage failed (local disk or object store).
#define LANCE_IO_ERROR 4

// The operation is not supported for this dataset.
#define LANCE_NOT_SUPPORTED 5

// The dataset or tag to be created already exists.
#define LANCE_ALREADY_EXISTS 6

// Stored bytes failed a check.
#define LANCE_CORRUPTION 7

// A bug: a panic inside the crate or Lance, caught at the boundary.
#define LANCE_INTERNAL 8

// A commit took longer than the handle's commit timeout and was abandoned;
// it may or may not have taken effect.
#define LANCE_TIMEOUT 9

// Which of a dataset's string maps a call reads or writes.
typedef enum LanceMapKind {
  // The dataset configuration (manifest config).
  LANCE_MAP_KIND_CONFIG = 0,
  // The table metadata.
  LANCE_MAP_KIND_METADATA = 1,
} LanceMapKind;

// An open dataset at one version. Calls on one handle may come from any
// thread: each call works on a snapshot of the handle's dataset, and calls
// that move the handle to a newer version never move it backwards.
typedef struct LanceDataset LanceDataset;

// Fragments written but not yet committed.
typedef struct LanceFragments LanceFragments;

// One key and its value; `value` may be NULL where a call says so (for
// example to delete a configuration key).
typedef struct LanceKeyValue {
  const char *key;
  const char *value;
} LanceKeyValue;

// Receives one log record. `level` is 1 (error) to 5 (trace); the strings
// are valid only during the call. It may be called from any thread. NULL
// where a callback is optional.
typedef void (*LanceLogCallback)(int32_t level, const char *target, const char *message, void *user);

// How `lance_dataset_compact` merges fragments.
typedef struct LanceCompactOptions {
  // Rows a merged fragment aims for; 0 leaves Lance's default.
  size_t target_rows_per_fragment;
  // Rewrite fragments whose share of deleted rows exceeds the threshold,
  // dropping those rows from storage.
  bool materialize_deletions;
  float materialize_deletions_threshold;
} LanceCompactOptions;

// What a cleanup removed.
typedef struct LanceCleanupStats {
  uint64_t old_versions;
  uint64_t bytes_removed;
} LanceCleanupStats;

// What a scan reads.
typedef struct LanceScanOptions {
  // Columns to read, in this order; with `columns_len` 0, every column.
  const char *const *columns;
  size_t columns_len;
  // An SQL predicate rows must match, or NULL for every row.
  const char *filter;
  // When `use_fragment_ids` is set, only these fragments are read, in
  // this order.
  const uint64_t *fragment_ids;
  size_t fragment_ids_len;
  bool use_fragment_ids;
  // Adds the `_rowaddr` column (uint64: fragment id << 32 | row offset).
  bool with_row_address;
  // Rows per batch; 0 leaves Lance's default.
  size_t batch_size;
} LanceScanOptions;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// The crate's version and the Lance version it was built with.
const char *lance_c_version(void);

// Opens the dataset at `uri`: the latest version when `version` is 0 and
// `tag` is NULL, else that version or that tag.
int32_t lance_dataset_open(const char *uri,
                           const struct LanceKeyValue *options,
                           size_t options_len,
                           uint64_t version,
                           const char *tag,
                           struct LanceDataset **out_dataset);

// Creates an empty dataset with `schema` (borrowed: the caller still
// releases it). Fails with LANCE_ALREADY_EXISTS if one is there. Lance's
// automatic cleanup stays off: it would run inside commits.
int32_t lance_dataset_create(const char *uri,
                             const struct LanceKeyValue *options,
                             size_t options_len,
                             const struct ArrowSchema *schema,
                             struct LanceDataset **out_dataset);

// Sets `*out_exists` to whether a dataset is stored at `uri`.
int32_t lance_dataset_exists(const char *uri,
                             const struct LanceKeyValue *options,
                             size_t options_len,
                             bool *out_exists);

// Lists the names of the immediate children of the location `uri` (files
// and directories, or common prefixes on object stores) as a stream of
// (name utf8), sorted. A location that does not exist has no children.
int32_t lance_list_dir(const char *uri,
                       const struct LanceKeyValue *options,
                       size_t options_len,
                       struct ArrowArrayStream *out_stream);

// Closes a handle. NULL is accepted.
void lance_dataset_free(struct LanceDataset *dataset);

// A second handle at the handle's version, sharing its object store (so it
// also works for memory:// datasets) and moving independently of it. The
// commit timeout is not copied.
int32_t lance_dataset_clone(const struct LanceDataset *dataset, struct LanceDataset **out_dataset);

// The version the handle reads.
uint64_t lance_dataset_version(const struct LanceDataset *dataset);

// The newest version in storage, found without loading it.
int32_t lance_dataset_latest_version(const struct LanceDataset *dataset, uint64_t *out_version);

// Moves the handle to the newest version in storage.
int32_t lance_dataset_checkout_latest(const struct LanceDataset *dataset);

// Lists the stored versions as a stream of (version uint64, timestamp
// timestamp[us, UTC]).
int32_t lance_dataset_versions(const struct LanceDataset *dataset,
                               struct ArrowArrayStream *out_stream);

// The oldest stored version that no tag names, and its commit time in
// microseconds since the Unix epoch: a listing of the versions and one
// manifest read, where `lance_dataset_versions` reads every manifest.
int32_t lance_dataset_oldest_version(const struct LanceDataset *dataset,
                                     uint64_t *out_version,
                                     int64_t *out_timestamp_us);

// Lists the fragments of the handle's version as a stream of (id uint64,
// data_file utf8, physical_rows uint64, deletion_file utf8?, deleted_rows
// uint64). data_file is the fragment's first data file, which Lance names
// uniquely, so (id, data_file, deletion_file) identifies a fragment's
// contents.
int32_t lance_dataset_fragments(const struct LanceDataset *dataset,
                                struct ArrowArrayStream *out_stream);

// Exports the dataset's schema into `out_schema` (the caller releases it).
int32_t lance_dataset_schema(const struct LanceDataset *dataset, struct ArrowSchema *out_schema);

// Counts the rows of the handle's version that match `filter` (an SQL
// predicate; NULL counts every row).
int32_t lance_dataset_count_rows(const struct LanceDataset *dataset,
                                 const char *filter,
                                 uint64_t *out_count);

// Reads a string map of the handle's version as a stream of (key utf8,
// value utf8), sorted by key.
int32_t lance_dataset_map(const struct LanceDataset *dataset,
                          enum LanceMapKind kind,
                          struct ArrowArrayStream *out_stream);

// Sets (or, where a value is NULL, removes) keys of a string map in one
// commit, and moves the handle to that commit.
int32_t lance_dataset_update_map(const struct LanceDataset *dataset,
                                 enum LanceMapKind kind,
                                 const struct LanceKeyValue *entries,
                                 size_t entries_len);

// Bounds every later commit through the handle (appends, updates, deletes,
// added columns) to `milliseconds`; 0 lifts the bound. A commit that takes
// longer fails with `LANCE_TIMEOUT`. Writing uncommitted fragments and
// compaction, which rewrite data of any size, are not bounded.
int32_t lance_dataset_set_commit_timeout(const struct LanceDataset *dataset, uint64_t milliseconds);

// The message of the last failed call on this thread. The pointer stays
// valid until the next failing call on the same thread.
const char *lance_last_error(void);

// Frees a list returned by this crate. NULL is accepted.
void lance_ids_free(uint64_t *ids, size_t len);

// Installs `callback` (or removes it, when NULL) for records at
// `max_level` (1 error .. 5 trace; 0 forwards nothing) and more severe.
void lance_set_log_callback(LanceLogCallback callback, void *user, int32_t max_level);

// Merges small fragments of the latest version with Lance's compaction (a
// Rewrite commit; rows are unchanged but move to new addresses). Reports the ids of the
// fragments it replaced and of those it added; both are empty when there
// was nothing to do. The handle moves to the new version.
//
// With `protected_dir` (a location URI, with `storage` its options), no
// fragment whose first data file names an object there is touched: the
// directory is listed after the latest version is loaded, so a fragment
// in that version whose name was listed is left as it is (kv0's
// announcements of fragments waiting for a shared commit, shared.rs).
int32_t lance_dataset_compact(const struct LanceDataset *dataset,
                              const struct LanceCompactOptions *options,
                              const char *protected_dir,
                              const struct LanceKeyValue *storage,
                              size_t storage_len,
                              uint64_t **out_removed_ids,
                              size_t *out_removed_ids_len,
                              uint64_t **out_added_ids,
                              size_t *out_added_ids_len);

// Deletes the rows matching `predicate` (SQL) in the latest version, in one
// commit.
int32_t lance_dataset_delete(const struct LanceDataset *dataset, const char *predicate);

// Adds the columns of `schema` (borrowed; every field must be nullable) as
// all-null columns, a commit that rewrites no data.
int32_t lance_dataset_add_null_columns(const struct LanceDataset *dataset,
                                       const struct ArrowSchema *schema);

// Creates a scalar index named `name` on `column` of type `index_type`
// ("BTREE" or "ZONEMAP"), or, when it exists, extends it to the fragments
// added since it was built.
int32_t lance_dataset_create_scalar_index(const struct LanceDataset *dataset,
                                          const char *column,
                                          const char *name,
                                          const char *index_type);

// Drops the index named `name` in one commit; LANCE_NOT_FOUND if there is
// none.
int32_t lance_dataset_drop_index(const struct LanceDataset *dataset, const char *name);

// Lists the dataset's indices as a stream of (name utf8, column utf8).
int32_t lance_dataset_indices(const struct LanceDataset *dataset,
                              struct ArrowArrayStream *out_stream);

// Names `version` with `tag`. Fails with LANCE_ALREADY_EXISTS if the tag
// exists, LANCE_NOT_FOUND if the version does not.
int32_t lance_dataset_tag_create(const struct LanceDataset *dataset,
                                 const char *tag,
                                 uint64_t version);

// Removes `tag`. Fails with LANCE_NOT_FOUND if there is no such tag.
int32_t lance_dataset_tag_delete(const struct LanceDataset *dataset, const char *tag);

// Lists the tags as a stream of (name utf8, version uint64), sorted by name.
int32_t lance_dataset_tags(const struct LanceDataset *dataset, struct ArrowArrayStream *out_stream);

// Removes versions older than `older_than_seconds` (never the handle's
// version, never a tagged one) and the files only they used. With
// `error_if_tagged` set, a tagged version old enough to be removed makes the
// call fail instead.
int32_t lance_dataset_cleanup(const struct LanceDataset *dataset,
                              int64_t older_than_seconds,
                              bool error_if_tagged,
                              struct LanceCleanupStats *out_stats);

// Writes `text` (NUL-terminated) as the whole object at `uri`, replacing
// any object there.
int32_t lance_object_put(const char *uri,
                         const struct LanceKeyValue *options,
                         size_t options_len,
                         const char *content);

// Reads the whole object at `uri` as text; free it with `lance_text_free`.
// LANCE_NOT_FOUND when there is none.
int32_t lance_object_get(const char *uri,
                         const struct LanceKeyValue *options,
                         size_t options_len,
                         char **out_content);

// Lists the objects directly under the location `dir_uri` as a stream of
// (name utf8, modified_ms int64: when the store last wrote it, in
// milliseconds since the Unix epoch by the store's clock), sorted by name.
// Directories are left out; a location that does not exist has none.
int32_t lance_objects_list(const char *dir_uri,
                           const struct LanceKeyValue *options,
                           size_t options_len,
                           struct ArrowArrayStream *out_stream);

// Deletes the objects `names` (`names_len` of them) under the location
// `dir_uri`, in as few requests as the store allows (S3 takes up to 1,000
// keys in one). An object already gone is not an error.
int32_t lance_objects_delete(const char *dir_uri,
                             const struct LanceKeyValue *options,
                             size_t options_len,
                             const char *const *names,
                             size_t names_len);

// Scans the handle's version. Batches are decoded as the caller pulls
// them, so a scan never holds the dataset in memory.
int32_t lance_dataset_scan(const struct LanceDataset *dataset,
                           const struct LanceScanOptions *options,
                           struct ArrowArrayStream *out_stream);

// Reads the rows at `addresses` (at the handle's version) in the order
// given, as a stream of one batch. Deleted rows are left out.
int32_t lance_dataset_take(const struct LanceDataset *dataset,
                           const uint64_t *addresses,
                           size_t addresses_len,
                           const char *const *columns,
                           size_t columns_len,
                           struct ArrowArrayStream *out_stream);

// Reads the rows of fragment `fragment_id` (at the handle's version) whose
// physical offsets fall in the ranges `[bounds[2i], bounds[2i + 1])`, ranges
// ascending and not overlapping, in that order, as a stream. Deleted rows
// are left out. `columns` may name `_rowaddr`; with `columns_len` 0, every
// column. Where a take by address handles each row on its own, this
// decodes each range once, as a scan does.
int32_t lance_dataset_read_ranges(const struct LanceDataset *dataset,
                                  uint64_t fragment_id,
                                  const uint64_t *bounds,
                                  size_t bounds_len,
                                  const char *const *columns,
                                  size_t columns_len,
                                  struct ArrowArrayStream *out_stream);

// Commits `fragments` (consumed, even on failure) as a shared commit read at
// the handle's version. Fails with LANCE_CONFLICT, committing nothing, when
// an append or an update was committed after that version. Reports the new
// version and the ids given to the fragments, in order; the handle moves to
// the new version.
int32_t lance_dataset_commit_shared(const struct LanceDataset *dataset,
                                    struct LanceFragments *fragments,
                                    uint64_t *out_version,
                                    uint64_t **out_fragment_ids,
                                    size_t *out_fragment_ids_len);

// The fragments' Lance metadata as JSON, for `lance_fragments_from_json`;
// free it with `lance_text_free`.
int32_t lance_fragments_to_json(const struct LanceFragments *fragments, char **out_json);

// Fragments from the JSON `lance_fragments_to_json` made.
int32_t lance_fragments_from_json(const char *json, struct LanceFragments **out_fragments);

// The first data file of each fragment, in order, as a stream of (name
// utf8): the names Lance gave them, unique to each fragment.
int32_t lance_fragments_data_files(const struct LanceFragments *fragments,
                                   struct ArrowArrayStream *out_stream);

// Frees text this crate returned. NULL is accepted.
void lance_text_free(char *text);

// Appends the rows of `stream` (consumed) as one fragment in one commit.
// Reports the new version and the fragment's id (none for an empty stream,
// which commits nothing). The handle moves to the new version.
int32_t lance_dataset_append(const struct LanceDataset *dataset,
                             struct ArrowArrayStream *stream,
                             uint64_t *out_version,
                             uint64_t **out_fragment_ids,
                             size_t *out_fragment_ids_len);

// Writes the rows of `stream` (consumed) as new fragments without
// committing them; `lance_dataset_commit_update` commits them.
int32_t lance_dataset_write_fragments(const struct LanceDataset *dataset,
                                      struct ArrowArrayStream *stream,
                                      struct LanceFragments **out_fragments);

// Frees uncommitted fragments that will not be committed (their files stay
// until a cleanup removes unreferenced files). NULL is accepted.
void lance_fragments_free(struct LanceFragments *fragments);

// Moves the fragments of `src` (consumed; may be NULL) to the end of `dst`,
// so fragments written by several calls go into one commit.
int32_t lance_fragments_extend(struct LanceFragments *dst, struct LanceFragments *src);

// Commits an Update that removes the fragments `removed_ids` and adds
// `fragments` (consumed, even on failure; may be NULL for none), read at
// the handle's version. Appends committed meanwhile are kept; a commit since
// then that removed or changed one of `removed_ids` makes this one fail with
// LANCE_CONFLICT (checked on the latest version, see commit.rs). Reports the new version and the ids given to the new
// fragments, in order. The handle moves to the new version.
int32_t lance_dataset_commit_update(const struct LanceDataset *dataset,
                                    const uint64_t *removed_ids,
                                    size_t removed_ids_len,
                                    struct LanceFragments *fragments,
                                    uint64_t *out_version,
                                    uint64_t **out_fragment_ids,
                                    size_t *out_fragment_ids_len);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* LANCE_C_H */
