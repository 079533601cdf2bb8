// Tests of the write-ahead log's file layer, on real files in a fresh
// directory per test. The disk-full and read-only cases mount small tmpfs
// file systems and need root; they skip themselves otherwise.

#include "wal/wal.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv0/error.h"
#include "wal/segment.h"

namespace kv0::wal {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(size, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

// Segment files of a writer directory, in number order.
std::vector<std::string> SegmentFiles(const std::string& dir) {
  std::vector<std::string> paths;
  for (const Segment& s : ListSegments(dir)) paths.push_back(s.path);
  return paths;
}

size_t RecordSize(const std::string& payload) { return kHeaderSize + payload.size(); }

// Runs body, expecting a kv0::Error with the given code whose message contains
// every one of needles.
template <typename Body>
void ExpectError(Code code, const std::vector<std::string>& needles, Body body) {
  try {
    body();
    ADD_FAILURE() << "expected " << CodeName(code) << ", nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << needle << "' not in: " << e.what();
    }
  }
}

class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
  }
  ~EnvGuard() {
    if (saved_) {
      setenv(name_, saved_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

class WalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "kv0-wal-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    root_ = pattern;
    ds_ = root_ + "/wal/" + "0123456789abcdef";
  }

  void TearDown() override {
    for (auto it = mounts_.rbegin(); it != mounts_.rend(); ++it) {
      if (umount2(it->c_str(), 0) != 0) umount2(it->c_str(), MNT_DETACH);
    }
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  // Mounts a 256 KiB tmpfs at dir; false (with the reason in *error) if this
  // machine does not allow it.
  bool MountSmallTmpfs(const std::string& dir, std::string* error) {
    fs::create_directories(dir);
    if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=256k") != 0) {
      *error = "cannot mount a tmpfs at " + dir + " (" + std::strerror(errno) +
               "); this test needs root";
      return false;
    }
    mounts_.push_back(dir);
    return true;
  }

  // The records of the only abandoned writer under ds_.
  std::vector<std::string> ClaimOnly(const std::string& ds) {
    auto claimed = ClaimAbandoned(ds, "");
    EXPECT_EQ(claimed.size(), 1u);
    return claimed.empty() ? std::vector<std::string>{} : claimed[0].records;
  }

  std::string root_;
  std::string ds_;
  std::vector<std::string> mounts_;
};

TEST(SyncModeTest, ParsesAndNamesModes) {
  for (SyncMode mode : {SyncMode::kNone, SyncMode::kBatch, SyncMode::kAlways}) {
    EXPECT_EQ(ParseSyncMode(SyncModeName(mode)), mode);
  }
  EXPECT_EQ(SyncModeName(SyncMode::kBatch), "batch");
  ExpectError(Code::kInvalidArgument, {"\"Always\""}, [] { ParseSyncMode("Always"); });
  ExpectError(Code::kInvalidArgument, {}, [] { ParseSyncMode(""); });
}

TEST(RootTest, ResolvesOptionThenEnvThenCacheDir) {
  EnvGuard wal("KV0_WAL_DIR"), xdg("XDG_CACHE_HOME"), home("HOME");
  setenv("KV0_WAL_DIR", "/env/wal", 1);
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(ResolveRoot("/opt/wal"), "/opt/wal");
  EXPECT_EQ(ResolveRoot(""), "/env/wal");
  setenv("KV0_WAL_DIR", "", 1);
#ifdef __APPLE__
  EXPECT_EQ(ResolveRoot(""), "/home/u/Library/Caches/kv0/wal");
#else
  EXPECT_EQ(ResolveRoot(""), "/xdg/kv0/wal");
  unsetenv("KV0_WAL_DIR");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(ResolveRoot(""), "/home/u/.cache/kv0/wal");
#endif
}

TEST(RootTest, DatasetDirIsXxh3OfKeyInHex) {
  EXPECT_EQ(DatasetDir("/r", ""), "/r/2d06800538d394c2");  // XXH3_64bits of nothing
  std::string kv = DatasetDir("/r", "s3://bucket/db");
  std::string repo = DatasetDir("/r", "repo:s3://bucket/db");
  EXPECT_NE(kv, repo);
  for (const std::string& dir : {kv, repo}) {
    std::string leaf = dir.substr(3);
    EXPECT_EQ(leaf.size(), 16u);
    EXPECT_EQ(leaf.find_first_not_of("0123456789abcdef"), std::string::npos) << leaf;
  }
}

TEST(SegmentTest, ParsesFileNames) {
  EXPECT_EQ(SegmentFileName(7), "000000000007.wal");
  auto plain = ParseSegmentName("000000000007.wal");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->number, 7u);
  EXPECT_FALSE(plain->valid_bytes);
  auto cut = ParseSegmentName(CutSegmentFileName(9, 1234));
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->number, 9u);
  EXPECT_EQ(cut->valid_bytes, 1234u);
  for (const char* other : {"LOCK", ".wal", "12.wal.", "12.wal.x", "x12.wal", "12.wal~"}) {
    EXPECT_FALSE(ParseSegmentName(other)) << other;
  }
}

TEST_F(WalTest, RoundTripsEmptyAndLargePayloads) {
  std::vector<std::string> payloads = {
      "", "a", RandomBytes(5 << 20, 1), "", std::string(3, '\0'), RandomBytes(100000, 2)};
  auto log = Log::Open(ds_, SyncMode::kBatch);
  std::string dir = log->dir();
  std::string id = log->writer_id();
  EXPECT_EQ(dir, ds_ + "/" + id);
  uint64_t bytes = 0;
  for (const std::string& p : payloads) {
    log->Append(p);
    bytes += RecordSize(p);
  }
  EXPECT_EQ(log->segment_bytes(), bytes);
  log.reset();

  auto claimed = ClaimAbandoned(ds_, "");
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].dir, dir);
  EXPECT_EQ(claimed[0].writer_id, id);
  EXPECT_TRUE(claimed[0].records == payloads);
}

TEST_F(WalTest, TwoLogsGetTheirOwnWriters) {
  auto a = Log::Open(ds_, SyncMode::kBatch);
  auto b = Log::Open(ds_, SyncMode::kBatch);
  EXPECT_NE(a->writer_id(), b->writer_id());
  EXPECT_NE(a->dir(), b->dir());
  EXPECT_EQ(a->writer_id().size(), 16u);
  a->Append("to a");
  b->Append("to b");
  EXPECT_TRUE(fs::exists(a->dir() + "/LOCK"));
  EXPECT_EQ(SegmentFiles(a->dir()).size(), 1u);
}

TEST_F(WalTest, CleanCloseLeavesDirectoryForTheNextOpen) {
  auto log = Log::Open(ds_, SyncMode::kBatch);
  std::string id = log->writer_id();
  log->Append("committed");
  log->Seal();
  log->Append("also committed");
  log->CloseClean();
  ExpectError(Code::kNotSupported, {log->dir()}, [&] { log->Append("late"); });
  EXPECT_TRUE(fs::is_directory(log->dir()));
  EXPECT_TRUE(SegmentFiles(log->dir()).empty());
  EXPECT_TRUE(ClaimAbandoned(ds_, "").empty());
  log.reset();

  auto again = Log::Open(ds_, SyncMode::kBatch);
  EXPECT_EQ(again->writer_id(), id);
  again->Append("new");
  auto other = Log::Open(ds_, SyncMode::kBatch);  // the adopted one is taken now
  EXPECT_NE(other->writer_id(), id);
  again.reset();
  auto claimed = ClaimAbandoned(ds_, other->writer_id());
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].records, std::vector<std::string>{"new"});
}

TEST_F(WalTest, CrashedWriterIsClaimedAndLiveOneIsNot) {
  std::vector<std::string> written = {"one", "two", "three"};
  auto crashed = Log::Open(ds_, SyncMode::kAlways);
  std::string crashed_id = crashed->writer_id();
  for (const auto& r : written) crashed->Append(r);
  crashed.reset();  // no CloseClean: as if the process died

  auto live = Log::Open(ds_, SyncMode::kBatch);
  live->Append("live record");
  auto opener = Log::Open(ds_, SyncMode::kBatch);
  EXPECT_NE(opener->writer_id(), crashed_id);  // a directory with records is not adopted
  EXPECT_NE(opener->writer_id(), live->writer_id());

  auto claimed = ClaimAbandoned(ds_, opener->writer_id());
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].writer_id, crashed_id);
  EXPECT_EQ(claimed[0].records, written);
  EXPECT_TRUE(claimed[0].lock.held());
  // Held by the first claim, the directory is not claimed twice.
  EXPECT_TRUE(ClaimAbandoned(ds_, opener->writer_id()).empty());

  std::string dir = claimed[0].dir;
  claimed[0].Remove();
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(claimed[0].lock.held());
  EXPECT_TRUE(ClaimAbandoned(ds_, opener->writer_id()).empty());
  EXPECT_TRUE(ClaimAbandoned(root_ + "/no/such/dir", "").empty());
}

TEST_F(WalTest, SealAndDeleteSealedKeepOnlyNewerRecords) {
  auto log = Log::Open(ds_, SyncMode::kBatch);
  log->Append("a");
  log->Append("b");
  uint64_t first = log->Seal();
  EXPECT_EQ(log->segment_bytes(), 0u);
  EXPECT_EQ(log->Seal(), first);  // nothing new: the empty segment stays
  log->Append("c");
  uint64_t second = log->Seal();
  EXPECT_GT(second, first);
  log->Append("d");
  EXPECT_EQ(SegmentFiles(log->dir()).size(), 3u);
  log->DeleteSealed(first);
  EXPECT_EQ(SegmentFiles(log->dir()).size(), 2u);
  log->DeleteSealed(UINT64_MAX);  // never the current segment
  EXPECT_EQ(SegmentFiles(log->dir()).size(), 1u);
  log->Append("e");
  log.reset();
  EXPECT_EQ(ClaimOnly(ds_), (std::vector<std::string>{"d", "e"}));
}

TEST_F(WalTest, SegmentGapsAreFine) {
  auto log = Log::Open(ds_, SyncMode::kBatch);
  std::string dir = log->dir();
  log->Append("a");
  log->Seal();
  log->Append("b");
  log->Seal();
  log->Append("c");
  log.reset();
  auto files = SegmentFiles(dir);
  ASSERT_EQ(files.size(), 3u);
  fs::remove(files[1]);
  EXPECT_EQ(ClaimOnly(ds_), (std::vector<std::string>{"a", "c"}));
}

TEST_F(WalTest, TornTailIsDroppedAndCut) {
  std::string last = RandomBytes(30, 3);
  auto log = Log::Open(ds_, SyncMode::kBatch);
  std::string dir = log->dir();
  log->Append("in the first segment");
  log->Seal();
  log->Append("b");
  log->Append(last);
  log.reset();
  std::string segment = SegmentFiles(dir).back();
  const std::string whole = ReadAll(segment);
  const size_t start = whole.size() - RecordSize(last);
  const std::vector<std::string> before = {"in the first segment", "b"};

  for (size_t cut = start; cut < whole.size(); ++cut) {
    WriteAll(segment, whole.substr(0, cut));
    {
      auto claimed = ClaimAbandoned(ds_, "");
      ASSERT_EQ(claimed.size(), 1u) << "cut at " << cut;
      EXPECT_EQ(claimed[0].records, before) << "cut at " << cut;
    }
    EXPECT_EQ(fs::file_size(segment), start) << "cut at " << cut;
  }

  // A damaged final record that reaches the end of the file is torn too.
  std::string damaged = whole;
  damaged.back() ^= 0x40;
  WriteAll(segment, damaged);
  EXPECT_EQ(ClaimOnly(ds_), before);
  EXPECT_EQ(fs::file_size(segment), start);

  // So is a zero-filled tail, as a crash can leave behind.
  WriteAll(segment, whole + std::string(100, '\0'));
  std::vector<std::string> all = before;
  all.push_back(last);
  EXPECT_EQ(ClaimOnly(ds_), all);
  EXPECT_EQ(fs::file_size(segment), whole.size());
}

TEST_F(WalTest, TornTailBeforeEmptySegmentsIsDropped) {
  auto log = Log::Open(ds_, SyncMode::kNone);
  std::string dir = log->dir();
  log->Append("a");
  log->Append("b");
  log->Seal();  // stopped right after: the new segment is empty
  log.reset();
  auto files = SegmentFiles(dir);
  ASSERT_EQ(files.size(), 2u);
  fs::resize_file(files[0], fs::file_size(files[0]) - 1);
  EXPECT_EQ(ClaimOnly(ds_), std::vector<std::string>{"a"});
  EXPECT_EQ(fs::file_size(files[0]), RecordSize("a"));
}

TEST_F(WalTest, DamageBeforeTheTailIsCorruption) {
  auto log = Log::Open(ds_, SyncMode::kBatch);
  std::string dir = log->dir();
  log->Append("first");
  log->Append("middle record");
  log->Append("last");
  log.reset();
  std::string segment = SegmentFiles(dir).back();
  const std::string whole = ReadAll(segment);
  const size_t middle = RecordSize("first");

  std::string damaged = whole;
  damaged[middle + kHeaderSize + 3] ^= 0x01;  // a payload byte
  WriteAll(segment, damaged);
  ExpectError(Code::kCorruption, {segment, "offset " + std::to_string(middle), "checksum"},
              [&] { ClaimAbandoned(ds_, ""); });
  EXPECT_EQ(ReadAll(segment), damaged);  // nothing was cut

  damaged = whole;
  damaged[middle] ^= 0x01;  // the length
  WriteAll(segment, damaged);
  ExpectError(Code::kCorruption, {segment, "offset " + std::to_string(middle)},
              [&] { ClaimAbandoned(ds_, ""); });
}

TEST_F(WalTest, DamageInAnEarlierSegmentIsCorruption) {
  auto log = Log::Open(ds_, SyncMode::kBatch);
  std::string dir = log->dir();
  log->Append("a");
  log->Append("end of the first segment");
  log->Seal();
  log->Append("c");
  log.reset();
  std::string first = SegmentFiles(dir).front();
  const std::string whole = ReadAll(first);

  std::string damaged = whole;
  damaged.back() ^= 0x01;
  WriteAll(first, damaged);
  ExpectError(Code::kCorruption, {first, "offset " + std::to_string(RecordSize("a"))},
              [&] { ClaimAbandoned(ds_, ""); });

  WriteAll(first, whole.substr(0, whole.size() - 1));  // cut short, but not the last segment
  ExpectError(Code::kCorruption, {first}, [&] { ClaimAbandoned(ds_, ""); });

  WriteAll(first, whole);
  EXPECT_EQ(ClaimOnly(ds_), (std::vector<std::string>{"a", "end of the first segment", "c"}));
}

// A segment whose failed tail could not be truncated is renamed to say where
// its records end; recovery reads only that far.
TEST_F(WalTest, FencedSegmentIsReadUpToItsLength) {
  auto log = Log::Open(ds_, SyncMode::kBatch);
  std::string dir = log->dir();
  log->Append("a");
  log->Append("b");
  log->Seal();
  log->Append("c");
  log.reset();
  std::string first = SegmentFiles(dir).front();
  uint64_t good = fs::file_size(first);
  std::string fenced = dir + "/" + CutSegmentFileName(1, good);
  fs::rename(first, fenced);
  WriteAll(fenced, ReadAll(fenced) + "\x05\x00\x00\x00partial");
  EXPECT_EQ(ClaimOnly(ds_), (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(WalTest, EveryModeIsRecoverable) {
  for (SyncMode mode : {SyncMode::kNone, SyncMode::kBatch, SyncMode::kAlways}) {
    SCOPED_TRACE(std::string(SyncModeName(mode)));
    std::string ds = ds_ + "-" + std::string(SyncModeName(mode));
    auto log = Log::Open(ds, mode);
    EXPECT_EQ(log->mode(), mode);
    std::vector<std::string> written;
    for (int i = 0; i < 20; ++i) {
      written.push_back("record " + std::to_string(i));
      log->Append(written.back());
      if (i == 10) log->Seal();
    }
    EXPECT_EQ(log->Sync(), mode == SyncMode::kBatch);
    EXPECT_FALSE(log->Sync());  // nothing new
    log.reset();
    EXPECT_EQ(ClaimOnly(ds), written);
  }
}

TEST_F(WalTest, ConcurrentAppendsAndSyncs) {
  auto log = Log::Open(ds_, SyncMode::kBatch);
  constexpr int kThreads = 4, kPerThread = 500;
  std::atomic<bool> done{false};
  std::thread syncer([&] {
    while (!done) log->Sync();
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        log->Append(std::to_string(t) + ":" + std::to_string(i));
        if (t == 0 && i % 100 == 0) log->Seal();
      }
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  syncer.join();
  log.reset();

  auto records = ClaimOnly(ds_);
  ASSERT_EQ(records.size(), static_cast<size_t>(kThreads * kPerThread));
  std::vector<int> next(kThreads, 0);
  for (const std::string& r : records) {
    int t = std::stoi(r.substr(0, r.find(':')));
    EXPECT_EQ(std::stoi(r.substr(r.find(':') + 1)), next[t]++);
  }
}

TEST_F(WalTest, FullDiskAppendIsCutOut) {
  std::string mount_dir = root_ + "/small";
  std::string error;
  if (!MountSmallTmpfs(mount_dir, &error)) GTEST_SKIP() << error;
  std::string ds = mount_dir + "/ds";

  // Fills the log until the disk is full; returns the acknowledged records.
  auto fill = [](Log& log, uint32_t seed) {
    std::vector<std::string> acked;
    for (uint32_t i = 0; i < 10000; ++i) {
      std::string record = RandomBytes(1000 + i % 7, seed + i);
      try {
        log.Append(record);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Code::kIOError) << e.what();
        EXPECT_NE(std::string(e.what()).find(log.dir()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(std::strerror(ENOSPC)), std::string::npos) << e.what();
        return acked;
      }
      acked.push_back(record);
    }
    ADD_FAILURE() << "the disk never filled up";
    return acked;
  };

  auto log = Log::Open(ds, SyncMode::kAlways);
  std::vector<std::string> acked = fill(*log, 0);
  ASSERT_FALSE(acked.empty());
  uint64_t acked_bytes = 0;
  for (const auto& r : acked) acked_bytes += RecordSize(r);
  EXPECT_EQ(log->segment_bytes(), acked_bytes);
  EXPECT_EQ(fs::file_size(SegmentFiles(log->dir()).back()), acked_bytes);  // no partial record
  ExpectError(Code::kIOError, {}, [&] { log->Append(std::string(8192, 'x')); });
  log->Append("");  // a small record still fits in the space the cut freed
  acked.push_back("");
  log.reset();

  auto claimed = ClaimAbandoned(ds, "");
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_TRUE(claimed[0].records == acked);
  claimed[0].Remove();  // frees the space

  log = Log::Open(ds, SyncMode::kBatch);
  log->Append("after removing a directory");
  std::vector<std::string> second = fill(*log, 100000);
  uint64_t sealed = log->Seal();
  log->DeleteSealed(sealed);
  std::vector<std::string> after = {"after deleting sealed segments", RandomBytes(20000, 7)};
  for (const auto& r : after) log->Append(r);
  log.reset();
  EXPECT_EQ(ClaimOnly(ds), after);
}

TEST_F(WalTest, OpenUnderARegularFileFails) {
  WriteAll(root_ + "/file", "not a directory");
  ExpectError(Code::kIOError, {root_ + "/file"},
              [&] { Log::Open(root_ + "/file/wal/ds", SyncMode::kBatch); });
}

TEST_F(WalTest, OpenOnReadOnlyFileSystemFails) {
  std::string mount_dir = root_ + "/ro";
  std::string error;
  if (!MountSmallTmpfs(mount_dir, &error)) GTEST_SKIP() << error;
  std::string idle = mount_dir + "/idle";
  Log::Open(idle, SyncMode::kBatch)->CloseClean();
  if (mount("tmpfs", mount_dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
    GTEST_SKIP() << "cannot remount " << mount_dir << " read-only: " << std::strerror(errno);
  }
  ExpectError(Code::kIOError, {mount_dir + "/fresh", std::strerror(EROFS)},
              [&] { Log::Open(mount_dir + "/fresh", SyncMode::kBatch); });
  // An idle writer directory can be locked there, but no segment created.
  ExpectError(Code::kIOError, {idle, std::strerror(EROFS)},
              [&] { Log::Open(idle, SyncMode::kBatch); });
}

}  // namespace
}  // namespace kv0::wal
