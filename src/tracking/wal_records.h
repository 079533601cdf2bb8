// The tracking layer's WAL records (kinds 20 to 23), one per logged change.
//
// Every record starts with its kind byte and carries the seq it was logged
// at, so replay can skip what a table's mark says is committed. Run changes,
// parameters and series are rare and encoded as JSON after the kind byte;
// points are frequent and encoded as fixed-width binary:
//
//   23 | seq u64 | n x (series_id u64, step i64, has_epoch u8, epoch i64,
//                      timestamp_us i64, value f64)      (little-endian)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "tracking/run_record.h"
#include "tracking/tables.h"

namespace kv0::tracking {

inline constexpr uint8_t kWalRun = 20;
inline constexpr uint8_t kWalParams = 21;
inline constexpr uint8_t kWalSeries = 22;
inline constexpr uint8_t kWalPoints = 23;

std::string EncodeRunRecord(const RunRow& row);
std::string EncodeParamsRecord(uint64_t seq, const std::string& run_id,
                               const nlohmann::json& params);
std::string EncodeSeriesRecord(uint64_t seq, const SeriesInfo& series);

// Builds one points record: Start with the record's seq, Add points, then
// take the bytes.
class PointsRecord {
 public:
  static constexpr size_t kPointSize = 8 + 8 + 1 + 8 + 8 + 8;
  static constexpr size_t kHeaderSize = 1 + 8;

  void Start(uint64_t seq);
  void Add(uint64_t series_id, int64_t step, std::optional<int64_t> epoch, int64_t timestamp_us,
           double value);
  std::string_view bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

struct ParamsRecord {
  uint64_t seq;
  std::string run_id;
  nlohmann::json params;
};
struct SeriesRecord {
  uint64_t seq;
  SeriesInfo series;
};
struct PointsRecordData {
  uint64_t seq;
  PointBuffer points;  // deltas dirty: a replayed step may be counted already
};
using WalRecord = std::variant<RunRow, ParamsRecord, SeriesRecord, PointsRecordData>;

// Throws kv0::Error(kCorruption) for a record this layer did not write.
WalRecord DecodeWalRecord(std::string_view bytes);

}  // namespace kv0::tracking
