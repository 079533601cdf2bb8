// Versions of one dataset to read stored rows from, and the one place where
// kv0's key-value layer asks Lance for rows.
//
// A handle's own lance::Dataset moves: its flushes and refreshes check out
// newer versions, on any thread, at any time. A fragment list taken from it
// and a scan or take made through it a moment later may therefore be of two
// different versions, and the second may lack a fragment the first listed
// (another writer compacted it away). Lance's take of an address whose
// fragment its version lacks is not a defined outcome: with the addresses
// out of order it panicked (an unwrap on an empty list of batches in its
// slow path). So every read of stored rows goes through a PinnedVersion:
//
//   - a handle opened at one version that nothing ever moves, so its
//     fragment list is the list its scans and takes read;
//   - Take and Scan refuse, before calling Lance, an address or fragment id
//     that version does not list, and Take hands Lance addresses in
//     ascending order without repeats, the order its fast paths take.
//
// memory:// datasets cannot be opened a second time (each open is a new
// store), so there a PinnedVersion reads through the handle's own dataset.
// Only the handle's own compactions remove fragments there; should one race
// a read, the refused or failed read is an error that the caller answers by
// refreshing, and the ordered addresses keep Lance on its paths that report
// a missing fragment as an error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "lance/dataset.h"

namespace kv0::kv {

// The fragment a row address points into.
inline uint64_t FragmentOf(uint64_t address) { return address >> 32; }

class PinnedVersion {
 public:
  // A handle of its own at the version `dataset` was opened at.
  explicit PinnedVersion(lance::Dataset&& dataset);
  // Reads through `moving`, as it stands now (memory:// only).
  explicit PinnedVersion(const lance::Dataset* moving);

  uint64_t version() const { return version_; }
  const std::string& uri() const { return dataset_->uri(); }
  const std::vector<lance::FragmentInfo>& fragments() const { return fragments_; }
  bool Lists(uint64_t fragment_id) const { return ids_.count(fragment_id) != 0; }

  // The rows at `addresses` (ascending, no repeats, in listed fragments),
  // in that order. Throws InvalidArgument for other addresses, without
  // reading anything.
  arrow::StreamReader Take(std::span<const uint64_t> addresses,
                           const std::vector<std::string>& columns) const;
  // A scan of listed fragments (options.fragment_ids must be set).
  arrow::StreamReader Scan(const lance::ScanOptions& options) const;

 private:
  std::optional<lance::Dataset> owned_;
  const lance::Dataset* dataset_;
  uint64_t version_;
  std::vector<lance::FragmentInfo> fragments_;
  std::set<uint64_t> ids_;
};

// Opens versions on first use and keeps the newest few open. Thread-safe; a
// returned version stays usable after it is dropped from the set.
class PinnedVersions {
 public:
  // `moving` is the handle's own dataset: for its version, and for reading
  // memory:// datasets.
  explicit PinnedVersions(const lance::Dataset& moving);

  // The version the handle's dataset is at now.
  std::shared_ptr<const PinnedVersion> Current();
  // Throws what lance::Dataset::Open throws (NotFound once cleanup removed
  // the version; always for an older version of a memory:// dataset).
  std::shared_ptr<const PinnedVersion> At(uint64_t version);

  // A version that lists `fragment_id`: the newest open one that does, else
  // the current one if it does, else `origin` (the version the address was
  // read at, which lists it by construction). Throws IOError if none does.
  std::shared_ptr<const PinnedVersion> Holding(uint64_t fragment_id, uint64_t origin);

 private:
  static constexpr size_t kKeep = 4;

  const lance::Dataset& moving_;
  const bool memory_;
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<const PinnedVersion>> open_;  // by version
};

}  // namespace kv0::kv
