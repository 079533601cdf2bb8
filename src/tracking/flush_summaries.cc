// Flush summaries: reading them and asking them (the rules are in
// flush_summaries.h).

#include "tracking/flush_summaries.h"

#include <algorithm>
#include <optional>
#include <set>

#include "kv0/error.h"
#include "tracking/levels.h"
#include "tracking/schema.h"
#include "tracking/series_stats.h"

namespace kv0::tracking {
namespace {

std::string KeyOf(const lance::FragmentInfo& f) { return f.data_file + '\n' + f.deletion_file; }

// Whether the points a delta counted may lie in `span`.
bool Meets(const StatsDelta& delta, const StepSpan& span) {
  return !delta.empty() && delta.last_step() >= span.start &&
         (span.stop == INT64_MAX || delta.first_step() < span.stop);
}

const std::vector<std::string>& ReservedColumns() {
  static const std::vector<std::string> columns = {"series_id", "step", "epoch",           "value",
                                                   "stats",     "seq",  lance::kRowAddress};
  return columns;
}

// Adds the reserved rows of `batch` (rows of other series are skipped) to
// the summaries of their fragments in `out`. A batch without the stats
// column defers its statistics rows instead: their addresses go to
// `deferred`, for a batch of them with the column.
void Count(const arrow::Batch& batch, std::map<uint64_t, std::shared_ptr<FlushSummary>>* out,
           std::vector<uint64_t>* deferred = nullptr) {
  arrow::UInt64Column series(batch, "series_id");
  arrow::Int64Column step(batch, "step"), epoch(batch, "epoch");
  arrow::Float64Column value(batch, "value");
  std::optional<arrow::BinaryColumn> stats;
  if (batch.FindColumn("stats") >= 0) stats.emplace(batch, "stats");
  arrow::UInt64Column seq(batch, "seq"), address(batch, lance::kRowAddress);
  for (int64_t i = 0; i < batch.num_rows(); ++i) {
    if (series.value(i) != kReservedSeriesId) continue;
    auto found = out->find(address.value(i) >> 32);
    if (found == out->end()) continue;
    FlushSummary& summary = *found->second;
    const uint64_t series_id = static_cast<uint64_t>(step.value(i));
    if (!epoch.is_null(i) && value.value(i) == kOwnEntryValue) {
      summary.counted_rows++;
      summary.own_entry_rows.push_back(address.value(i));
      continue;
    }
    if (epoch.is_null(i)) {  // a statistics row
      if (!stats) {
        deferred->push_back(address.value(i));
        continue;
      }
      summary.counted_rows++;
      if (stats->is_null(i)) continue;
      const StatsDelta delta = StatsDelta::Decode(stats->value(i));
      summary.counted_rows += delta.count();
      summary.deltas[series_id].Merge(delta);
      continue;
    }
    summary.counted_rows++;
    if (value.value(i) == kFlushMarkValue) {
      summary.marked_rows += static_cast<uint64_t>(epoch.value(i));
    } else if ((value.value(i) == kLevelRowValue || value.value(i) == kTopLevelRowValue) &&
               !seq.is_null(i)) {
      summary.levels.push_back(LevelRowAt{series_id, static_cast<int>(seq.value(i)), epoch.value(i),
                                          value.value(i) == kTopLevelRowValue,
                                          address.value(i) & 0xffffffffu});
    }
  }
}

// Whether `own` covers the rows [0, points) exactly: its entries neither
// overlap nor leave a gap.
bool Covers(const OwnDirectory& own, uint64_t points) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [offset, end)
  for (const auto& [id, entries] : own.by_series) {
    for (const DirectoryEntry& e : entries) spans.emplace_back(e.offset, e.offset + e.count);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (const auto& [offset, end] : spans) {
    if (offset != covered) return false;
    covered = end;
  }
  return covered == points;
}

// The tail of each of `fragments` that ends with a flush mark describing
// it (levels.h, FlushTail), by fragment id; the others are absent.
std::map<uint64_t, uint64_t> Tails(const lance::Dataset& metrics,
                                   const std::vector<lance::FragmentInfo>& fragments) {
  std::map<uint64_t, uint64_t> rows;  // of each fragment that may have one
  std::vector<uint64_t> last;
  for (const auto& f : fragments) {
    // A deleted row would shift nothing (addresses are physical) but may be
    // one of the tail's, which the take leaves out: those are scanned.
    if (f.physical_rows == 0 || !f.deletion_file.empty() || f.physical_rows > 0xffffffffu) {
      continue;
    }
    rows[f.id] = f.physical_rows;
    last.push_back(f.id << 32 | (f.physical_rows - 1));
  }
  std::map<uint64_t, uint64_t> out;
  if (last.empty()) return out;
  auto reader =
      metrics.Take(last, {"series_id", "step", "epoch", "value", "stats", lance::kRowAddress});
  while (auto batch = reader.Next()) {
    arrow::UInt64Column series(*batch, "series_id"), address(*batch, lance::kRowAddress);
    arrow::Int64Column step(*batch, "step"), epoch(*batch, "epoch");
    arrow::Float64Column value(*batch, "value");
    arrow::BinaryColumn stats(*batch, "stats");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      if (series.value(i) != kReservedSeriesId || step.value(i) != 0 || epoch.is_null(i) ||
          value.value(i) != kFlushMarkValue || stats.is_null(i)) {
        continue;
      }
      const uint64_t id = address.value(i) >> 32;
      const auto tail = FlushTail::Decode(stats.value(i));
      if (tail && rows.count(id) && tail->fragment_rows == rows[id]) out[id] = tail->tail_rows;
    }
  }
  return out;
}

// Reads the summaries of `fragments` (ids) of `metrics` into `out`, by id:
// the tails of those that have one by address, the others in one scan of
// their reserved rows. `by_address` off scans all of them.
void ReadSummaries(const lance::Dataset& metrics, const std::vector<lance::FragmentInfo>& fragments,
                   bool by_address, std::map<uint64_t, std::shared_ptr<FlushSummary>>* out,
                   FlushSummaries::Reads* reads) {
  for (const auto& f : fragments) {
    auto summary = std::make_shared<FlushSummary>();
    summary->rows = f.physical_rows;
    (*out)[f.id] = summary;
  }
  std::map<uint64_t, uint64_t> tails;
  if (by_address) tails = Tails(metrics, fragments);
  if (!tails.empty()) {
    std::vector<uint64_t> addresses;
    for (const auto& f : fragments) {
      auto tail = tails.find(f.id);
      if (tail == tails.end()) continue;
      (*out)[f.id]->tail_rows = tail->second;
      for (uint64_t row = f.physical_rows - tail->second; row < f.physical_rows; ++row) {
        addresses.push_back(f.id << 32 | row);
      }
    }
    // The tails without their stats column, whose level rows' cells are
    // most of the bytes and not needed here; then the statistics rows'.
    std::vector<std::string> columns = ReservedColumns();
    std::erase(columns, "stats");
    std::vector<uint64_t> statistics;
    auto reader = metrics.Take(addresses, columns);
    while (auto batch = reader.Next()) Count(*batch, out, &statistics);
    if (!statistics.empty()) {
      auto rows = metrics.Take(statistics, ReservedColumns());
      while (auto batch = rows.Next()) Count(*batch, out);
    }
    reads->by_address += tails.size();
  }
  std::vector<uint64_t> scanned;
  for (const auto& f : fragments) {
    if (!tails.count(f.id)) scanned.push_back(f.id);
  }
  if (scanned.empty()) return;
  reads->scanned += scanned.size();
  lance::ScanOptions scan;
  scan.columns = ReservedColumns();
  scan.columns.pop_back();  // the address comes with with_row_address
  scan.fragment_ids = scanned;
  scan.with_row_address = true;
  scan.filter = "series_id = 0";
  auto reader = metrics.Scan(scan);
  while (auto batch = reader.Next()) Count(*batch, out);
}

}  // namespace

bool FlushSummary::MayHold(const std::vector<uint64_t>& ids,
                           const std::vector<StepSpan>& spans) const {
  if (!Bounded()) return true;
  for (uint64_t id : ids) {
    auto found = deltas.find(id);
    if (found == deltas.end()) continue;
    for (const StepSpan& span : spans) {
      if (Meets(found->second, span)) return true;
    }
  }
  return false;
}

FlushSummaries::ById FlushSummaries::Of(const lance::Dataset& metrics) {
  const auto fragments = metrics.Fragments();
  const auto metadata = metrics.Metadata();
  std::set<uint64_t> optimized = FragmentList(metadata, kLevelledFragmentsKey);
  optimized.merge(FragmentList(metadata, kDirectedFragmentsKey));

  ById out;
  std::vector<lance::FragmentInfo> missing;
  {
    std::lock_guard lock(mu_);
    for (const auto& f : fragments) {
      if (optimized.count(f.id)) continue;
      auto found = by_files_.find(KeyOf(f));
      if (found != by_files_.end()) {
        out[f.id] = found->second;
      } else {
        missing.push_back(f);
      }
    }
  }
  if (missing.empty()) return out;
  std::map<uint64_t, std::shared_ptr<FlushSummary>> read;
  Reads reads;
  ReadSummaries(metrics, missing, by_address_, &read, &reads);

  std::lock_guard lock(mu_);
  reads_.by_address += reads.by_address;
  reads_.scanned += reads.scanned;
  for (const auto& f : missing) {
    out[f.id] = read[f.id];
    by_files_[KeyOf(f)] = read[f.id];
  }
  // Forget the summaries of fragments long gone (compacted, optimized).
  if (by_files_.size() > 2 * fragments.size() + 64) {
    std::set<std::string> current;
    for (const auto& f : fragments) current.insert(KeyOf(f));
    std::erase_if(by_files_, [&](const auto& kept) { return !current.count(kept.first); });
  }
  return out;
}

std::vector<uint64_t> FlushSummaries::MayHold(const ById& summaries,
                                              const std::vector<lance::FragmentInfo>& fragments,
                                              const std::vector<uint64_t>& ids,
                                              const std::vector<StepSpan>& spans) {
  std::vector<uint64_t> out;
  for (const auto& f : fragments) {
    auto found = summaries.find(f.id);
    if (found == summaries.end() || found->second->MayHold(ids, spans)) out.push_back(f.id);
  }
  return out;
}

OwnDirectories FlushSummaries::OwnOf(const lance::Dataset& metrics, const ById& summaries,
                                     const std::vector<uint64_t>& fragments) {
  OwnDirectories out;
  std::vector<std::pair<uint64_t, const FlushSummary*>> unread;
  {
    std::lock_guard lock(mu_);
    for (uint64_t id : fragments) {
      auto found = summaries.find(id);
      if (found == summaries.end() || found->second->tail_rows == 0) continue;
      const FlushSummary* summary = found->second.get();
      if (!summary->own_read) {
        unread.emplace_back(id, summary);
      } else if (summary->own) {
        out[id] = summary->own;
      }
    }
  }
  if (unread.empty()) return out;

  std::vector<uint64_t> addresses;
  for (const auto& [id, summary] : unread) {
    addresses.insert(addresses.end(), summary->own_entry_rows.begin(),
                     summary->own_entry_rows.end());
  }
  std::map<uint64_t, OwnDirectory> read;
  std::set<uint64_t> undecoded;
  if (!addresses.empty()) {
    auto reader = metrics.Take(addresses, {"step", "stats", lance::kRowAddress});
    while (auto batch = reader.Next()) {
      arrow::Int64Column series(*batch, "step");
      arrow::BinaryColumn stats(*batch, "stats");
      arrow::UInt64Column address(*batch, lance::kRowAddress);
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        const uint64_t fragment = address.value(i) >> 32;
        const auto series_id = static_cast<uint64_t>(series.value(i));
        try {
          read[fragment].by_series[series_id].push_back(
              DecodeEntry(series_id, fragment, stats.is_null(i) ? "" : stats.value(i)));
        } catch (const Error&) {
          undecoded.insert(fragment);  // the fragment is read by filter
        }
      }
    }
  }
  std::lock_guard lock(mu_);
  for (const auto& [id, summary] : unread) {
    if (!summary->own_read) {
      summary->own_read = true;
      if (!undecoded.count(id) && Covers(read[id], summary->rows - summary->tail_rows)) {
        summary->own = std::make_shared<const OwnDirectory>(std::move(read[id]));
      }
    }
    if (summary->own) out[id] = summary->own;
  }
  return out;
}

namespace {

// Copies row i of a metrics batch (MetricsSchema's columns, in order) to b.
void CopyMetricsRow(const arrow::Batch& batch, int64_t i, arrow::BatchBuilder& b) {
  arrow::UInt64Column series(batch, 0), seq(batch, 6);
  arrow::Int64Column step(batch, 1), epoch(batch, 2);
  arrow::TimestampColumn timestamp(batch, 3);
  arrow::Float64Column value(batch, 4);
  arrow::BinaryColumn stats(batch, 5);
  b.uint64(0).Append(series.value(i));
  b.int64(1).Append(step.value(i));
  epoch.is_null(i) ? b.int64(2).AppendNull() : b.int64(2).Append(epoch.value(i));
  b.timestamp(3).Append(timestamp.value(i));
  b.float64(4).Append(value.value(i));
  stats.is_null(i) ? b.binary(5).AppendNull() : b.binary(5).Append(stats.value(i));
  seq.is_null(i) ? b.uint64(6).AppendNull() : b.uint64(6).Append(seq.value(i));
}

// Whether row i of a metrics batch is an own entry.
bool IsOwnEntry(const arrow::Batch& batch, int64_t i) {
  return arrow::UInt64Column(batch, 0).value(i) == kReservedSeriesId &&
         !arrow::Int64Column(batch, 2).is_null(i) &&
         arrow::Float64Column(batch, 4).value(i) == kOwnEntryValue;
}

}  // namespace

// One scan, whose batches of points pass through as they are and whose
// batches of reserved rows wait for the end; the few batches holding both
// (where one fragment's points meet its tail) are split by copying, and so
// are those holding the sources' own entries, which are left out: the
// merged fragment gets its own, of the points as they lie in it.
arrow::OwnedStream MergedFlushesStream(const lance::Dataset& metrics,
                                       const std::vector<uint64_t>& fragments) {
  struct State {
    explicit State(arrow::OwnedStream rows) : reader(std::move(rows)) {}
    arrow::StreamReader reader;
    bool scanned = false;
    std::vector<arrow::OwnedArray> reserved;    // whole batches of reserved rows
    arrow::BatchBuilder last{MetricsSchema()};  // the rest of them, then the mark
    OwnEntryBuilder entries;                    // of the points passed through
    uint64_t points = 0, tail = 1;              // rows; the tail counts the mark
    int64_t dropped = 0;                        // the sources' own entries
    bool done = false;
  };
  lance::ScanOptions scan;
  for (const auto& field : MetricsSchema()) scan.columns.push_back(field.name);  // its order
  scan.fragment_ids = fragments;
  auto state = std::make_shared<State>(metrics.ScanStream(scan));

  arrow::OwnedStream out;
  arrow::MakeStream(
      MetricsSchema(),
      [state](ArrowArray* batch) {
        while (!state->scanned) {
          auto next = state->reader.Next();
          if (!next) {
            state->scanned = true;
            break;
          }
          arrow::UInt64Column series(*next, 0);
          arrow::Int64Column step(*next, 1);
          int64_t reserved = 0, own = 0;
          for (int64_t i = 0; i < next->num_rows(); ++i) {
            if (series.value(i) != kReservedSeriesId) {
              state->entries.Add(series.value(i), step.value(i));
            } else if (IsOwnEntry(*next, i)) {
              own++;
            } else {
              reserved++;
            }
          }
          const int64_t rows = next->num_rows();
          const int64_t points = rows - reserved - own;
          state->tail += static_cast<uint64_t>(reserved);
          state->points += static_cast<uint64_t>(points);
          state->dropped += own;
          if (reserved == rows) {
            state->reserved.push_back(std::move(*next).Release());
            continue;
          }
          if (points == rows) {
            *batch = std::move(*next).Release().release();
            return true;
          }
          arrow::BatchBuilder copy(MetricsSchema());
          for (int64_t i = 0; i < rows; ++i) {
            if (series.value(i) != kReservedSeriesId) {
              CopyMetricsRow(*next, i, copy);
            } else if (!IsOwnEntry(*next, i)) {
              CopyMetricsRow(*next, i, state->last);
            }
          }
          if (points == 0) continue;
          copy.Finish(batch);
          return true;
        }
        if (!state->reserved.empty()) {
          *batch = state->reserved.back().release();
          state->reserved.pop_back();
          return true;
        }
        if (state->done) return false;
        state->done = true;
        const std::vector<DirectoryEntry> entries = state->entries.Finish();
        AppendOwnEntries(entries, state->last);
        state->tail += entries.size();
        // The sources' marks count the rows they appended, their own
        // entries included; this one counts the rows the merge adds and
        // removes, so that the marks still add up to the rows (a negative
        // count adds up too: readers sum them modulo 2^64).
        const int64_t added = 1 + static_cast<int64_t>(entries.size()) - state->dropped;
        AppendFlushMark(added,
                        {.fragment_rows = state->points + state->tail, .tail_rows = state->tail},
                        state->last);
        state->last.Finish(batch);
        return true;
      },
      &out);
  return out;
}

}  // namespace kv0::tracking
