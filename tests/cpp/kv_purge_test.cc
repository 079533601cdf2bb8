// DB::Purge: deleted values leave the dataset's files, tags that would keep
// them refuse the purge (or go, with force), and other tags survive intact.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "kv0/kv.h"
#include "test_util.h"

namespace kv0::kv {
namespace {

class KvPurgeTest : public ::testing::Test {
 protected:
  Options Opts() {
    Options o;
    o.wal_dir = dir_ / "wal";  // outside the dataset directory
    o.flush_interval = std::chrono::hours(1);
    return o;
  }
  std::string Path() { return dir_ / "db"; }
  std::unique_ptr<DB> Open(const Options& o) { return DB::Open(Path(), o); }
  std::unique_ptr<DB> Open() { return Open(Opts()); }

  // A value no other test data can contain by accident.
  static std::string Marker() {
    std::random_device random;
    char hex[17];
    snprintf(hex, sizeof hex, "%08x%08x", random(), random());
    return std::string("SECRET-") + hex;
  }

  // The files under `root` (default: the dataset) whose bytes contain `needle`.
  std::vector<std::string> FilesContaining(const std::string& needle, std::string root = "") {
    std::vector<std::string> out;
    if (root.empty()) root = Path();
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (bytes.find(needle) != std::string::npos) out.push_back(entry.path().string());
    }
    return out;
  }

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

TEST_F(KvPurgeTest, TagHoldingADeletedKeyRefusesUnlessForced) {
  std::string secret = Marker();
  auto db = Open();
  db->Put("live", "still here");
  db->Put("gone", secret);
  db->Flush();
  db->CreateTag("t1");
  db->Delete("gone");
  db->Flush();
  ASSERT_FALSE(FilesContaining(secret).empty());  // the check below can see it

  size_t versions = db->Versions().size();
  uint64_t version = db->version();
  try {
    db->Purge();
    FAIL() << "purge went ahead despite tag t1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kBusy);
    EXPECT_NE(std::string(e.what()).find("'t1'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(db->Tags().count("t1"), 1u);
  EXPECT_EQ(db->Versions().size(), versions);
  EXPECT_EQ(db->version(), version);
  EXPECT_FALSE(FilesContaining(secret).empty());

  DB::PurgeStats stats = db->Purge(true);
  EXPECT_EQ(stats.tags_deleted, std::vector<std::string>{"t1"});
  EXPECT_GT(stats.versions_removed, 0u);
  EXPECT_GT(stats.bytes_removed, 0u);
  EXPECT_TRUE(db->Tags().empty());
  EXPECT_EQ(db->Versions().size(), 1u);
  EXPECT_EQ(FilesContaining(secret), std::vector<std::string>{});
  // The flushes already dropped the WAL segments that logged the put.
  EXPECT_EQ(FilesContaining(secret, dir_ / "wal"), std::vector<std::string>{});
  EXPECT_EQ(db->Get("live"), "still here");
  EXPECT_EQ(db->Get("gone"), std::nullopt);

  db.reset();
  db = Open();
  EXPECT_EQ(db->Get("live"), "still here");
  EXPECT_EQ(db->Get("gone"), std::nullopt);
  EXPECT_EQ(All(*db).size(), 1u);
  EXPECT_EQ(FilesContaining(secret), std::vector<std::string>{});
}

TEST_F(KvPurgeTest, TagOnTheLatestVersionIsCheckedToo) {
  // The rewrite makes a new latest version; a tag on the old one would keep
  // the fragments holding the deleted value.
  std::string secret = Marker();
  auto db = Open();
  db->Put("gone", secret);
  db->Flush();
  db->Delete("gone");
  db->Flush();
  db->CreateTag("now");
  ASSERT_FALSE(FilesContaining(secret).empty());
  try {
    db->Purge();
    FAIL() << "purge went ahead despite tag now";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kBusy);
    EXPECT_NE(std::string(e.what()).find("now"), std::string::npos) << e.what();
  }
  EXPECT_EQ(db->Purge(true).tags_deleted, std::vector<std::string>{"now"});
  EXPECT_EQ(FilesContaining(secret), std::vector<std::string>{});
}

TEST_F(KvPurgeTest, DeleteRangeCountsAsDeletion) {
  std::string secret = Marker();
  auto db = Open();
  db->Put("r1", secret);
  db->Put("z", "kept");
  db->Flush();
  db->CreateTag("before-range");
  db->DeleteRange("r", "s");
  EXPECT_THROW(db->Purge(), Error);
  db->Purge(true);
  EXPECT_EQ(FilesContaining(secret), std::vector<std::string>{});
  EXPECT_EQ(db->Get("z"), "kept");
}

TEST_F(KvPurgeTest, TagOfLiveKeysSurvivesWithItsExactRows) {
  std::string secret = Marker();
  std::string old_value = Marker();
  auto db = Open();
  db->Put("a", old_value);
  db->Put("b", "2");
  db->Flush();
  db->CreateTag("keep");
  uint64_t kept_version = db->Tags().at("keep");
  db->Put("a", "overwritten");  // still live: the tag may keep the old value
  db->Put("x", secret);         // written and deleted after the tag
  db->Flush();
  db->Delete("x");
  db->Put("c", "3");

  DB::PurgeStats stats = db->Purge();
  EXPECT_TRUE(stats.tags_deleted.empty());
  EXPECT_GT(stats.versions_removed, 0u);
  EXPECT_EQ(db->Tags(), (std::map<std::string, uint64_t>{{"keep", kept_version}}));
  // The tagged version and the latest one.
  EXPECT_EQ(db->Versions().size(), 2u);
  EXPECT_EQ(FilesContaining(secret), std::vector<std::string>{});
  EXPECT_FALSE(FilesContaining(old_value).empty());

  auto o = Opts();
  o.tag = "keep";
  auto tagged = Open(o);
  EXPECT_EQ(All(*tagged),
            (std::vector<std::pair<std::string, std::string>>{{"a", old_value}, {"b", "2"}}));
  tagged.reset();

  EXPECT_EQ(All(*db), (std::vector<std::pair<std::string, std::string>>{
                          {"a", "overwritten"}, {"b", "2"}, {"c", "3"}}));
  db.reset();
  db = Open();
  EXPECT_EQ(All(*db), (std::vector<std::pair<std::string, std::string>>{
                          {"a", "overwritten"}, {"b", "2"}, {"c", "3"}}));
}

TEST_F(KvPurgeTest, WithoutTagsOnlyTheLatestVersionRemains) {
  std::string secret = Marker();
  auto o = Opts();
  o.lazy_value_threshold = 16;  // the deleted value stays in Lance, not in memory
  auto db = Open(o);
  for (int i = 0; i < 5; ++i) {
    db->Put("k" + std::to_string(i), std::string(100, 'v') + std::to_string(i));
    db->Flush();
  }
  db->Put("big", secret + std::string(100, 's'));
  db->Flush();
  db->Delete("big");
  db->Put("k0", "new");  // unflushed: the purge flushes it
  ASSERT_GT(db->Versions().size(), 1u);
  ASSERT_FALSE(FilesContaining(secret).empty());

  DB::PurgeStats stats = db->Purge();
  EXPECT_GT(stats.versions_removed, 0u);
  EXPECT_EQ(db->Versions().size(), 1u);
  EXPECT_EQ(FilesContaining(secret), std::vector<std::string>{});
  EXPECT_EQ(db->Get("k0"), "new");
  EXPECT_EQ(db->Get("k3"), std::string(100, 'v') + "3");
  EXPECT_EQ(db->Get("big"), std::nullopt);

  db.reset();
  db = Open(o);
  EXPECT_EQ(db->Get("k4"), std::string(100, 'v') + "4");
  EXPECT_EQ(db->Get("big"), std::nullopt);
  EXPECT_EQ(All(*db).size(), 5u);
}

TEST_F(KvPurgeTest, RemovesThisHandlesSavedView) {
  std::string secret = Marker();
  auto o = Opts();
  o.snapshot_min_entries = 1;  // every close saves the view
  auto db = Open(o);
  db->Put("gone", secret);
  db->Put("live", "1");
  db.reset();
  ASSERT_FALSE(FilesContaining(secret, dir_ / "wal").empty());  // in the saved view

  db = Open(o);
  EXPECT_TRUE(db->GetStats().opened_from_snapshot);
  db->Delete("gone");
  db->Purge();
  EXPECT_EQ(FilesContaining(secret, dir_ / "wal"), std::vector<std::string>{});
  db.reset();  // saves the view again, without the value
  EXPECT_EQ(FilesContaining(secret, dir_ / "wal"), std::vector<std::string>{});
  EXPECT_EQ(FilesContaining(secret), std::vector<std::string>{});
  db = Open(o);
  EXPECT_EQ(db->Get("gone"), std::nullopt);
  EXPECT_EQ(db->Get("live"), "1");
}

TEST_F(KvPurgeTest, EmptyStoreAndReadOnlyHandle) {
  auto db = Open();
  DB::PurgeStats stats = db->Purge();
  EXPECT_TRUE(stats.tags_deleted.empty());
  EXPECT_EQ(db->Versions().size(), 1u);
  db->Put("a", "1", {.sync = true});

  auto o = Opts();
  o.read_only = true;
  auto reader = Open(o);
  try {
    reader->Purge();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kNotSupported);
  }
}

}  // namespace
}  // namespace kv0::kv
