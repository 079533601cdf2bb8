// kv0::kv::DB on real Lance datasets (local directories and memory://).

#include "kv0/kv.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "kv/op_log.h"
#include "test_util.h"
#include "util/clock.h"
#include "util/location.h"
#include "wal/wal.h"

namespace kv0::kv {
namespace {

class KvTest : public ::testing::Test {
 protected:
  Options Opts() {
    Options o;
    o.wal_dir = dir_ / "wal";
    o.flush_interval = std::chrono::hours(1);  // tests flush explicitly
    return o;
  }
  std::string Path(const std::string& name = "db") { return dir_ / name; }
  std::unique_ptr<DB> Open(const Options& o) { return DB::Open(Path(), o); }
  std::unique_ptr<DB> Open() { return Open(Opts()); }

  static std::vector<std::pair<std::string, std::string>> All(DB& db) {
    std::vector<std::pair<std::string, std::string>> out;
    auto it = db.NewIterator();
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      out.emplace_back(std::string(it->key()), std::string(it->value()));
    }
    return out;
  }

  testing::TempDir dir_;
};

TEST_F(KvTest, PutGetDelete) {
  auto db = Open();
  EXPECT_EQ(db->Get("a"), std::nullopt);
  db->Put("a", "1");
  db->Put("b", "2");
  EXPECT_EQ(db->Get("a"), "1");
  db->Put("a", "3");
  EXPECT_EQ(db->Get("a"), "3");
  db->Delete("a");
  EXPECT_EQ(db->Get("a"), std::nullopt);
  EXPECT_FALSE(db->KeyMayExist("a"));
  EXPECT_TRUE(db->KeyMayExist("b"));
  db->Delete("never-there");
  EXPECT_EQ(db->Get("never-there"), std::nullopt);
}

TEST_F(KvTest, EmptyKeysValuesAndBinary) {
  auto db = Open();
  std::string ff(64, '\xff');
  std::string zeros("\0\0\0", 3);
  db->Put("", "empty key");
  db->Put("k", "");
  db->Put(ff, zeros);
  db->Flush();
  db.reset();
  db = Open();
  EXPECT_EQ(db->Get(""), "empty key");
  EXPECT_EQ(db->Get("k"), "");
  EXPECT_EQ(db->Get(ff), zeros);
  auto all = All(*db);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.front().first, "");
  EXPECT_EQ(all.back().first, ff);
}

TEST_F(KvTest, KeysSortByteWise) {
  auto db = Open();
  for (std::string k : {"b", "a", "\x80", "\x01", "ab", "\xff\xff", "A"}) db->Put(k, k);
  std::vector<std::string> keys;
  for (auto& [k, v] : All(*db)) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"\x01", "A", "a", "ab", "b", "\x80", "\xff\xff"}));
}

TEST_F(KvTest, DeleteRange) {
  auto db = Open();
  for (char c = 'a'; c <= 'j'; ++c) db->Put(std::string(1, c), "v");
  db->DeleteRange("c", "f");
  EXPECT_EQ(db->Get("b"), "v");
  EXPECT_EQ(db->Get("c"), std::nullopt);
  EXPECT_EQ(db->Get("e"), std::nullopt);
  EXPECT_EQ(db->Get("f"), "v");
  db->Put("d", "new");
  EXPECT_EQ(db->Get("d"), "new");
  db->Flush();
  db.reset();
  db = Open();
  EXPECT_EQ(db->Get("c"), std::nullopt);
  EXPECT_EQ(db->Get("d"), "new");
  EXPECT_EQ(All(*db).size(), 8u);
  EXPECT_THROW(db->DeleteRange("z", "a"), Error);
  db->DeleteRange("x", "x");  // empty: nothing
}

TEST_F(KvTest, WriteBatchIsAtomicAndOrdered) {
  auto db = Open();
  WriteBatch batch;
  batch.Put("a", "1");
  batch.Put("b", "2");
  batch.Delete("a");
  batch.DeleteRange("b", "c");
  batch.Put("b", "3");
  db->Write(batch);
  EXPECT_EQ(db->Get("a"), std::nullopt);
  EXPECT_EQ(db->Get("b"), "3");
  EXPECT_EQ(batch.Count(), 5u);
  db->Flush();
  auto stats = db->GetStats();
  EXPECT_EQ(stats.fragments, 1u);
}

TEST_F(KvTest, MultiGet) {
  auto db = Open();
  db->Put("a", "1");
  db->Put("c", "3");
  std::vector<std::string_view> keys = {"a", "b", "c", "a"};
  auto values = db->MultiGet(keys);
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values[0], "1");
  EXPECT_EQ(values[1], std::nullopt);
  EXPECT_EQ(values[2], "3");
  EXPECT_EQ(values[3], "1");
}

TEST_F(KvTest, TryGetAnswersFromMemoryAndWouldWaitForStoredValues) {
  auto o = Opts();
  o.lazy_value_threshold = 100;
  auto db = Open(o);
  db->Put("small", "s");
  db->Put("big", std::string(500, 'b'));
  db->Put("gone", "g");
  db->Delete("gone");
  std::string got;
  auto copy = [&](std::string_view v) { got = v; };
  // Before a flush every value is in memory, the big one too.
  EXPECT_EQ(db->TryGet("big", copy), DB::Probe::kFound);
  EXPECT_EQ(got, std::string(500, 'b'));
  db->Flush();
  got.clear();
  EXPECT_EQ(db->TryGet("small", copy), DB::Probe::kFound);
  EXPECT_EQ(got, "s");
  got = "untouched";
  EXPECT_EQ(db->TryGet("gone", copy), DB::Probe::kAbsent);
  EXPECT_EQ(db->TryGet("never", copy), DB::Probe::kAbsent);
  // Committed, the big value stays in Lance: reading it would wait.
  EXPECT_EQ(db->TryGet("big", copy), DB::Probe::kWouldWait);
  EXPECT_EQ(got, "untouched");
  EXPECT_EQ(db->Get("big"), std::string(500, 'b'));
  db->Close();
  EXPECT_THROW(db->TryGet("small", copy), Error);
}

TEST_F(KvTest, TryMultiGetAnswersEveryKeyOrNone) {
  auto o = Opts();
  o.lazy_value_threshold = 100;
  auto db = Open(o);
  db->Put("a", "1");
  db->Put("c", "3");
  std::vector<std::string_view> keys = {"a", "b", "c", "a"};
  std::vector<std::string> got(keys.size(), "-");
  auto found = [&](size_t i, std::string_view v) { got[i] = v; };
  EXPECT_EQ(db->TryMultiGet(keys, found), DB::Probe::kFound);
  EXPECT_EQ(got, (std::vector<std::string>{"1", "-", "3", "1"}));
  std::vector<std::string_view> none = {"x", "y"};
  EXPECT_EQ(db->TryMultiGet(none, found), DB::Probe::kFound);  // answered: both absent
  db->Put("big", std::string(200, 'z'));
  db->Flush();
  std::vector<std::string_view> mixed = {"a", "big"};
  EXPECT_EQ(db->TryMultiGet(mixed, found), DB::Probe::kWouldWait);
  auto values = db->MultiGet(mixed);
  EXPECT_EQ(values[1], std::string(200, 'z'));
}

TEST_F(KvTest, TryGetRacingWritersSeesOnlyWrittenValues) {
  auto o = Opts();
  o.write_buffer_size = 16 << 10;
  o.lazy_value_threshold = 64;  // some values go to Lance as flushes commit them
  auto db = Open(o);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 3000; ++i) {
      std::string v = "v" + std::to_string(i);
      if (i % 3 == 0) v += std::string(100, 'x');
      db->Put("k" + std::to_string(i % 50), v);
    }
    done = true;
  });
  // Passes until the writer is done, then one more, in which every key is
  // there. A kWouldWait says nothing about the key: Get answers.
  for (bool last = false; !last;) {
    last = done;
    for (int k = 0; k < 50; ++k) {
      std::string key = "k" + std::to_string(k);
      std::optional<std::string> got;
      DB::Probe p = db->TryGet(key, [&](std::string_view v) { got.emplace(v); });
      if (p == DB::Probe::kWouldWait) got = db->Get(key);
      if (p == DB::Probe::kFound) EXPECT_TRUE(got.has_value()) << key;
      if (p == DB::Probe::kAbsent) EXPECT_FALSE(got.has_value()) << key;
      if (!got) {
        EXPECT_FALSE(last) << key << " is missing after the writer finished";
        continue;
      }
      if (got->empty() || got->front() != 'v') {
        ADD_FAILURE() << key << " holds " << *got;  // no ASSERT: the writer still runs
        continue;
      }
      int i = std::stoi(got->substr(1));
      EXPECT_EQ(i % 50, k);
      EXPECT_EQ(got->size() > 90, i % 3 == 0) << *got;
    }
  }
  writer.join();
}

TEST_F(KvTest, IteratorSeeks) {
  auto db = Open();
  for (int i = 0; i < 1000; ++i) {
    char key[8];
    std::snprintf(key, sizeof(key), "k%04d", i * 2);
    db->Put(key, std::to_string(i));
  }
  auto it = db->NewIterator();
  EXPECT_FALSE(it->Valid());
  it->Seek("k0101");
  ASSERT_TRUE(it->Valid());
  EXPECT_EQ(it->key(), "k0102");
  it->SeekForPrev("k0101");
  ASSERT_TRUE(it->Valid());
  EXPECT_EQ(it->key(), "k0100");
  it->SeekForPrev("k0100");
  EXPECT_EQ(it->key(), "k0100");
  it->SeekToLast();
  EXPECT_EQ(it->key(), "k1998");
  it->Next();
  EXPECT_FALSE(it->Valid());
  it->SeekForPrev("a");
  EXPECT_FALSE(it->Valid());
  it->Seek("z");
  EXPECT_FALSE(it->Valid());

  // Across many chunks, both ways.
  int n = 0;
  std::string last;
  for (it->SeekToFirst(); it->Valid(); it->Next(), ++n) {
    EXPECT_LT(last, std::string(it->key()));
    last = it->key();
  }
  EXPECT_EQ(n, 1000);
  n = 0;
  for (it->SeekToLast(); it->Valid(); it->Prev()) ++n;
  EXPECT_EQ(n, 1000);
  // Changing direction in the middle of a chunk boundary.
  it->Seek("k0510");
  for (int i = 0; i < 300; ++i) it->Next();
  EXPECT_EQ(it->key(), "k1110");
  for (int i = 0; i < 300; ++i) it->Prev();
  EXPECT_EQ(it->key(), "k0510");
}

TEST_F(KvTest, IteratorSeesWritesAheadButNeverRepeats) {
  auto db = Open();
  for (int i = 0; i < 600; ++i) db->Put("k" + std::to_string(1000 + i), "v");
  auto it = db->NewIterator();
  it->SeekToFirst();
  std::set<std::string> seen;
  int i = 0;
  for (; it->Valid(); it->Next(), ++i) {
    EXPECT_TRUE(seen.insert(std::string(it->key())).second);
    if (i == 10) {
      db->Put("k1000", "rewritten behind");  // behind: not seen again
      db->Put("k1599x", "ahead");            // ahead, beyond the first chunk
    }
  }
  EXPECT_TRUE(seen.count("k1599x"));
  EXPECT_EQ(seen.size(), 601u);
}

TEST_F(KvTest, ReadYourWritesAcrossFlushAndReopen) {
  {
    auto db = Open();
    db->Put("flushed", "1");
    db->Flush();
    db->Put("buffered", "2");
    EXPECT_EQ(db->Get("flushed"), "1");
    EXPECT_EQ(db->Get("buffered"), "2");
    db->Close();
    EXPECT_THROW(db->Get("flushed"), Error);
  }
  auto db = Open();
  EXPECT_EQ(db->Get("flushed"), "1");
  EXPECT_EQ(db->Get("buffered"), "2");
  EXPECT_EQ(db->GetStats().buffered_ops, 0u);
}

TEST_F(KvTest, FlushCommitsOneFragment) {
  auto db = Open();
  uint64_t v0 = db->version();
  for (int i = 0; i < 100; ++i) db->Put("k" + std::to_string(i), "v");
  EXPECT_EQ(db->version(), v0);
  db->Flush();
  EXPECT_EQ(db->version(), v0 + 1);
  db->Flush();  // nothing buffered: no commit
  EXPECT_EQ(db->version(), v0 + 1);
  EXPECT_EQ(db->GetStats().fragments, 1u);
}

TEST_F(KvTest, SyncWriteIsCommittedBeforeReturning) {
  auto db = Open();
  uint64_t v0 = db->version();
  db->Put("k", "v", {.sync = true});
  EXPECT_EQ(db->version(), v0 + 1);
  auto reader = DB::Open(Path(), [&] {
    auto o = Opts();
    o.read_only = true;
    return o;
  }());
  EXPECT_EQ(reader->Get("k"), "v");
}

TEST_F(KvTest, WriteBufferSizeTriggersCommits) {
  auto o = Opts();
  o.write_buffer_size = 64 << 10;
  auto db = Open(o);
  std::string value(1000, 'x');
  for (int i = 0; i < 1000; ++i) db->Put("k" + std::to_string(i), value);
  db->Flush();
  EXPECT_GE(db->GetStats().flushes, 5u);
  for (int i = 0; i < 1000; i += 97) EXPECT_EQ(db->Get("k" + std::to_string(i)), value);
}

TEST_F(KvTest, IntervalFlushFromBackgroundThread) {
  auto o = Opts();
  o.flush_interval = std::chrono::milliseconds(50);
  auto db = Open(o);
  uint64_t v0 = db->version();
  db->Put("k", "v");
  for (int i = 0; i < 500 && db->version() == v0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(db->version(), v0);
}

TEST_F(KvTest, LargeValuesStayInLance) {
  auto o = Opts();
  o.lazy_value_threshold = 100;
  auto db = Open(o);
  std::string big(5000, 'b');
  for (int i = 0; i < 50; ++i) db->Put("big" + std::to_string(i), big + std::to_string(i));
  db->Put("small", "s");
  db->Flush();
  auto stats = db->GetStats();
  EXPECT_EQ(stats.lazy_values, 50u);
  EXPECT_EQ(db->Get("big7"), big + "7");
  std::vector<std::string_view> keys = {"big1", "small", "big2"};
  auto values = db->MultiGet(keys);
  EXPECT_EQ(values[0], big + "1");
  EXPECT_EQ(values[1], "s");
  EXPECT_EQ(values[2], big + "2");
  int n = 0;
  auto it = db->NewIterator();
  for (it->Seek("big"); it->Valid() && it->key().starts_with("big"); it->Next(), ++n) {
    EXPECT_EQ(it->value().substr(0, 5000), big);
  }
  EXPECT_EQ(n, 50);
  db.reset();
  db = Open(o);
  EXPECT_EQ(db->GetStats().lazy_values, 50u);
  EXPECT_EQ(db->Get("big49"), big + "49");
}

TEST_F(KvTest, VeryLargeValue) {
  auto db = Open();
  std::string huge(64 << 20, 'h');
  huge[12345] = 'x';
  db->Put("huge", huge);
  db->Flush();
  db.reset();
  db = Open();
  auto got = db->Get("huge");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->size(), huge.size());
  EXPECT_TRUE(*got == huge);
}

TEST_F(KvTest, CompactionKeepsLiveData) {
  auto o = Opts();
  o.max_fragments = 4;
  auto db = Open(o);
  for (int round = 0; round < 12; ++round) {
    for (int i = 0; i < 200; ++i) db->Put("k" + std::to_string(i), std::to_string(round));
    db->Delete("k" + std::to_string(round));
    db->Flush();
  }
  auto stats = db->GetStats();
  EXPECT_GE(stats.compactions, 1u);
  EXPECT_LE(stats.fragments, 5u);
  // The last round rewrote every key and then deleted k11.
  for (int i = 0; i < 200; ++i) {
    if (i != 11) EXPECT_EQ(db->Get("k" + std::to_string(i)), "11");
  }
  EXPECT_EQ(db->Get("k11"), std::nullopt);
  db.reset();
  db = Open(o);
  EXPECT_EQ(All(*db).size(), 199u);
  EXPECT_EQ(db->Get("k11"), std::nullopt);
  EXPECT_EQ(db->Get("k5"), "11");
}

TEST_F(KvTest, CompactRangeMaterializesAndDropsOldTombstones) {
  auto o = Opts();
  o.tombstone_grace = std::chrono::seconds(0);
  o.lazy_value_threshold = 10;
  auto db = Open(o);
  for (int i = 0; i < 100; ++i) db->Put("k" + std::to_string(i), "value-" + std::to_string(i));
  db->Flush();
  for (int i = 0; i < 50; ++i) db->Delete("k" + std::to_string(i));
  db->DeleteRange("k5", "k6");
  db->CompactRange();
  auto stats = db->GetStats();
  EXPECT_EQ(stats.fragments, 1u);
  EXPECT_EQ(stats.tombstones, 0u);
  EXPECT_EQ(stats.range_tombstones, 0u);
  EXPECT_EQ(stats.entries, stats.stored_rows - 1);  // plus the writer's mark row
  EXPECT_EQ(db->Get("k77"), "value-77");
  EXPECT_EQ(db->Get("k55"), std::nullopt);
  db.reset();
  db = Open(o);
  EXPECT_EQ(db->Get("k77"), "value-77");
  EXPECT_EQ(db->GetStats().entries, 40u);  // k50..k99 less k50..k59
}

TEST_F(KvTest, ReadOnlyAndVersionHandles) {
  {
    auto db = Open();
    db->Put("a", "1", {.sync = true});
    db->Put("a", "2", {.sync = true});
  }
  auto o = Opts();
  o.read_only = true;
  auto ro = Open(o);
  EXPECT_EQ(ro->Get("a"), "2");
  try {
    ro->Put("a", "3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kNotSupported);
  }
  auto versions = ro->Versions();
  ASSERT_GE(versions.size(), 3u);
  auto at = Opts();
  at.version = versions[1].version;
  auto old = Open(at);
  EXPECT_EQ(old->Get("a"), "1");
  EXPECT_THROW(old->Delete("a"), Error);

  auto missing = Opts();
  missing.read_only = true;
  try {
    DB::Open(Path("nothing-here"), missing);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kNotFound);
  }
}

TEST_F(KvTest, TagsSurviveCleanup) {
  auto db = Open();
  db->Put("a", "1", {.sync = true});
  db->CreateTag("first");
  db->Put("a", "2", {.sync = true});
  db->CompactRange();
  EXPECT_GT(db->CleanupOldVersions(std::chrono::seconds(0)), 0u);
  auto tags = db->Tags();
  ASSERT_EQ(tags.size(), 1u);
  auto o = Opts();
  o.tag = "first";
  auto tagged = Open(o);
  EXPECT_EQ(tagged->Get("a"), "1");
  db->DeleteTag("first");
  EXPECT_TRUE(db->Tags().empty());
}

// With a retention of 0 every 20th version starts a background cleanup that
// removes every version but the newest, while the handles flush, compact and
// read values stored lazily in fragments those versions named.
TEST_F(KvTest, AutomaticCleanupKeepsEveryKey) {
  auto o = Opts();
  o.lazy_value_threshold = 16;
  o.version_retention = std::chrono::seconds(0);
  o.refresh_interval = std::chrono::hours(1);
  auto a = Open(o);
  auto b = DB::Open(Path(), o);
  std::map<std::string, std::string> expected;
  for (int round = 0; round < 60; ++round) {
    DB& writer = round % 3 == 0 ? *b : *a;
    for (int i = 0; i < 5; ++i) {
      std::string key = "k" + std::to_string((round * 7 + i) % 40);
      std::string value = std::string(round % 2 ? 100 : 4, 'v') + std::to_string(round);
      writer.Put(key, value);
      expected[key] = value;
    }
    writer.Flush();
    a->Refresh();
    for (const auto& [key, value] : expected) ASSERT_EQ(a->Get(key), value) << key;
  }
  b->Refresh();
  for (const auto& [key, value] : expected) EXPECT_EQ(b->Get(key), value) << key;
  EXPECT_LT(a->Versions().size(), 40u) << "no automatic cleanup ran";
  a->Close();
  b->Close();
  auto again = Open(o);
  for (const auto& [key, value] : expected) EXPECT_EQ(again->Get(key), value) << key;
}

TEST_F(KvTest, TwoHandlesConverge) {
  auto a = Open();
  auto o = Opts();
  o.refresh_interval = std::chrono::hours(1);
  auto b = DB::Open(Path(), o);
  a->Put("from-a", "1", {.sync = true});
  b->Put("from-b", "2", {.sync = true});
  a->Put("shared", "a-first", {.sync = true});
  b->Put("shared", "b-later", {.sync = true});
  EXPECT_EQ(b->Get("from-a"), std::nullopt);  // not refreshed yet
  a->Refresh();
  b->Refresh();
  for (auto* db : {a.get(), b.get()}) {
    EXPECT_EQ(db->Get("from-a"), "1");
    EXPECT_EQ(db->Get("from-b"), "2");
    EXPECT_EQ(db->Get("shared"), "b-later");
  }
}

TEST_F(KvTest, LazyValuesSurviveAnotherWritersCompactionAndCleanup) {
  auto o = Opts();
  o.lazy_value_threshold = 16;
  o.refresh_interval = std::chrono::hours(1);
  auto reader = Open(o);
  std::string big(1000, 'v');
  for (int i = 0; i < 20; ++i) reader->Put("k" + std::to_string(i), big + std::to_string(i));
  reader->Flush();
  EXPECT_EQ(reader->GetStats().lazy_values, 20u);

  auto writer = DB::Open(Path(), o);
  writer->Put("other", "x");
  writer->CompactRange();
  writer->CleanupOldVersions(std::chrono::seconds(0));
  // reader's references point into fragments that no longer exist.
  EXPECT_EQ(reader->Get("k3"), big + "3");
  std::vector<std::string_view> keys = {"k1", "k2"};
  auto values = reader->MultiGet(keys);
  EXPECT_EQ(values[0], big + "1");
  EXPECT_EQ(values[1], big + "2");
  EXPECT_EQ(reader->Get("other"), "x");
}

TEST_F(KvTest, MemoryStore) {
  auto db = DB::Open("memory://kv-test", Opts());
  db->Put("a", "1");
  db->Flush();
  db->CompactRange();
  EXPECT_EQ(db->Get("a"), "1");
}

TEST_F(KvTest, ClosedHandleRejectsCalls) {
  auto db = Open();
  db->Close();
  db->Close();  // twice is fine
  EXPECT_THROW(db->Put("a", "1"), Error);
  EXPECT_THROW(db->NewIterator(), Error);
}

TEST_F(KvTest, ConcurrentWritersAndReaders) {
  auto o = Opts();
  o.write_buffer_size = 32 << 10;
  o.max_fragments = 8;
  auto db = Open(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&db, t] {
      for (int i = 0; i < 2000; ++i) {
        db->Put("t" + std::to_string(t) + "-" + std::to_string(i), std::to_string(i));
        if (i % 100 == 0) db->Get("t0-5");
      }
    });
  }
  threads.emplace_back([&db] {
    for (int i = 0; i < 50; ++i) {
      auto it = db->NewIterator();
      std::string last;
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        EXPECT_LT(last, std::string(it->key()));
        last = it->key();
      }
    }
  });
  for (auto& t : threads) t.join();
  db->Flush();
  EXPECT_EQ(db->GetStats().entries, 8000u);
  db.reset();
  db = Open(o);
  EXPECT_EQ(db->GetStats().entries, 8000u);
}

}  // namespace
}  // namespace kv0::kv

namespace kv0::kv {
namespace {

class KvSnapshotTest : public KvTest {
 protected:
  Options SnapOpts() {
    Options o = Opts();
    o.snapshot_min_entries = 10;
    return o;
  }
  void Fill(DB& db, int n, const std::string& value = "v") {
    for (int i = 0; i < n; ++i) db.Put("k" + std::to_string(i), value + std::to_string(i));
  }
  std::string SnapshotFile() {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_.path() / "wal")) {
      if (e.path().filename() == "view.snap") return e.path().string();
    }
    return "";
  }
};

TEST_F(KvSnapshotTest, ReopenUsesTheSnapshotThenReadsOnlyNewFragments) {
  {
    auto db = Open(SnapOpts());
    Fill(*db, 100);
  }
  ASSERT_FALSE(SnapshotFile().empty());
  {
    // Another writer commits after the snapshot was saved.
    auto o = SnapOpts();
    o.snapshot_min_entries = 1'000'000;  // this handle saves none
    auto other = Open(o);
    other->Put("after", "snapshot");
  }
  auto db = Open(SnapOpts());
  EXPECT_TRUE(db->GetStats().opened_from_snapshot);
  EXPECT_EQ(db->Get("k42"), "v42");
  EXPECT_EQ(db->Get("after"), "snapshot");
  EXPECT_EQ(db->GetStats().entries, 101u);
}

TEST_F(KvSnapshotTest, DamagedSnapshotFallsBackToAFullScan) {
  {
    auto db = Open(SnapOpts());
    Fill(*db, 100);
  }
  std::string snap = SnapshotFile();
  ASSERT_FALSE(snap.empty());
  {
    std::fstream f(snap, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  auto db = Open(SnapOpts());
  EXPECT_FALSE(db->GetStats().opened_from_snapshot);
  EXPECT_EQ(db->Get("k42"), "v42");
  EXPECT_EQ(db->GetStats().entries, 100u);
}

TEST_F(KvSnapshotTest, CompactionOrAnotherThresholdInvalidatesIt) {
  {
    auto db = Open(SnapOpts());
    Fill(*db, 100);
  }
  {
    auto o = SnapOpts();
    o.lazy_value_threshold = 1;  // a different threshold: the snapshot does not fit
    auto db = Open(o);
    EXPECT_FALSE(db->GetStats().opened_from_snapshot);
    EXPECT_EQ(db->Get("k7"), "v7");
    EXPECT_EQ(db->GetStats().lazy_values, 100u);
    db->CompactRange();  // and the fragments it described are gone
  }
  auto db = Open(SnapOpts());
  EXPECT_EQ(db->Get("k7"), "v7");
  EXPECT_EQ(db->GetStats().entries, 100u);
}

TEST_F(KvTest, DisableWalWritesAreCommittedByTheNextFlush) {
  auto db = Open();
  db->Put("logged", "1");
  db->Put("unlogged", "2", {.disable_wal = true});
  EXPECT_EQ(db->Get("unlogged"), "2");
  db->Flush();
  db.reset();
  db = Open();
  EXPECT_EQ(db->Get("unlogged"), "2");
}

// A crash between the Lance commit and the deletion of the sealed segments
// leaves a WAL whose operations are all committed: replaying it must store
// nothing twice.
TEST_F(KvTest, ReplayOfCommittedOperationsStoresNothingTwice) {
  namespace fs = std::filesystem;
  fs::path saved = dir_.path() / "saved-wal";
  fs::path writer_dir;
  {
    auto db = Open();
    for (int i = 0; i < 50; ++i) db->Put("k" + std::to_string(i), "v");
    for (const auto& e : fs::recursive_directory_iterator(dir_.path() / "wal")) {
      if (e.path().extension() == ".wmap") writer_dir = e.path().parent_path();
    }
    ASSERT_FALSE(writer_dir.empty());
    fs::copy(writer_dir, saved);
    db->Flush();
  }
  uint64_t stored = Open()->GetStats().stored_rows;
  // Put the segments back, as if the deletion after the commit never ran.
  for (const auto& e : fs::directory_iterator(saved)) {
    if (e.path().extension() == ".wmap") fs::copy(e.path(), writer_dir / e.path().filename());
  }
  auto db = Open();
  EXPECT_EQ(db->GetStats().stored_rows, stored);
  EXPECT_EQ(db->Get("k49"), "v");
  EXPECT_EQ(db->GetStats().entries, 50u);
}

// Earlier builds logged the key-value store with write calls, into ".wal"
// segments; this one logs into mapped ".wmap" segments. A WAL of the old kind
// left by a crash is replayed all the same.
TEST_F(KvTest, ReplaysTheWalOfAnEarlierBuild) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> expected = {
      {"overwritten", "committed"}, {"deleted", "committed"}, {"r5", "committed"}};
  {
    auto db = Open();
    for (const auto& [k, v] : expected) db->Put(k, v);
    db->Flush();
  }
  // The earlier build's handle: a record per write, as its kv layer logged
  // them, over two segments, then the process died.
  std::string dataset_dir = wal::DatasetDir(Opts().wal_dir, NormalizeLocation(Path()));
  std::string old_dir;
  {
    HybridClock clock;
    auto log = wal::Log::Open(dataset_dir, WalSync::kBatch, /*mapped=*/false);
    old_dir = log->dir();
    auto log_ops = [&](std::initializer_list<std::tuple<OpKind, std::string, std::string>> ops) {
      OpBuffer buffer;
      for (const auto& [kind, key, value] : ops) buffer.Add(clock.Next(), kind, key, value);
      log->Append(buffer.WalRecord());
    };
    for (int i = 0; i < 100; ++i) {
      std::string key = "k" + std::to_string(i), value = "v" + std::to_string(i);
      log_ops({{OpKind::kPut, key, value}});
      expected[key] = value;
    }
    log->Seal();
    log_ops({{OpKind::kPut, "overwritten", "logged"}});
    log_ops({{OpKind::kDelete, "deleted", ""}});
    log_ops({{OpKind::kPut, "batch", "1"}, {OpKind::kDeleteRange, "r", "s"}});
    expected["overwritten"] = "logged";
    expected.erase("deleted");
    expected.erase("r5");
    expected["batch"] = "1";
  }
  int old_segments = 0;
  for (const auto& e : fs::directory_iterator(old_dir)) {
    ASSERT_NE(e.path().extension(), ".wmap") << e.path();
    old_segments += e.path().extension() == ".wal";
  }
  ASSERT_EQ(old_segments, 2);

  auto db = Open();
  using Map = std::map<std::string, std::string>;
  auto all = All(*db);
  EXPECT_EQ(Map(all.begin(), all.end()), expected);
  // Replayed and committed: the old segments are gone, the new ones mapped.
  for (const auto& e : fs::recursive_directory_iterator(dataset_dir)) {
    EXPECT_NE(e.path().extension(), ".wal") << e.path();
  }
  db->Put("new", "mapped");
  bool mapped = false;
  for (const auto& e : fs::recursive_directory_iterator(dataset_dir)) {
    mapped |= e.path().extension() == ".wmap";
  }
  EXPECT_TRUE(mapped);
  db.reset();
  expected["new"] = "mapped";
  all = All(*Open());
  EXPECT_EQ(Map(all.begin(), all.end()), expected);
}

TEST_F(KvTest, WriterIdsAreReusedAcrossCleanOpens) {
  namespace fs = std::filesystem;
  for (int i = 0; i < 5; ++i) {
    auto db = Open();
    db->Put("k", std::to_string(i), {.sync = true});
  }
  int writer_dirs = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_.path() / "wal")) {
    if (e.is_directory() && e.path().filename().string().size() == 16) ++writer_dirs;
  }
  EXPECT_EQ(writer_dirs, 2);  // the dataset directory's hash, and one writer
  auto db = Open();
  db->CompactRange();
  // One writer, one mark row.
  EXPECT_EQ(db->GetStats().stored_rows, 2u);
}

TEST_F(KvTest, UnwritableWalDirectoryFailsTheOpen) {
  std::string file = dir_ / "a-file";
  std::ofstream(file) << "not a directory";
  auto o = Opts();
  o.wal_dir = file + "/wal";
  try {
    Open(o);
    FAIL() << "opened with a WAL under a regular file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kIOError) << e.what();
  }
}

// The WAL on a tiny file system: a write that does not fit fails with
// IOError and changes nothing; every acknowledged write survives, and the
// flush that commits them frees the WAL, full disk or not.
TEST_F(KvTest, FullWalDiskLosesNoAcknowledgedWrite) {
  std::string mount = dir_ / "tiny";
  std::filesystem::create_directories(mount);
  // Room for one preallocated mapped segment, not for a second.
  const uint64_t size = wal::Log::kDefaultMappedCapacity * 3 / 2;
  if (::system(
          ("mount -t tmpfs -o size=" + std::to_string(size) + " tmpfs " + mount + " 2>/dev/null")
              .c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { (void)!::system(("umount " + path).c_str()); }
  } unmount{mount};
  auto o = Opts();
  o.wal_dir = mount;
  o.write_buffer_size = 1 << 30;  // nothing commits on its own
  std::string value(1000, 'v');
  int acked = 0;
  {
    auto db = Open(o);
    for (; acked < 100000; ++acked) {
      try {
        db->Put("k" + std::to_string(acked), value);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Code::kIOError);
        break;
      }
    }
    ASSERT_LT(acked, 100000) << "the tmpfs never filled";
    EXPECT_EQ(db->Get("k" + std::to_string(acked)), std::nullopt);
    db->Flush();  // commits, then frees the WAL
    db->Put("after", "space came back");
  }
  auto db = Open(o);
  for (int i = 0; i < acked; ++i) ASSERT_EQ(db->Get("k" + std::to_string(i)), value) << i;
  EXPECT_EQ(db->Get("k" + std::to_string(acked)), std::nullopt);
  EXPECT_EQ(db->Get("after"), "space came back");
}

// Two handles compacting the same fragments at once: one commit wins, the
// other fails with Conflict and commits nothing; no write is lost either way.
TEST_F(KvTest, ConcurrentCompactionsLoseNothing) {
  auto o = Opts();
  o.max_fragments = 2;  // every flush may compact
  auto a = Open(o);
  auto b = Open(o);
  std::atomic<int> conflicts{0};
  auto work = [&](DB* db, const std::string& name) {
    for (int round = 0; round < 8; ++round) {
      for (int i = 0; i < 50; ++i) db->Put(name + std::to_string(round * 50 + i), "v");
      db->Flush();
      try {
        db->CompactRange();
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Code::kConflict) << e.what();
        conflicts++;
      }
    }
  };
  std::thread ta(work, a.get(), "a"), tb(work, b.get(), "b");
  ta.join();
  tb.join();
  for (auto* db : {a.get(), b.get()}) {
    db->Refresh();
    EXPECT_EQ(db->GetStats().entries, 800u);
    EXPECT_EQ(db->Get("a399"), "v");
    EXPECT_EQ(db->Get("b0"), "v");
  }
  a.reset();
  b.reset();
  EXPECT_EQ(Open()->GetStats().entries, 800u);
}

TEST_F(KvTest, TwoHandlesInOneProcessHaveTheirOwnWals) {
  namespace fs = std::filesystem;
  auto a = Open();
  auto b = Open();
  a->Put("a", "1");
  b->Put("b", "2");
  std::set<fs::path> wal_dirs;
  for (const auto& e : fs::recursive_directory_iterator(dir_.path() / "wal")) {
    if (e.path().extension() == ".wmap") wal_dirs.insert(e.path().parent_path());
  }
  EXPECT_EQ(wal_dirs.size(), 2u);
  a.reset();
  b.reset();
  auto db = Open();
  EXPECT_EQ(db->Get("a"), "1");
  EXPECT_EQ(db->Get("b"), "2");
}

}  // namespace
}  // namespace kv0::kv
