#include "tracking/run_record.h"

#include <iterator>
#include <map>
#include <utility>

#include "kv0/error.h"

namespace kv0::tracking {

namespace {

using nlohmann::json;

std::string TargetText(const json& target) {
  return target.dump(-1, ' ', false, json::error_handler_t::replace);
}

template <typename T>
int Compare(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

int Compare(const std::optional<json>& a, const std::optional<json>& b) {
  if (!a.has_value() || !b.has_value()) return int(a.has_value()) - int(b.has_value());
  int c = TargetText(*a).compare(TargetText(*b));
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

// One run field: its bit, the order that breaks seq ties, and how to copy it.
struct Field {
  uint32_t bit;
  int (*compare)(const RunInfo& a, const RunInfo& b);
  void (*copy)(const RunInfo& from, RunInfo& to);
};

template <auto kMember>
constexpr Field MakeField(uint32_t bit) {
  return {bit, [](const RunInfo& a, const RunInfo& b) { return Compare(a.*kMember, b.*kMember); },
          [](const RunInfo& from, RunInfo& to) { to.*kMember = from.*kMember; }};
}

constexpr Field kFields[] = {
    MakeField<&RunInfo::name>(kFieldName),
    MakeField<&RunInfo::experiment>(kFieldExperiment),
    MakeField<&RunInfo::description>(kFieldDescription),
    MakeField<&RunInfo::tags>(kFieldTags),
    MakeField<&RunInfo::status>(kFieldStatus),
    MakeField<&RunInfo::archived>(kFieldArchived),
    MakeField<&RunInfo::created_at_us>(kFieldCreatedAt),
    MakeField<&RunInfo::ended_at_us>(kFieldEndedAt),
    MakeField<&RunInfo::kind>(kFieldKind),
    MakeField<&RunInfo::target>(kFieldTarget),
};
constexpr size_t kNumFields = std::size(kFields);

// The rows a merge takes values from: per field the winning row (-1 when no
// row sets it), and the newest row, which gives updated_at_us.
struct Choice {
  int field[kNumFields];
  size_t newest = 0;
};

Choice Choose(const std::vector<RunRow>& rows) {
  Choice c;
  for (int& w : c.field) w = -1;
  for (size_t i = 0; i < rows.size(); i++) {
    const RunRow& row = rows[i];
    const RunRow& newest = rows[c.newest];
    if (row.seq > newest.seq ||
        (row.seq == newest.seq && row.record.updated_at_us > newest.record.updated_at_us)) {
      c.newest = i;
    }
    const uint32_t mask = RowFields(row);
    for (size_t f = 0; f < kNumFields; f++) {
      if ((mask & kFields[f].bit) == 0) continue;
      const int w = c.field[f];
      if (w < 0 || row.seq > rows[w].seq ||
          (row.seq == rows[w].seq && kFields[f].compare(row.record, rows[w].record) > 0)) {
        c.field[f] = static_cast<int>(i);
      }
    }
  }
  return c;
}

RunInfo Build(const std::vector<RunRow>& rows, const Choice& c) {
  RunInfo out;
  out.run_id = rows.front().record.run_id;
  out.updated_at_us = rows[c.newest].record.updated_at_us;
  for (size_t f = 0; f < kNumFields; f++) {
    if (c.field[f] >= 0) kFields[f].copy(rows[c.field[f]].record, out);
  }
  return out;
}

void CheckOneRun(const std::vector<RunRow>& rows) {
  for (const RunRow& row : rows) {
    if (row.record.run_id != rows.front().record.run_id) {
      throw Error(Code::kInvalidArgument, "run rows of different runs merged together: '" +
                                              rows.front().record.run_id + "' and '" +
                                              row.record.run_id + "'");
    }
  }
}

bool AnyTombstone(const std::vector<RunRow>& rows) {
  for (const RunRow& row : rows) {
    if (IsTombstone(row)) return true;
  }
  return false;
}

[[noreturn]] void BadKey(const char* key, const char* what) {
  throw Error(Code::kInvalidArgument, std::string("run record: \"") + key + "\" " + what);
}

// Reads an optional string: missing or null means absent.
void ReadString(const json& j, const char* key, std::optional<std::string>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    out.reset();
    return;
  }
  if (!it->is_string()) BadKey(key, "must be a string or null");
  out = it->get<std::string>();
}

void ReadTime(const json& j, const char* key, std::optional<int64_t>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    out.reset();
    return;
  }
  if (!it->is_number_integer()) BadKey(key, "must be an integer (microseconds)");
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)) {
    BadKey(key, "is out of range");
  }
  out = it->get<int64_t>();
}

}  // namespace

bool IsValidStatus(std::string_view status) {
  return status == "running" || status == "finished" || status == "failed" || status == "aborted";
}

void to_json(json& j, const RunInfo& info) {
  j = json::object();
  j["run_id"] = info.run_id;
  if (info.name) j["name"] = *info.name;
  if (info.experiment) j["experiment"] = *info.experiment;
  if (info.description) j["description"] = *info.description;
  j["tags"] = info.tags;
  j["status"] = info.status;
  j["archived"] = info.archived;
  j["created_at_us"] = info.created_at_us;
  j["updated_at_us"] = info.updated_at_us;
  if (info.ended_at_us) j["ended_at_us"] = *info.ended_at_us;
  if (info.kind) j["kind"] = *info.kind;
  if (info.target) j["target"] = *info.target;
}

void from_json(const json& j, RunInfo& info) {
  if (!j.is_object()) throw Error(Code::kInvalidArgument, "run record: not a JSON object");
  RunInfo out;
  auto run_id = j.find("run_id");
  if (run_id == j.end() || !run_id->is_string()) BadKey("run_id", "must be a string");
  out.run_id = run_id->get<std::string>();
  ReadString(j, "name", out.name);
  ReadString(j, "experiment", out.experiment);
  ReadString(j, "description", out.description);
  if (auto it = j.find("tags"); it != j.end()) {
    if (!it->is_array()) BadKey("tags", "must be an array of strings");
    for (const json& tag : *it) {
      if (!tag.is_string()) BadKey("tags", "must be an array of strings");
      out.tags.push_back(tag.get<std::string>());
    }
  }
  if (auto it = j.find("status"); it != j.end()) {
    if (!it->is_string() || !IsValidStatus(it->get<std::string>())) {
      BadKey("status", "must be one of running, finished, failed, aborted");
    }
    out.status = it->get<std::string>();
  }
  if (auto it = j.find("archived"); it != j.end()) {
    if (!it->is_boolean()) BadKey("archived", "must be a boolean");
    out.archived = it->get<bool>();
  }
  for (auto [key, member] : {std::pair{"created_at_us", &RunInfo::created_at_us},
                             std::pair{"updated_at_us", &RunInfo::updated_at_us}}) {
    std::optional<int64_t> t;
    ReadTime(j, key, t);
    if (j.contains(key) && !t) BadKey(key, "must be an integer (microseconds)");
    if (t) out.*member = *t;
  }
  ReadTime(j, "ended_at_us", out.ended_at_us);
  ReadString(j, "kind", out.kind);
  if (auto it = j.find("target"); it != j.end()) out.target = *it;
  info = std::move(out);
}

bool IsTombstone(const RunRow& row) { return row.fields == kFieldDeleted; }

uint32_t RowFields(const RunRow& row) { return row.fields.value_or(kAllRunFields) & kAllRunFields; }

RunRow Tombstone(std::string run_id, uint64_t seq, int64_t now_us) {
  RunRow row;
  row.seq = seq;
  row.record.run_id = std::move(run_id);
  row.record.updated_at_us = now_us;
  row.fields = kFieldDeleted;
  return row;
}

std::optional<RunInfo> MergeRun(std::vector<RunRow> rows) {
  CheckOneRun(rows);
  if (rows.empty() || AnyTombstone(rows)) return std::nullopt;
  return Build(rows, Choose(rows));
}

uint32_t ChangedFields(const RunInfo& before, const RunInfo& after) {
  uint32_t mask = 0;
  for (const Field& f : kFields) {
    if (f.compare(before, after) != 0) mask |= f.bit;
  }
  return mask;
}

std::vector<RunRow> FoldRun(std::vector<RunRow> rows) {
  CheckOneRun(rows);
  if (rows.empty() || AnyTombstone(rows)) return rows;
  const Choice c = Choose(rows);
  const RunInfo merged = Build(rows, c);
  // seq -> the fields last set at that seq. The newest row's seq is always
  // present, so that updated_at_us keeps its seq too.
  std::map<uint64_t, uint32_t> masks;
  masks[rows[c.newest].seq] = 0;
  for (size_t f = 0; f < kNumFields; f++) {
    if (c.field[f] >= 0) masks[rows[c.field[f]].seq] |= kFields[f].bit;
  }
  std::vector<RunRow> out;
  out.reserve(masks.size());
  for (const auto& [seq, mask] : masks) out.push_back(RunRow{seq, merged, mask});
  return out;
}

}  // namespace kv0::tracking
