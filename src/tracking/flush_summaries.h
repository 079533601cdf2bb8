// Flush summaries: what a fragment written by flushes says about itself,
// read once per fragment and kept by the handle, so that a read skips the
// fragments that hold no point of its series in its steps and takes their
// level rows by address instead of filtering for them.
//
// Why: a chart of series whose newest points are not optimized yet meets
// every fragment flushed since the last optimize. Each filtered scan of one
// of them costs a zone map's comparisons and at least a zone of rows, for a
// fragment that often holds nothing of the window (a zoom into the
// optimized history), whose few level rows a take reads directly, or whose
// points of the window its own entries locate.
//
// A flush's append (levels.h, FlushStream) ends with reserved rows that
// describe it: a statistics row per series (its first and last step and the
// count of its points there), the level rows of those points, its own
// directory entries (point_directory.h) and a flush mark counting the
// append's rows. The statistics rows are kept whole, so that reads of
// series' statistics (RepoImpl::ReadDeltas) scan only the fragments without
// a summary. A compaction that merges flushed fragments copies those rows,
// so the merged fragment's summary is theirs combined; the merge of
// unsorted fragments (below) writes own entries of its rows instead of the
// sources'.
//
// How a summary is read: a fragment whose last row is a flush mark that
// describes it (levels.h, FlushTail: the fragment's rows as written, and
// how many of its last rows hold all of its reserved rows) is read by
// address, three takes for all such fragments (their last rows, their
// tails without the level rows' cells, then the statistics rows'), so that
// a new handle's first statistics read costs the reserved rows, not a scan
// of every point's series_id. Flushes write such
// fragments, and so does the merge of unsorted fragments
// (MergedFlushesStream: points first, then every reserved row, then a mark
// for the whole). Any other fragment (Lance's compaction of several, one
// with deleted rows, an earlier build's) is read by one scan of its
// reserved rows (series_id = 0).
//
// What a summary may be trusted for, by the fragment as it is now:
//   - bounded (the statistics rows' counts plus the reserved rows add up to
//     the fragment's rows): every point row is counted by a statistics row
//     of the fragment, so a series' points lie within its [first, last]
//     steps there, and a series without a statistics row there has no
//     point there. The scan sees live rows only, so a fragment whose
//     reserved rows were deleted (a run's delete, pruned marks) falls
//     short; one whose points alone were deleted (a delete cut short
//     between its commits) stays bounded, rightly: fewer points lie within
//     the same steps;
//   - levelled (bounded, and the flush marks add up to the rows too): the
//     fragment holds the level rows of all its points, from kFlushFirstLevel
//     on (and each series' top row);
//   - own-directed (read by address, and its own entries, all decoded and
//     not overlapping, cover the rows before the tail exactly): a series'
//     points there lie where its entries say, at physical offsets that
//     only Lance's rewrite of the fragment would move (and that makes the
//     mark disagree).
// Anything else (a fragment optimize wrote, an earlier build's flush, a
// fragment with deleted reserved rows) may hold any point.
//
// Summaries are kept by data file and deletion file: both are immutable
// and uniquely named, so a kept summary describes exactly those rows. The
// fragments optimize wrote (listed in metrics' metadata as levelled or
// directed) are never read: their levels and directory say more.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lance/dataset.h"
#include "tracking/point_directory.h"
#include "tracking/series_stats.h"

namespace kv0::tracking {

// Where one level row lies in its fragment.
struct LevelRowAt {
  uint64_t series_id = 0;
  int level = 0;
  int64_t chunk = 0;  // its first cell number
  bool top = false;
  uint64_t offset = 0;  // row offset in the fragment
};

struct FlushSummary {
  uint64_t rows = 0;          // the fragment's physical rows
  uint64_t marked_rows = 0;   // rows the flush marks account for
  uint64_t counted_rows = 0;  // reserved rows plus the statistics rows' counts
  uint64_t tail_rows = 0;     // the tail's rows, if read by address; else 0
  // Per series, its statistics rows here merged (empty ones, which ask for
  // a recount, included): statistics reads take them from here.
  std::unordered_map<uint64_t, StatsDelta> deltas;
  std::vector<LevelRowAt> levels;
  // The addresses of its own entries (point_directory.h), read when a read
  // of points first asks for them (FlushSummaries::OwnOf), not by the
  // statistics reads that most summaries are read for.
  std::vector<uint64_t> own_entry_rows;
  // Set by OwnOf, under FlushSummaries' lock: whether the entries were
  // read, and what they say if the fragment is own-directed (else null).
  mutable bool own_read = false;
  mutable std::shared_ptr<const OwnDirectory> own;

  bool Bounded() const { return counted_rows == rows; }
  bool Levelled() const { return Bounded() && marked_rows == rows; }
  // False only when bounded and no series of `ids` has a step of `spans`.
  bool MayHold(const std::vector<uint64_t>& ids, const std::vector<StepSpan>& spans) const;
};

// A handle's summaries. Thread-safe; its lock is a leaf (held only to
// look up and store, never while reading).
class FlushSummaries {
 public:
  using ById = std::map<uint64_t, std::shared_ptr<const FlushSummary>>;

  // With `by_address` false every summary is read by a scan: for tests
  // that compare the two ways.
  explicit FlushSummaries(bool by_address = true) : by_address_(by_address) {}

  // How the summaries read so far were read, in fragments.
  struct Reads {
    uint64_t by_address = 0;
    uint64_t scanned = 0;
  };
  Reads reads() const {
    std::lock_guard lock(mu_);
    return reads_;
  }

  // The summaries of `metrics`' fragments, by fragment id, reading those
  // not read before (by address where their marks allow, else in one
  // scan); fragments optimize wrote are absent.
  ById Of(const lance::Dataset& metrics);

  // The ids of `fragments` that may hold a point of `ids` in `spans`, in
  // their order: `summaries` is Of's answer for the dataset whose fragments
  // they are.
  static std::vector<uint64_t> MayHold(const ById& summaries,
                                       const std::vector<lance::FragmentInfo>& fragments,
                                       const std::vector<uint64_t>& ids,
                                       const std::vector<StepSpan>& spans);

  // The own directories of those of `fragments` that are own-directed
  // (see above): `summaries` is Of's answer for `metrics`. Each fragment's
  // entries are read once, in one take for all fragments not read before,
  // and kept with its summary.
  OwnDirectories OwnOf(const lance::Dataset& metrics, const ById& summaries,
                       const std::vector<uint64_t>& fragments);

 private:
  const bool by_address_;
  mutable std::mutex mu_;
  Reads reads_;
  std::unordered_map<std::string, std::shared_ptr<const FlushSummary>> by_files_;
};

// The rows of `fragments` of metrics (unsorted ones, see
// RepoImpl::MergeUnsortedMetrics) as one new fragment's: their points in
// their order, then all their reserved rows but their own entries, then own
// entries of the merged points and a flush mark that describes that tail,
// so that the merged fragment's summary is read by address too. The reserved rows' order is not
// kept: each says what it is, and a reader only needs them inside the tail.
arrow::OwnedStream MergedFlushesStream(const lance::Dataset& metrics,
                                       const std::vector<uint64_t>& fragments);

}  // namespace kv0::tracking
