#include "kv/lazy_values.h"

#include <unordered_map>

namespace kv0::kv {

std::vector<std::string> LazyValues::TakeFrom(const lance::Dataset& dataset,
                                              std::span<const LazyRef> refs) {
  try {
    return TakeAll(dataset, refs);
  } catch (const Error& e) {
    if (!lance::IsOffsetOverflow(e) || refs.size() == 1) throw;
  }
  // Together they hold more than one Arrow batch can: one at a time (a
  // value is at most 1 GiB).
  std::vector<std::string> values;
  for (const LazyRef& ref : refs) values.push_back(std::move(TakeAll(dataset, {&ref, 1})[0]));
  return values;
}

std::vector<std::string> LazyValues::TakeAll(const lance::Dataset& dataset,
                                             std::span<const LazyRef> refs) {
  std::vector<uint64_t> addresses;
  addresses.reserve(refs.size());
  for (const auto& r : refs) addresses.push_back(r.address);
  std::vector<std::string> values;
  values.reserve(refs.size());
  arrow::StreamReader reader = dataset.Take(addresses, {"value"});
  while (auto batch = reader.Next()) {
    arrow::BinaryColumn column(*batch, "value");
    for (int64_t i = 0; i < batch->num_rows(); ++i) values.emplace_back(column.value(i));
  }
  if (values.size() != refs.size()) {
    throw Error(Code::kIOError, "took " + std::to_string(values.size()) + " of " +
                                    std::to_string(refs.size()) + " values from " + dataset.uri());
  }
  return values;
}

const lance::Dataset& LazyValues::AtVersion(uint64_t version) {
  std::lock_guard lock(versions_mu_);
  auto it = versions_.find(version);
  if (it == versions_.end()) {
    // Old versions are only needed in the window between another writer's
    // compaction and this handle's refresh; keep a few.
    if (versions_.size() >= 4) versions_.erase(versions_.begin());
    auto ds = std::make_unique<lance::Dataset>(
        lance::Dataset::Open(current_.uri(), current_.storage_options(), version));
    it = versions_.emplace(version, std::move(ds)).first;
  }
  return *it->second;
}

std::vector<std::string> LazyValues::Take(std::span<const LazyRef> refs) {
  try {
    return TakeFrom(current_, refs);
  } catch (const Error&) {
    // Some fragment is gone from the current version: read each version's
    // references where they came from.
  }
  std::vector<std::string> values(refs.size());
  std::map<uint64_t, std::vector<size_t>> by_version;
  for (size_t i = 0; i < refs.size(); ++i) by_version[refs[i].version].push_back(i);
  for (const auto& [version, positions] : by_version) {
    std::vector<LazyRef> group;
    for (size_t i : positions) group.push_back(refs[i]);
    auto taken = TakeFrom(AtVersion(version), group);
    for (size_t j = 0; j < positions.size(); ++j) values[positions[j]] = std::move(taken[j]);
  }
  return values;
}

std::vector<std::string> LazyValues::ReadUncached(std::span<const LazyRef> refs) {
  if (refs.empty()) return {};
  return Take(refs);
}

std::vector<std::shared_ptr<const std::string>> LazyValues::Read(std::span<const LazyRef> refs) {
  std::vector<std::shared_ptr<const std::string>> out(refs.size());
  std::vector<size_t> misses;
  for (size_t i = 0; i < refs.size(); ++i) {
    out[i] = cache_.Lookup(refs[i].address);
    if (!out[i]) misses.push_back(i);
  }
  if (misses.empty()) return out;

  // The first miss's loader reads every miss in one take; the others then
  // find their values here (or in the cache). Going through GetOrLoad makes
  // concurrent readers of one address wait for a single read.
  std::unordered_map<uint64_t, std::shared_ptr<const std::string>> fetched;
  bool taken = false;
  for (size_t i : misses) {
    uint64_t address = refs[i].address;
    out[i] = cache_.GetOrLoad(address, [&]() -> std::shared_ptr<const std::string> {
      if (!taken) {
        taken = true;
        std::vector<LazyRef> wanted;
        for (size_t j : misses) wanted.push_back(refs[j]);
        auto values = Take(wanted);
        for (size_t j = 0; j < misses.size(); ++j) {
          auto value = std::make_shared<const std::string>(std::move(values[j]));
          fetched[refs[misses[j]].address] = value;
          if (refs[misses[j]].address != address) cache_.Insert(refs[misses[j]].address, value);
        }
      }
      auto it = fetched.find(address);
      if (it != fetched.end()) return it->second;
      // Another thread's read of this address failed earlier; read it alone.
      auto one = Take(std::span<const LazyRef>(&refs[i], 1));
      return std::make_shared<const std::string>(std::move(one[0]));
    });
  }
  return out;
}

}  // namespace kv0::kv
