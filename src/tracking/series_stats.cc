#include "tracking/series_stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "kv0/error.h"

namespace kv0::tracking {

namespace {

uint64_t Bits(double d) { return std::bit_cast<uint64_t>(d); }

// Orders finite doubles, with -0.0 below +0.0: negative, zero or positive.
int CompareFinite(double a, double b) {
  if (a < b) return -1;
  if (a > b) return 1;
  return int{std::signbit(b)} - int{std::signbit(a)};
}

// Whether the point (step, seq, value) is later than (other_step, ...).
bool IsLater(int64_t step, uint64_t seq, double value, int64_t other_step, uint64_t other_seq,
             double other_value) {
  if (step != other_step) return step > other_step;
  if (seq != other_seq) return seq > other_seq;
  return Bits(value) > Bits(other_value);
}

template <typename T>
void Store(char* p, T v) {
  uint64_t u = std::bit_cast<uint64_t>(v);
  if constexpr (std::endian::native == std::endian::big) u = __builtin_bswap64(u);
  std::memcpy(p, &u, 8);
}

template <typename T>
T Load(const char* p) {
  uint64_t u;
  std::memcpy(&u, p, 8);
  if constexpr (std::endian::native == std::endian::big) u = __builtin_bswap64(u);
  return std::bit_cast<T>(u);
}

[[noreturn]] void Corrupt(const std::string& why) {
  throw Error(Code::kCorruption, "series statistics delta: " + why);
}

}  // namespace

void StatsDelta::Add(int64_t step, double value, int64_t timestamp_us, uint64_t seq) {
  StatsDelta one;
  one.count_ = 1;
  one.first_step_ = one.last_step_ = step;
  one.last_seq_ = seq;
  one.last_ = value;
  one.last_timestamp_us_ = timestamp_us;
  if (std::isfinite(value)) {
    one.min_ = one.max_ = value;
    one.min_step_ = one.max_step_ = step;
  } else {
    one.non_finite_ = 1;
  }
  Merge(one);
}

void StatsDelta::Merge(const StatsDelta& other) {
  const bool dirty = dirty_ || other.dirty_;
  if (other.empty()) {
    dirty_ = dirty;
    return;
  }
  if (empty()) {
    *this = other;
    dirty_ = dirty;
    return;
  }
  dirty_ = dirty;
  count_ += other.count_;
  non_finite_ += other.non_finite_;
  first_step_ = std::min(first_step_, other.first_step_);
  if (IsLater(other.last_step_, other.last_seq_, other.last_, last_step_, last_seq_, last_)) {
    last_step_ = other.last_step_;
    last_seq_ = other.last_seq_;
    last_ = other.last_;
  }
  last_timestamp_us_ = std::max(last_timestamp_us_, other.last_timestamp_us_);
  if (std::isnan(other.min_)) return;  // other has no finite value
  if (std::isnan(min_)) {
    min_ = other.min_, min_step_ = other.min_step_;
    max_ = other.max_, max_step_ = other.max_step_;
    return;
  }
  int c = CompareFinite(other.min_, min_);
  if (c < 0 || (c == 0 && other.min_step_ < min_step_)) {
    min_ = other.min_, min_step_ = other.min_step_;
  }
  c = CompareFinite(other.max_, max_);
  if (c > 0 || (c == 0 && other.max_step_ < max_step_)) {
    max_ = other.max_, max_step_ = other.max_step_;
  }
}

SeriesStats StatsDelta::Finish() const {
  if (empty()) {
    throw Error(Code::kInvalidArgument, "statistics of a series with no points");
  }
  SeriesStats s;
  s.count = count_;
  s.first_step = first_step_;
  s.last_step = last_step_;
  s.last = last_;
  s.min = min_;
  s.min_step = min_step_;
  s.max = max_;
  s.max_step = max_step_;
  s.non_finite = non_finite_;
  s.last_timestamp_us = last_timestamp_us_;
  return s;
}

std::string StatsDelta::Encode() const {
  std::string out(kEncodedSize, '\0');
  char* p = out.data();
  p[0] = static_cast<char>(kFormatVersion);
  p[1] = static_cast<char>(dirty_ ? 1 : 0);
  Store(p + 2, count_);
  Store(p + 10, non_finite_);
  Store(p + 18, first_step_);
  Store(p + 26, last_step_);
  Store(p + 34, last_seq_);
  Store(p + 42, last_);
  Store(p + 50, last_timestamp_us_);
  Store(p + 58, min_);
  Store(p + 66, min_step_);
  Store(p + 74, max_);
  Store(p + 82, max_step_);
  return out;
}

StatsDelta StatsDelta::Decode(std::string_view bytes) {
  if (bytes.empty()) Corrupt("no bytes");
  const char* p = bytes.data();
  const auto version = static_cast<uint8_t>(p[0]);
  if (version != kFormatVersion) Corrupt("unknown format version " + std::to_string(version));
  if (bytes.size() != kEncodedSize) {
    Corrupt(std::to_string(bytes.size()) + " bytes, expected " + std::to_string(kEncodedSize));
  }
  const auto flags = static_cast<uint8_t>(p[1]);
  if (flags & ~1u) Corrupt("unknown flags " + std::to_string(flags));
  StatsDelta d;
  d.dirty_ = flags & 1u;
  if (Load<uint64_t>(p + 2) == 0) {
    // Empty: the rest must be exactly what Encode writes for it.
    if (d.Encode() != bytes) Corrupt("an empty delta with fields set");
    return d;
  }
  d.count_ = Load<uint64_t>(p + 2);
  d.non_finite_ = Load<uint64_t>(p + 10);
  d.first_step_ = Load<int64_t>(p + 18);
  d.last_step_ = Load<int64_t>(p + 26);
  d.last_seq_ = Load<uint64_t>(p + 34);
  d.last_ = Load<double>(p + 42);
  d.last_timestamp_us_ = Load<int64_t>(p + 50);
  d.min_ = Load<double>(p + 58);
  d.min_step_ = Load<int64_t>(p + 66);
  d.max_ = Load<double>(p + 74);
  d.max_step_ = Load<int64_t>(p + 82);

  if (d.non_finite_ > d.count_) Corrupt("more non-finite points than points");
  if (d.first_step_ > d.last_step_) Corrupt("first step after last step");
  const bool any_finite = d.non_finite_ < d.count_;
  if (std::isfinite(d.last_) ? !any_finite : d.non_finite_ == 0) {
    Corrupt("last value contradicts the non-finite count");
  }
  if (any_finite) {
    if (!std::isfinite(d.min_) || !std::isfinite(d.max_) || d.min_ > d.max_ ||
        d.min_step_ < d.first_step_ || d.min_step_ > d.last_step_ || d.max_step_ < d.first_step_ ||
        d.max_step_ > d.last_step_) {
      Corrupt("inconsistent minimum or maximum");
    }
  } else if (!std::isnan(d.min_) || !std::isnan(d.max_) || d.min_step_ != 0 || d.max_step_ != 0) {
    Corrupt("minimum or maximum set without finite points");
  }
  return d;
}

StatsDelta ExactStats(std::span<const Point> points) {
  std::vector<const Point*> sorted;
  sorted.reserve(points.size());
  for (const Point& p : points) sorted.push_back(&p);
  // Within a step, the surviving point sorts last.
  std::sort(sorted.begin(), sorted.end(), [](const Point* a, const Point* b) {
    if (IsLater(a->step, a->seq, a->value, b->step, b->seq, b->value)) return false;
    if (IsLater(b->step, b->seq, b->value, a->step, a->seq, a->value)) return true;
    return a->timestamp_us < b->timestamp_us;
  });
  StatsDelta delta;
  for (size_t i = 0; i < sorted.size(); i++) {
    const Point& p = *sorted[i];
    if (i + 1 < sorted.size() && sorted[i + 1]->step == p.step) continue;  // overwritten
    delta.Add(p.step, p.value, p.timestamp_us, p.seq);
  }
  return delta;
}

nlohmann::json DoubleToJson(double d) {
  if (std::isnan(d)) return nullptr;
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return d;
}

std::optional<double> DoubleFromJson(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (v == "Infinity") return std::numeric_limits<double>::infinity();
  if (v == "-Infinity") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

namespace {

[[noreturn]] void BadJson(const char* key, const char* why) {
  throw Error(Code::kInvalidArgument, std::string("series statistics JSON: ") + key + " " + why);
}

const nlohmann::json& Field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) BadJson(key, "is missing");
  return *it;
}

double DoubleField(const nlohmann::json& j, const char* key) {
  if (auto d = DoubleFromJson(Field(j, key))) return *d;
  BadJson(key, "is not a number, null, \"Infinity\" or \"-Infinity\"");
}

int64_t Int64Field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = Field(j, key);
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  BadJson(key, "is not a 64-bit signed integer");
}

uint64_t Uint64Field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = Field(j, key);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  BadJson(key, "is not a 64-bit unsigned integer");
}

}  // namespace

void to_json(nlohmann::json& j, const SeriesStats& s) {
  j = nlohmann::json{{"count", s.count},           {"first_step", s.first_step},
                     {"last_step", s.last_step},   {"last", DoubleToJson(s.last)},
                     {"min", DoubleToJson(s.min)}, {"min_step", s.min_step},
                     {"max", DoubleToJson(s.max)}, {"max_step", s.max_step},
                     {"non_finite", s.non_finite}, {"last_timestamp_us", s.last_timestamp_us}};
}

void from_json(const nlohmann::json& j, SeriesStats& s) {
  if (!j.is_object()) throw Error(Code::kInvalidArgument, "series statistics JSON: not an object");
  s.count = Uint64Field(j, "count");
  s.first_step = Int64Field(j, "first_step");
  s.last_step = Int64Field(j, "last_step");
  s.last = DoubleField(j, "last");
  s.min = DoubleField(j, "min");
  s.min_step = Int64Field(j, "min_step");
  s.max = DoubleField(j, "max");
  s.max_step = Int64Field(j, "max_step");
  s.non_finite = Uint64Field(j, "non_finite");
  s.last_timestamp_us = Int64Field(j, "last_timestamp_us");
}

}  // namespace kv0::tracking
