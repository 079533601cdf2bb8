// kv0::kv::DB on real Lance datasets (local directories and memory://).

#include "kv0/kv.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "test_util.h"

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
