// Tests of series statistics deltas: semantics, merging, encoding, ExactStats.

#include "tracking/series_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kv0/error.h"

namespace kv0::tracking {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

StatsDelta Of(const std::vector<Point>& points) {
  StatsDelta d;
  for (const Point& p : points) d.Add(p.step, p.value, p.timestamp_us, p.seq);
  return d;
}

// Equal field by field, doubles compared by bits (so NaN matches NaN).
void ExpectSame(const SeriesStats& a, const SeriesStats& b) {
  auto bits = [](double d) { return std::bit_cast<uint64_t>(d); };
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.first_step, b.first_step);
  EXPECT_EQ(a.last_step, b.last_step);
  EXPECT_EQ(bits(a.last), bits(b.last)) << a.last << " vs " << b.last;
  EXPECT_EQ(bits(a.min), bits(b.min)) << a.min << " vs " << b.min;
  EXPECT_EQ(a.min_step, b.min_step);
  EXPECT_EQ(bits(a.max), bits(b.max)) << a.max << " vs " << b.max;
  EXPECT_EQ(a.max_step, b.max_step);
  EXPECT_EQ(a.non_finite, b.non_finite);
  EXPECT_EQ(a.last_timestamp_us, b.last_timestamp_us);
}

template <typename F>
void ExpectCode(Code code, F&& f) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
  }
}

// The statistics computed straight from the rules in the header, with no merging.
SeriesStats Naive(const std::vector<Point>& points) {
  SeriesStats s;
  s.count = points.size();
  const Point* last = nullptr;
  const Point* min = nullptr;
  const Point* max = nullptr;
  s.first_step = std::numeric_limits<int64_t>::max();
  s.last_timestamp_us = std::numeric_limits<int64_t>::min();
  for (const Point& p : points) {
    s.first_step = std::min(s.first_step, p.step);
    s.last_timestamp_us = std::max(s.last_timestamp_us, p.timestamp_us);
    if (!last || p.step > last->step || (p.step == last->step && p.seq > last->seq) ||
        (p.step == last->step && p.seq == last->seq &&
         std::bit_cast<uint64_t>(p.value) > std::bit_cast<uint64_t>(last->value))) {
      last = &p;
    }
    if (!std::isfinite(p.value)) {
      s.non_finite++;
      continue;
    }
    // Sort keys with -0.0 below +0.0.
    auto key = [](const Point& q) { return std::pair(q.value, std::signbit(q.value) ? 0 : 1); };
    if (!min || key(p) < key(*min) || (key(p) == key(*min) && p.step < min->step)) min = &p;
    if (!max || key(p) > key(*max) || (key(p) == key(*max) && p.step < max->step)) max = &p;
  }
  s.last_step = last->step;
  s.last = last->value;
  s.min = min ? min->value : kNaN;
  s.min_step = min ? min->step : 0;
  s.max = max ? max->value : kNaN;
  s.max_step = max ? max->step : 0;
  return s;
}

// Random points drawn to hit ties: few distinct steps and values, signed
// zeros, NaN and infinities, and occasionally a repeated seq.
std::vector<Point> RandomPoints(std::mt19937_64& rng, size_t n) {
  static const double kValues[] = {-2.5, -1, -0.0, 0.0, 1, 3.25, 1e300, kNaN, kInf, -kInf};
  std::vector<Point> points;
  for (size_t i = 0; i < n; i++) {
    Point p;
    p.step = static_cast<int64_t>(rng() % 9) - 3;
    p.value = kValues[rng() % std::size(kValues)];
    p.timestamp_us = static_cast<int64_t>(rng() % 1000) - 100;
    p.seq = rng() % 8 == 0 ? 7 : rng() % 100000;
    points.push_back(p);
  }
  return points;
}

TEST(SeriesStatsTest, EmptyDelta) {
  StatsDelta d;
  EXPECT_TRUE(d.empty());
  EXPECT_FALSE(d.dirty());
  EXPECT_EQ(d.last_step(), -1);
  ExpectCode(Code::kInvalidArgument, [&] { d.Finish(); });
  d.set_dirty();
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(d.dirty());
}

TEST(SeriesStatsTest, OnePoint) {
  StatsDelta d;
  d.Add(7, 0.5, 1234, 99);
  EXPECT_FALSE(d.empty());
  EXPECT_FALSE(d.dirty());
  EXPECT_EQ(d.last_step(), 7);
  SeriesStats want{1, 7, 7, 0.5, 0.5, 7, 0.5, 7, 0, 1234};
  EXPECT_EQ(d.Finish(), want);
}

TEST(SeriesStatsTest, LastIsGreatestStepThenGreatestSeq) {
  StatsDelta d;
  d.Add(5, 1.0, 0, 10);
  d.Add(5, 2.0, 0, 9);  // same step, older write
  EXPECT_EQ(d.Finish().last, 1.0);
  d.Add(5, 3.0, 0, 11);  // same step, newer write
  EXPECT_EQ(d.Finish().last, 3.0);
  d.Add(6, 4.0, 0, 1);  // greater step wins whatever its seq
  EXPECT_EQ(d.Finish().last, 4.0);
  d.Add(2, 5.0, 0, 100);
  SeriesStats s = d.Finish();
  EXPECT_EQ(s.last, 4.0);
  EXPECT_EQ(s.first_step, 2);
  EXPECT_EQ(s.last_step, 6);
  EXPECT_EQ(s.count, 5u);  // a delta counts every point; dedup is ExactStats' job
}

TEST(SeriesStatsTest, LastTimestampIsTheGreatest) {
  StatsDelta d;
  d.Add(1, 1, 500, 1);
  d.Add(2, 1, 300, 2);
  EXPECT_EQ(d.Finish().last_timestamp_us, 500);
  d.Add(0, 1, -5, 3);
  EXPECT_EQ(d.Finish().last_timestamp_us, 500);
}

TEST(SeriesStatsTest, NonFiniteCountedAndExcludedFromMinMax) {
  StatsDelta d;
  d.Add(0, kNaN, 0, 1);
  d.Add(1, 2.0, 0, 2);
  d.Add(2, kInf, 0, 3);
  d.Add(3, -1.0, 0, 4);
  d.Add(4, -kInf, 0, 5);
  SeriesStats s = d.Finish();
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.non_finite, 3u);
  EXPECT_EQ(s.min, -1.0);
  EXPECT_EQ(s.min_step, 3);
  EXPECT_EQ(s.max, 2.0);
  EXPECT_EQ(s.max_step, 1);
  EXPECT_EQ(s.last, -kInf);
  EXPECT_EQ(s.last_step, 4);
}

TEST(SeriesStatsTest, AllNonFinite) {
  StatsDelta d;
  d.Add(3, kInf, 10, 1);
  d.Add(4, kNaN, 20, 2);
  d.Add(5, -kInf, 30, 3);
  SeriesStats s = d.Finish();
  EXPECT_EQ(s.count, 3u);
  EXPECT_EQ(s.non_finite, 3u);
  EXPECT_TRUE(std::isnan(s.min));
  EXPECT_TRUE(std::isnan(s.max));
  EXPECT_EQ(s.min_step, 0);
  EXPECT_EQ(s.max_step, 0);
  EXPECT_EQ(s.last, -kInf);
  EXPECT_EQ(s.first_step, 3);
  EXPECT_EQ(s.last_step, 5);
  // Merging in a finite point gives min and max their first values.
  StatsDelta f;
  f.Add(9, 1.5, 0, 4);
  d.Merge(f);
  s = d.Finish();
  EXPECT_EQ(s.min, 1.5);
  EXPECT_EQ(s.max_step, 9);
}

TEST(SeriesStatsTest, MinMaxTiesGoToTheSmallerStep) {
  for (bool reverse : {false, true}) {
    std::vector<Point> points = {{4, 1.0, 0, 1}, {8, 1.0, 0, 2}, {2, 1.0, 0, 3}, {6, 1.0, 0, 4}};
    if (reverse) std::reverse(points.begin(), points.end());
    SeriesStats s = Of(points).Finish();
    EXPECT_EQ(s.min_step, 2);
    EXPECT_EQ(s.max_step, 2);
  }
  // Signed zeros: -0.0 is the smaller.
  for (bool reverse : {false, true}) {
    std::vector<Point> points = {{1, 0.0, 0, 1}, {2, -0.0, 0, 2}};
    if (reverse) std::reverse(points.begin(), points.end());
    SeriesStats s = Of(points).Finish();
    EXPECT_TRUE(std::signbit(s.min));
    EXPECT_EQ(s.min_step, 2);
    EXPECT_FALSE(std::signbit(s.max));
    EXPECT_EQ(s.max_step, 1);
  }
}

TEST(SeriesStatsTest, AddMatchesNaiveStatistics) {
  for (uint64_t seed = 0; seed < 500; seed++) {
    std::mt19937_64 rng(seed);
    std::vector<Point> points = RandomPoints(rng, 1 + rng() % 30);
    SCOPED_TRACE("seed " + std::to_string(seed));
    ExpectSame(Of(points).Finish(), Naive(points));
  }
}

TEST(SeriesStatsTest, MergeIsCommutativeAndAssociative) {
  for (uint64_t seed = 0; seed < 1000; seed++) {
    std::mt19937_64 rng(seed);
    // Some deltas are empty, some dirty (an empty one can be dirty too).
    StatsDelta d[3];
    for (StatsDelta& x : d) {
      x = Of(RandomPoints(rng, rng() % 4 == 0 ? 0 : rng() % 6));
      if (rng() % 4 == 0) x.set_dirty();
    }
    SCOPED_TRACE("seed " + std::to_string(seed));
    StatsDelta ab = d[0], ba = d[1];
    ab.Merge(d[1]);
    ba.Merge(d[0]);
    EXPECT_EQ(ab.Encode(), ba.Encode());
    StatsDelta ab_c = ab, bc = d[1];
    ab_c.Merge(d[2]);
    bc.Merge(d[2]);
    StatsDelta a_bc = d[0];
    a_bc.Merge(bc);
    EXPECT_EQ(ab_c.Encode(), a_bc.Encode());
    // Empty is the identity.
    StatsDelta e = d[0];
    e.Merge(StatsDelta());
    EXPECT_EQ(e.Encode(), d[0].Encode());
  }
}

TEST(SeriesStatsTest, EverySplitAndOrderOfSmallSetsMatchesOneDelta) {
  for (uint64_t seed = 0; seed < 40; seed++) {
    std::mt19937_64 rng(seed);
    const std::vector<Point> points = RandomPoints(rng, 5);
    const std::string want = Of(points).Encode();
    std::vector<int> order(points.size());
    std::iota(order.begin(), order.end(), 0);
    do {
      // Every way to cut this order into consecutive parts, each part a delta,
      // folded left to right; bit i of cuts ends a part after position i.
      for (unsigned cuts = 0; cuts < (1u << (points.size() - 1)); cuts++) {
        StatsDelta total, part;
        for (size_t i = 0; i < order.size(); i++) {
          const Point& p = points[order[i]];
          part.Add(p.step, p.value, p.timestamp_us, p.seq);
          if (i + 1 == order.size() || (cuts >> i & 1)) {
            total.Merge(part);
            part = StatsDelta();
          }
        }
        ASSERT_EQ(total.Encode(), want) << "seed " << seed << " cuts " << cuts;
      }
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

// Splits points at random into deltas (some empty) and merges them in a random
// tree: that must equal Add-ing every point to one delta.
TEST(SeriesStatsTest, RandomSplitsAndMergeTreesMatchOneDelta) {
  for (uint64_t seed = 0; seed < 2000; seed++) {
    std::mt19937_64 rng(seed);
    std::vector<Point> points = RandomPoints(rng, rng() % 40);
    const bool dirty = rng() % 3 == 0;
    StatsDelta want = Of(points);
    if (dirty) want.set_dirty();

    std::vector<StatsDelta> parts(1 + rng() % 8);
    for (const Point& p : points)
      parts[rng() % parts.size()].Add(p.step, p.value, p.timestamp_us, p.seq);
    if (dirty) parts[rng() % parts.size()].set_dirty();
    while (parts.size() > 1) {
      size_t i = rng() % parts.size(), j = rng() % (parts.size() - 1);
      if (j >= i) j++;
      parts[i].Merge(parts[j]);
      parts.erase(parts.begin() + static_cast<ptrdiff_t>(j));
    }
    ASSERT_EQ(parts[0].Encode(), want.Encode()) << "seed " << seed;
    ASSERT_EQ(parts[0].dirty(), dirty);
  }
}

TEST(SeriesStatsTest, DirtyIsOredByMerge) {
  StatsDelta a, b;
  a.Add(1, 1, 0, 1);
  b.set_dirty();
  a.Merge(b);
  EXPECT_TRUE(a.dirty());
  EXPECT_EQ(a.Finish().count, 1u);
  StatsDelta c;
  c.Merge(a);
  EXPECT_TRUE(c.dirty());
}

TEST(SeriesStatsTest, EncodeDecodeRoundTrip) {
  std::vector<StatsDelta> deltas(5);
  deltas[1].set_dirty();
  deltas[2].Add(-5, kNaN, -7, 3);
  deltas[2].Add(-9, kInf, 1, 2);
  deltas[3].Add(-1, -kInf, 0, 0);
  deltas[3].Add(std::numeric_limits<int64_t>::min(), -0.0, std::numeric_limits<int64_t>::max(),
                std::numeric_limits<uint64_t>::max());
  deltas[3].Add(std::numeric_limits<int64_t>::max(), 1e-310, 0, 1);
  deltas[3].set_dirty();
  deltas[4].Add(3, 2.5, 100, 1);
  for (uint64_t seed = 0; seed < 200; seed++) {
    std::mt19937_64 rng(seed);
    deltas.push_back(Of(RandomPoints(rng, rng() % 10)));
    if (rng() % 2) deltas.back().set_dirty();
  }
  for (const StatsDelta& d : deltas) {
    std::string bytes = d.Encode();
    ASSERT_EQ(bytes.size(), StatsDelta::kEncodedSize);
    StatsDelta back = StatsDelta::Decode(bytes);
    EXPECT_EQ(back.Encode(), bytes);
    EXPECT_EQ(back.dirty(), d.dirty());
    EXPECT_EQ(back.empty(), d.empty());
    EXPECT_EQ(back.last_step(), d.last_step());
    if (!d.empty()) ExpectSame(back.Finish(), d.Finish());
  }
}

TEST(SeriesStatsTest, EncodingLayout) {
  StatsDelta d;
  d.Add(-2, 1.5, 0x0102030405060708, 0x1122334455667788);
  d.set_dirty();
  std::string b = d.Encode();
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[1], 1);
  EXPECT_EQ(b[2], 1);  // count, little-endian
  EXPECT_EQ(std::string(b, 3, 7), std::string(7, '\0'));
  EXPECT_EQ(std::string(b, 18, 8),
            std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8));  // first_step -2
  EXPECT_EQ(static_cast<uint8_t>(b[34]), 0x88);                   // seq of last, low byte first
  EXPECT_EQ(static_cast<uint8_t>(b[41]), 0x11);
  EXPECT_EQ(static_cast<uint8_t>(b[50]), 0x08);  // last_timestamp_us
  EXPECT_EQ(static_cast<uint8_t>(b[49]), 0x3f);  // top byte of 1.5 (0x3ff8000000000000)
}

TEST(SeriesStatsTest, DecodeRejectsBadInput) {
  StatsDelta d;
  d.Add(1, 2, 3, 4);
  const std::string good = d.Encode();
  const std::string empty = StatsDelta().Encode();
  auto corrupt = [](std::string bytes) {
    ExpectCode(Code::kCorruption, [&] { StatsDelta::Decode(bytes); });
  };
  for (const std::string& base : {good, empty}) {
    for (size_t n = 0; n < base.size(); n++) corrupt(base.substr(0, n));  // truncated
    corrupt(base + '\0');                                                 // over-long
    for (char version : {'\0', '\2', '\xff'}) {
      std::string b = base;
      b[0] = version;
      corrupt(b);
    }
    std::string b = base;
    b[1] = 2;  // unknown flag
    corrupt(b);
  }
  std::string b = good;
  b[10] = 2;  // non_finite > count
  corrupt(b);
  b = empty;
  b[20] = 1;  // an empty delta with a first step
  corrupt(b);
  b = good;
  b[66] = 9;  // min_step outside [first_step, last_step]
  corrupt(b);
}

TEST(SeriesStatsTest, ExactStatsKeepsTheLatestPointOfEachStep) {
  std::vector<Point> points = {
      {1, 10.0, 100, 1}, {2, 20.0, 200, 2}, {1, 11.0, 300, 5},  // step 1 written again
      {3, kNaN, 400, 4}, {3, 30.0, 150, 3},                     // older write of step 3
  };
  StatsDelta exact = ExactStats(points);
  EXPECT_FALSE(exact.dirty());
  SeriesStats s = exact.Finish();
  EXPECT_EQ(s.count, 3u);
  EXPECT_EQ(s.non_finite, 1u);
  EXPECT_EQ(s.min, 11.0);
  EXPECT_EQ(s.min_step, 1);
  EXPECT_EQ(s.max, 20.0);
  EXPECT_EQ(s.max_step, 2);
  EXPECT_TRUE(std::isnan(s.last));
  EXPECT_EQ(s.last_timestamp_us, 400);
  EXPECT_EQ(exact.Encode(), Of({{2, 20.0, 200, 2}, {1, 11.0, 300, 5}, {3, kNaN, 400, 4}}).Encode());
  EXPECT_TRUE(ExactStats({}).empty());
}

TEST(SeriesStatsTest, ExactStatsEqualsAddingTheSurvivors) {
  for (uint64_t seed = 0; seed < 500; seed++) {
    std::mt19937_64 rng(seed);
    std::vector<Point> points = RandomPoints(rng, rng() % 40);
    for (size_t i = 0; i < points.size(); i++) points[i].seq = rng() % 1000 * 64 + i;  // unique
    std::map<int64_t, Point> survivors;
    for (const Point& p : points) {
      auto [it, inserted] = survivors.emplace(p.step, p);
      if (!inserted && p.seq > it->second.seq) it->second = p;
    }
    std::vector<Point> kept;
    for (const auto& [step, p] : survivors) kept.push_back(p);
    std::shuffle(kept.begin(), kept.end(), rng);
    StatsDelta exact = ExactStats(points);
    ASSERT_EQ(exact.Encode(), Of(kept).Encode()) << "seed " << seed;
    if (!kept.empty()) ExpectSame(exact.Finish(), Naive(kept));
  }
}

TEST(SeriesStatsTest, JsonRoundTrip) {
  SeriesStats finite{12, -3, 40, 0.25, -1.5, 7, 8.0, 9, 2, 1700000000000000};
  SeriesStats odd{3, 0, 2, kInf, kNaN, 0, kNaN, 0, 3, -1};
  for (const SeriesStats& s : {finite, odd}) {
    nlohmann::json j = s;
    SeriesStats back = nlohmann::json::parse(j.dump()).get<SeriesStats>();
    ExpectSame(back, s);
  }
  EXPECT_EQ(nlohmann::json::parse(nlohmann::json(finite).dump()).get<SeriesStats>(), finite);

  nlohmann::json j = odd;
  EXPECT_EQ(j["last"], "Infinity");
  EXPECT_TRUE(j["min"].is_null());
  for (const char* key : {"count", "first_step", "last_step", "last", "min", "min_step", "max",
                          "max_step", "non_finite", "last_timestamp_us"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.size(), 10u);
}

TEST(SeriesStatsTest, JsonRejectsBadInput) {
  nlohmann::json good = SeriesStats{1, 0, 0, 1, 1, 0, 1, 0, 0, 0};
  auto rejected = [](const nlohmann::json& j) {
    ExpectCode(Code::kInvalidArgument, [&] { j.get<SeriesStats>(); });
  };
  auto bad = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = good;
    j[key] = value;
    rejected(j);
  };
  nlohmann::json missing = good;
  missing.erase("last_timestamp_us");
  rejected(missing);
  bad("count", -1);
  bad("count", 1.5);
  bad("first_step", "3");
  bad("last_step", std::numeric_limits<uint64_t>::max());
  bad("min", "nan");
  bad("max", true);
  rejected(nlohmann::json::array());
}

}  // namespace
}  // namespace kv0::tracking
