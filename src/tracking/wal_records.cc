#include "tracking/wal_records.h"

#include <cstring>

#include "kv0/error.h"

namespace kv0::tracking {
namespace {

template <typename T>
void Put(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

template <typename T>
T Get(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

std::string JsonRecord(uint8_t kind, const nlohmann::json& body) {
  std::string out(1, static_cast<char>(kind));
  out += body.dump();
  return out;
}

Error Corrupt(const std::string& why) {
  return Error(Code::kCorruption, "tracking WAL record: " + why);
}

}  // namespace

std::string EncodeRunRecord(const RunRow& row) {
  nlohmann::json body = {{"seq", row.seq}, {"record", row.record}};
  if (row.fields) body["fields"] = *row.fields;
  return JsonRecord(kWalRun, body);
}

std::string EncodeParamsRecord(uint64_t seq, const std::string& run_id,
                               const nlohmann::json& params) {
  // Spelled out rather than built as one json value, which would copy
  // `params` whole on every call.
  std::string out(1, static_cast<char>(kWalParams));
  out += R"({"params":)";
  out += params.dump();
  out += R"(,"run_id":)";
  out += nlohmann::json(run_id).dump();
  out += R"(,"seq":)";
  out += std::to_string(seq);
  out += '}';
  return out;
}

std::string EncodeSeriesRecord(uint64_t seq, const SeriesInfo& series) {
  return JsonRecord(kWalSeries, {{"seq", seq}, {"series", series}});
}

void PointsRecord::Start(uint64_t seq) {
  bytes_.clear();
  bytes_.push_back(static_cast<char>(kWalPoints));
  Put(&bytes_, seq);
}

void PointsRecord::Add(uint64_t series_id, int64_t step, std::optional<int64_t> epoch,
                       int64_t timestamp_us, double value) {
  Put(&bytes_, series_id);
  Put(&bytes_, step);
  Put(&bytes_, static_cast<uint8_t>(epoch.has_value()));
  Put(&bytes_, epoch.value_or(0));
  Put(&bytes_, timestamp_us);
  Put(&bytes_, value);
}

WalRecord DecodeWalRecord(std::string_view bytes) {
  if (bytes.empty()) throw Corrupt("empty");
  uint8_t kind = static_cast<uint8_t>(bytes[0]);
  if (kind == kWalPoints) {
    if (bytes.size() < PointsRecord::kHeaderSize ||
        (bytes.size() - PointsRecord::kHeaderSize) % PointsRecord::kPointSize != 0) {
      throw Corrupt("points record of " + std::to_string(bytes.size()) + " bytes");
    }
    PointsRecordData out;
    out.seq = Get<uint64_t>(bytes.data() + 1);
    for (size_t pos = PointsRecord::kHeaderSize; pos < bytes.size();
         pos += PointsRecord::kPointSize) {
      const char* p = bytes.data() + pos;
      std::optional<int64_t> epoch;
      if (p[16]) epoch = Get<int64_t>(p + 17);
      out.points.Add(Get<uint64_t>(p), Get<int64_t>(p + 8), epoch, Get<int64_t>(p + 25),
                     Get<double>(p + 33), out.seq, /*dirty=*/true);
    }
    return out;
  }
  auto body = nlohmann::json::parse(bytes.substr(1), nullptr, false);
  if (body.is_discarded() || !body.is_object()) throw Corrupt("bad JSON");
  try {
    switch (kind) {
      case kWalRun: {
        RunRow row;
        row.seq = body.at("seq").get<uint64_t>();
        row.record = body.at("record").get<RunInfo>();
        if (body.contains("fields")) row.fields = body["fields"].get<uint32_t>();
        return row;
      }
      case kWalParams:
        return ParamsRecord{body.at("seq").get<uint64_t>(), body.at("run_id").get<std::string>(),
                            body.at("params")};
      case kWalSeries:
        return SeriesRecord{body.at("seq").get<uint64_t>(), body.at("series").get<SeriesInfo>()};
      default:
        throw Corrupt("unknown kind " + std::to_string(kind));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Corrupt(e.what());
  }
}

}  // namespace kv0::tracking
