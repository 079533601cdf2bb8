// The tracking layer's tables: their Lance schemas and reserved values.
//
// A repository is a location holding four datasets (runs.lance,
// params.lance, series.lance, metrics.lance) plus one dataset per records
// table under records/. The schemas here are the on-disk contract: any Lance
// reader sees exactly these columns, types and nullability.
#pragma once

#include <cstdint>
#include <string_view>

#include "lance/arrow.h"

namespace kv0::tracking {

// runs.lance: one row per change of a run; `fields` says which fields the
// row sets (null in rows written before the column existed: all of them).
const arrow::Schema& RunsSchema();
// params.lance: one row per (run, dotted key) change; the newest seq wins.
const arrow::Schema& ParamsSchema();
// series.lance: one row per metric series.
const arrow::Schema& SeriesSchema();
// metrics.lance: points, plus reserved rows (series_id 0) for statistics
// deltas and WAL marks in the `stats` column.
const arrow::Schema& MetricsSchema();

// records/<escaped table>.lance: one row per write of a (run_id, item_id)
// key of one records table; the newest seq of a key wins. data is JSON text.
const arrow::Schema& RecordsSchema();

// Columns added after the first version of a table; opening a table that
// lacks them adds them as all-null columns (a metadata-only commit).
const arrow::Schema& RunsLateColumns();     // fields, kind, target
const arrow::Schema& MetricsLateColumns();  // stats

// Bits of runs.fields: the run fields a row sets.
enum RunField : uint32_t {
  kFieldName = 1u << 0,
  kFieldExperiment = 1u << 1,
  kFieldDescription = 1u << 2,
  kFieldTags = 1u << 3,
  kFieldStatus = 1u << 4,
  kFieldArchived = 1u << 5,
  kFieldCreatedAt = 1u << 6,
  kFieldEndedAt = 1u << 7,
  kFieldKind = 1u << 8,
  kFieldTarget = 1u << 9,
  kAllRunFields = (1u << 10) - 1,
  // A tombstone: a row whose fields are exactly this bit deletes the run.
  kFieldDeleted = 1u << 31,
};

// Run ids starting with this prefix are WAL mark rows, never runs.
inline constexpr std::string_view kWalMarkPrefix = "__kv0_wal__/";
// The series id of metrics rows that are not points.
inline constexpr uint64_t kReservedSeriesId = 0;

// Metadata of metrics.lance, written by optimize after its commit: the
// fragments it wrote sorted by (series_id, step), and those of them whose
// points have level rows (levels.h), as JSON arrays of fragment ids.
inline constexpr const char* kSortedFragmentsKey = "kv0.sorted_fragments";
// The levelled key names the levels' layout. Levels of an earlier layout
// (under "kv0.levelled_fragments": cells of 4^j widths, 104 bytes each)
// are not listed here, so reads do not use them and the next optimize
// rewrites their fragments, once, as it does sorted fragments with none.
inline constexpr const char* kLevelledFragmentsKey = "kv0.levelled_fragments.2";
// The fragments whose every series has a directory row (point_directory.h).
inline constexpr const char* kDirectedFragmentsKey = "kv0.directed_fragments";
// Where those directory rows are: a JSON array with an object per append of
// directory rows, {"homes": [the fragments it made], "describes": [the
// fragments whose entries it holds, and the homes, which hold no point]}.
inline constexpr const char* kDirectoryHomesKey = "kv0.directory_homes";

// The ZONEMAP index on metrics.series_id (kept by optimize).
inline constexpr const char* kSeriesIndexName = "series_id_zones";
// The BTREE index on metrics.series_id that earlier builds kept; optimize
// drops it (see docs/design.md, "Indices").
inline constexpr const char* kOldSeriesIndexName = "series_id_idx";
// The ZONEMAP index on metrics.step (kept by optimize).
inline constexpr const char* kStepIndexName = "step_idx";

inline constexpr std::string_view kRunsTable = "runs.lance";
inline constexpr std::string_view kParamsTable = "params.lance";
inline constexpr std::string_view kSeriesTable = "series.lance";
inline constexpr std::string_view kMetricsTable = "metrics.lance";
// The directory holding one dataset per records table.
inline constexpr std::string_view kRecordsDir = "records";
// The single records table of earlier kv0 versions (same schema, every
// table's rows), migrated into records/ and kept.
inline constexpr std::string_view kLegacyRecordsTable = "records.lance";

}  // namespace kv0::tracking
