// What a Repo handle keeps between run searches (run_search.cc), so that a
// search reads only what was committed since the last one.
//
// Each part remembers the fragments of its table it has read, by identity
// (lance::FragmentInfo). At a newer version it reads just the fragments it
// has not seen: appends add fragments and leave the others as they are. If a
// fragment it read has changed or is gone (a compaction, optimize, a delete
// of rows), it forgets everything and reads the table again. What it keeps
// is what a full read would give: rows are merged exactly as the reads of
// repo_read.cc merge them.
//
// A part whose refresh fails is dropped whole, never left half read: a
// statistics delta merged twice would count its points twice.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "tracking/params.h"
#include "tracking/run_query.h"
#include "tracking/run_record.h"
#include "tracking/series_stats.h"

namespace kv0::tracking {

// The fragments of one table that a part has read.
class FragmentsRead {
 public:
  // The fragments of table's current version still to read. If one read
  // before has changed or is gone, that is all of them, and *restart is set:
  // the caller drops what it kept.
  std::vector<uint64_t> ToRead(lance::Dataset& table, bool* restart);
  // The fragments ToRead returned are read.
  void Done();

 private:
  std::map<uint64_t, lance::FragmentInfo> read_;
  std::vector<lance::FragmentInfo> pending_;
};

// A dense number for each run id a search has seen, given in the order the
// ids first appear and never reused. The parts below keep their per-run
// values in vectors indexed by slot, so that a search walks arrays instead of
// hashing 100,000 run ids per term (the hashing was most of a warm search).
class RunSlots {
 public:
  // The slot of run_id, new if it has none yet.
  uint32_t Of(std::string_view run_id);
  const std::string& id(uint32_t slot) const { return ids_[slot]; }
  uint32_t size() const { return static_cast<uint32_t>(ids_.size()); }

 private:
  absl::flat_hash_map<std::string, uint32_t> slot_of_;
  std::vector<std::string> ids_;
};

// runs.lance: each run's rows, folded (FoldRun keeps what a later merge
// needs in two or three rows), the merged record of each live run by slot,
// and the live slots in ascending order.
struct RunsPart {
  FragmentsRead fragments;
  std::vector<std::vector<RunRow>> rows;  // by slot
  std::vector<std::optional<RunInfo>> by_slot;
  std::vector<uint32_t> live;
};

// One parameter key: the leaves of params.lance that decide it (the key,
// the keys on its path, those below it), and each run's value, by slot
// (missing past the end).
struct ParamPart {
  std::string key;
  FragmentsRead fragments;
  std::vector<std::vector<Leaf>> leaves;  // by slot
  std::vector<query::Value> values;
};

// One metric (name and context): the series of every run in RunSlots, by
// slot; their merged statistics deltas; the statistics of the clean ones by
// slot (dirty ones, by slot too, are computed from their points by each
// search).
struct MetricPart {
  std::string name;
  nlohmann::json context = nlohmann::json::object();
  FragmentsRead fragments;
  std::vector<uint64_t> series;                     // by slot
  absl::flat_hash_map<uint64_t, uint32_t> slot_of;  // by series id
  std::vector<StatsDelta> deltas;                   // by slot
  std::vector<std::optional<SeriesStats>> clean;    // by slot
  std::unordered_set<uint32_t> dirty;               // slots
};

// Bounded: at most kMaxParts parameter and metric parts between searches
// (a search may hold more while it runs: every part it names), the least
// recently used dropped first.
struct SearchCache {
  static constexpr size_t kMaxParts = 32;

  RunSlots slots;
  RunsPart runs;
  std::map<std::string, ParamPart> params;    // by key
  std::map<std::string, MetricPart> metrics;  // by name, '\0', context JSON
  std::list<std::string> recent;              // "p" or "m" + the map key, newest first

  // The part of a parameter key or of a metric (name and context), new and
  // empty if there is none, marked as used now. No part is dropped until
  // Trim, so the references stay valid through a search.
  ParamPart& Param(const std::string& key);
  MetricPart& Metric(const std::string& name, const nlohmann::json& context);
  // Forgets the part (a refresh of it failed).
  void Drop(const ParamPart& part);
  void Drop(const MetricPart& part);
  // Drops the least recently used parts past kMaxParts.
  void Trim();

 private:
  void Touch(char kind, const std::string& key);
};

}  // namespace kv0::tracking
