#include "tracking/tables.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "lance/dataset.h"
#include "tracking/schema.h"
#include "util/clock.h"
#include "util/reserve.h"

namespace kv0::tracking {

void AppendOptional(arrow::Utf8Builder& b, const std::optional<std::string>& v) {
  if (v) {
    b.Append(*v);
  } else {
    b.AppendNull();
  }
}

namespace {

// Collects a stream's rows in batches, starting a new one before a row would
// take the batch's strings past kBatchBytes: then no string column reaches
// Arrow's 2 GiB offset limit, however much one flush holds (one row's
// strings are at most kMaxWriteSize).
class SplitBatches {
 public:
  static constexpr size_t kBatchBytes = size_t{256} << 20;

  explicit SplitBatches(const arrow::Schema& schema) : schema_(schema), builder_(schema) {}

  // The builder to append one row with `bytes` bytes of strings to.
  arrow::BatchBuilder& Row(size_t bytes) {
    if (rows_ > 0 && bytes_ + bytes > kBatchBytes) Cut();
    bytes_ += bytes;
    ++rows_;
    return builder_;
  }

  arrow::OwnedStream Finish() {
    if (rows_ > 0 || batches_.empty()) Cut();
    arrow::OwnedStream stream;
    arrow::MakeStream(schema_, std::move(batches_), &stream);
    return stream;
  }

 private:
  void Cut() {
    batches_.emplace_back();
    builder_.Finish(batches_.back().get());
    rows_ = 0;
    bytes_ = 0;
  }

  const arrow::Schema& schema_;
  arrow::BatchBuilder builder_;
  std::vector<arrow::OwnedArray> batches_;
  size_t rows_ = 0;
  size_t bytes_ = 0;
};

size_t Size(const std::optional<std::string>& s) { return s ? s->size() : 0; }

size_t StringBytes(const RunInfo& r) {
  size_t bytes = r.run_id.size() + Size(r.name) + Size(r.experiment) + Size(r.description) +
                 r.status.size() + Size(r.kind);
  for (const auto& tag : r.tags) bytes += tag.size();
  return bytes;
}

std::string MarkRunId(const Mark& mark) { return std::string(kWalMarkPrefix) + mark.writer_id; }

}  // namespace

void PointBuffer::Add(uint64_t series_id, int64_t step, std::optional<int64_t> epoch,
                      int64_t timestamp_us, double value, uint64_t seq, bool dirty,
                      StatsDelta* delta) {
  series_ids.push_back(series_id);
  seqs.push_back(dirty ? seq : 0);
  steps.push_back(step);
  epochs.push_back(epoch.value_or(0));
  has_epoch.push_back(epoch.has_value());
  timestamps_us.push_back(timestamp_us);
  values.push_back(value);
  if (delta == nullptr) delta = &deltas[series_id];
  delta->Add(step, value, timestamp_us, seq);
  if (dirty) delta->set_dirty();
}

void PointBuffer::Append(PointBuffer&& other) {
  auto extend = [](auto& to, auto& from) { to.insert(to.end(), from.begin(), from.end()); };
  extend(series_ids, other.series_ids);
  extend(seqs, other.seqs);
  extend(steps, other.steps);
  extend(epochs, other.epochs);
  extend(has_epoch, other.has_epoch);
  extend(timestamps_us, other.timestamps_us);
  extend(values, other.values);
  for (auto& [id, delta] : other.deltas) deltas[id].Merge(delta);
  other = PointBuffer();
}

void PointBuffer::AppendPointOf(const PointBuffer& other, size_t i) {
  series_ids.push_back(other.series_ids[i]);
  seqs.push_back(other.seqs[i]);
  steps.push_back(other.steps[i]);
  epochs.push_back(other.epochs[i]);
  has_epoch.push_back(other.has_epoch[i]);
  timestamps_us.push_back(other.timestamps_us[i]);
  values.push_back(other.values[i]);
}

void PointBuffer::Clear() {
  series_ids.clear();
  seqs.clear();
  steps.clear();
  epochs.clear();
  has_epoch.clear();
  timestamps_us.clear();
  values.clear();
  deltas.clear();
}

arrow::OwnedStream RunsStream(const std::vector<RunRow>& rows, std::span<const Mark> marks) {
  SplitBatches batches(RunsSchema());
  auto add = [&](uint64_t seq, const RunInfo& r, std::optional<uint32_t> fields) {
    std::string target = r.target ? r.target->dump() : std::string();
    arrow::BatchBuilder& b = batches.Row(StringBytes(r) + target.size());
    b.uint64(0).Append(seq);
    b.utf8(1).Append(r.run_id);
    AppendOptional(b.utf8(2), r.name);
    AppendOptional(b.utf8(3), r.experiment);
    AppendOptional(b.utf8(4), r.description);
    std::vector<std::string_view> tags(r.tags.begin(), r.tags.end());
    b.list_utf8(5).Append(tags);
    b.utf8(6).Append(r.status);
    b.boolean(7).Append(r.archived);
    b.timestamp(8).Append(r.created_at_us);
    b.timestamp(9).Append(r.updated_at_us);
    if (r.ended_at_us) {
      b.timestamp(10).Append(*r.ended_at_us);
    } else {
      b.timestamp(10).AppendNull();
    }
    if (fields) {
      b.uint32(11).Append(*fields);
    } else {
      b.uint32(11).AppendNull();
    }
    AppendOptional(b.utf8(12), r.kind);
    if (r.target) {
      b.utf8(13).Append(target);
    } else {
      b.utf8(13).AppendNull();
    }
  };
  for (const auto& row : rows) add(row.seq, row.record, row.fields);
  for (const auto& mark : marks) {
    RunInfo info;
    info.run_id = MarkRunId(mark);
    add(mark.seq, info, 0u);
  }
  return batches.Finish();
}

arrow::OwnedStream ParamsStream(const std::vector<ParamChange>& rows, std::span<const Mark> marks) {
  SplitBatches batches(ParamsSchema());
  for (const auto& change : rows) {
    const ParamRow& p = change.row;
    arrow::BatchBuilder& b =
        batches.Row(change.run_id.size() + p.key.size() + p.value_json.size() + Size(p.text));
    b.uint64(0).Append(change.seq);
    b.utf8(1).Append(change.run_id);
    b.utf8(2).Append(p.key);
    b.utf8(3).Append(p.value_json);
    if (p.num) {
      b.float64(4).Append(*p.num);
    } else {
      b.float64(4).AppendNull();
    }
    AppendOptional(b.utf8(5), p.text);
    if (p.flag) {
      b.boolean(6).Append(*p.flag);
    } else {
      b.boolean(6).AppendNull();
    }
  }
  for (const auto& mark : marks) {
    arrow::BatchBuilder& b = batches.Row(0);
    b.uint64(0).Append(mark.seq);
    b.utf8(1).Append(MarkRunId(mark));
    b.utf8(2).Append("");
    b.utf8(3).Append("null");
    b.float64(4).AppendNull();
    b.utf8(5).AppendNull();
    b.boolean(6).AppendNull();
  }
  return batches.Finish();
}

arrow::OwnedStream SeriesStream(const std::vector<SeriesInfo>& rows, std::span<const Mark> marks) {
  SplitBatches batches(SeriesSchema());
  for (const auto& s : rows) {
    std::string context = s.context.dump();
    arrow::BatchBuilder& b = batches.Row(s.run_id.size() + s.name.size() + context.size());
    b.uint64(0).Append(s.series_id);
    b.utf8(1).Append(s.run_id);
    b.utf8(2).Append(s.name);
    b.utf8(3).Append(context);
    b.timestamp(4).Append(s.created_at_us);
  }
  for (const auto& mark : marks) {
    char digits[24];
    std::snprintf(digits, sizeof(digits), "%020" PRIu64, mark.seq);
    arrow::BatchBuilder& b = batches.Row(0);
    b.uint64(0).Append(kReservedSeriesId);
    b.utf8(1).Append(MarkRunId(mark));
    b.utf8(2).Append(digits);
    b.utf8(3).Append("{}");
    b.timestamp(4).Append(static_cast<int64_t>(mark.seq / 1000));
  }
  return batches.Finish();
}

arrow::OwnedStream MetricsStream(const PointBuffer& points, std::span<const Mark> marks,
                                 bool exact_deltas) {
  arrow::BatchBuilder b(MetricsSchema());
  AppendMetricsRows(points, marks, exact_deltas, b);
  return OneBatch(MetricsSchema(), b);
}

void AppendMetricsRows(const PointBuffer& points, std::span<const Mark> marks, bool exact_deltas,
                       arrow::BatchBuilder& b, std::span<const uint32_t> rows) {
  std::vector<uint8_t> has_seq(points.size());
  for (size_t i = 0; i < points.size(); ++i) has_seq[i] = points.seqs[i] != 0;
  // Whole columns at a time: a flush runs beside Track, and when it falls
  // behind Track waits for it.
  const auto column = [&](auto& builder, const auto& values, std::span<const uint8_t> valid) {
    using T = typename std::decay_t<decltype(values)>::value_type;
    if (rows.empty()) {
      builder.Append(std::span<const T>(values), valid);
    } else {
      builder.AppendRows(std::span<const T>(values), valid, rows);
    }
  };
  column(b.uint64(0), points.series_ids, {});  // no valid list: none null
  column(b.int64(1), points.steps, {});
  column(b.int64(2), points.epochs, points.has_epoch);
  column(b.timestamp(3), points.timestamps_us, {});
  column(b.float64(4), points.values, {});
  b.binary(5).AppendNulls(points.size());
  column(b.uint64(6), points.seqs, has_seq);
  int64_t now_us = static_cast<int64_t>(WallNanos() / 1000);
  for (const auto& [id, delta] : points.deltas) {
    b.uint64(0).Append(kReservedSeriesId);
    b.int64(1).Append(static_cast<int64_t>(id));
    b.int64(2).AppendNull();
    b.timestamp(3).Append(now_us);
    b.float64(4).Append(exact_deltas ? 1 : 0);
    b.binary(5).Append(delta.Encode());
    b.uint64(6).AppendNull();
  }
  for (const auto& mark : marks) {
    b.uint64(0).Append(kReservedSeriesId);
    b.int64(1).Append(StepFromWriterId(mark.writer_id));
    b.int64(2).Append(static_cast<int64_t>(mark.seq));
    b.timestamp(3).Append(now_us);
    b.float64(4).Append(0);
    b.binary(5).AppendNull();
    b.uint64(6).AppendNull();
  }
}

std::vector<std::string> PointColumns() {
  return {"series_id", "step", "epoch", "timestamp", "value", "seq"};
}

void CollectPoints(const arrow::Batch& batch, PointsBySeries* out,
                   const std::function<bool(uint64_t series_id)>& keep) {
  arrow::UInt64Column id(batch, "series_id"), address(batch, lance::kRowAddress);
  arrow::Int64Column step(batch, "step"), epoch(batch, "epoch");
  arrow::TimestampColumn timestamp(batch, "timestamp");
  arrow::Float64Column value(batch, "value");
  arrow::UInt64Column seq(batch, "seq");
  // Rows of one series come in runs (sorted fragments hold each series
  // together), so the series' vector is looked up and sized once per run.
  const int64_t rows = batch.num_rows();
  for (int64_t begin = 0, end = 0; begin < rows; begin = end) {
    const uint64_t series = id.value(begin);
    for (end = begin + 1; end < rows && id.value(end) == series;) ++end;
    if (keep && !keep(series)) continue;
    std::vector<StoredPoint>& points = (*out)[series];
    ReserveMore(&points, static_cast<size_t>(end - begin));
    for (int64_t i = begin; i < end; ++i) {
      points.push_back({step.value(i), seq.is_null(i) ? 0 : seq.value(i), address.value(i),
                        timestamp.value(i), value.value(i), epoch.value(i), !epoch.is_null(i)});
    }
  }
}

void LatestPerStep(std::vector<StoredPoint>* points) {
  auto by_step = [](const StoredPoint& a, const StoredPoint& b) {
    if (a.step != b.step) return a.step < b.step;
    return a.seq != b.seq ? a.seq < b.seq : a.address < b.address;
  };
  // Points read from sorted fragments arrive in order already.
  if (!std::is_sorted(points->begin(), points->end(), by_step)) {
    std::sort(points->begin(), points->end(), by_step);
  }
  size_t out = 0;
  for (size_t i = 0; i < points->size(); ++i) {
    if (i + 1 < points->size() && (*points)[i + 1].step == (*points)[i].step) continue;
    (*points)[out++] = (*points)[i];
  }
  points->resize(out);
}

bool IsMarkRunId(std::string_view run_id) { return run_id.starts_with(kWalMarkPrefix); }

void DecodeRunRows(const arrow::Batch& batch, std::vector<RunRow>* out) {
  arrow::UInt64Column seq(batch, "seq");
  arrow::Utf8Column run_id(batch, "run_id"), name(batch, "name"), experiment(batch, "experiment"),
      description(batch, "description"), status(batch, "status");
  arrow::ListUtf8Column tags(batch, "tags");
  arrow::BoolColumn archived(batch, "archived");
  arrow::TimestampColumn created(batch, "created_at"), updated(batch, "updated_at"),
      ended(batch, "ended_at");
  int fields_index = batch.FindColumn("fields");
  int kind_index = batch.FindColumn("kind");
  int target_index = batch.FindColumn("target");
  std::optional<arrow::UInt32Column> fields;
  std::optional<arrow::Utf8Column> kind, target;
  if (fields_index >= 0) fields.emplace(batch, fields_index);
  if (kind_index >= 0) kind.emplace(batch, kind_index);
  if (target_index >= 0) target.emplace(batch, target_index);
  auto text = [](const arrow::Utf8Column& c, int64_t i) -> std::optional<std::string> {
    if (c.is_null(i)) return std::nullopt;
    return std::string(c.value(i));
  };
  for (int64_t i = 0; i < batch.num_rows(); ++i) {
    if (IsMarkRunId(run_id.value(i))) continue;
    RunRow row;
    row.seq = seq.value(i);
    RunInfo& r = row.record;
    r.run_id = std::string(run_id.value(i));
    r.name = text(name, i);
    r.experiment = text(experiment, i);
    r.description = text(description, i);
    for (auto tag : tags.value(i)) r.tags.emplace_back(tag);
    r.status = std::string(status.value(i));
    r.archived = archived.value(i);
    r.created_at_us = created.value(i);
    r.updated_at_us = updated.value(i);
    if (!ended.is_null(i)) r.ended_at_us = ended.value(i);
    if (fields && !fields->is_null(i)) row.fields = fields->value(i);
    if (kind) r.kind = text(*kind, i);
    if (target && !target->is_null(i)) {
      // A target that is not JSON (written by another tool) is kept as text.
      auto parsed = nlohmann::json::parse(target->value(i), nullptr, false);
      r.target = parsed.is_discarded() ? nlohmann::json(std::string(target->value(i))) : parsed;
    }
    out->push_back(std::move(row));
  }
}

SeriesInfo DecodeSeries(const arrow::Batch& batch, int64_t row) {
  SeriesInfo s;
  s.series_id = arrow::UInt64Column(batch, "series_id").value(row);
  s.run_id = std::string(arrow::Utf8Column(batch, "run_id").value(row));
  s.name = std::string(arrow::Utf8Column(batch, "name").value(row));
  auto context = arrow::Utf8Column(batch, "context").value(row);
  s.context = nlohmann::json::parse(context, nullptr, false);
  if (s.context.is_discarded()) s.context = nlohmann::json::object();
  s.created_at_us = arrow::TimestampColumn(batch, "created_at").value(row);
  return s;
}

std::string WriterIdFromStep(int64_t step) {
  char text[20];
  std::snprintf(text, sizeof(text), "%016" PRIx64, static_cast<uint64_t>(step));
  return text;
}

int64_t StepFromWriterId(std::string_view writer_id) {
  return static_cast<int64_t>(std::stoull(std::string(writer_id), nullptr, 16));
}

std::string SqlString(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += '\'';
    out += c;
  }
  out += '\'';
  return out;
}

std::string SqlInt(int64_t value) {
  if (value == INT64_MIN) return "(-9223372036854775807 - 1)";
  return std::to_string(value);
}

std::string SqlTimestamp(int64_t micros) {
  return "arrow_cast(" + SqlInt(micros) + ", 'Timestamp(Microsecond, Some(\"UTC\"))')";
}

std::string SqlIn(std::string_view column, const std::vector<uint64_t>& values) {
  std::string out = std::string(column) + " IN (";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(values[i]);
  }
  return out + ")";
}

std::string ReservedStepIn(const std::vector<uint64_t>& series_ids) {
  std::string out = "(step + 0) IN (";
  for (size_t i = 0; i < series_ids.size(); ++i) {
    if (i) out += ", ";
    out += SqlInt(static_cast<int64_t>(series_ids[i]));
  }
  return out + ")";
}

}  // namespace kv0::tracking
