// Repo::ReadDownsampled: the points of the window are read as any read
// reads them (ReadStream: the latest write of each step, deleted runs left
// out) and folded into their buckets as they stream by, a series at a time,
// so memory holds one series' buckets, never its points.

#include "tracking/downsample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "tracking/repo_impl.h"
#include "tracking/schema.h"

namespace kv0::tracking {

BucketGrid::BucketGrid(int64_t start, int64_t stop, int64_t buckets) : start_(start), stop_(stop) {
  // In 128 bits: a window may span the whole int64 range.
  const __int128 span = static_cast<__int128>(stop) - start;
  __int128 width = 1;
  while ((span + width - 1) / width > buckets) width <<= 1;
  // Floor division: cells are counted from 0, also below it.
  __int128 origin = start / width * width;
  if (origin > start) origin -= width;
  origin_ = origin;
  wide_ = width;
  width_ = width > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                       : static_cast<int64_t>(width);
  cells_ = CellOf(stop - 1) + 1;
}

int64_t BucketGrid::CellOf(int64_t x) const {
  return static_cast<int64_t>((static_cast<__int128>(x) - origin_) / wide_);
}

int64_t BucketGrid::CellStart(int64_t i) const {
  return static_cast<int64_t>(std::max<__int128>(start_, origin_ + i * wide_));
}

int64_t BucketGrid::CellStop(int64_t i) const {
  return static_cast<int64_t>(std::min<__int128>(stop_, origin_ + (i + 1) * wide_));
}

void AddPoint(Bucket* b, Axis axis, int64_t step, int64_t timestamp_us, double value) {
  const bool finite = std::isfinite(value);
  const bool had_finite = b->count > b->non_finite;
  if (b->count == 0) {
    b->first_step = b->last_step = step;
    b->first = b->last = value;
    b->first_timestamp_us = b->last_timestamp_us = timestamp_us;
  } else {
    // Steps ascend, so on the step axis every point is the last so far; on
    // the time axis an equal timestamp makes the later step the last.
    if (axis == Axis::kStep || timestamp_us >= b->last_timestamp_us) {
      b->last_step = step;
      b->last = value;
    }
    if (axis == Axis::kTime && timestamp_us < b->first_timestamp_us) {
      b->first_step = step;
      b->first = value;
    }
    b->first_timestamp_us = std::min(b->first_timestamp_us, timestamp_us);
    b->last_timestamp_us = std::max(b->last_timestamp_us, timestamp_us);
  }
  b->count++;
  if (!finite) {
    b->non_finite++;
    if (!had_finite) {
      b->min = b->max = std::numeric_limits<double>::quiet_NaN();
      b->min_step = b->max_step = b->first_step;
    }
    return;
  }
  // Strict comparisons: an equal value at a later step keeps the earlier.
  if (!had_finite || value < b->min) {
    b->min = value;
    b->min_step = step;
  }
  if (!had_finite || value > b->max) {
    b->max = value;
    b->max_step = step;
  }
}

namespace {

// One series being folded: its cells, and its points as one-point buckets
// for as long as they are few enough to be the answer.
class SeriesFold {
 public:
  SeriesFold(const BucketGrid& grid, Axis axis, size_t raw_limit)
      : grid_(grid), axis_(axis), raw_limit_(raw_limit), cells_(grid.cells()) {}

  void Add(int64_t step, int64_t timestamp_us, double value) {
    const int64_t x = axis_ == Axis::kStep ? step : timestamp_us;
    Bucket& cell = cells_[grid_.CellOf(x)];
    AddPoint(&cell, axis_, step, timestamp_us, value);
    if (++points_ <= raw_limit_) {
      Bucket point;
      point.start = x;
      point.stop = x + 1;  // x < the window's stop, so no overflow
      AddPoint(&point, axis_, step, timestamp_us, value);
      raw_.push_back(point);
    } else if (!raw_.empty()) {
      raw_ = {};
    }
  }

  DownsampledSeries Finish() {
    DownsampledSeries out;
    out.width = grid_.width();
    if (points_ <= raw_limit_) {
      out.raw = true;
      if (axis_ == Axis::kTime) {
        // Steps came in order; sort by time, stably so that ties stay by step.
        std::stable_sort(raw_.begin(), raw_.end(),
                         [](const Bucket& a, const Bucket& b) { return a.start < b.start; });
      }
      out.buckets = std::move(raw_);
      return out;
    }
    for (size_t i = 0; i < cells_.size(); ++i) {
      if (cells_[i].count == 0) continue;
      cells_[i].start = grid_.CellStart(static_cast<int64_t>(i));
      cells_[i].stop = grid_.CellStop(static_cast<int64_t>(i));
      out.buckets.push_back(cells_[i]);
    }
    return out;
  }

 private:
  const BucketGrid& grid_;
  const Axis axis_;
  const size_t raw_limit_;
  std::vector<Bucket> cells_;
  std::vector<Bucket> raw_;
  size_t points_ = 0;
};

}  // namespace

void RepoImpl::CheckSeriesExist(std::span<const uint64_t> ids) {
  std::unordered_set<uint64_t> missing(ids.begin(), ids.end());
  missing.erase(kReservedSeriesId);  // never a series; reported below
  lance::Dataset& series = Latest(kSeries);
  for (const auto& part : Chunks(ids, kMaxFilterIds)) {
    lance::ScanOptions scan;
    scan.columns = {"series_id"};
    scan.filter = SqlIn("series_id", part);
    auto reader = series.Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::UInt64Column id(*batch, "series_id");
      for (int64_t i = 0; i < batch->num_rows(); ++i) missing.erase(id.value(i));
    }
  }
  for (uint64_t id : ids) {
    if (id == kReservedSeriesId || missing.count(id)) {
      throw Error(Code::kInvalidArgument, "no series has the id " + std::to_string(id));
    }
  }
}

std::map<uint64_t, DownsampledSeries> RepoImpl::ReadDownsampled(std::span<const uint64_t> ids,
                                                                const DownsampleOptions& options) {
  if (options.buckets <= 0) {
    throw Error(Code::kInvalidArgument,
                "buckets must be positive, not " + std::to_string(options.buckets));
  }
  if (options.start && options.stop && *options.start > *options.stop) {
    throw Error(Code::kInvalidArgument, "the window starts (" + std::to_string(*options.start) +
                                            ") after it stops (" + std::to_string(*options.stop) +
                                            ")");
  }
  Flush();
  CheckSeriesExist(ids);
  std::vector<uint64_t> wanted = Unique(ids);
  Latest(kMetrics);
  wanted = WithoutDeletedRuns(std::move(wanted));

  // The window: what was asked, its open ends taken from the points.
  const bool by_step = options.x == Axis::kStep;
  std::optional<int64_t> start = options.start, stop = options.stop;
  std::map<uint64_t, SeriesStats> stats;  // read for an open window on steps
  if (!start || !stop) {
    std::optional<int64_t> lo, hi;  // the extreme x of any point
    auto widen = [&](int64_t first, int64_t last) {
      lo = lo ? std::min(*lo, first) : first;
      hi = hi ? std::max(*hi, last) : last;
    };
    if (by_step) {
      stats = StatsAtCurrentVersion(wanted);
      for (const auto& [id, s] : stats) widen(s.first_step, s.last_step);
    } else {
      // Statistics keep no oldest timestamp: one pass over the points finds it.
      ArrowArrayStream raw{};
      ReadStream(wanted, StepRange{}, std::nullopt, &raw);
      arrow::StreamReader reader{arrow::OwnedStream(&raw)};
      while (auto batch = reader.Next()) {
        arrow::TimestampColumn timestamp(*batch, "timestamp");
        for (int64_t i = 0; i < batch->num_rows(); ++i) {
          widen(timestamp.value(i), timestamp.value(i));
        }
      }
    }
    if (!start) start = lo;
    if (!stop && hi) {
      stop = *hi == std::numeric_limits<int64_t>::max() ? *hi : *hi + 1;
    }
  }

  std::map<uint64_t, DownsampledSeries> out;
  for (uint64_t id : wanted) out[id];  // no point in the window: no buckets
  if (!start || !stop || *start >= *stop) return out;

  const BucketGrid grid(*start, *stop, options.buckets);
  const size_t raw_limit = 2 * static_cast<size_t>(options.buckets);
  std::map<uint64_t, std::vector<Bucket>> folded;
  if (by_step) {
    // Series with few points in the window are answered as their points,
    // read below. Known to be few (the statistics count every point of an
    // open window), a series skips the levels.
    std::vector<uint64_t> few, many;
    for (uint64_t id : wanted) {
      auto s = stats.find(id);
      (s != stats.end() && s->second.count <= raw_limit ? few : many).push_back(id);
    }
    if (ReadDownsampledFromLevels(many, grid, *start, *stop, &folded)) {
      for (uint64_t id : many) {
        auto found = folded.find(id);
        if (found == folded.end()) continue;  // no point in the window
        uint64_t points = 0;
        for (const Bucket& b : found->second) points += b.count;
        if (points <= raw_limit) {
          few.push_back(id);
          continue;
        }
        DownsampledSeries& series = out[id];
        for (Bucket& b : found->second) {
          if (b.count > 0) series.buckets.push_back(b);
        }
      }
      wanted = std::move(few);
    }
  }
  if (!wanted.empty()) {
    ArrowArrayStream raw{};
    if (by_step) {
      ReadStream(wanted, StepRange{*start, *stop}, std::nullopt, &raw);
    } else {
      ReadStream(wanted, StepRange{}, TimeRange{*start, *stop}, &raw);
    }
    arrow::StreamReader reader{arrow::OwnedStream(&raw)};
    // The stream holds the series one after another (ReadStream's order).
    std::optional<uint64_t> current;
    std::optional<SeriesFold> fold;
    while (auto batch = reader.Next()) {
      arrow::UInt64Column id(*batch, "series_id");
      arrow::Int64Column step(*batch, "step");
      arrow::TimestampColumn timestamp(*batch, "timestamp");
      arrow::Float64Column value(*batch, "value");
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        if (current != id.value(i)) {
          if (fold) out[*current] = fold->Finish();
          current = id.value(i);
          fold.emplace(grid, options.x, raw_limit);
        }
        fold->Add(step.value(i), timestamp.value(i), value.value(i));
      }
    }
    if (fold) out[*current] = fold->Finish();
  }
  for (auto& [id, series] : out) {
    series.width = grid.width();
    if (series.buckets.empty()) series.raw = true;  // no point: none to reduce
  }
  return out;
}

namespace {

const arrow::Schema& BucketsSchema() {
  static const arrow::Schema schema = {
      {"series_id", arrow::Type::kUInt64, false},
      {"raw", arrow::Type::kBool, false},
      {"width", arrow::Type::kInt64, false},
      {"start", arrow::Type::kInt64, false},
      {"stop", arrow::Type::kInt64, false},
      {"count", arrow::Type::kUInt64, false},
      {"non_finite", arrow::Type::kUInt64, false},
      {"first_step", arrow::Type::kInt64, false},
      {"first", arrow::Type::kFloat64, false},
      {"last_step", arrow::Type::kInt64, false},
      {"last", arrow::Type::kFloat64, false},
      {"min", arrow::Type::kFloat64, true},
      {"min_step", arrow::Type::kInt64, true},
      {"max", arrow::Type::kFloat64, true},
      {"max_step", arrow::Type::kInt64, true},
      {"first_timestamp", arrow::Type::kTimestampUs, false},
      {"last_timestamp", arrow::Type::kTimestampUs, false},
  };
  return schema;
}

}  // namespace

void RepoImpl::ReadDownsampledStream(std::span<const uint64_t> ids,
                                     const DownsampleOptions& options, ArrowArrayStream* out) {
  auto series =
      std::make_shared<std::map<uint64_t, DownsampledSeries>>(ReadDownsampled(ids, options));
  auto order = std::make_shared<std::vector<uint64_t>>(Unique(ids));
  auto next = [series, order, index = size_t{0}](ArrowArray* out) mutable -> bool {
    while (index < order->size()) {
      uint64_t id = (*order)[index++];
      auto found = series->find(id);
      if (found == series->end() || found->second.buckets.empty()) continue;
      const DownsampledSeries& s = found->second;
      arrow::BatchBuilder b(BucketsSchema());
      for (const Bucket& k : s.buckets) {
        const bool finite = k.count > k.non_finite;
        b.uint64(0).Append(id);
        b.boolean(1).Append(s.raw);
        b.int64(2).Append(s.width);
        b.int64(3).Append(k.start);
        b.int64(4).Append(k.stop);
        b.uint64(5).Append(k.count);
        b.uint64(6).Append(k.non_finite);
        b.int64(7).Append(k.first_step);
        b.float64(8).Append(k.first);
        b.int64(9).Append(k.last_step);
        b.float64(10).Append(k.last);
        if (finite) {
          b.float64(11).Append(k.min);
          b.int64(12).Append(k.min_step);
          b.float64(13).Append(k.max);
          b.int64(14).Append(k.max_step);
        } else {
          b.float64(11).AppendNull();
          b.int64(12).AppendNull();
          b.float64(13).AppendNull();
          b.int64(14).AppendNull();
        }
        b.timestamp(15).Append(k.first_timestamp_us);
        b.timestamp(16).Append(k.last_timestamp_us);
      }
      b.Finish(out);
      return true;
    }
    return false;
  };
  arrow::OwnedStream stream;
  arrow::MakeStream(BucketsSchema(), std::move(next), &stream);
  if (out->release != nullptr) out->release(out);
  *out = stream.release();
}

}  // namespace kv0::tracking
