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

// Adds the ids of item[key] to *into; false if they are not a list of ids.
bool ReadIds(const nlohmann::json& item, const char* key, std::set<uint64_t>* into) {
  if (!item.is_object() || !item.contains(key) || !item[key].is_array()) return false;
  for (const auto& id : item[key]) {
    if (!id.is_number_unsigned()) return false;
    into->insert(id.get<uint64_t>());
  }
  return true;
}

// The appends listed in `metadata` whose homes are all in `present`: where
// their entries still are. None if the key is absent or malformed, which
// makes reads filter every fragment.
std::vector<DirectoryAppend> PresentAppends(const std::map<std::string, std::string>& metadata,
                                            const std::set<uint64_t>& present) {
  std::vector<DirectoryAppend> out;
  auto found = metadata.find(kDirectoryHomesKey);
  if (found == metadata.end()) return out;
  const auto json = nlohmann::json::parse(found->second, nullptr, false);
  if (!json.is_array()) return out;
  for (const auto& item : json) {
    DirectoryAppend append;
    if (!ReadIds(item, "homes", &append.homes) || !ReadIds(item, "describes", &append.describes)) {
      return {};
    }
    if (std::includes(present.begin(), present.end(), append.homes.begin(), append.homes.end())) {
      out.push_back(std::move(append));
    }
  }
  return out;
}

std::set<uint64_t> FragmentIds(const lance::Dataset& metrics) {
  std::set<uint64_t> ids;
  for (const auto& f : metrics.Fragments()) ids.insert(f.id);
  return ids;
}

// The fragments holding the entries of `fragments`, if one of `appends`
// describes each of them; unset otherwise.
std::optional<std::vector<uint64_t>> HomesOf(const std::vector<DirectoryAppend>& appends,
                                             const std::set<uint64_t>& fragments) {
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

// Adds the rows of `entry` that may hold a step of `spans` to *ranges, and
// their count to *rows.
void AddEntryRanges(const DirectoryEntry& entry, const std::vector<StepSpan>& spans,
                    RowRanges* ranges, uint64_t* rows) {
  for (const StepSpan& span : spans) {
    const auto [first, last] = entry.RowsOf(span);
    if (first == last) continue;
    ranges->emplace_back(first, last);
    *rows += last - first;
  }
}

// The rows of `ids` in `spans` within `fragments`, from their directory
// rows, found in `homes` (every fragment if unset): by fragment, ranges of
// row offsets [start, stop), in no order. Adds to (*rows)[id] the rows
// found for each series.
std::map<uint64_t, RowRanges> DirectedRanges(const lance::Dataset& metrics,
                                             const std::vector<uint64_t>& ids,
                                             const std::vector<StepSpan>& spans,
                                             const std::set<uint64_t>& fragments,
                                             const std::optional<std::vector<uint64_t>>& homes,
                                             std::map<uint64_t, uint64_t>* rows) {
  std::map<uint64_t, RowRanges> ranges;
  for (const auto& part : Chunks(ids, kMaxFilterIds)) {
    const std::unordered_set<uint64_t> wanted(part.begin(), part.end());
    lance::ScanOptions scan;
    if (homes) scan.fragment_ids = *homes;
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
        AddEntryRanges(DecodeEntry(id, fragment_id, stats.value(i)), spans, &ranges[fragment_id],
                       &(*rows)[id]);
      }
    }
  }
  return ranges;
}

// Adds to (*ranges)[fragment] the rows of `ids` in `spans` that the
// fragment's own entries give, and to (*rows)[id] their counts.
void AddOwnRanges(uint64_t fragment, const OwnDirectory& own, const std::vector<uint64_t>& ids,
                  const std::vector<StepSpan>& spans, std::map<uint64_t, RowRanges>* ranges,
                  std::map<uint64_t, uint64_t>* rows) {
  for (uint64_t id : ids) {
    auto found = own.by_series.find(id);
    if (found == own.by_series.end()) continue;
    for (const DirectoryEntry& entry : found->second) {
      AddEntryRanges(entry, spans, &(*ranges)[fragment], &(*rows)[id]);
    }
  }
}

// Sorts each fragment's ranges and merges those that touch.
void MergeRanges(std::map<uint64_t, RowRanges>* ranges) {
  for (auto& [fragment_id, list] : *ranges) {
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

void OwnEntryBuilder::Add(uint64_t series_id, int64_t step) {
  if (entries_.empty() || entries_.back().series_id != series_id ||
      step < entries_.back().last_step) {
    entries_.push_back({.series_id = series_id, .offset = rows_, .last_step = step, .fences = {}});
  }
  DirectoryEntry& entry = entries_.back();
  if (entry.count % static_cast<uint64_t>(kDirectoryStride) == 0) entry.fences.push_back(step);
  entry.count++;
  entry.last_step = step;
  rows_++;
}

std::vector<DirectoryEntry> OwnEntryBuilder::Finish() {
  std::vector<DirectoryEntry> out;
  if (entries_.size() * kMinOwnEntryRows <= rows_) out.swap(entries_);
  entries_.clear();
  rows_ = 0;
  return out;
}

void AppendOwnEntries(const std::vector<DirectoryEntry>& entries, arrow::BatchBuilder& b) {
  const int64_t now_us = static_cast<int64_t>(WallNanos() / 1000);
  for (const DirectoryEntry& entry : entries) {
    b.uint64(0).Append(kReservedSeriesId);
    b.int64(1).Append(static_cast<int64_t>(entry.series_id));
    b.int64(2).Append(0);
    b.timestamp(3).Append(now_us);
    b.float64(4).Append(kOwnEntryValue);
    b.binary(5).Append(EncodeEntry(entry));
    b.uint64(6).AppendNull();
  }
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
  for (const DirectoryAppend& a : PresentAppends(metrics.Metadata(), FragmentIds(metrics))) {
    add(a.homes, a.describes);
  }
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
                                const std::optional<std::vector<uint64_t>>& fragments,
                                const OwnDirectories& own) {
  PointsBySeries points;
  if (ids.empty() || spans.empty()) return points;
  // One version throughout: the metadata, the directory and the rows.
  const lance::Dataset metrics = at.Clone();
  const std::map<std::string, std::string> metadata = metrics.Metadata();
  const std::set<uint64_t> present = FragmentIds(metrics);
  const std::vector<uint64_t> from =
      fragments.value_or(std::vector<uint64_t>(present.begin(), present.end()));
  const std::set<uint64_t> directed = FragmentList(metadata, kDirectedFragmentsKey);
  std::set<uint64_t> directed_from;
  std::vector<uint64_t> own_from, filter_from;
  for (uint64_t id : from) {
    if (directed.count(id)) {
      directed_from.insert(id);
    } else if (own.count(id)) {
      own_from.push_back(id);
    } else {
      filter_from.push_back(id);
    }
  }

  std::map<uint64_t, RowRanges> by_fragment;
  std::map<uint64_t, uint64_t> rows_by_series;
  if (!directed_from.empty()) {
    // The other reserved rows (statistics, level rows, marks) are seven
    // times the directory's: at 2,000 runs, filtering them all took 5-6 ms,
    // the directory's own fragment 2 ms.
    const auto homes = HomesOf(PresentAppends(metadata, present), directed_from);
    by_fragment = DirectedRanges(metrics, ids, spans, directed_from, homes, &rows_by_series);
  }
  for (uint64_t id : own_from) {
    AddOwnRanges(id, *own.at(id), ids, spans, &by_fragment, &rows_by_series);
  }
  MergeRanges(&by_fragment);
  for (const auto& [id, rows] : rows_by_series) points[id].reserve(rows);
  std::vector<std::string> columns = PointColumns();
  columns.push_back(lance::kRowAddress);
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
  if (!filter_from.empty()) {
    for (const auto& part : Chunks(ids, kMaxFilterIds)) {
      lance::ScanOptions scan;
      scan.columns = PointColumns();
      scan.with_row_address = true;
      // No list when every fragment is filtered: the scan reads them all.
      if (fragments || filter_from.size() != from.size()) scan.fragment_ids = filter_from;
      scan.filter = SqlIn("series_id", part) + " AND " + SpanFilter(spans);
      auto reader = metrics.Scan(scan);
      while (auto batch = reader.Next()) CollectPoints(*batch, &points);
    }
  }
  // Entries give whole strides of rows around the spans.
  const std::unordered_set<uint64_t> wanted(ids.begin(), ids.end());
  std::erase_if(points, [&](const auto& series) { return !wanted.count(series.first); });
  for (auto& [id, series] : points) {
    if (!by_fragment.empty()) {
      std::erase_if(series, [&](const StoredPoint& p) { return !InSpans(spans, p.step); });
    }
    LatestPerStep(&series);
  }
  std::erase_if(points, [](const auto& series) { return series.second.empty(); });
  return points;
}

}  // namespace kv0::tracking
