// A randomized model test: hundreds of thousands of random operations on a
// DB and on a std::map, with flushes, compactions, reopens and refreshes
// interleaved; after every step the keys it touched and a random seek are
// compared, and after every structural event the whole store is.

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kv0/kv.h"
#include "test_util.h"

namespace kv0::kv {
namespace {

class Model {
 public:
  explicit Model(uint64_t seed) : rng_(seed) {}

  std::string Key() {
    // A small key space makes overwrites, deletes and ranges collide often;
    // a few keys are empty or all 0xFF.
    int n = std::uniform_int_distribution<int>(0, 599)(rng_);
    if (n == 0) return "";
    if (n == 1) return std::string(8, '\xff');
    char buf[16];
    std::snprintf(buf, sizeof(buf), "key%04d", n);
    return buf;
  }
  std::string Value() {
    int size = Chance(10) ? std::uniform_int_distribution<int>(65, 3000)(rng_)
                          : std::uniform_int_distribution<int>(0, 40)(rng_);
    std::string v(size, 'a' + static_cast<char>(rng_() % 26));
    v += std::to_string(rng_());
    return v;
  }
  bool Chance(int percent) { return std::uniform_int_distribution<int>(0, 99)(rng_) < percent; }
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  std::map<std::string, std::string> state;

 private:
  std::mt19937_64 rng_;
};

class KvModelTest : public ::testing::Test {
 protected:
  Options Opts() {
    Options o;
    o.wal_dir = dir_ / "wal";
    o.flush_interval = std::chrono::hours(1);
    o.write_buffer_size = 16 << 10;
    o.max_fragments = 4;
    o.lazy_value_threshold = 64;
    o.value_cache_size = 64 << 10;
    o.snapshot_min_entries = 100;
    o.tombstone_grace = std::chrono::seconds(0);
    return o;
  }

  void ExpectKey(DB& db, const Model& m, const std::string& key, int step) {
    auto it = m.state.find(key);
    auto got = db.Get(key);
    if (it == m.state.end()) {
      ASSERT_EQ(got, std::nullopt) << "step " << step << " key " << key;
    } else {
      ASSERT_TRUE(got.has_value()) << "step " << step << " key " << key;
      ASSERT_EQ(*got, it->second) << "step " << step << " key " << key;
    }
  }

  void ExpectAll(DB& db, const Model& m, int step) {
    auto it = db.NewIterator();
    auto expected = m.state.begin();
    for (it->SeekToFirst(); it->Valid(); it->Next(), ++expected) {
      ASSERT_NE(expected, m.state.end()) << "step " << step << ": extra key " << it->key();
      ASSERT_EQ(it->key(), expected->first) << "step " << step;
      ASSERT_EQ(it->value(), expected->second) << "step " << step;
    }
    ASSERT_EQ(expected, m.state.end()) << "step " << step << ": missing " << expected->first;
  }

  void ExpectSeek(DB& db, const Model& m, const std::string& target, bool forward, int step) {
    auto it = db.NewIterator();
    if (forward) {
      it->Seek(target);
      auto want = m.state.lower_bound(target);
      if (want == m.state.end()) {
        ASSERT_FALSE(it->Valid()) << "step " << step;
      } else {
        ASSERT_TRUE(it->Valid()) << "step " << step;
        ASSERT_EQ(it->key(), want->first) << "step " << step;
        ASSERT_EQ(it->value(), want->second) << "step " << step;
      }
    } else {
      it->SeekForPrev(target);
      auto want = m.state.upper_bound(target);
      if (want == m.state.begin()) {
        ASSERT_FALSE(it->Valid()) << "step " << step;
      } else {
        --want;
        ASSERT_TRUE(it->Valid()) << "step " << step;
        ASSERT_EQ(it->key(), want->first) << "step " << step;
      }
    }
  }

  testing::TempDir dir_;
};

TEST_F(KvModelTest, RandomOperationsMatchAnOrderedMap) {
  // KV0_MODEL_STEPS: a shorter run for the sanitizer builds (50,000 there).
  const int kSteps = static_cast<int>(testing::EnvNumber("KV0_MODEL_STEPS", 200000));
  Model m(20261130);
  std::string path = dir_ / "db";
  auto db = DB::Open(path, Opts());
  uint64_t compactions = 0, flushes = 0;  // across every handle of the run
  uint64_t asked_flushes = 0;             // Flush() calls, committing or not
  for (int step = 0; step < kSteps; ++step) {
    int what = m.Pick(1000);
    if (what < 550) {
      std::string k = m.Key(), v = m.Value();
      db->Put(k, v);
      m.state[k] = v;
      ExpectKey(*db, m, k, step);
    } else if (what < 800) {
      std::string k = m.Key();
      db->Delete(k);
      m.state.erase(k);
      ExpectKey(*db, m, k, step);
    } else if (what < 830) {
      std::string a = m.Key(), b = m.Key();
      if (a > b) std::swap(a, b);
      db->DeleteRange(a, b);
      m.state.erase(m.state.lower_bound(a), m.state.lower_bound(b));
      ExpectSeek(*db, m, a, true, step);
    } else if (what < 900) {
      WriteBatch batch;
      std::vector<std::string> touched;
      for (int i = m.Pick(5) + 1; i > 0; --i) {
        std::string k = m.Key();
        touched.push_back(k);
        if (m.Chance(70)) {
          std::string v = m.Value();
          batch.Put(k, v);
          m.state[k] = v;
        } else {
          batch.Delete(k);
          m.state.erase(k);
        }
      }
      db->Write(batch);
      for (const auto& k : touched) ExpectKey(*db, m, k, step);
    } else if (what < 990) {
      ExpectSeek(*db, m, m.Key(), m.Chance(50), step);
    } else if (what < 995) {
      db->Flush();
      asked_flushes++;
      ExpectAll(*db, m, step);
    } else if (what < 997) {
      db->CompactRange();
      ExpectAll(*db, m, step);
    } else if (what < 998) {
      db->Refresh();
      ExpectAll(*db, m, step);
    } else {
      // Reopen: sometimes cleanly (snapshot), sometimes with the buffer
      // still in the WAL (a destroyed handle without close replays nothing
      // here, so close always; the WAL tests cover crashes).
      compactions += db->GetStats().compactions;
      flushes += db->GetStats().flushes;
      db.reset();
      db = DB::Open(path, Opts());
      ExpectAll(*db, m, step);
    }
    if (HasFatalFailure()) return;
  }
  compactions += db->GetStats().compactions;
  flushes += db->GetStats().flushes;
  // A full write buffer flushed by itself: more commits than Flush() calls,
  // which commit at most once each. Compactions ran often (2 steps in 1,000
  // ask for one, and max_fragments starts more).
  EXPECT_GT(flushes, asked_flushes);
  EXPECT_GT(compactions, static_cast<uint64_t>(kSteps) / 4000);
  // Range deletes often leave fewer entries than snapshot_min_entries, and
  // then a close saves no snapshot: enough keys that the last close must.
  for (int i = 0; i < 200; ++i) {
    std::string k = "snapshot" + std::to_string(i), v = m.Value();
    db->Put(k, v);
    m.state[k] = v;
  }
  db.reset();
  db = DB::Open(path, Opts());
  EXPECT_TRUE(db->GetStats().opened_from_snapshot);
  ExpectAll(*db, m, kSteps);
}

}  // namespace
}  // namespace kv0::kv
