// Downsampling a series into the buckets of a chart (Repo::ReadDownsampled,
// whose contract is in kv0/tracking.h).
//
// A window [start, stop) of the axis (steps, or timestamps in microseconds)
// is cut on a grid of cells of one power-of-two width, the smallest that
// needs at most `buckets` cells to cover the window; a bucket is one cell,
// clipped to the window. The grid is fixed by the window and the number of
// buckets alone, never by the points, so that cells computed once (by a
// later optimize, say) can answer any read that asks for the same or a
// coarser width: the aggregates of a bucket (count, first, last, min, max)
// merge exactly from those of its parts.
#pragma once

#include <cstdint>
#include <vector>

#include "kv0/tracking.h"

namespace kv0::tracking {

class BucketGrid {
 public:
  // Requires buckets > 0 and start < stop.
  BucketGrid(int64_t start, int64_t stop, int64_t buckets);

  // The cell width (INT64_MAX if it is wider: a window of more than 2^62
  // per bucket).
  int64_t width() const { return width_; }
  // The number of cells that meet the window (at most buckets + 1).
  int64_t cells() const { return cells_; }
  // The cell of x, for start <= x < stop.
  int64_t CellOf(int64_t x) const;
  // The edges of cell i, clipped to the window.
  int64_t CellStart(int64_t i) const;
  int64_t CellStop(int64_t i) const;

 private:
  int64_t start_, stop_, width_, cells_;
  __int128 wide_;    // the cell width, exactly
  __int128 origin_;  // the window's start rounded down to a multiple of it
};

// Adds a point to a bucket whose edges are already set. The points of a
// series must arrive in step order, one per step (as reads return them):
// ties of the axis are then broken by step without comparing steps.
void AddPoint(Bucket* bucket, Axis axis, int64_t step, int64_t timestamp_us, double value);

}  // namespace kv0::tracking
