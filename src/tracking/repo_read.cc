// Reads: each query flushes the handle's buffer, moves the tables it reads to
// their latest versions and scans them with a filter.

#include <algorithm>
#include <set>
#include <unordered_set>

#include "absl/container/flat_hash_set.h"
#include "tracking/point_directory.h"
#include "tracking/repo_impl.h"
#include "tracking/schema.h"
#include "util/reserve.h"

namespace kv0::tracking {
namespace {

// Points one read holds at a time; a larger series is read in step ranges.
constexpr uint64_t kReadChunkPoints = 1 << 20;

const arrow::Schema& PointsSchema() {
  static const arrow::Schema schema = {
      {"series_id", arrow::Type::kUInt64, false}, {"step", arrow::Type::kInt64, false},
      {"epoch", arrow::Type::kInt64, true},       {"timestamp", arrow::Type::kTimestampUs, false},
      {"value", arrow::Type::kFloat64, false},
  };
  return schema;
}

// One scan of a read: some series over one step range.
struct ReadChunk {
  std::vector<uint64_t> ids;
  int64_t start, stop;                // steps [start, stop)
  std::vector<uint64_t> fragments{};  // those that may hold its points
};

std::string StepFilter(int64_t start, int64_t stop) {
  std::string out;
  if (start != INT64_MIN) out += " AND step >= " + SqlInt(start);
  if (stop != INT64_MAX) out += " AND step < " + SqlInt(stop);
  return out;
}

// Exports the points of `ids`, in that order (those in `times` if set), as
// one batch of PointsSchema in *out, emptying *points as it goes; false, with
// nothing exported, if there are none. The columns are gathered whole and
// appended in one copy each: a builder's append per point was a third of a
// range read of 100,000 points.
bool ExportPoints(PointsBySeries* points, const std::vector<uint64_t>& ids,
                  std::optional<TimeRange> times, ArrowArray* out) {
  size_t rows = 0;
  for (const auto& [id, series] : *points) rows += series.size();
  std::vector<uint64_t> series_ids;
  std::vector<int64_t> steps, epochs, timestamps;
  std::vector<uint8_t> has_epoch;
  std::vector<double> values;
  series_ids.reserve(rows);
  steps.reserve(rows);
  epochs.reserve(rows);
  has_epoch.reserve(rows);
  timestamps.reserve(rows);
  values.reserve(rows);
  for (uint64_t id : ids) {
    auto found = points->find(id);
    if (found == points->end()) continue;
    for (const auto& p : found->second) {
      if (times && (p.timestamp_us < times->start_us || p.timestamp_us >= times->stop_us)) {
        continue;
      }
      series_ids.push_back(id);
      steps.push_back(p.step);
      epochs.push_back(p.epoch);
      has_epoch.push_back(p.has_epoch);
      timestamps.push_back(p.timestamp_us);
      values.push_back(p.value);
    }
    found->second = {};
  }
  if (series_ids.empty()) return false;
  arrow::BatchBuilder builder(PointsSchema());
  builder.uint64(0).Append(std::span<const uint64_t>(series_ids));
  builder.int64(1).Append(std::span<const int64_t>(steps));
  builder.int64(2).Append(std::span<const int64_t>(epochs), has_epoch);
  builder.timestamp(3).Append(std::span<const int64_t>(timestamps));
  builder.float64(4).Append(std::span<const double>(values));
  builder.Finish(out);
  return true;
}

// Reads `chunks` of `metrics`' current version as a stream of one batch per
// chunk, the latest point of each step, from the fragments `summaries` say
// may hold them. The stream holds that version, so it stays readable after
// the handle is closed or moves on.
void StreamChunks(const lance::Dataset& metrics, FlushSummaries& summaries,
                  std::vector<ReadChunk> chunks, std::optional<TimeRange> times,
                  ArrowArrayStream* out) {
  auto dataset = std::make_shared<lance::Dataset>(metrics.Clone());
  const auto by_id = summaries.Of(*dataset);
  const auto fragments = dataset->Fragments();
  for (ReadChunk& chunk : chunks) {
    chunk.fragments =
        FlushSummaries::MayHold(by_id, fragments, chunk.ids, {{chunk.start, chunk.stop}});
  }
  std::set<uint64_t> read;
  for (const ReadChunk& chunk : chunks) read.insert(chunk.fragments.begin(), chunk.fragments.end());
  struct Plan {
    std::vector<ReadChunk> chunks;
    size_t next = 0;
    OwnDirectories own;
  };
  auto state = std::make_shared<Plan>(
      Plan{std::move(chunks), 0,
           summaries.OwnOf(*dataset, by_id, std::vector<uint64_t>(read.begin(), read.end()))});
  auto next = [dataset, state, times](ArrowArray* out) -> bool {
    while (state->next < state->chunks.size()) {
      const ReadChunk& chunk = state->chunks[state->next++];
      PointsBySeries points = ReadLatestPoints(*dataset, chunk.ids, {{chunk.start, chunk.stop}},
                                               chunk.fragments, state->own);
      if (ExportPoints(&points, chunk.ids, times, out)) return true;
    }
    return false;
  };
  arrow::OwnedStream stream;
  arrow::MakeStream(PointsSchema(), std::move(next), &stream);
  if (out->release != nullptr) out->release(out);
  *out = stream.release();
}

}  // namespace

std::vector<uint64_t> Unique(std::span<const uint64_t> ids) {
  // A flat set: a catalog passes every series, and a node per id made this
  // a tenth of a new process's GetSeriesStats.
  std::vector<uint64_t> out;
  out.reserve(ids.size());
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(ids.size());
  for (uint64_t id : ids) {
    if (id != kReservedSeriesId && seen.insert(id).second) out.push_back(id);
  }
  return out;
}

lance::Dataset& RepoImpl::Latest(int table) {
  tables_[table]->CheckoutLatest();
  return *tables_[table];
}

std::vector<RunRow> RepoImpl::ReadRunRows(const std::string& filter) {
  lance::ScanOptions scan;
  scan.filter = filter;
  std::vector<RunRow> rows;
  auto reader = Latest(kRuns).Scan(scan);
  while (auto batch = reader.Next()) DecodeRunRows(*batch, &rows);
  return rows;
}

std::vector<RunInfo> RepoImpl::Runs() {
  Flush();
  std::map<std::string, std::vector<RunRow>> by_run;
  for (auto& row : ReadRunRows("")) by_run[row.record.run_id].push_back(std::move(row));
  std::vector<RunInfo> out;
  for (auto& [id, rows] : by_run) {
    if (auto info = MergeRun(std::move(rows))) out.push_back(std::move(*info));
  }
  std::stable_sort(out.begin(), out.end(), [](const RunInfo& a, const RunInfo& b) {
    return a.created_at_us < b.created_at_us;
  });
  return out;
}

std::optional<RunInfo> RepoImpl::GetRun(const std::string& run_id) {
  Flush();
  return MergeRun(ReadRunRows("run_id = " + SqlString(run_id)));
}

std::map<std::string, nlohmann::json> RepoImpl::ReadParams(const std::string& filter) {
  Flush();
  lance::ScanOptions scan;
  scan.columns = {"seq", "run_id", "key", "value"};
  scan.filter = filter;
  std::map<std::string, std::vector<Leaf>> by_run;
  auto reader = Latest(kParams).Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt64Column seq(*batch, "seq");
    arrow::Utf8Column run_id(*batch, "run_id"), key(*batch, "key"), value(*batch, "value");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      if (IsMarkRunId(run_id.value(i))) continue;
      auto parsed = nlohmann::json::parse(value.value(i), nullptr, false);
      if (parsed.is_discarded()) parsed = std::string(value.value(i));
      by_run[std::string(run_id.value(i))].push_back(
          Leaf{std::string(key.value(i)), std::move(parsed), seq.value(i)});
    }
  }
  LoadTombstones(true);
  std::map<std::string, nlohmann::json> out;
  for (auto& [id, leaves] : by_run) {
    if (!IsDeleted(id)) out[id] = Unflatten(std::move(leaves));
  }
  return out;
}

std::vector<SeriesInfo> RepoImpl::ReadSeries(const std::string& filter) {
  lance::ScanOptions scan;
  scan.filter = filter.empty() ? "series_id <> 0" : "series_id <> 0 AND " + filter;
  LoadTombstones(true);
  std::vector<SeriesInfo> out;
  std::unordered_set<uint64_t> seen;
  auto reader = Latest(kSeries).Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt64Column id(*batch, "series_id");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      if (!seen.insert(id.value(i)).second) continue;
      SeriesInfo info = DecodeSeries(*batch, i);
      if (!IsDeleted(info.run_id)) out.push_back(std::move(info));
    }
  }
  std::sort(out.begin(), out.end(), [](const SeriesInfo& a, const SeriesInfo& b) {
    return std::tie(a.run_id, a.name, a.series_id) < std::tie(b.run_id, b.name, b.series_id);
  });
  return out;
}

std::map<uint64_t, StatsDelta> RepoImpl::ReadDeltas(
    std::span<const uint64_t> ids, const std::optional<std::vector<uint64_t>>& fragments) {
  if (fragments) return ReadDeltasIn(*tables_[kMetrics], ids, fragments);
  // The flushed fragments' statistics rows are in their summaries; only the
  // others are scanned. One version throughout.
  lance::Dataset metrics = tables_[kMetrics]->Clone();
  const auto summaries = flush_summaries_.Of(metrics);
  std::vector<uint64_t> scanned;
  for (const auto& f : metrics.Fragments()) {
    if (!summaries.count(f.id)) scanned.push_back(f.id);
  }
  std::map<uint64_t, StatsDelta> out = ReadDeltasIn(metrics, ids, scanned);
  // Each summary is walked from its smaller side: a catalog asks for every
  // series, of which a fragment holds a few.
  const std::vector<uint64_t> wanted = Unique(ids);
  const absl::flat_hash_set<uint64_t> wanted_set(wanted.begin(), wanted.end());
  for (const auto& [fragment, summary] : summaries) {
    if (summary->deltas.size() < wanted.size()) {
      for (const auto& [id, delta] : summary->deltas) {
        if (wanted_set.count(id)) out[id].Merge(delta);
      }
      continue;
    }
    for (uint64_t id : wanted) {
      auto found = summary->deltas.find(id);
      if (found != summary->deltas.end()) out[id].Merge(found->second);
    }
  }
  return out;
}

std::map<uint64_t, StatsDelta> RepoImpl::ReadDeltasIn(
    lance::Dataset& metrics, std::span<const uint64_t> ids,
    const std::optional<std::vector<uint64_t>>& fragments) {
  std::map<uint64_t, StatsDelta> out;
  if (fragments && fragments->empty()) return out;
  std::vector<uint64_t> wanted = Unique(ids);
  std::unordered_set<uint64_t> set(wanted.begin(), wanted.end());
  if (wanted.empty()) return out;
  ForEachDeltaIn(metrics, wanted, fragments, [&](uint64_t id, std::string_view encoded) {
    if (set.count(id)) out[id].Merge(StatsDelta::Decode(encoded));
  });
  return out;
}

void RepoImpl::ForEachDeltaIn(lance::Dataset& metrics, std::span<const uint64_t> ids,
                              const std::optional<std::vector<uint64_t>>& fragments,
                              absl::FunctionRef<void(uint64_t, std::string_view)> visit) {
  if (ids.empty() || (fragments && fragments->empty())) return;
  lance::ScanOptions scan;
  scan.columns = {"step", "stats"};
  scan.fragment_ids = fragments;
  scan.filter = "series_id = 0 AND epoch IS NULL";
  if (ids.size() <= kMaxFilterIds) {
    std::vector<uint64_t> wanted = Unique(ids);
    if (wanted.empty()) return;
    scan.filter += " AND " + ReservedStepIn(wanted);
  }
  auto reader = metrics.Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::Int64Column step(*batch, "step");
    arrow::BinaryColumn stats(*batch, "stats");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      if (!stats.is_null(i)) visit(static_cast<uint64_t>(step.value(i)), stats.value(i));
    }
  }
}

std::map<uint64_t, SeriesStats> RepoImpl::GetSeriesStats(std::span<const uint64_t> ids) {
  Flush();
  Latest(kMetrics);
  return StatsAtCurrentVersion(WithoutDeletedRuns(Unique(ids)));
}

std::map<uint64_t, SeriesStats> RepoImpl::StatsAtCurrentVersion(std::span<const uint64_t> ids) {
  return FinishStats(ReadDeltas(ids));
}

std::map<uint64_t, SeriesStats> RepoImpl::FinishStats(
    const std::map<uint64_t, StatsDelta>& deltas) {
  std::map<uint64_t, SeriesStats> out;
  std::vector<uint64_t> dirty;
  for (const auto& [id, delta] : deltas) {
    if (delta.dirty()) {
      dirty.push_back(id);
    } else if (!delta.empty()) {
      out[id] = delta.Finish();
    }
  }
  // Dirty series are computed from their points, as reads see them.
  for (const auto& part : Chunks(dirty, kMaxFilterIds)) {
    lance::ScanOptions scan;
    scan.columns = PointColumns();
    scan.filter = SqlIn("series_id", part);
    scan.with_row_address = true;
    PointsBySeries points;
    auto reader = tables_[kMetrics]->Scan(scan);
    while (auto batch = reader.Next()) CollectPoints(*batch, &points);
    for (auto& [id, stored] : points) {
      LatestPerStep(&stored);
      std::vector<Point> latest;
      for (const StoredPoint& p : stored) {
        latest.push_back(Point{p.step, p.value, p.timestamp_us, p.seq});
      }
      StatsDelta exact = ExactStats(latest);
      if (!exact.empty()) out[id] = exact.Finish();
    }
  }
  return out;
}

void RepoImpl::ReadStream(std::span<const uint64_t> ids, StepRange steps,
                          std::optional<TimeRange> times, ArrowArrayStream* out) {
  Flush();
  Latest(kMetrics);
  std::vector<uint64_t> wanted = WithoutDeletedRuns(Unique(ids));

  // A step range too narrow to hold more than one chunk of points (steps are
  // distinct after LatestPerStep) is read in one scan with no statistics: the
  // plan below only needs them to clamp wide ranges and to split big series.
  uint64_t width = static_cast<uint64_t>(steps.stop) - static_cast<uint64_t>(steps.start);
  if (!times && !wanted.empty() && steps.start < steps.stop &&
      width <= kReadChunkPoints / std::max<size_t>(1, wanted.size()) &&
      wanted.size() <= kMaxFilterIds) {
    return StreamChunks(*tables_[kMetrics], flush_summaries_, {{wanted, steps.start, steps.stop}},
                        times, out);
  }
  auto deltas = ReadDeltas(wanted);

  // Per series, the step range to read. A time range first finds the steps
  // with a point in it; the latest point of each such step is chosen below
  // before the time range applies.
  std::map<uint64_t, std::pair<int64_t, int64_t>> ranges;  // [start, stop)
  if (times) {
    for (const auto& part : Chunks(wanted, kMaxFilterIds)) {
      lance::ScanOptions scan;
      scan.columns = {"series_id", "step"};
      scan.filter = SqlIn("series_id", part) + StepFilter(steps.start, steps.stop);
      if (times->start_us != INT64_MIN) {
        scan.filter += " AND timestamp >= " + SqlTimestamp(times->start_us);
      }
      if (times->stop_us != INT64_MAX) {
        scan.filter += " AND timestamp < " + SqlTimestamp(times->stop_us);
      }
      auto reader = tables_[kMetrics]->Scan(scan);
      while (auto batch = reader.Next()) {
        arrow::UInt64Column id(*batch, "series_id");
        arrow::Int64Column step(*batch, "step");
        for (int64_t i = 0; i < batch->num_rows(); ++i) {
          int64_t s = step.value(i);
          auto [it, fresh] = ranges.try_emplace(id.value(i), s, s + 1);
          it->second.first = std::min(it->second.first, s);
          it->second.second = std::max(it->second.second, s + 1);
        }
      }
    }
  } else {
    for (uint64_t id : wanted) {
      auto delta = deltas.find(id);
      if (delta == deltas.end() || delta->second.empty()) continue;
      SeriesStats stats = delta->second.Finish();
      int64_t stop = stats.last_step == INT64_MAX ? INT64_MAX : stats.last_step + 1;
      int64_t lo = std::max(steps.start, stats.first_step), hi = std::min(steps.stop, stop);
      if (lo < hi) ranges[id] = {lo, hi};
    }
  }

  // Plan the scans: series in the order asked, grouped while their points
  // in the range fit one chunk; a larger series is split into step ranges.
  // The points in the range are estimated as the fewer of the series' points
  // (as the statistics count them) and the steps in the range: a window of a
  // thousand steps of long series reads them in one scan, not one per series.
  // (Steps written many times before an optimize make the estimate low; the
  // chunk's size is a target, not a limit.)
  std::vector<ReadChunk> chunks;
  uint64_t in_chunk = 0;
  for (uint64_t id : wanted) {
    auto range = ranges.find(id);
    if (range == ranges.end()) continue;
    auto [lo, hi] = range->second;
    auto delta = deltas.find(id);
    const uint64_t steps_in_range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    uint64_t count = std::min(steps_in_range, delta != deltas.end() && !delta->second.empty()
                                                  ? delta->second.Finish().count
                                                  : 0);
    if (count > kReadChunkPoints) {
      uint64_t pieces = (count + kReadChunkPoints - 1) / kReadChunkPoints;
      // Width computed in unsigned arithmetic: the range may span all int64.
      uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
      uint64_t width = std::max<uint64_t>(1, span / pieces + 1);
      for (uint64_t start = static_cast<uint64_t>(lo); start < static_cast<uint64_t>(hi);) {
        uint64_t stop =
            static_cast<uint64_t>(hi) - start <= width ? static_cast<uint64_t>(hi) : start + width;
        chunks.push_back({{id}, static_cast<int64_t>(start), static_cast<int64_t>(stop)});
        if (stop == static_cast<uint64_t>(hi)) break;
        start = stop;
      }
      in_chunk = kReadChunkPoints;  // start a new chunk after it
      continue;
    }
    if (chunks.empty() || in_chunk + count > kReadChunkPoints ||
        chunks.back().ids.size() >= kMaxFilterIds || chunks.back().start != lo ||
        chunks.back().stop != hi) {
      chunks.push_back({{}, lo, hi});
      in_chunk = 0;
    }
    chunks.back().ids.push_back(id);
    in_chunk += count;
  }

  StreamChunks(*tables_[kMetrics], flush_summaries_, std::move(chunks), times, out);
}

std::map<uint64_t, MetricData> RepoImpl::ReadMany(std::span<const uint64_t> ids, StepRange steps,
                                                  std::optional<TimeRange> times) {
  ArrowArrayStream raw{};
  ReadStream(ids, steps, times, &raw);
  arrow::StreamReader reader{arrow::OwnedStream(&raw)};
  std::map<uint64_t, MetricData> out;
  while (auto batch = reader.Next()) {
    arrow::UInt64Column id(*batch, "series_id");
    arrow::Int64Column step(*batch, "step"), epoch(*batch, "epoch");
    arrow::TimestampColumn timestamp(*batch, "timestamp");
    arrow::Float64Column value(*batch, "value");
    // A series' points come together: one lookup per series and batch.
    const int64_t rows = batch->num_rows();
    for (int64_t begin = 0, end = 0; begin < rows; begin = end) {
      const uint64_t series = id.value(begin);
      for (end = begin + 1; end < rows && id.value(end) == series;) ++end;
      MetricData& data = out[series];
      const auto more = static_cast<size_t>(end - begin);
      ReserveMore(&data.steps, more);
      ReserveMore(&data.epochs, more);
      ReserveMore(&data.timestamps_us, more);
      ReserveMore(&data.values, more);
      for (int64_t i = begin; i < end; ++i) {
        data.steps.push_back(step.value(i));
        data.epochs.push_back(epoch.is_null(i) ? std::nullopt : std::optional(epoch.value(i)));
        data.timestamps_us.push_back(timestamp.value(i));
        data.values.push_back(value.value(i));
      }
    }
  }
  return out;
}

}  // namespace kv0::tracking
