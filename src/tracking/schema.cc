#include "tracking/schema.h"

namespace kv0::tracking {

using arrow::Type;

const arrow::Schema& RunsSchema() {
  static const arrow::Schema schema = {
      {"seq", Type::kUInt64, false},
      {"run_id", Type::kUtf8, false},
      {"name", Type::kUtf8, true},
      {"experiment", Type::kUtf8, true},
      {"description", Type::kUtf8, true},
      {"tags", Type::kListUtf8, false},
      {"status", Type::kUtf8, false},
      {"archived", Type::kBool, false},
      {"created_at", Type::kTimestampUs, false},
      {"updated_at", Type::kTimestampUs, false},
      {"ended_at", Type::kTimestampUs, true},
      {"fields", Type::kUInt32, true},
      {"kind", Type::kUtf8, true},
      {"target", Type::kUtf8, true},
  };
  return schema;
}

const arrow::Schema& RunsLateColumns() {
  static const arrow::Schema schema = {
      {"fields", Type::kUInt32, true},
      {"kind", Type::kUtf8, true},
      {"target", Type::kUtf8, true},
  };
  return schema;
}

const arrow::Schema& ParamsSchema() {
  static const arrow::Schema schema = {
      {"seq", Type::kUInt64, false}, {"run_id", Type::kUtf8, false}, {"key", Type::kUtf8, false},
      {"value", Type::kUtf8, false}, {"num", Type::kFloat64, true},  {"text", Type::kUtf8, true},
      {"flag", Type::kBool, true},
  };
  return schema;
}

const arrow::Schema& SeriesSchema() {
  static const arrow::Schema schema = {
      {"series_id", Type::kUInt64, false},
      {"run_id", Type::kUtf8, false},
      {"name", Type::kUtf8, false},
      {"context", Type::kUtf8, false},
      {"created_at", Type::kTimestampUs, false},
  };
  return schema;
}

const arrow::Schema& MetricsSchema() {
  // Lance tries a dictionary for any 64-bit column whose sample repeats; in
  // metrics, steps repeat across series and timestamps within a microsecond,
  // and building those dictionaries took most of a flush's encoding time for
  // little space. series_id keeps its dictionary (a few random ids per page).
  // Lance takes these hints from the schema a table is created with.
  const std::map<std::string, std::string> kNoDictionary = {
      {"lance-encoding:dict-divisor", "1000000000"}};
  static const arrow::Schema schema = {
      {"series_id", Type::kUInt64, false},
      {"step", Type::kInt64, false, kNoDictionary},
      {"epoch", Type::kInt64, true, kNoDictionary},
      {"timestamp", Type::kTimestampUs, false, kNoDictionary},
      {"value", Type::kFloat64, false, kNoDictionary},
      {"stats", Type::kBinary, true},
      {"seq", Type::kUInt64, true, kNoDictionary},
  };
  return schema;
}

const arrow::Schema& RecordsSchema() {
  static const arrow::Schema schema = {
      {"seq", Type::kUInt64, false}, {"table_name", Type::kUtf8, false},
      {"run_id", Type::kUtf8, true}, {"item_id", Type::kUtf8, false},
      {"data", Type::kUtf8, false},  {"created_at", Type::kTimestampUs, false},
  };
  return schema;
}

const arrow::Schema& MetricsLateColumns() {
  static const arrow::Schema schema = {{"stats", Type::kBinary, true},
                                       {"seq", Type::kUInt64, true}};
  return schema;
}

}  // namespace kv0::tracking
