// Run parameters as rows of params.lance, and back.
//
// A run's parameters are a JSON object. Storage keeps one row per leaf, keyed
// by the leaf's dotted path ("optimizer.lr"), so that a later set_params can
// change one leaf without rewriting the others and a read can filter on typed
// columns. This file holds the pure computation: turning an object into rows,
// rebuilding the object from the rows read back, and the in-memory merge that
// mirrors what a write does. Nothing here performs I/O.
//
// Terms. A leaf is any value that is not a non-empty object: a number, string,
// boolean, null, array (kept whole, objects inside included) or an empty
// object, which has no members to flatten into. A write at path P is a leaf
// stored at P; it replaces whatever P held, subtree included. Setting paths
// below P turns a non-object at P into an object; objects merge member by
// member, so siblings of the paths a write names are kept.
//
// Keys. Each member name must be non-empty valid UTF-8 without '.'. A name
// with a dot would make "a.b" mean either {"a":{"b":..}} or {"a.b":..}, and an
// empty name would yield paths such as "a..b" or ".a"; neither could be read
// back unambiguously, so Flatten rejects both instead of escaping them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kv0::tracking {

// One leaf as stored: the columns key, value, num, text and flag.
struct ParamRow {
  std::string key;                  // dotted path, such as "optimizer.lr"
  std::string value_json;           // the leaf as compact JSON text
  std::optional<double> num;        // set for numbers (integers as well, as double)
  std::optional<std::string> text;  // set for strings
  std::optional<bool> flag;         // set for booleans
  // Null, arrays and empty objects set none of num, text and flag.
};

// Splits `params` into its leaves, sorted by key (byte-wise).
//
// Throws kv0::Error(kInvalidArgument), naming the offending path, when
// `params` is not an object, when a member name (at any depth outside arrays)
// is empty, contains '.' or is not valid UTF-8, or when a leaf cannot be
// written as JSON text: a non-finite number (JSON has no NaN or infinity), a
// string that is not valid UTF-8, or a binary value. An empty object yields
// no rows.
std::vector<ParamRow> Flatten(const nlohmann::json& params);

// A leaf read back from storage: its dotted key, its value, and the sequence
// number of the write that stored it.
struct Leaf {
  std::string key;
  nlohmann::json value;
  uint64_t seq = 0;
};

// Rebuilds the nested object from leaves of one run, in any order, possibly
// several per key (older rows that storage has not folded away yet).
//
// The result is what applying the writes in seq order with Merge() gives:
//   1. Per key, only the leaf with the highest seq counts. Two leaves of one
//      key with equal seq are resolved by their compact JSON text (the larger
//      wins), so the result does not depend on input order.
//   2. A leaf at K is then dropped when a leaf at a proper ancestor of K (a
//      key K starts with, followed by '.') has a greater seq: a newer write
//      of "a" replaced the whole subtree, hiding older "a.x" leaves.
//   3. A leaf at K is also dropped when a leaf at a proper descendant of K
//      has a seq greater than or equal to K's: a newer "a.b" turned "a" into
//      an object. On a tie the deeper leaf wins (it cannot arise from a
//      Flatten() of one object, and keeps the more specific data).
// The leaves that remain never lie on one path, so each is placed at its
// path, with objects created along the way. Each value is placed as is.
// Rules 2 and 3 compare only with newer leaves, so the result is the same
// whether or not storage has already dropped superseded rows of a key.
// No leaves yield an empty object.
//
// Throws kv0::Error(kInvalidArgument) for a key that is empty, or that starts
// or ends with '.' or holds "..".
nlohmann::json Unflatten(std::vector<Leaf> leaves);

// What setting `patch` on parameters `base` gives; the in-memory mirror of
// writing Flatten(patch) with a newer seq than every row behind `base`.
// When both are objects, each member of `patch` is applied to `base`: a
// non-empty object merges recursively into an object already there, and any
// other value (an empty object included, being a leaf) replaces the member.
// Members `patch` does not name are kept. When either is not an object, the
// result is `patch`. Unflatten(rows of base, then rows of patch) == Merge
// holds for a `patch` that Flatten() accepts.
nlohmann::json Merge(nlohmann::json base, const nlohmann::json& patch);

}  // namespace kv0::tracking
