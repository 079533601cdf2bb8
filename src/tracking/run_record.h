// Run records and the rows of runs.lance that store them.
//
// A run's record is never rewritten in place. Each change appends a row that
// names the fields it sets (the `fields` mask, bits from schema.h), and a read
// merges all rows of the run field by field: for every field, the row with
// the highest seq among the rows that set it provides the value. Two writers
// that change different fields therefore never undo each other, while a later
// change of one field still replaces an earlier one.
//
// This file holds the pure logic of that scheme: merging rows, the mask an
// update writes, and the folding that optimize applies to a live run. Nothing
// here performs I/O or knows about Lance.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv0/tracking.h"
#include "tracking/schema.h"

namespace kv0::tracking {

// RunInfo, IsValidStatus and RunInfo's JSON form are in kv0/tracking.h.

// One stored row of runs.lance.
struct RunRow {
  uint64_t seq = 0;
  // The row's value for every column. Only the fields in `fields` count in a
  // merge; run_id and updated_at_us count for every row.
  RunInfo record;
  // The RunField bits of the fields this row sets. nullopt marks a row
  // written before the column existed; it sets every field. Bits outside
  // kAllRunFields are ignored, except that a mask equal to kFieldDeleted
  // makes the row a tombstone (see IsTombstone).
  std::optional<uint32_t> fields;

  bool operator==(const RunRow&) const = default;
};

// True when `row` deletes its run: its fields are exactly kFieldDeleted.
bool IsTombstone(const RunRow& row);

// The fields `row` sets: kAllRunFields for a nullopt mask, otherwise its mask
// restricted to kAllRunFields (so 0 for a tombstone).
uint32_t RowFields(const RunRow& row);

// A tombstone for `run_id` at `seq`, with updated_at_us = now_us and every
// other value the RunInfo default.
RunRow Tombstone(std::string run_id, uint64_t seq, int64_t now_us);

// Merges the rows of one run, given in any order, into its record.
//
// Returns nullopt when `rows` is empty or holds a tombstone: a deleted run is
// hidden whatever the seqs of its other rows. Otherwise:
//  - each field takes its value from the row with the highest seq among the
//    rows that set it; a field that no row sets keeps the RunInfo default;
//  - updated_at_us is the updated_at_us of the newest row (highest seq),
//    whatever fields that row sets, so a row that sets no field (a
//    heartbeat) still advances it;
//  - run_id is the rows' common run_id.
// Equal seqs do not arise in practice (seq is a hybrid logical clock), but
// the result is still independent of input order: among rows of equal seq,
// each field (and updated_at_us) takes the greatest of their values, in the
// order of the member's type (nullopt first; strings and tag lists
// byte-wise lexicographic; false before true; target by its compact JSON
// text). The tie is thus resolved per field, from values alone, which is
// what lets FoldRun() stay exact even against a row of equal seq.
//
// Throws kv0::Error(kInvalidArgument) when the rows do not all have the same
// run_id.
std::optional<RunInfo> MergeRun(std::vector<RunRow> rows);

// The mask of the fields whose values differ between `before` and `after`:
// the `fields` of the row that an update from `before` to `after` appends.
// run_id and updated_at_us are not fields and are not compared; target is
// compared by its compact JSON text, the form it is stored in.
uint32_t ChangedFields(const RunInfo& before, const RunInfo& after);

// The rows that optimize writes in place of the rows of one run.
//
// For a live run (no tombstone among `rows`), the result has one row per
// distinct seq at which some field was last set (the seq of that field's
// winning row in MergeRun), in ascending seq order. Each holds the merged
// record and, as its explicit mask, the fields last set at its seq. If the
// newest row sets no field that it wins (a heartbeat, say), one more row at
// its seq with mask 0 keeps updated_at_us tied to that seq. Every field thus
// keeps both its value and its seq, so for any further row X, of any seq:
//   MergeRun(FoldRun(rows) + X) == MergeRun(rows + X).
// A row with a nullopt mask (a legacy row) counts as setting every field; it
// folds like any other row: the fields it still wins stay at its seq, now as
// an explicit mask, and the fields newer rows set leave it. Output masks are
// never nullopt. Every output seq is the seq of an input row and output seqs
// are distinct, so the result never has more rows than `rows`; a typical run
// (creation, a few updates, a finish) folds to two or three rows.
//
// A run with a tombstone is not folded: `rows` is returned unchanged, since
// its rows are hidden anyway and are removed together with the tombstone.
// An empty `rows` yields no rows. Throws as MergeRun does.
std::vector<RunRow> FoldRun(std::vector<RunRow> rows);

}  // namespace kv0::tracking
