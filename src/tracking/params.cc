#include "tracking/params.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "kv0/error.h"
#include "util/utf8.h"

namespace kv0::tracking {

using nlohmann::json;

namespace {

// A path as a JSON array of member names: unambiguous even when a name holds
// a dot, and printable even when it is not valid UTF-8.
std::string DescribePath(const std::vector<std::string_view>& path) {
  json names = json::array();
  for (std::string_view name : path) names.push_back(std::string(name));
  return names.dump(-1, ' ', false, json::error_handler_t::replace);
}

[[noreturn]] void Reject(const std::vector<std::string_view>& path, const std::string& why) {
  throw Error(Code::kInvalidArgument, "parameter " + DescribePath(path) + ": " + why);
}

// Rejects what has no JSON text: non-finite numbers and binary values. Invalid
// UTF-8 is caught by dump() itself.
void CheckWritable(const json& value, const std::vector<std::string_view>& path) {
  switch (value.type()) {
    case json::value_t::number_float:
      if (!std::isfinite(value.get<double>())) Reject(path, "non-finite number has no JSON form");
      break;
    case json::value_t::binary:
    case json::value_t::discarded:
      Reject(path, "value is not JSON");
    case json::value_t::array:
    case json::value_t::object:
      for (const json& item : value) CheckWritable(item, path);
      break;
    default:
      break;
  }
}

ParamRow MakeRow(std::string key, const json& value, const std::vector<std::string_view>& path) {
  CheckWritable(value, path);
  ParamRow row;
  row.key = std::move(key);
  try {
    row.value_json = value.dump();
  } catch (const json::type_error&) {
    Reject(path, "string is not valid UTF-8");
  }
  if (value.is_number()) {
    row.num = value.get<double>();
  } else if (value.is_string()) {
    row.text = value.get<std::string>();
  } else if (value.is_boolean()) {
    row.flag = value.get<bool>();
  }
  return row;
}

// Appends the leaves of the non-empty object `object`, whose dotted path is
// `prefix` (empty at the top).
void FlattenInto(const json& object, const std::string& prefix, std::vector<std::string_view>& path,
                 std::vector<ParamRow>& out) {
  for (const auto& [name, value] : object.items()) {
    path.push_back(name);
    if (name.empty()) Reject(path, "empty name");
    if (name.find('.') != std::string::npos) Reject(path, "name contains '.'");
    if (!IsValidUtf8(name)) Reject(path, "name is not valid UTF-8");
    std::string key = prefix.empty() ? name : prefix + "." + name;
    if (value.is_object() && !value.empty()) {
      FlattenInto(value, key, path, out);
    } else {
      out.push_back(MakeRow(std::move(key), value, path));
    }
    path.pop_back();
  }
}

void CheckKey(const std::string& key) {
  if (key.empty() || key.front() == '.' || key.back() == '.' ||
      key.find("..") != std::string::npos) {
    throw Error(Code::kInvalidArgument,
                "parameter key " + json(key).dump(-1, ' ', false, json::error_handler_t::replace) +
                    " has an empty segment");
  }
}

}  // namespace

std::vector<ParamRow> Flatten(const json& params) {
  if (!params.is_object()) {
    throw Error(Code::kInvalidArgument,
                std::string("parameters must be a JSON object, not ") + params.type_name());
  }
  std::vector<ParamRow> rows;
  std::vector<std::string_view> path;
  FlattenInto(params, "", path, rows);
  // Member order is per level; "a-b" sorts before "a.c" although "a" < "a-b".
  std::sort(rows.begin(), rows.end(),
            [](const ParamRow& x, const ParamRow& y) { return x.key < y.key; });
  return rows;
}

json Unflatten(std::vector<Leaf> leaves) {
  for (const Leaf& leaf : leaves) CheckKey(leaf.key);

  // Rule 1: the newest leaf of each key comes first, then drop the rest.
  std::sort(leaves.begin(), leaves.end(), [](const Leaf& x, const Leaf& y) {
    if (x.key != y.key) return x.key < y.key;
    if (x.seq != y.seq) return x.seq > y.seq;
    return x.value.dump(-1, ' ', false, json::error_handler_t::replace) >
           y.value.dump(-1, ' ', false, json::error_handler_t::replace);
  });
  leaves.erase(std::unique(leaves.begin(), leaves.end(),
                           [](const Leaf& x, const Leaf& y) { return x.key == y.key; }),
               leaves.end());

  // For each proper prefix path, the newest seq of a leaf below it. Views
  // point into `leaves`, which no longer changes.
  std::unordered_map<std::string_view, uint64_t> newest_below;
  std::unordered_map<std::string_view, uint64_t> seq_of;
  for (const Leaf& leaf : leaves) {
    std::string_view key = leaf.key;
    seq_of.emplace(key, leaf.seq);
    for (size_t dot = key.find('.'); dot != std::string_view::npos; dot = key.find('.', dot + 1)) {
      uint64_t& newest = newest_below[key.substr(0, dot)];
      newest = std::max(newest, leaf.seq);
    }
  }

  json result = json::object();
  for (Leaf& leaf : leaves) {
    std::string_view key = leaf.key;
    // Rule 3: a leaf at or after this one's seq lies below it.
    auto below = newest_below.find(key);
    if (below != newest_below.end() && below->second >= leaf.seq) continue;
    // Rule 2: a newer leaf lies above it.
    bool hidden = false;
    for (size_t dot = key.find('.'); dot != std::string_view::npos && !hidden;
         dot = key.find('.', dot + 1)) {
      auto above = seq_of.find(key.substr(0, dot));
      hidden = above != seq_of.end() && above->second > leaf.seq;
    }
    if (hidden) continue;

    // The surviving leaves never lie on one path, so every node on the way
    // is an object (or absent), and the final member is not yet set.
    json* node = &result;
    size_t start = 0;
    for (size_t dot = key.find('.'); dot != std::string_view::npos;
         start = dot + 1, dot = key.find('.', start)) {
      std::string name(key.substr(start, dot - start));
      auto it = node->find(name);
      if (it == node->end()) it = node->emplace(std::move(name), json::object()).first;
      node = &*it;
    }
    (*node)[std::string(key.substr(start))] = std::move(leaf.value);
  }
  return result;
}

json Merge(json base, const json& patch) {
  if (!base.is_object() || !patch.is_object()) return patch;
  for (const auto& [name, value] : patch.items()) {
    auto it = base.find(name);
    if (value.is_object() && !value.empty() && it != base.end() && it->is_object()) {
      *it = Merge(std::move(*it), value);
    } else {
      base[name] = value;
    }
  }
  return base;
}

}  // namespace kv0::tracking
