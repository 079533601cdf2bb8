// Flush summaries: reading them and asking them (the rules are in
// flush_summaries.h).

#include "tracking/flush_summaries.h"

#include <set>

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

// Reads the summaries of `fragments` (ids) of `metrics` into `out`, by id.
void ReadSummaries(const lance::Dataset& metrics, const std::vector<lance::FragmentInfo>& fragments,
                   std::map<uint64_t, std::shared_ptr<FlushSummary>>* out) {
  std::vector<uint64_t> ids;
  for (const auto& f : fragments) {
    auto summary = std::make_shared<FlushSummary>();
    summary->rows = f.physical_rows;
    (*out)[f.id] = summary;
    ids.push_back(f.id);
  }
  lance::ScanOptions scan;
  scan.columns = {"step", "epoch", "value", "stats", "seq"};
  scan.fragment_ids = ids;
  scan.with_row_address = true;
  scan.filter = "series_id = 0";
  auto reader = metrics.Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::Int64Column step(*batch, "step"), epoch(*batch, "epoch");
    arrow::Float64Column value(*batch, "value");
    arrow::BinaryColumn stats(*batch, "stats");
    arrow::UInt64Column seq(*batch, "seq"), address(*batch, lance::kRowAddress);
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      auto found = out->find(address.value(i) >> 32);
      if (found == out->end()) continue;
      FlushSummary& summary = *found->second;
      summary.counted_rows++;
      const uint64_t series_id = static_cast<uint64_t>(step.value(i));
      if (epoch.is_null(i)) {  // a statistics row
        if (stats.is_null(i)) continue;
        const StatsDelta delta = StatsDelta::Decode(stats.value(i));
        summary.counted_rows += delta.count();
        summary.deltas[series_id].Merge(delta);
      } else if (value.value(i) == kFlushMarkValue) {
        summary.marked_rows += static_cast<uint64_t>(epoch.value(i));
      } else if ((value.value(i) == kLevelRowValue || value.value(i) == kTopLevelRowValue) &&
                 !seq.is_null(i)) {
        summary.levels.push_back(LevelRowAt{series_id, static_cast<int>(seq.value(i)),
                                            epoch.value(i), value.value(i) == kTopLevelRowValue,
                                            address.value(i) & 0xffffffffu});
      }
    }
  }
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
  ReadSummaries(metrics, missing, &read);

  std::lock_guard lock(mu_);
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

}  // namespace kv0::tracking
