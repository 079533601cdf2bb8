// Statistics of a metric series, kept as mergeable deltas.
//
// Each flush appends, per series it touched, one StatsDelta describing the
// points it wrote; reading a series' statistics merges all of its deltas and
// calls Finish(). Merging is associative and commutative and Add(p) equals
// merging a delta of the single point p, so a delta is a function of the
// multiset of points it saw, however they were split between writers and in
// whatever order the pieces meet.
//
// Ordering rules, chosen so that no result depends on the order of Add/Merge:
//   - The last point is the one with the greatest step; among points at that
//     step, the greatest seq (later writes carry larger seqs). Should two
//     points share step and seq, the value with the larger IEEE-754 bit
//     pattern is taken.
//   - first_step and last_step are the smallest and greatest steps.
//   - min and max consider finite values only. Equal values are resolved by
//     the smaller step; -0.0 counts as less than +0.0.
//   - last_timestamp_us is the greatest timestamp of any point (the time the
//     series last received a point), not necessarily that of the last point.
//   - count and non_finite are sums over the points (NaN, +inf and -inf are
//     non-finite; count includes them).
//
// A delta knows nothing of overwrites: when a step is written again, both
// points count. The caller marks such a delta dirty (set_dirty) whenever its
// points may overwrite a step counted elsewhere; a dirty delta's count, min,
// max, non_finite and last_timestamp_us may include overwritten points, so
// readers recompute dirty series from their points with ExactStats. first_step,
// last_step and last are right even then.
//
// Not thread-safe; a delta is a small value type.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kv0/tracking.h"

namespace kv0::tracking {

// SeriesStats and its JSON form are in kv0/tracking.h.

// A double in kv0's JSON: NaN as null, infinities as "Infinity" and
// "-Infinity". DoubleFromJson returns nullopt for anything else.
nlohmann::json DoubleToJson(double d);
std::optional<double> DoubleFromJson(const nlohmann::json& v);

// One point of a series, as ExactStats sees it.
struct Point {
  int64_t step = 0;
  double value = 0;
  int64_t timestamp_us = 0;
  uint64_t seq = 0;
};

class StatsDelta {
 public:
  // Encoding, format version 1: exactly kEncodedSize bytes, integers and
  // doubles little-endian and fixed-width (doubles as their IEEE-754 bits).
  //
  //   offset size field
  //        0    1 format version (1)
  //        1    1 flags: bit 0 dirty; other bits zero
  //        2    8 count              u64
  //       10    8 non_finite         u64
  //       18    8 first_step         i64
  //       26    8 last_step          i64
  //       34    8 seq of last point  u64
  //       42    8 last               f64
  //       50    8 last_timestamp_us  i64
  //       58    8 min                f64 (NaN when no point is finite)
  //       66    8 min_step           i64 (0 when no point is finite)
  //       74    8 max                f64 (NaN when no point is finite)
  //       82    8 max_step           i64 (0 when no point is finite)
  //
  // An empty delta has every field after the flags as a default-constructed
  // delta has it: zero, except min and max which are a quiet NaN. This layout
  // is stored in Lance; change it only by adding a new version that Decode
  // also accepts.
  static constexpr uint8_t kFormatVersion = 1;
  static constexpr size_t kEncodedSize = 90;

  StatsDelta() = default;

  // Counts one point. seq orders writes to the same step (see above).
  void Add(int64_t step, double value, int64_t timestamp_us, uint64_t seq);

  // Adds the points counted by other; dirty if either was.
  void Merge(const StatsDelta& other);

  // True if no point was counted (a dirty delta can be empty).
  bool empty() const { return count_ == 0; }
  bool dirty() const { return dirty_; }
  void set_dirty() { dirty_ = true; }

  // The statistics of the counted points. Throws kv0::Error(kInvalidArgument)
  // if empty().
  SeriesStats Finish() const;

  // The greatest step counted, so the next default step is last_step() + 1;
  // -1 when empty, making that default 0.
  int64_t last_step() const { return empty() ? -1 : last_step_; }
  // The smallest step counted (0 when empty) and the points counted.
  int64_t first_step() const { return first_step_; }
  uint64_t count() const { return count_; }

  std::string Encode() const;
  // Throws kv0::Error(kCorruption) on an unknown version, a length other than
  // kEncodedSize, unknown flags or fields that contradict each other.
  static StatsDelta Decode(std::string_view bytes);

 private:
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  uint64_t count_ = 0;
  uint64_t non_finite_ = 0;
  int64_t first_step_ = 0;
  int64_t last_step_ = 0;
  uint64_t last_seq_ = 0;
  double last_ = 0;
  int64_t last_timestamp_us_ = 0;
  double min_ = kNaN;  // NaN exactly when no finite value was counted
  int64_t min_step_ = 0;
  double max_ = kNaN;
  int64_t max_step_ = 0;
  bool dirty_ = false;
};

// The statistics of a series as reads see it: at each step only the point with
// the greatest seq counts (the earlier ones were overwritten; should seqs tie,
// the same rule as for the last point decides, then the greater timestamp).
// The points may come in any order. The result is never dirty.
StatsDelta ExactStats(std::span<const Point> points);

}  // namespace kv0::tracking
