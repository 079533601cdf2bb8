#include "kv/lazy_values.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace kv0::kv {

std::vector<std::string> LazyValues::TakeFrom(const PinnedVersion& at,
                                              std::span<const LazyRef> refs) {
  try {
    return TakeAll(at, refs);
  } catch (const Error& e) {
    if (!lance::IsOffsetOverflow(e) || refs.size() == 1) throw;
  }
  // Together they hold more than one Arrow batch can: one at a time (a
  // value is at most 1 GiB).
  std::vector<std::string> values;
  for (const LazyRef& ref : refs) values.push_back(std::move(TakeAll(at, {&ref, 1})[0]));
  return values;
}

std::vector<std::string> LazyValues::TakeAll(const PinnedVersion& at,
                                             std::span<const LazyRef> refs) {
  // Lance gets the addresses in ascending order without repeats (see
  // pinned_versions.h); the values come back in the order asked for.
  std::vector<uint64_t> addresses;
  addresses.reserve(refs.size());
  for (const auto& r : refs) addresses.push_back(r.address);
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  std::vector<std::string> taken;
  taken.reserve(addresses.size());
  arrow::StreamReader reader = at.Take(addresses, {"value"});
  while (auto batch = reader.Next()) {
    arrow::BinaryColumn column(*batch, "value");
    for (int64_t i = 0; i < batch->num_rows(); ++i) taken.emplace_back(column.value(i));
  }
  if (taken.size() != addresses.size()) {
    throw Error(Code::kIOError, "took " + std::to_string(taken.size()) + " of " +
                                    std::to_string(addresses.size()) + " values from " + at.uri());
  }
  std::vector<std::string> values;
  values.reserve(refs.size());
  for (const auto& r : refs) {
    size_t i = std::lower_bound(addresses.begin(), addresses.end(), r.address) - addresses.begin();
    values.push_back(taken[i]);
  }
  return values;
}

std::vector<std::string> LazyValues::Take(std::span<const LazyRef> refs) {
  // Usually one group: the newest open version lists every fragment the
  // view refers to, until another writer compacts some of them away.
  std::map<std::shared_ptr<const PinnedVersion>, std::vector<size_t>> groups;
  for (size_t i = 0; i < refs.size(); ++i) {
    groups[versions_.Holding(FragmentOf(refs[i].address), refs[i].version)].push_back(i);
  }
  if (groups.size() == 1) return TakeFrom(*groups.begin()->first, refs);
  std::vector<std::string> values(refs.size());
  for (const auto& [at, positions] : groups) {
    std::vector<LazyRef> group;
    for (size_t i : positions) group.push_back(refs[i]);
    auto taken = TakeFrom(*at, group);
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
