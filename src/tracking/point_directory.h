// The point directory: where each series' points lie in the metrics
// fragments optimize sorted, so that a read of some steps of many series
// reads those rows by their offsets instead of filtering the table for them.
//
// Why: a filtered scan of 200 series reads at least a zone of 8,192 rows of
// each and compares every id of its list with every zone (160-220 ms for
// 1,000 steps of 200 series of 200,000 points), where a take of the same
// rows' addresses costs 31-36 ms (docs/benchmarks.md, "Lance's ways to many
// series"). The rows are read by range, which costs less than a take of
// them (docs/design.md, "The point directory").
//
// The directory is reserved rows of metrics.lance, one per series and
// sorted fragment, appended by optimize in a commit after the one that wrote
// the fragments (only that commit gives them their ids):
//
//   series_id 0, step = the series id, epoch = the fragment id,
//   value = kDirectoryRowValue, seq null, stats = the entry:
//     first row offset, row count   varints
//     last step                     zigzag varint
//     fences                        zigzag varints: the step of every
//                                   kDirectoryStride-th row of the series
//                                   in the fragment (its first row, then
//                                   every stride), each from the one before
//                                   (the first from 0)
//
// Readers of other reserved rows skip these: statistics rows have no epoch,
// marks have value 0, level rows have a seq. Deleting a run deletes them
// with its statistics and level rows (step IN its series ids).
//
// A fragment's entries are complete (every series with rows in it has one)
// when the fragment is listed under kDirectedFragmentsKey in metrics'
// metadata, which optimize writes after the directory's commit, together
// with kDirectoryHomesKey: which fragments of directory rows hold the
// entries of which fragments. A read looks for entries in those fragments
// alone when each fragment it reads by directory is described by an append
// whose fragments are all still present; otherwise (the directory's own
// fragment compacted into another, or a repository of an earlier build) it
// filters the reserved rows of every fragment. So a crash
// between the commits leaves the fragments read by filter; so are fragments
// rewritten since (a compaction gives rows new fragment ids, never reused)
// and those no optimize sorted.
//
// Flushed fragments carry their own directory. A flush writes each series'
// points together, in step order (the later of two points at one step
// after the earlier, as reads rank them), and ends its tail with an entry
// per series of its own points:
//
//   series_id 0, step = the series id, epoch 0,
//   value = kOwnEntryValue, seq null, stats = the entry, as above, its
//   offsets in the fragment that holds it
//
// and so does the merge of flushed fragments (flush_summaries.h), over the
// points it copies, an entry wherever a series' run of rows ends. A reader
// finds them with the fragment's flush summary, taken by address, and
// trusts them when that summary was read by address (the fragment's rows
// are as written) and its entries, not overlapping, cover every point row.
// Fragments whose rows would need more than one entry per kMinOwnEntryRows
// points (an earlier build's flushes, merged) get none and are read by
// filter, as are fragments with deleted rows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "lance/dataset.h"
#include "tracking/tables.h"

namespace kv0::tracking {

inline constexpr double kDirectoryRowValue = 4;
inline constexpr double kOwnEntryValue = 6;
// Rows between two fences: a read takes at most this many rows more than it
// needs at each end of each span; the directory costs a fence (a byte or
// two) per this many points.
inline constexpr int64_t kDirectoryStride = 256;

// Steps [start, stop); a stop of INT64_MAX has no bound, so that step
// INT64_MAX can be read too.
struct StepSpan {
  int64_t start, stop;
  auto operator<=>(const StepSpan&) const = default;
  bool Contains(int64_t step) const { return step >= start && (step < stop || stop == INT64_MAX); }
};
bool InSpans(const std::vector<StepSpan>& spans, int64_t step);

// Where one series' rows lie in one fragment.
struct DirectoryEntry {
  uint64_t series_id = 0;
  uint64_t fragment_id = 0;
  uint64_t offset = 0;  // of its first row
  uint64_t count = 0;   // rows, consecutive from offset, steps ascending (an own entry's
                        // may repeat a step)
  int64_t last_step = 0;
  std::vector<int64_t> fences;  // the step of rows 0, stride, 2 * stride...

  // The rows of the entry that may hold a step of `span`, as offsets in
  // the fragment [first, second); empty if none can.
  std::pair<uint64_t, uint64_t> RowsOf(const StepSpan& span) const;
};

std::string EncodeEntry(const DirectoryEntry& entry);
// Corruption if the bytes are not an entry.
DirectoryEntry DecodeEntry(uint64_t series_id, uint64_t fragment_id, std::string_view bytes);

// The directory of `fragments`, just written by optimize, from a scan of
// their rows: their entries, and in *directed the fragments they describe
// completely. A fragment whose rows are not what a sorted rewrite writes
// (a series' rows apart, steps not ascending, rows deleted meanwhile) is
// left out, to be read by filter.
std::vector<DirectoryEntry> BuildDirectory(const lance::Dataset& metrics,
                                           std::span<const uint64_t> fragments,
                                           std::vector<uint64_t>* directed);
// The entries as metrics rows, for one append.
arrow::OwnedStream DirectoryStream(const std::vector<DirectoryEntry>& entries);

// The value of kDirectoryHomesKey once the fragments `homes`, just appended
// to `metrics`, hold the entries of `described`: the appends listed in its
// metadata whose homes are all still present, and the new one.
std::string DirectoryHomesAfter(const lance::Dataset& metrics, std::span<const uint64_t> homes,
                                std::span<const uint64_t> described);

// Fewest points per entry, on average, for which a flush or a merge writes
// its own entries: one series' single points interleaved with another's
// would cost a row per point.
inline constexpr uint64_t kMinOwnEntryRows = 32;

// The entries of rows as a flush or a merge appends them, in order: a new
// entry wherever the series changes or its step goes back.
class OwnEntryBuilder {
 public:
  void Add(uint64_t series_id, int64_t step);
  // The entries, or none if they average fewer than kMinOwnEntryRows rows.
  std::vector<DirectoryEntry> Finish();

 private:
  std::vector<DirectoryEntry> entries_;
  uint64_t rows_ = 0;
};

// Appends `entries` as kOwnEntryValue rows.
void AppendOwnEntries(const std::vector<DirectoryEntry>& entries, arrow::BatchBuilder& b);

// A flushed fragment's own entries, by series: complete (flush_summaries.h
// says when they may be trusted).
struct OwnDirectory {
  std::unordered_map<uint64_t, std::vector<DirectoryEntry>> by_series;
};
// The fragments whose own entries are complete, by fragment id.
using OwnDirectories = std::map<uint64_t, std::shared_ptr<const OwnDirectory>>;

// The latest point of each step of the series `ids` in `spans`, read from
// `fragments` of `metrics` (all of them if unset): read by row range from
// the directed fragments and those of `own`, filtered from the others.
// Series with no point there are absent.
PointsBySeries ReadLatestPoints(const lance::Dataset& metrics, const std::vector<uint64_t>& ids,
                                const std::vector<StepSpan>& spans,
                                const std::optional<std::vector<uint64_t>>& fragments,
                                const OwnDirectories& own = {});

}  // namespace kv0::tracking
