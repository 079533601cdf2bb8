// Levels: a series' points folded, by optimize, into cells of a few fixed
// widths, so that a chart reads a few cells per bucket instead of every
// point (Repo::ReadDownsampled; the design and its costs are in
// docs/design.md, "Charts from levels").
//
// Level j has cells of kLevelBase * kLevelRatio^j steps, counted from step 0:
// cell c holds the steps [c * width, (c + 1) * width). A cell is a Bucket of
// the points of one series in it (count, first, last, min, max with their
// steps, timestamps). Since every width is a power of two, a chart's bucket
// (a power-of-two width, aligned the same way, see BucketGrid) is a whole
// number of cells of any level no wider than it, and the aggregates merge
// exactly (MergeBuckets).
//
// Levels are stored as reserved rows of metrics.lance, written by optimize
// into the commit that writes the sorted points they fold, one row per
// series, level and chunk of kCellsPerRow consecutive cell numbers:
//
//   series_id 0, step = the series id, epoch = the chunk's first cell number,
//   value = kLevelRowValue, seq = the level j, stats = the encoded cells
//
// Their epoch is set, which the statistics rows' readers (epoch IS NULL)
// skip; the WAL marks' reader asks for value 0.
//
// Levels of a series stop at the first whose cells would hold all of the
// points folded (one cell): that row has value kTopLevelRowValue, and stands
// for every coarser level, where those points stay in one cell (the cell
// number divided by kLevelRatio per level). Two folds of one series (the
// passes of a large series, or the optimizes that sorted its older and its
// newer steps) may stop at different levels; a read at level j takes the
// rows of level j and the top rows below it.
//
// A flush writes levels too: its fragment holds, beside its points, the
// level rows of each series' points in it (the latest per step) and one
// flush mark, which says how many rows the append wrote:
//
//   series_id 0, step 0, epoch = the rows of the append, the mark included
//   (a merge's mark: the rows the merge added less those it left out),
//   value = kFlushMarkValue, seq null, stats = a FlushTail (below)
//
// The append's reserved rows (statistics, WAL marks, levels, its own
// directory entries (point_directory.h), the mark) come
// after its points, so they form the fragment's tail, and the mark, its
// last row, says how long that tail is: a reader takes the tail by address
// instead of scanning every point for series_id 0 (flush_summaries.h).
// Marks written before the tail was recorded have stats null.
//
// A fragment whose marks add up to its rows has the cells of all its points
// (a compaction that merges such fragments copies their marks); one that
// does not (an earlier build's flush) is read point by point. Reads learn
// this from the fragment's flush summary (flush_summaries.h). Two flushes
// may hold the same step (the later write wins), so their cells are merged
// only where their steps do not meet (docs/design.md, "Charts from levels").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "tracking/series_stats.h"
#include "tracking/tables.h"

namespace kv0::tracking {

// A level for every power of two from kLevelBase on: a chart's bucket is
// then one cell of some level (with a ratio of 4, two on average, which
// doubles what a chart reads for 2/3 of the levels' bytes).
inline constexpr int64_t kLevelBase = 32;
inline constexpr int kLevelShift = 1;  // log2 of the ratio of neighbouring levels' widths
inline constexpr int64_t kLevelRatio = int64_t{1} << kLevelShift;
inline constexpr int kLevels = 55;  // the widest cells: 2^5 * 2^54 = 2^59 steps
inline constexpr int64_t kCellsPerRow = 1024;
inline constexpr double kLevelRowValue = 2;
inline constexpr double kTopLevelRowValue = 3;
inline constexpr double kFlushMarkValue = 5;
// Flushes write levels from this one on (cells of 128 steps), a quarter of
// the cells of all levels, to keep a flush's extra work small; a read at a
// finer level (buckets narrower than 128 steps) reads flushed fragments
// point by point.
inline constexpr int kFlushFirstLevel = 2;

// The cell width of level j.
constexpr int64_t LevelWidth(int level) { return kLevelBase << (kLevelShift * level); }
// Fails to compile if the widest level's width overflows.
static_assert(LevelWidth(kLevels - 1) > 0);
// The coarsest level whose cells are no wider than `width`; -1 if none is.
int FinestLevelWithin(int64_t width);
// The cell of `step` at `width`, rounded down (also below zero).
int64_t CellOfStep(int64_t step, int64_t width);
// The chunk (its first cell number) that holds `cell`.
int64_t ChunkOfCell(int64_t cell);

// Adds `from` to `into`: both summarise disjoint steps of one series (as the
// step axis orders them). `into`'s edges are kept.
void MergeBuckets(Bucket* into, const Bucket& from);

// One level row: `cells` of one series, level and chunk, by cell number.
struct LevelRow {
  uint64_t series_id = 0;
  int level = 0;
  int64_t chunk = 0;
  bool top = false;                               // the series' coarsest level (see above)
  std::vector<std::pair<int64_t, Bucket>> cells;  // (cell number, its points)
};

// The level rows of one series' points, in step order and one per step:
// the rows of levels from `first_level` on, and the top row, whatever its
// level (it stands for every coarser level).
void BuildLevels(uint64_t series_id, std::span<const Point> points, std::vector<LevelRow>* out,
                 int first_level = 0);

// The rows as metrics rows (see above); adds their cells and the size of
// the cells encoded to stats->level_cells and stats->level_bytes.
arrow::OwnedStream LevelsStream(const std::vector<LevelRow>& rows, OptimizeStats* stats);

// A flush's append: MetricsStream's rows, the level rows of the points and
// the flush mark (see above).
arrow::OwnedStream FlushStream(const PointBuffer& points, std::span<const Mark> marks);

// What a flush mark says of the fragment it ends, in its stats column:
//
//   offset size field
//        0    1 format version (1)
//        1    8 fragment_rows  u64: the fragment's rows as written
//        9    8 tail_rows      u64: its last rows, the mark included, that
//                              hold every reserved row of the fragment
//
// It holds only while the fragment has exactly fragment_rows rows and no
// row deleted: a compaction that appends other fragments' rows before it,
// or drops deleted ones, changes the count, and readers then scan.
struct FlushTail {
  static constexpr uint8_t kFormatVersion = 1;
  static constexpr size_t kEncodedSize = 17;
  uint64_t fragment_rows = 0;
  uint64_t tail_rows = 0;

  std::string Encode() const;
  // nullopt for anything but a well-formed tail of version 1 with
  // 1 <= tail_rows <= fragment_rows.
  static std::optional<FlushTail> Decode(std::string_view bytes);
};

// Appends a flush mark that counts `counted_rows` rows (its epoch) and
// describes `tail`.
void AppendFlushMark(int64_t counted_rows, const FlushTail& tail, arrow::BatchBuilder& b);

// The fragment ids listed under `key` in a dataset's metadata (empty if the
// key is absent or not a JSON array of ids).
std::set<uint64_t> FragmentList(const std::map<std::string, std::string>& metadata,
                                const char* key);

// Appends the cells of a row's stats column, of level `level`, to `out` as
// (cell number, cell), in the row's order (the format is in levels.cc).
// Corruption if the bytes do not decode to whole cells.
void DecodeCells(std::string_view bytes, int level, std::vector<std::pair<int64_t, Bucket>>* out);

}  // namespace kv0::tracking
