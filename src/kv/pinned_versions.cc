#include "kv/pinned_versions.h"

#include "util/location.h"

namespace kv0::kv {

PinnedVersion::PinnedVersion(lance::Dataset&& dataset)
    : owned_(std::move(dataset)),
      dataset_(&*owned_),
      version_(dataset_->version()),
      fragments_(dataset_->Fragments()) {
  for (const auto& f : fragments_) ids_.insert(f.id);
}

PinnedVersion::PinnedVersion(const lance::Dataset* moving)
    : dataset_(moving), version_(moving->version()), fragments_(moving->Fragments()) {
  for (const auto& f : fragments_) ids_.insert(f.id);
}

arrow::StreamReader PinnedVersion::Take(std::span<const uint64_t> addresses,
                                        const std::vector<std::string>& columns) const {
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (i > 0 && addresses[i] <= addresses[i - 1]) {
      throw Error(Code::kInvalidArgument,
                  "row addresses to take from " + uri() + " must ascend without repeats");
    }
    if (!Lists(FragmentOf(addresses[i]))) {
      throw Error(Code::kInvalidArgument, "version " + std::to_string(version_) + " of " + uri() +
                                              " does not list fragment " +
                                              std::to_string(FragmentOf(addresses[i])));
    }
  }
  return dataset_->Take(addresses, columns);
}

arrow::StreamReader PinnedVersion::Scan(const lance::ScanOptions& options) const {
  if (!options.fragment_ids) {
    throw Error(Code::kInvalidArgument, "a scan of " + uri() + " must name its fragments");
  }
  for (uint64_t id : *options.fragment_ids) {
    if (!Lists(id)) {
      throw Error(Code::kInvalidArgument, "version " + std::to_string(version_) + " of " + uri() +
                                              " does not list fragment " + std::to_string(id));
    }
  }
  return dataset_->Scan(options);
}

PinnedVersions::PinnedVersions(const lance::Dataset& moving)
    : moving_(moving), memory_(IsMemoryUri(moving.uri())) {}

std::shared_ptr<const PinnedVersion> PinnedVersions::Current() {
  if (memory_) return std::make_shared<const PinnedVersion>(&moving_);
  return At(moving_.version());
}

std::shared_ptr<const PinnedVersion> PinnedVersions::At(uint64_t version) {
  if (memory_) {
    auto now = std::make_shared<const PinnedVersion>(&moving_);
    if (now->version() != version) {
      throw Error(Code::kNotFound, moving_.uri() + " keeps no handle on version " +
                                       std::to_string(version) + " (a memory:// dataset)");
    }
    return now;
  }
  std::lock_guard lock(mu_);
  auto it = open_.find(version);
  if (it != open_.end()) return it->second;
  auto pinned = std::make_shared<const PinnedVersion>(
      lance::Dataset::Open(moving_.uri(), moving_.storage_options(), version));
  open_.emplace(version, pinned);
  // Old versions are only read in the window between another writer's
  // compaction and this handle's refresh; the newest few are enough.
  while (open_.size() > kKeep) open_.erase(open_.begin());
  return pinned;
}

std::shared_ptr<const PinnedVersion> PinnedVersions::Holding(uint64_t fragment_id,
                                                             uint64_t origin) {
  if (!memory_) {
    std::lock_guard lock(mu_);
    for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
      if (it->second->Lists(fragment_id)) return it->second;
    }
  }
  auto current = Current();
  if (current->Lists(fragment_id)) return current;
  auto at = At(origin);
  if (at->Lists(fragment_id)) return at;
  throw Error(Code::kIOError, "fragment " + std::to_string(fragment_id) + " of " + moving_.uri() +
                                  " is in neither version " + std::to_string(current->version()) +
                                  " nor version " + std::to_string(origin));
}

}  // namespace kv0::kv
