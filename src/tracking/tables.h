// Rows of the four tracking tables: building them as Arrow streams for an
// append, and decoding them from scanned batches. Also the reserved rows
// (statistics deltas and WAL marks) and SQL filter literals.
//
// Reserved rows, as stored:
//   runs    a mark: seq = highest committed seq, run_id = kWalMarkPrefix +
//           writer id, fields = 0, every other column its default.
//   params  a mark: seq, run_id as in runs, key "", value "null".
//   series  a mark: series_id 0, run_id as in runs, name = the seq as 20
//           decimal digits (so names compare like numbers), context "{}".
//   metrics series_id 0 for every reserved row. A statistics delta has
//           step = the series id (as int64 bits), epoch null and stats = the
//           encoded StatsDelta; value is 1 for the exact delta optimize
//           writes, 0 for a flush's. A mark has step = the writer id (16 hex
//           digits, as int64 bits), epoch = the seq, value 0 and stats
//           null. A level row (levels.h) has epoch set, value 2 or 3 and
//           seq set; a directory row (point_directory.h) has epoch set,
//           value 4 and seq null; a flush mark (levels.h) has step 0,
//           epoch set, value 5 and seq null.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "kv0/tracking.h"
#include "lance/arrow.h"
#include "tracking/params.h"
#include "tracking/run_record.h"
#include "tracking/series_stats.h"

namespace kv0::tracking {

// A parameter leaf waiting to be written.
struct ParamChange {
  uint64_t seq = 0;
  std::string run_id;
  ParamRow row;
};

// Points waiting to be written, column by column, with one statistics delta
// per series they touch.
struct PointBuffer {
  std::vector<uint64_t> series_ids;
  // A point's seq if it may overwrite an earlier point at its step (Add's
  // `dirty`), else 0: stored as null, since a point at a step its writer had
  // not written yet is the first there and loses to any later one.
  std::vector<uint64_t> seqs;
  std::vector<int64_t> steps;
  std::vector<int64_t> epochs;
  std::vector<uint8_t> has_epoch;
  std::vector<int64_t> timestamps_us;
  std::vector<double> values;
  std::unordered_map<uint64_t, StatsDelta> deltas;

  size_t size() const { return steps.size(); }  // points
  // No points and no delta (a delta without points marks a series dirty).
  bool empty() const { return steps.empty() && deltas.empty(); }
  // Adds a point; `delta` is the series' entry of deltas, if the caller has it.
  void Add(uint64_t series_id, int64_t step, std::optional<int64_t> epoch, int64_t timestamp_us,
           double value, uint64_t seq, bool dirty, StatsDelta* delta = nullptr);
  // Appends other's points and merges its deltas.
  void Append(PointBuffer&& other);
  // Appends other's point i, without its delta.
  void AppendPointOf(const PointBuffer& other, size_t i);
  // Removes every point and delta, keeping the columns' capacity.
  void Clear();
};

// A WAL writer's mark: the highest seq of its records a table has committed.
struct Mark {
  std::string writer_id;
  uint64_t seq = 0;
};

// A point as scanned from metrics. At one step the later point is the one
// with the higher seq; a point without one (seq 0: the first its writer put
// at that step, or written before the column existed) is older than any
// with one, and among those the larger row address wins. Row addresses
// alone do not say it: compaction and optimize give the rows they move new,
// higher addresses, above points appended meanwhile.
struct StoredPoint {
  int64_t step;
  uint64_t seq;
  uint64_t address;
  int64_t timestamp_us;
  double value;
  int64_t epoch;
  bool has_epoch;
};
using PointsBySeries = std::map<uint64_t, std::vector<StoredPoint>>;

// The columns CollectPoints needs (scan them with the row address).
std::vector<std::string> PointColumns();
// Adds the batch's points to *out, by series; keep, if set, filters series.
void CollectPoints(const arrow::Batch& batch, PointsBySeries* out,
                   const std::function<bool(uint64_t series_id)>& keep = {});
// Sorts points by step and keeps the latest point of each step (see
// StoredPoint).
void LatestPerStep(std::vector<StoredPoint>* points);

// Appends v, or a null when it is unset.
void AppendOptional(arrow::Utf8Builder& b, const std::optional<std::string>& v);

// Streams for one append each: the rows, then one mark row per mark.
arrow::OwnedStream RunsStream(const std::vector<RunRow>& rows, std::span<const Mark> marks);
arrow::OwnedStream ParamsStream(const std::vector<ParamChange>& rows, std::span<const Mark> marks);
arrow::OwnedStream SeriesStream(const std::vector<SeriesInfo>& rows, std::span<const Mark> marks);
// Points, then one delta row per entry of points.deltas (flagged as exact,
// value 1, for optimize's), then the mark rows.
arrow::OwnedStream MetricsStream(const PointBuffer& points, std::span<const Mark> marks,
                                 bool exact_deltas = false);
// The same rows, added to a builder of MetricsSchema(); the points in the
// order of `rows` (their indexes, each once) if it is not empty.
void AppendMetricsRows(const PointBuffer& points, std::span<const Mark> marks, bool exact_deltas,
                       arrow::BatchBuilder& b, std::span<const uint32_t> rows = {});

// Decoding scanned batches (any projection holding the named columns).
bool IsMarkRunId(std::string_view run_id);
// The runs rows of a batch (marks skipped). Columns fields, kind, target may
// be absent (an old table): fields then reads as nullopt.
void DecodeRunRows(const arrow::Batch& batch, std::vector<RunRow>* out);
SeriesInfo DecodeSeries(const arrow::Batch& batch, int64_t row);

// The writer id a mark row in metrics names, from its step.
std::string WriterIdFromStep(int64_t step);
int64_t StepFromWriterId(std::string_view writer_id);

// SQL literals for Lance filters.
std::string SqlString(std::string_view text);  // 'text' with quotes doubled
std::string SqlInt(int64_t value);             // spells INT64_MIN so the parser takes it
std::string SqlTimestamp(int64_t micros);      // a timestamp[us, UTC] value
// "column IN (a, b, ...)" over uint64 values.
std::string SqlIn(std::string_view column, const std::vector<uint64_t>& values);
// Reserved rows of metrics (series_id 0) of the series `series_ids`, whose
// step holds the series id: "(step + 0) IN (...)". The expression keeps
// Lance from answering the list from the zone map on step, which cannot
// narrow these rows (series ids are hashes, spread over every zone) and
// which Lance 14 evaluates by comparing every id with every zone: 41 ms for
// 200 ids over 40 million rows, where the rows filtered by series_id = 0
// are read in 6 ms (docs/benchmarks.md, "Lance's ways to many series").
std::string ReservedStepIn(const std::vector<uint64_t>& series_ids);

// `values` cut, in order, into parts of at most `size` each: the lists of
// IN filters, which Lance plans slowly when they grow long.
template <typename Range>
auto Chunks(const Range& values, size_t size) {
  using T = std::remove_cv_t<typename Range::value_type>;
  std::vector<std::vector<T>> out;
  for (size_t i = 0; i < values.size(); i += size) {
    out.emplace_back(values.begin() + i, values.begin() + std::min(values.size(), i + size));
  }
  return out;
}

}  // namespace kv0::tracking
