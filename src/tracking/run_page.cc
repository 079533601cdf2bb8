// RunPageToArrow: a page of run search results as one Arrow record batch,
// shaped like mlflow.search_runs' frame (run columns, then params.* and
// metrics.* columns).

#include <string_view>

#include "kv0/tracking.h"
#include "lance/arrow.h"
#include "tracking/tables.h"

namespace kv0::tracking {
namespace {

// Metric columns end in their statistic; these three are values, the others
// steps and counts.
bool IsFloatMetric(std::string_view column) {
  return column.ends_with(".last") || column.ends_with(".min") || column.ends_with(".max");
}

}  // namespace

void RunPageToArrow(const RunPage& page, ArrowArrayStream* out) {
  arrow::Schema schema = {
      {"run_id", arrow::Type::kUtf8, false},
      {"name", arrow::Type::kUtf8, true},
      {"experiment", arrow::Type::kUtf8, true},
      {"description", arrow::Type::kUtf8, true},
      {"status", arrow::Type::kUtf8, false},
      {"kind", arrow::Type::kUtf8, true},
      {"archived", arrow::Type::kBool, false},
      {"tags", arrow::Type::kListUtf8, false},
      {"created_at", arrow::Type::kTimestampUs, false},
      {"updated_at", arrow::Type::kTimestampUs, false},
      {"ended_at", arrow::Type::kTimestampUs, true},
      {"target", arrow::Type::kUtf8, true},
  };
  const size_t first_value_column = schema.size();
  for (const auto& c : page.columns) {
    arrow::Type type = !c.starts_with("metrics.") ? arrow::Type::kUtf8
                       : IsFloatMetric(c)         ? arrow::Type::kFloat64
                                                  : arrow::Type::kInt64;
    schema.push_back({c, type, true});
  }
  arrow::BatchBuilder b(schema);
  for (size_t i = 0; i < page.runs.size(); ++i) {
    const RunInfo& r = page.runs[i];
    b.utf8(0).Append(r.run_id);
    AppendOptional(b.utf8(1), r.name);
    AppendOptional(b.utf8(2), r.experiment);
    AppendOptional(b.utf8(3), r.description);
    b.utf8(4).Append(r.status);
    AppendOptional(b.utf8(5), r.kind);
    b.boolean(6).Append(r.archived);
    std::vector<std::string_view> tags(r.tags.begin(), r.tags.end());
    b.list_utf8(7).Append(tags);
    b.timestamp(8).Append(r.created_at_us);
    b.timestamp(9).Append(r.updated_at_us);
    if (r.ended_at_us) {
      b.timestamp(10).Append(*r.ended_at_us);
    } else {
      b.timestamp(10).AppendNull();
    }
    AppendOptional(b.utf8(11), r.target ? std::optional(r.target->dump()) : std::nullopt);
    for (size_t c = 0; c < page.columns.size(); ++c) {
      const nlohmann::json& v = page.values[i][c];
      size_t col = first_value_column + c;
      switch (schema[col].type) {
        case arrow::Type::kUtf8:
          if (v.is_null()) {
            b.utf8(col).AppendNull();
          } else {
            b.utf8(col).Append(v.is_string() ? v.get_ref<const std::string&>() : v.dump());
          }
          break;
        case arrow::Type::kFloat64:
          if (v.is_number()) {
            b.float64(col).Append(v.get<double>());
          } else {
            b.float64(col).AppendNull();
          }
          break;
        default:
          if (v.is_number()) {
            b.int64(col).Append(v.get<int64_t>());
          } else {
            b.int64(col).AppendNull();
          }
          break;
      }
    }
  }
  arrow::OwnedStream stream = OneBatch(schema, b);
  if (out->release != nullptr) out->release(out);
  *out = stream.release();
}

}  // namespace kv0::tracking
