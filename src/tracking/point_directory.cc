// The point directory (point_directory.h): encoding entries, building them
// after optimize's commit, and reading points through them.

#include "tracking/point_directory.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "tracking/levels.h"
#include "tracking/repo_impl.h"
#include "tracking/schema.h"
#include "util/clock.h"
#include "util/varint.h"

namespace kv0::tracking {
namespace {

constexpr const char* kCorruptEntry = "a directory row of metrics does not decode";

// Rows per range read: bounds the batches one read holds.
constexpr uint64_t kRangeReadRows = uint64_t{1} << 20;

std::string SpanFilter(const std::vector<StepSpan>& spans) {
  std::string filter;
  for (const StepSpan& s : spans) {
    if (!filter.empty()) filter += " OR ";
    filter += "(step >= " + SqlInt(s.start);
    if (s.stop != INT64_MAX) filter += " AND step < " + SqlInt(s.stop);
    filter += ")";
  }
  return "(" + filter + ")";
}

using RowRanges = std::vector<std::pair<uint64_t, uint64_t>>;

// One append of directory rows (kDirectoryHomesKey).
struct DirectoryAppend {
  std::set<uint64_t> homes, describes;
};

// The appends listed in `metadata`; none if the key is absent or malformed,
// which makes reads filter every fragment.
std::vector<DirectoryAppend> DirectoryAppends(const std::map<std::string, std::string>& metadata) {
  std::vector<DirectoryAppend> out;
  auto found = metadata.find(kDirectoryHomesKey);
  if (found == metadata.end()) return out;
  const auto json = nlohmann::json::parse(found->second, nullptr, false);
  if (!json.is_array()) return out;
  for (const auto& item : json) {
    DirectoryAppend append;
    for (auto [key, into] : {std::pair{"homes", &append.homes}, {"describes", &append.describes}}) {
      if (!item.is_object() || !item.contains(key) || !item[key].is_array()) return {};
      for (const auto& id : item[key]) {
        if (!id.is_number_unsigned()) return {};
        into->insert(id.get<uint64_t>());
      }
    }
    out.push_back(std::move(append));
  }
  return out;
}

// The appends listed in metrics' metadata whose homes are all present at
// its version: where their entries still are.
std::vector<DirectoryAppend> PresentAppends(const lance::Dataset& metrics) {
  std::vector<DirectoryAppend> appends = DirectoryAppends(metrics.Metadata());
  std::set<uint64_t> present;
  for (const auto& f : metrics.Fragments()) present.insert(f.id);
  std::erase_if(appends, [&](const DirectoryAppend& a) {
    return !std::includes(present.begin(), present.end(), a.homes.begin(), a.homes.end());
  });
  return appends;
}

// The fragments holding the entries of `fragments`, if an append whose
// homes are all present describes each of them; unset otherwise.
std::optional<std::vector<uint64_t>> HomesOf(const lance::Dataset& metrics,
                                             const std::set<uint64_t>& fragments) {
  const std::vector<DirectoryAppend> appends = PresentAppends(metrics);
  std::set<uint64_t> homes;
  for (uint64_t id : fragments) {
    bool described = false;
    for (const DirectoryAppend& a : appends) {
      if (!a.describes.count(id)) continue;
      homes.insert(a.homes.begin(), a.homes.end());
      described = true;
    }
    if (!described) return std::nullopt;
  }
  return std::vector<uint64_t>(homes.begin(), homes.end());
}

// The rows of `ids` in `spans` within `fragments`, from their directory
// rows: by fragment, ranges of row offsets [start, stop), ascending, merged
// where they touch. Adds to (*rows)[id] the rows found for each series.
std::map<uint64_t, RowRanges> DirectedRanges(const lance::Dataset& metrics,
                                             const std::vector<uint64_t>& ids,
                                             const std::vector<StepSpan>& spans,
                                             const std::set<uint64_t>& fragments,
                                             std::map<uint64_t, uint64_t>* rows) {
  std::map<uint64_t, RowRanges> ranges;
  // The other reserved rows (statistics, level rows, marks) are seven times
  // the directory's: at 2,000 runs, filtering them all took 5-6 ms, the
  // directory's own fragment 2 ms.
  const std::optional<std::vector<uint64_t>> homes = HomesOf(metrics, fragments);
  for (const auto& part : Chunks(ids, kMaxFilterIds)) {
    const std::unordered_set<uint64_t> wanted(part.begin(), part.end());
    lance::ScanOptions scan;
    scan.fragment_ids = homes;
    scan.columns = {"step", "epoch", "stats"};
    scan.filter =
        "series_id = 0 AND value = " + std::to_string(static_cast<int>(kDirectoryRowValue)) +
        " AND " + ReservedStepIn(part);
    auto reader = metrics.Scan(scan);
    while (auto batch = reader.Next()) {
      arrow::Int64Column series(*batch, "step"), fragment(*batch, "epoch");
      arrow::BinaryColumn stats(*batch, "stats");
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        const auto id = static_cast<uint64_t>(series.value(i));
        const auto fragment_id = static_cast<uint64_t>(fragment.value(i));
        if (!wanted.count(id) || !fragments.count(fragment_id)) continue;
        const DirectoryEntry entry = DecodeEntry(id, fragment_id, stats.value(i));
        for (const StepSpan& span : spans) {
          const auto [first, last] = entry.RowsOf(span);
          if (first == last) continue;
          ranges[fragment_id].emplace_back(first, last);
          (*rows)[id] += last - first;
        }
      }
    }
  }
  for (auto& [fragment_id, list] : ranges) {
    std::sort(list.begin(), list.end());
    RowRanges merged;
    for (const auto& r : list) {
      if (!merged.empty() && r.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    list = std::move(merged);
  }
  return ranges;
}

}  // namespace

bool InSpans(const std::vector<StepSpan>& spans, int64_t step) {
  return std::any_of(spans.begin(), spans.end(),
                     [&](const StepSpan& s) { return s.Contains(step); });
}

std::pair<uint64_t, uint64_t> DirectoryEntry::RowsOf(const StepSpan& span) const {
  const bool bounded = span.stop != INT64_MAX;
  if (count == 0 || last_step < span.start ||
      (bounded && (span.start >= span.stop || fences.front() >= span.stop))) {
    return {0, 0};
  }
  // Rows from fence k on have steps >= fences[k]; rows before it, below.
  const auto stride = static_cast<uint64_t>(kDirectoryStride);
  const auto first_at_or_above = [&](int64_t step) {
    return static_cast<uint64_t>(std::lower_bound(fences.begin(), fences.end(), step) -
                                 fences.begin());
  };
  const uint64_t k0 = first_at_or_above(span.start);
  const uint64_t k1 = bounded ? first_at_or_above(span.stop) : fences.size();
  const uint64_t first = k0 == 0 ? 0 : (k0 - 1) * stride;
  const uint64_t last = std::min(count, k1 * stride);
  return {offset + first, offset + last};
}

std::string EncodeEntry(const DirectoryEntry& entry) {
  std::string out;
  PutVarint(&out, entry.offset);
  PutVarint(&out, entry.count);
  PutVarint(&out, Zigzag(entry.last_step));
  int64_t previous = 0;
  for (int64_t fence : entry.fences) {
    PutVarint(&out, Zigzag(WrapSub(fence, previous)));
    previous = fence;
  }
  return out;
}

DirectoryEntry DecodeEntry(uint64_t series_id, uint64_t fragment_id, std::string_view bytes) {
  ByteReader in(bytes, kCorruptEntry);
  DirectoryEntry entry;
  entry.series_id = series_id;
  entry.fragment_id = fragment_id;
  entry.offset = in.Varint();
  entry.count = in.Varint();
  entry.last_step = Unzigzag(in.Varint());
  int64_t fence = 0;
  while (!in.done()) {
    fence = WrapAdd(fence, Unzigzag(in.Varint()));
    entry.fences.push_back(fence);
  }
  const uint64_t stride = static_cast<uint64_t>(kDirectoryStride);
  if (entry.count == 0 || entry.offset + entry.count > (uint64_t{1} << 32) ||
      entry.fences.size() != (entry.count + stride - 1) / stride ||
      !std::is_sorted(entry.fences.begin(), entry.fences.end()) ||
      entry.fences.back() > entry.last_step) {
    in.Fail();
  }
  return entry;
}

std::vector<DirectoryEntry> BuildDirectory(const lance::Dataset& metrics,
                                           std::span<const uint64_t> fragments,
                                           std::vector<uint64_t>* directed) {
  std::vector<DirectoryEntry> entries;
  std::set<uint64_t> broken;
  std::set<std::pair<uint64_t, uint64_t>> seen;  // (series, fragment)
  lance::ScanOptions scan;
  scan.columns = {"series_id", "step"};
  scan.fragment_ids = std::vector<uint64_t>(fragments.begin(), fragments.end());
  scan.with_row_address = true;
  scan.filter = "series_id <> 0";
  auto reader = metrics.Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt64Column id(*batch, "series_id"), address(*batch, lance::kRowAddress);
    arrow::Int64Column step(*batch, "step");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      const uint64_t fragment_id = address.value(i) >> 32;
      const uint64_t offset = address.value(i) & 0xffffffffu;
      if (broken.count(fragment_id)) continue;
      DirectoryEntry* open = entries.empty() ? nullptr : &entries.back();
      if (open && open->series_id == id.value(i) && open->fragment_id == fragment_id) {
        if (offset != open->offset + open->count || step.value(i) <= open->last_step) {
          broken.insert(fragment_id);
          continue;
        }
        if (open->count % static_cast<uint64_t>(kDirectoryStride) == 0) {
          open->fences.push_back(step.value(i));
        }
        open->count++;
        open->last_step = step.value(i);
        continue;
      }
      if (!seen.insert({id.value(i), fragment_id}).second) {
        broken.insert(fragment_id);  // the series' rows are not together
        continue;
      }
      entries.push_back(
          {id.value(i), fragment_id, offset, 1, step.value(i), std::vector{step.value(i)}});
    }
  }
  std::erase_if(entries, [&](const DirectoryEntry& e) { return broken.count(e.fragment_id) > 0; });
  directed->clear();
  for (uint64_t id : fragments) {
    if (!broken.count(id)) directed->push_back(id);
  }
  return entries;
}

arrow::OwnedStream DirectoryStream(const std::vector<DirectoryEntry>& entries) {
  arrow::BatchBuilder b(MetricsSchema());
  const int64_t now_us = static_cast<int64_t>(WallNanos() / 1000);
  for (const DirectoryEntry& entry : entries) {
    b.uint64(0).Append(kReservedSeriesId);
    b.int64(1).Append(static_cast<int64_t>(entry.series_id));
    b.int64(2).Append(static_cast<int64_t>(entry.fragment_id));
    b.timestamp(3).Append(now_us);
    b.float64(4).Append(kDirectoryRowValue);
    b.binary(5).Append(EncodeEntry(entry));
    b.uint64(6).AppendNull();
  }
  return arrow::OneBatch(MetricsSchema(), b);
}

std::string DirectoryHomesAfter(const lance::Dataset& metrics, std::span<const uint64_t> homes,
                                std::span<const uint64_t> described) {
  nlohmann::json out = nlohmann::json::array();
  const auto add = [&](const std::set<uint64_t>& homes, const std::set<uint64_t>& describes) {
    out.push_back({{"homes", homes}, {"describes", describes}});
  };
  for (const DirectoryAppend& a : PresentAppends(metrics)) add(a.homes, a.describes);
  if (!homes.empty()) {
    // The homes are directed fragments too (of no point, so no entry).
    std::set<uint64_t> describes(described.begin(), described.end());
    describes.insert(homes.begin(), homes.end());
    add(std::set<uint64_t>(homes.begin(), homes.end()), describes);
  }
  return out.dump();
}

PointsBySeries ReadLatestPoints(const lance::Dataset& at, const std::vector<uint64_t>& ids,
                                const std::vector<StepSpan>& spans,
                                const std::optional<std::vector<uint64_t>>& fragments) {
  PointsBySeries points;
  if (ids.empty() || spans.empty()) return points;
  // One version throughout: the metadata, the directory and the rows.
  const lance::Dataset metrics = at.Clone();
  std::vector<uint64_t> from = fragments.value_or(std::vector<uint64_t>{});
  if (!fragments) {
    for (const auto& f : metrics.Fragments()) from.push_back(f.id);
  }
  const std::set<uint64_t> directed = FragmentList(metrics.Metadata(), kDirectedFragmentsKey);
  std::set<uint64_t> directed_from;
  std::vector<uint64_t> filter_from;
  for (uint64_t id : from) {
    if (directed.count(id)) {
      directed_from.insert(id);
    } else {
      filter_from.push_back(id);
    }
  }

  if (!directed_from.empty()) {
    std::vector<std::string> columns = PointColumns();
    columns.push_back(lance::kRowAddress);
    std::map<uint64_t, uint64_t> rows_by_series;
    const auto by_fragment = DirectedRanges(metrics, ids, spans, directed_from, &rows_by_series);
    for (const auto& [id, rows] : rows_by_series) points[id].reserve(rows);
    for (const auto& [fragment_id, ranges] : by_fragment) {
      // In reads of at most kRangeReadRows rows.
      RowRanges group;
      uint64_t rows = 0;
      const auto read = [&, id = fragment_id] {
        auto reader = metrics.ReadRanges(id, group, columns);
        while (auto batch = reader.Next()) CollectPoints(*batch, &points);
        group.clear();
        rows = 0;
      };
      for (auto [start, stop] : ranges) {
        while (start < stop) {
          const uint64_t n = std::min(stop - start, kRangeReadRows - rows);
          group.emplace_back(start, start + n);
          rows += n;
          start += n;
          if (rows == kRangeReadRows) read();
        }
      }
      if (!group.empty()) read();
    }
  }
  if (!filter_from.empty()) {
    for (const auto& part : Chunks(ids, kMaxFilterIds)) {
      lance::ScanOptions scan;
      scan.columns = PointColumns();
      scan.with_row_address = true;
      // No list when no fragment is directed: the scan reads every fragment.
      if (fragments || !directed_from.empty()) scan.fragment_ids = filter_from;
      scan.filter = SqlIn("series_id", part) + " AND " + SpanFilter(spans);
      auto reader = metrics.Scan(scan);
      while (auto batch = reader.Next()) CollectPoints(*batch, &points);
    }
  }
  // The directory gives whole strides of rows around the spans.
  const std::unordered_set<uint64_t> wanted(ids.begin(), ids.end());
  std::erase_if(points, [&](const auto& series) { return !wanted.count(series.first); });
  for (auto& [id, series] : points) {
    if (!directed_from.empty()) {
      std::erase_if(series, [&](const StoredPoint& p) { return !InSpans(spans, p.step); });
    }
    LatestPerStep(&series);
  }
  std::erase_if(points, [](const auto& series) { return series.second.empty(); });
  return points;
}

}  // namespace kv0::tracking
