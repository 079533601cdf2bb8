#include "tracking/search_cache.h"

#include <algorithm>

namespace kv0::tracking {
namespace {

// A metric part's key in SearchCache::metrics.
std::string MetricKey(const std::string& name, const nlohmann::json& context) {
  return name + '\0' + context.dump();
}

}  // namespace

std::vector<uint64_t> FragmentsRead::ToRead(lance::Dataset& table, bool* restart) {
  std::vector<lance::FragmentInfo> now = table.Fragments();
  std::map<uint64_t, const lance::FragmentInfo*> by_id;
  for (const auto& f : now) by_id[f.id] = &f;
  *restart = false;
  for (const auto& [id, info] : read_) {
    auto found = by_id.find(id);
    if (found == by_id.end() || !(*found->second == info)) {
      *restart = true;
      read_.clear();
      break;
    }
  }
  pending_.clear();
  std::vector<uint64_t> out;
  for (const auto& f : now) {
    if (!read_.count(f.id)) {
      pending_.push_back(f);
      out.push_back(f.id);
    }
  }
  return out;
}

void FragmentsRead::Done() {
  for (auto& f : pending_) read_[f.id] = std::move(f);
  pending_.clear();
}

uint32_t RunSlots::Of(std::string_view run_id) {
  // Debian's abseil has a string_view of its own; the lookup makes no string.
  if (auto it = slot_of_.find(absl::string_view(run_id.data(), run_id.size()));
      it != slot_of_.end()) {
    return it->second;
  }
  auto slot = static_cast<uint32_t>(ids_.size());
  slot_of_.emplace(run_id, slot);
  ids_.emplace_back(run_id);
  return slot;
}

ParamPart& SearchCache::Param(const std::string& key) {
  Touch('p', key);
  auto [it, added] = params.try_emplace(key);
  if (added) it->second.key = key;
  return it->second;
}

MetricPart& SearchCache::Metric(const std::string& name, const nlohmann::json& context) {
  std::string key = MetricKey(name, context);
  Touch('m', key);
  auto [it, added] = metrics.try_emplace(key);
  if (added) {
    it->second.name = name;
    it->second.context = context;
  }
  return it->second;
}

void SearchCache::Drop(const ParamPart& part) {
  std::string key = part.key;  // not a reference into the node it erases
  recent.remove('p' + key);
  params.erase(key);
}

void SearchCache::Drop(const MetricPart& part) {
  std::string key = MetricKey(part.name, part.context);
  recent.remove('m' + key);
  metrics.erase(key);
}

void SearchCache::Touch(char kind, const std::string& key) {
  std::string name = kind + key;
  recent.remove(name);
  recent.push_front(std::move(name));
}

void SearchCache::Trim() {
  while (recent.size() > kMaxParts) {
    const std::string& oldest = recent.back();
    if (oldest[0] == 'p') {
      params.erase(oldest.substr(1));
    } else {
      metrics.erase(oldest.substr(1));
    }
    recent.pop_back();
  }
}

}  // namespace kv0::tracking
