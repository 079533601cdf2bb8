// The deterministic workloads of the crash tests: operation i depends only
// on (seed, i), or record i only on i, so the parent can rebuild what the
// child acknowledged.
#pragma once

#include <cstdio>
#include <map>
#include <random>
#include <string>

#include "kv0/kv.h"

namespace kv0::testing {

// Record i of the mapped-WAL crash test: mostly small, every tenth big, so
// that a kill can land in the middle of a long copy.
inline std::string MappedCrashPayload(uint64_t i) {
  size_t size = i % 10 == 9 ? 20000 + i % 5000 : 16 + i % 200;
  std::string payload = std::to_string(i) + ":";
  for (size_t j = payload.size(); j < size; ++j) payload.push_back(static_cast<char>(i * 31 + j));
  return payload;
}

inline kv::WriteBatch CrashOp(uint64_t seed, uint64_t i) {
  std::mt19937_64 rng(seed * 1'000'003 + i);
  auto key = [&] {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "k%03d", static_cast<int>(rng() % 200));
    return std::string(buf);
  };
  auto value = [&] { return "v" + std::to_string(i) + std::string(rng() % 50, 'x'); };
  kv::WriteBatch batch;
  int kind = static_cast<int>(rng() % 100);
  if (kind < 60) {
    batch.Put(key(), value());
  } else if (kind < 75) {
    batch.Delete(key());
  } else if (kind < 85) {
    std::string a = key(), b = key();
    if (a > b) std::swap(a, b);
    batch.DeleteRange(a, b);
  } else {
    for (int n = 2 + static_cast<int>(rng() % 4); n > 0; --n) {
      if (rng() % 4 == 0) {
        batch.Delete(key());
      } else {
        batch.Put(key(), value());
      }
    }
  }
  return batch;
}

inline void ApplyToModel(const kv::WriteBatch& batch, std::map<std::string, std::string>& m) {
  for (const auto& op : batch.ops()) {
    switch (op.kind) {
      case kv::WriteBatch::Kind::kPut:
        m[op.key] = op.value;
        break;
      case kv::WriteBatch::Kind::kDelete:
        m.erase(op.key);
        break;
      case kv::WriteBatch::Kind::kDeleteRange:
        m.erase(m.lower_bound(op.key), m.lower_bound(op.value));
        break;
    }
  }
}

}  // namespace kv0::testing

namespace kv0::testing {

// Operation i of the tracking overwrite crash test: mostly a point at one of
// 30 steps of one of three series (so most points overwrite an earlier
// one), now and then a flush or an optimize. Each point's value is unique.
struct OverwriteOp {
  enum Kind { kTrack, kFlush, kOptimize } kind = kTrack;
  int series = 0;  // index into OverwriteSeries()
  int64_t step = 0;
  double value = 0;
};

inline const char* OverwriteSeries(int i) {
  static const char* names[] = {"loss", "acc", "lr"};
  return names[i];
}

inline OverwriteOp MakeOverwriteOp(uint64_t seed, int64_t i) {
  std::mt19937_64 rng(seed * 1'000'003 + static_cast<uint64_t>(i));
  OverwriteOp op;
  int roll = static_cast<int>(rng() % 1000);
  if (roll < 20) {
    op.kind = OverwriteOp::kFlush;
  } else if (roll < 24) {
    op.kind = OverwriteOp::kOptimize;
  }
  op.series = static_cast<int>(rng() % 3);
  op.step = static_cast<int64_t>(rng() % 30);
  op.value = static_cast<double>(i) + 0.5;
  return op;
}

}  // namespace kv0::testing
