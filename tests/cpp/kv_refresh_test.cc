// What a handle reads after other handles rewrote the fragments its view was
// built from: a refresh brings the view to what a fresh open of the same
// version holds (plus the handle's own unflushed writes), values that stay in
// Lance are read without touching a version that lacks their fragment, and
// view.snap only ever saves such a view.

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "kv/op_log.h"
#include "kv/snapshot.h"
#include "kv0/kv.h"
#include "lance/dataset.h"
#include "test_util.h"

namespace kv0::kv {
namespace {

using Contents = std::map<std::string, std::string>;

class KvRefreshTest : public ::testing::Test {
 protected:
  Options Opts() {
    Options o;
    o.wal_dir = dir_ / "wal";
    o.flush_interval = std::chrono::hours(1);     // tests flush explicitly
    o.refresh_interval = std::chrono::hours(1);   // and refresh explicitly
    o.tombstone_grace = std::chrono::seconds(0);  // compaction drops tombstones at once
    o.snapshot_min_entries = 1;
    return o;
  }
  std::string Path() { return dir_ / "db"; }
  std::unique_ptr<DB> Open(const Options& o) { return DB::Open(Path(), o); }
  std::unique_ptr<DB> Open() { return Open(Opts()); }

  static Contents All(DB& db) {
    Contents out;
    auto it = db.NewIterator();
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      out.emplace(std::string(it->key()), std::string(it->value()));
    }
    return out;
  }

  // What an open that reads every fragment sees: read-only, with a WAL root
  // of its own, so no saved view is loaded.
  Contents Fresh() {
    Options o = Opts();
    o.read_only = true;
    o.wal_dir = dir_ / "fresh-wal";
    auto db = Open(o);
    EXPECT_FALSE(db->GetStats().opened_from_snapshot);
    return All(*db);
  }

  std::string SnapshotFile() {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_.path() / "wal")) {
      if (e.path().filename() == "view.snap") return e.path().string();
    }
    return "";
  }

  testing::TempDir dir_;
};

// Issue 12, case 1: a key deleted and compacted away by another handle is
// gone from this handle's view after a refresh, and from the view it saves.
TEST_F(KvRefreshTest, KeyDeletedAndCompactedElsewhereIsGoneAfterARefresh) {
  auto a = Open();
  auto b = Open();
  a->Put("k", "old");
  a->Put("keep", "1");
  a->Flush();
  b->Refresh();
  ASSERT_EQ(b->Get("k"), "old");

  a->Delete("k");
  a->Flush();
  a->CompactRange();  // grace 0: neither the put nor the tombstone is stored now
  a->Close();

  b->Refresh();
  EXPECT_EQ(b->Get("k"), std::nullopt);
  EXPECT_FALSE(b->KeyMayExist("k"));
  EXPECT_EQ(All(*b), (Contents{{"keep", "1"}}));
  EXPECT_EQ(All(*b), Fresh());

  // Closing saves the view; the next open must not bring the key back.
  b->Close();
  ASSERT_FALSE(SnapshotFile().empty());
  auto c = Open();
  EXPECT_TRUE(c->GetStats().opened_from_snapshot);
  EXPECT_EQ(c->Get("k"), std::nullopt);
  EXPECT_EQ(All(*c), (Contents{{"keep", "1"}}));
}

TEST_F(KvRefreshTest, RangeDeletedAndCompactedElsewhereIsGoneAfterARefresh) {
  auto a = Open();
  auto b = Open();
  for (std::string k : {"a", "b1", "b2", "b3", "c"}) a->Put(k, "v-" + k);
  a->Flush();
  b->Refresh();
  ASSERT_EQ(b->Get("b2"), "v-b2");

  a->DeleteRange("b", "c");
  a->Flush();
  a->CompactRange();
  a->Close();

  b->Refresh();
  EXPECT_EQ(b->Get("b1"), std::nullopt);
  std::vector<std::string_view> keys = {"a", "b2", "b3", "c"};
  auto values = b->MultiGet(keys);
  EXPECT_EQ(values,
            (std::vector<std::optional<std::string>>{"v-a", std::nullopt, std::nullopt, "v-c"}));
  EXPECT_EQ(All(*b), (Contents{{"a", "v-a"}, {"c", "v-c"}}));
  EXPECT_EQ(All(*b), Fresh());
  b->Close();
  EXPECT_EQ(All(*Open()), (Contents{{"a", "v-a"}, {"c", "v-c"}}));
}

// The refresh keeps what this handle wrote and has not committed, and
// commits it later as usual.
TEST_F(KvRefreshTest, UnflushedWritesSurviveTheRefresh) {
  auto a = Open();
  auto b = Open();
  a->Put("k", "old");
  a->Put("x", "from-a");
  a->Flush();
  b->Refresh();

  b->Put("mine", "buffered");
  b->Delete("x");
  WriteBatch batch;
  batch.Put("k", "b-wins");
  batch.DeleteRange("y", "z");
  b->Write(batch, {.disable_wal = true});

  a->Delete("k");
  a->Put("y1", "deleted-by-b?");  // newer than b's range: survives it
  a->Flush();
  a->CompactRange();

  b->Refresh();
  Contents want = {{"k", "b-wins"}, {"mine", "buffered"}, {"y1", "deleted-by-b?"}};
  EXPECT_EQ(All(*b), want);
  EXPECT_EQ(b->Get("x"), std::nullopt);
  b->Flush();
  a->Refresh();
  EXPECT_EQ(All(*a), want);
  EXPECT_EQ(Fresh(), want);
}

// Lance's own compaction (a Rewrite) moves rows without dropping any; the
// view stays what a fresh open holds.
TEST_F(KvRefreshTest, AnotherHandlesRewriteKeepsTheViewEqualToStorage) {
  auto o = Opts();
  o.max_fragments = 3;
  auto a = Open(o);
  auto b = Open(o);
  for (int round = 0; round < 5; ++round) {
    b->Put("b" + std::to_string(round), "v");
    b->Flush();
    b->Refresh();
    a->Put("a" + std::to_string(round), "v");
    a->Delete("b" + std::to_string(round - 1));
    a->Flush();  // compacts past three fragments
  }
  EXPECT_GE(a->GetStats().compactions, 1u);
  b->Refresh();
  EXPECT_EQ(All(*b), Fresh());
  EXPECT_EQ(b->Get("b3"), std::nullopt);
  EXPECT_EQ(b->Get("b4"), "v");
}

// Another writer merges only the small recent fragments (Lance's Rewrite with
// a target below the size of the first fragment): every row moves unchanged,
// so the refresh follows the rows to their new addresses instead of reading
// the whole store again.
TEST_F(KvRefreshTest, ARewriteOfAFewFragmentsIsFollowedWithoutAReload) {
  auto o = Opts();
  o.lazy_value_threshold = 16;
  auto b = Open(o);
  for (int i = 0; i < 400; ++i) b->Put("k" + std::to_string(i), "v" + std::to_string(i));
  b->Flush();
  auto a = Open(o);
  std::string big(100, 'b');
  for (int round = 0; round < 5; ++round) {
    a->Put("a" + std::to_string(round), big + std::to_string(round));  // stays in Lance
    a->Delete("k" + std::to_string(round));
    a->DeleteRange("k1" + std::to_string(round), "k1" + std::to_string(round) + "5");
    a->Flush();
  }
  b->Refresh();
  Contents before = All(*b);
  ASSERT_EQ(before, Fresh());

  lance::Dataset raw = lance::Dataset::Open(Path(), {});
  lance::CompactResult merged = raw.Compact({.target_rows_per_fragment = 100});
  ASSERT_EQ(merged.removed.size(), 5u);  // the 401-row fragment stays

  b->Refresh();
  EXPECT_EQ(b->GetStats().view_reloads, 0u);
  EXPECT_EQ(b->GetStats().fragments, 2u);
  EXPECT_EQ(All(*b), before);
  EXPECT_EQ(b->Get("a3"), big + "3");
  // The references moved: the old versions can go.
  a->CleanupOldVersions(std::chrono::seconds(0));
  std::vector<std::string_view> keys = {"a4", "a0"};
  EXPECT_EQ(b->MultiGet(keys), (std::vector<std::optional<std::string>>{big + "4", big + "0"}));
  EXPECT_EQ(b->GetStats().view_reloads, 0u);
}

// Rows are dropped from a small fragment while a large one stays: a dropped
// tombstone uncovers an older put that the large fragment holds. A view only
// keeps each key's newest entry, so the refresh reads the store again.
TEST_F(KvRefreshTest, RowsDroppedFromAFewFragmentsMakeTheRefreshReload) {
  auto b = Open();
  for (int i = 0; i < 400; ++i) b->Put("k" + std::to_string(i), "v" + std::to_string(i));
  b->Flush();
  auto a = Open();
  a->Delete("k5");
  a->Put("x", "1");
  a->Flush();
  b->Refresh();
  ASSERT_EQ(b->Get("k5"), std::nullopt);

  // An Update by another writer that keeps a's put and its mark but drops
  // the tombstone, as a compaction past tombstone_grace does.
  lance::Dataset raw = lance::Dataset::Open(Path(), {});
  auto fragments = raw.Fragments();
  ASSERT_EQ(fragments.size(), 2u);
  uint64_t small = fragments[1].id;
  OpBuffer kept;
  std::map<std::string, uint64_t> marks;
  lance::ScanOptions scan;
  scan.columns = {"seq", "op", "key", "value"};
  scan.fragment_ids = std::vector<uint64_t>{small};
  arrow::StreamReader reader = raw.Scan(scan);
  while (auto batch = reader.Next()) {
    arrow::UInt64Column seq(*batch, "seq");
    arrow::UInt8Column op(*batch, "op");
    arrow::BinaryColumn key(*batch, "key");
    arrow::BinaryColumn value(*batch, "value");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      auto kind = static_cast<OpKind>(op.value(i));
      if (kind == OpKind::kMark) {
        marks[std::string(key.value(i))] = seq.value(i);
      } else if (kind != OpKind::kDelete) {
        kept.Add(seq.value(i), kind, key.value(i), value.value(i));
      }
    }
  }
  ASSERT_EQ(kept.count(), 1u);
  std::vector<uint64_t> removed = {small};
  raw.CommitUpdate(removed, raw.WriteFragments(OpsToStream(kept, marks)));
  ASSERT_EQ(Fresh().count("k5"), 1u);

  b->Refresh();
  EXPECT_EQ(b->GetStats().view_reloads, 1u);
  EXPECT_EQ(b->Get("k5"), "v5");
  EXPECT_EQ(All(*b), Fresh());
}

// Issue 12, case 2: values that stay in Lance, from a fragment another handle
// compacted away while this handle's own flush moved it to a version without
// that fragment. Lance's take used to panic on such an address (lance-c
// caught the panic, and kv0 then read the version the value came from); the
// values are now read from a version that holds their fragment in the first
// place.
TEST_F(KvRefreshTest, LazyValuesOfAFragmentCompactedElsewhereAreReadWithoutAPanic) {
  auto o = Opts();
  o.lazy_value_threshold = 16;
  auto b = Open(o);
  std::string big(1000, 'v');
  for (int i = 0; i < 10; ++i) b->Put("k" + std::to_string(i), big + std::to_string(i));
  b->Flush();
  ASSERT_EQ(b->GetStats().lazy_values, 10u);

  auto a = Open(o);
  a->Put("other", "x");
  a->CompactRange();  // fragment 0 is gone from the latest version

  b->Put("y", "1");
  b->Flush();  // b's dataset moves to a version without fragment 0

  // Out of address order: Lance takes such rows through its slow path.
  std::vector<std::string_view> keys = {"k9", "k1", "k2"};
  ::testing::internal::CaptureStderr();
  auto values = b->MultiGet(keys);
  auto single = b->Get("k3");
  std::string stderr_text = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(values, (std::vector<std::optional<std::string>>{big + "9", big + "1", big + "2"}));
  EXPECT_EQ(single, big + "3");
  EXPECT_EQ(stderr_text.find("panicked"), std::string::npos) << stderr_text;

  // After a refresh the references point into the compacted fragment.
  b->Refresh();
  EXPECT_EQ(b->Get("k4"), big + "4");
  EXPECT_EQ(All(*b), Fresh());
}

// Reloads racing this handle's writes, flushes and reads: another handle
// compacts the whole store again and again while one thread writes and
// flushes through this handle and another refreshes it and reads. No write
// this handle acknowledged may ever read as absent.
TEST_F(KvRefreshTest, ReloadsRacingWritesFlushesAndReadsLoseNoWrite) {
  auto o = Opts();
  o.lazy_value_threshold = 16;
  o.commit_timeout = std::chrono::milliseconds(0);  // sanitizer builds commit slowly
  // KV0_RACE_ROUNDS: fewer compactions for the thread sanitizer's stage.
  const int rounds = static_cast<int>(testing::EnvNumber("KV0_RACE_ROUNDS", 25));
  auto a = Open(o);
  auto b = Open(o);
  std::atomic<int> acked{-1};
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  auto key = [](int i) { return "w" + std::to_string(i); };
  auto value = [](int i) { return std::string(i % 3 == 0 ? 40 : 4, 'x') + std::to_string(i); };
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      b->Put(key(i), value(i));
      acked = i;
      if (b->Get(key(i)) != value(i)) failures++;
      if (i % 7 == 0) b->Flush();
    }
  });
  std::thread reader([&] {
    std::mt19937 rng(7);
    while (!stop) {
      b->Refresh();
      int last = acked;
      if (last < 0) continue;
      int i = static_cast<int>(rng() % (last + 1));
      if (b->Get(key(i)) != value(i)) failures++;
      std::vector<std::string> keys = {key(i), key(last)};
      std::vector<std::string_view> views(keys.begin(), keys.end());
      auto got = b->MultiGet(views);
      if (got[0] != value(i) || got[1] != value(last)) failures++;
    }
  });
  // Joins the threads however the loop below ends.
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread& writer;
    std::thread& reader;
    ~Joiner() {
      stop = true;
      writer.join();
      reader.join();
    }
  };
  {
    Joiner joiner{stop, writer, reader};
    for (int round = 0; round < rounds; ++round) {
      a->Put("a" + std::to_string(round), "v");
      a->Delete("a" + std::to_string(round - 1));
      try {
        a->CompactRange();
      } catch (const Error& e) {
        // b's flushes compact too, and one of two compactions of the same
        // fragments loses.
        ASSERT_EQ(e.code(), Code::kConflict) << e.what();
      }
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(b->GetStats().view_reloads, 0u);
  b->Flush();
  b->Refresh();
  Contents all = All(*b);
  EXPECT_EQ(all, Fresh());
  for (int i = 0; i <= acked; ++i) ASSERT_EQ(all[key(i)], value(i)) << i;
}

// A saved view is trusted only if it describes exactly the fragments of the
// version it records; one that covers fewer (so its entries may be a
// different store's) is ignored and the open reads every fragment.
TEST_F(KvRefreshTest, ASavedViewThatDoesNotDescribeItsVersionIsIgnored) {
  {
    auto db = Open();
    db->Put("a", "1");
    db->Flush();
    db->Put("b", "2");
    db->Flush();
  }
  std::string snap = SnapshotFile();
  ASSERT_FALSE(snap.empty());
  lance::Dataset ds = lance::Dataset::Open(Path(), {});
  auto fragments = ds.Fragments();
  ASSERT_EQ(fragments.size(), 2u);

  // A view claiming the latest version while holding only its first
  // fragment, with an entry storage does not hold at all.
  SnapshotHeader header;
  header.dataset_version = ds.version();
  header.lazy_value_threshold = Opts().lazy_value_threshold;
  header.fragments = {fragments[0]};
  View view;
  view.ApplyPut(1, "a", "1");
  view.ApplyPut(2, "ghost", "never stored");
  WriteSnapshot(snap, header, view);

  auto db = Open();
  EXPECT_FALSE(db->GetStats().opened_from_snapshot);
  EXPECT_EQ(db->Get("ghost"), std::nullopt);
  EXPECT_EQ(All(*db), (Contents{{"a", "1"}, {"b", "2"}}));
}

// Two handles compact the same fragments at once: the loser's Update
// conflicts with the winner's, and CompactRange starts again from the
// winner's version instead of reporting the lost race.
TEST_F(KvRefreshTest, CompactRangeThatLosesARaceToAnotherCompactionStartsAgain) {
  auto a = Open();
  auto b = Open();
  a->Put("a", "1");
  a->Flush();
  b->Put("b", "2");
  b->Delete("a");
  b->Flush();
  a->Refresh();

  // Just before a's first Update commits, b compacts the same fragments.
  int updates = 0;
  lance::SetCommitHookForTesting([&](const std::string&, std::string_view op, bool committed) {
    if (op != "update" || committed) return;
    if (++updates == 1) b->CompactRange();
  });
  EXPECT_NO_THROW(a->CompactRange());
  lance::SetCommitHookForTesting(nullptr);

  EXPECT_EQ(updates, 3);  // a's first try, b's compaction, a's second try
  EXPECT_EQ(All(*a), (Contents{{"b", "2"}}));
  EXPECT_EQ(Fresh(), (Contents{{"b", "2"}}));
}

}  // namespace
}  // namespace kv0::kv
