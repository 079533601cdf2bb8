// Tests of the write-ahead log's file layer, on real files in a fresh
// directory per test. The disk-full and read-only cases mount small tmpfs
// file systems and need root; they skip themselves otherwise.

#include "wal/wal.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
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
#include "wal/fault_files.h"
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

  // Four threads append per_thread numbered records each while another
  // syncs and the first seals every seal_every records; the claimed log must
  // hold every record, each thread's in its order.
  void AppendFromThreadsWhileSyncing(std::unique_ptr<Log> log, int per_thread, int seal_every) {
    constexpr int kThreads = 4;
    std::atomic<bool> done{false};
    std::thread syncer([&] {
      while (!done) log->Sync();
    });
    std::vector<std::thread> writers;
    for (int t = 0; t < kThreads; ++t) {
      writers.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) {
          log->Append(std::to_string(t) + ":" + std::to_string(i));
          if (t == 0 && i % seal_every == 0) log->Seal();
        }
      });
    }
    for (auto& w : writers) w.join();
    done = true;
    syncer.join();
    log.reset();

    auto records = ClaimOnly(ds_);
    ASSERT_EQ(records.size(), static_cast<size_t>(kThreads * per_thread));
    std::vector<int> next(kThreads, 0);
    for (const std::string& r : records) {
      int t = std::stoi(r.substr(0, r.find(':')));
      EXPECT_EQ(std::stoi(r.substr(r.find(':') + 1)), next[t]++);
    }
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
  for (WalSync mode : {WalSync::kNone, WalSync::kBatch, WalSync::kAlways}) {
    EXPECT_EQ(ParseWalSync(WalSyncName(mode)), mode);
  }
  EXPECT_EQ(WalSyncName(WalSync::kBatch), "batch");
  ExpectError(Code::kInvalidArgument, {"\"Always\""}, [] { ParseWalSync("Always"); });
  ExpectError(Code::kInvalidArgument, {}, [] { ParseWalSync(""); });
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

TEST(SegmentTest, ParsesMappedFileNames) {
  EXPECT_EQ(SegmentFileName(7, /*mapped=*/true), "000000000007.wmap");
  auto plain = ParseSegmentName("000000000007.wmap");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->number, 7u);
  EXPECT_TRUE(plain->mapped);
  EXPECT_FALSE(plain->valid_bytes);
  EXPECT_FALSE(ParseSegmentName("000000000007.wal")->mapped);
  auto cut = ParseSegmentName(CutSegmentFileName(9, 1234, /*mapped=*/true));
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->number, 9u);
  EXPECT_TRUE(cut->mapped);
  EXPECT_EQ(cut->valid_bytes, 1234u);
  for (const char* other : {".wmap", "12.wmap.", "12.wmapx", "12.wma", "12.map", "12.wmap.wal"}) {
    EXPECT_FALSE(ParseSegmentName(other)) << other;
  }
}

TEST(SegmentTest, MappedRecordsArePaddedToEightBytes) {
  EXPECT_EQ(MappedRecordSize(1), 16u);
  EXPECT_EQ(MappedRecordSize(4), 16u);
  EXPECT_EQ(MappedRecordSize(5), 24u);
  EXPECT_EQ(MappedRecordSize(12), 24u);
  EXPECT_EQ(MappedRecordSize(13), 32u);
}

TEST_F(WalTest, RoundTripsSmallAndLargePayloads) {
  std::vector<std::string> payloads = {"a", RandomBytes(5 << 20, 1), std::string(1, '\0'),
                                       std::string(3, '\0'), RandomBytes(100000, 2)};
  auto log = Log::Open(ds_, WalSync::kBatch);
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
  auto a = Log::Open(ds_, WalSync::kBatch);
  auto b = Log::Open(ds_, WalSync::kBatch);
  EXPECT_NE(a->writer_id(), b->writer_id());
  EXPECT_NE(a->dir(), b->dir());
  EXPECT_EQ(a->writer_id().size(), 16u);
  a->Append("to a");
  b->Append("to b");
  EXPECT_TRUE(fs::exists(a->dir() + "/LOCK"));
  EXPECT_EQ(SegmentFiles(a->dir()).size(), 1u);
}

TEST_F(WalTest, CleanCloseLeavesDirectoryForTheNextOpen) {
  auto log = Log::Open(ds_, WalSync::kBatch);
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

  auto again = Log::Open(ds_, WalSync::kBatch);
  EXPECT_EQ(again->writer_id(), id);
  again->Append("new");
  auto other = Log::Open(ds_, WalSync::kBatch);  // the adopted one is taken now
  EXPECT_NE(other->writer_id(), id);
  again.reset();
  auto claimed = ClaimAbandoned(ds_, other->writer_id());
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].records, std::vector<std::string>{"new"});
}

TEST_F(WalTest, CrashedWriterIsClaimedAndLiveOneIsNot) {
  std::vector<std::string> written = {"one", "two", "three"};
  auto crashed = Log::Open(ds_, WalSync::kAlways);
  std::string crashed_id = crashed->writer_id();
  for (const auto& r : written) crashed->Append(r);
  crashed.reset();  // no CloseClean: as if the process died

  auto live = Log::Open(ds_, WalSync::kBatch);
  live->Append("live record");
  auto opener = Log::Open(ds_, WalSync::kBatch);
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
  auto log = Log::Open(ds_, WalSync::kBatch);
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
  auto log = Log::Open(ds_, WalSync::kBatch);
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
  auto log = Log::Open(ds_, WalSync::kBatch);
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
  auto log = Log::Open(ds_, WalSync::kNone);
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
  auto log = Log::Open(ds_, WalSync::kBatch);
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

TEST_F(WalTest, LengthRunningPastTheEndWithRecordsAfterItIsCorruption) {
  // A torn write is the last record; a record that only seems to run past
  // the end of the file while whole records follow it is damage. Reading it
  // as torn would drop every later acknowledged record.
  auto log = Log::Open(ds_, WalSync::kBatch);
  std::string dir = log->dir();
  std::vector<std::string> payloads;
  for (int i = 0; i < 20; ++i) payloads.push_back(RandomBytes(50 + i, i));
  for (const auto& p : payloads) log->Append(p);
  log.reset();
  std::string segment = SegmentFiles(dir).back();
  const std::string whole = ReadAll(segment);
  size_t at = 0;
  for (int i = 0; i < 7; ++i) at += RecordSize(payloads[i]);
  std::string damaged = whole;
  damaged[at + 3] = '\x40';  // a length of over a gigabyte
  WriteAll(segment, damaged);
  ExpectError(Code::kCorruption, {segment, "offset " + std::to_string(at), "past the end"},
              [&] { ClaimAbandoned(ds_, ""); });
  EXPECT_EQ(ReadAll(segment), damaged);  // nothing was cut
}

TEST_F(WalTest, FailedAndTornWritesAreNeverReplayed) {
  // Through fault-injecting files: a write that fails after writing half of
  // its bytes is cut back out, and the log goes on.
  FaultInjectingFiles files(ds_);
  SetFilesForTesting(&files);
  auto log = Log::Open(ds_, WalSync::kBatch);
  log->Append("one");
  files.FailNth(FaultInjectingFiles::Op::kWrite, 1, EIO, /*tear=*/true);
  ExpectError(Code::kIOError, {"cannot append"}, [&] { log->Append(RandomBytes(100, 1)); });
  log->Append("two");
  files.FailNth(FaultInjectingFiles::Op::kCreate, 1);
  ExpectError(Code::kIOError, {"cannot create segment"}, [&] { log->Seal(); });
  ExpectError(Code::kIOError, {"refused"}, [&] { log->Append("refused"); });
  log->Seal();  // a new segment, this time
  log->Append("three");
  log.reset();
  SetFilesForTesting(nullptr);
  EXPECT_EQ(ClaimOnly(ds_), (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_GE(files.count(FaultInjectingFiles::Op::kWrite), 4u);
}

TEST_F(WalTest, DamageInAnEarlierSegmentIsCorruption) {
  auto log = Log::Open(ds_, WalSync::kBatch);
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
  auto log = Log::Open(ds_, WalSync::kBatch);
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
  for (int variant = 0; variant < 6; ++variant) {
    WalSync mode = std::array{WalSync::kNone, WalSync::kBatch, WalSync::kAlways}[variant % 3];
    bool mapped = variant >= 3;
    SCOPED_TRACE(std::string(WalSyncName(mode)) + (mapped ? " mapped" : ""));
    std::string ds = ds_ + "-" + std::string(WalSyncName(mode)) + (mapped ? "-mapped" : "");
    auto log = Log::Open(ds, mode, mapped);
    EXPECT_EQ(log->mode(), mode);
    EXPECT_EQ(log->mapped(), mapped);
    std::vector<std::string> written;
    for (int i = 0; i < 20; ++i) {
      written.push_back("record " + std::to_string(i));
      log->Append(written.back());
      if (i == 10) log->Seal();
    }
    EXPECT_EQ(log->Sync(), mode == WalSync::kBatch);
    EXPECT_FALSE(log->Sync());  // nothing new
    log.reset();
    EXPECT_EQ(ClaimOnly(ds), written);
  }
}

TEST_F(WalTest, ConcurrentAppendsAndSyncs) {
  AppendFromThreadsWhileSyncing(Log::Open(ds_, WalSync::kBatch), 500, 100);
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

  auto log = Log::Open(ds, WalSync::kAlways);
  std::vector<std::string> acked = fill(*log, 0);
  ASSERT_FALSE(acked.empty());
  uint64_t acked_bytes = 0;
  for (const auto& r : acked) acked_bytes += RecordSize(r);
  EXPECT_EQ(log->segment_bytes(), acked_bytes);
  EXPECT_EQ(fs::file_size(SegmentFiles(log->dir()).back()), acked_bytes);  // no partial record
  ExpectError(Code::kIOError, {}, [&] { log->Append(std::string(8192, 'x')); });
  log->Append("x");  // a small record still fits in the space the cut freed
  acked.push_back("x");
  log.reset();

  auto claimed = ClaimAbandoned(ds, "");
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_TRUE(claimed[0].records == acked);
  claimed[0].Remove();  // frees the space

  log = Log::Open(ds, WalSync::kBatch);
  log->Append("after removing a directory");
  std::vector<std::string> second = fill(*log, 100000);
  uint64_t sealed = log->Seal();
  log->DeleteSealed(sealed);
  std::vector<std::string> after = {"after deleting sealed segments", RandomBytes(20000, 7)};
  for (const auto& r : after) log->Append(r);
  log.reset();
  EXPECT_EQ(ClaimOnly(ds), after);
}

// ---- Mapped logs ----

// The bytes a mapped segment holds for payload: header, payload, zero padding.
std::string MappedRecord(const std::string& payload) {
  char header[kHeaderSize];
  EncodeHeader(payload, header);
  std::string record(header, kHeaderSize);
  record += payload;
  record.resize(MappedRecordSize(payload.size()), '\0');
  return record;
}

std::string MappedRecords(const std::vector<std::string>& payloads) {
  std::string out;
  for (const std::string& p : payloads) out += MappedRecord(p);
  return out;
}

TEST_F(WalTest, EmptyPayloadIsRejectedInBothModes) {
  for (bool mapped : {false, true}) {
    SCOPED_TRACE(mapped ? "mapped" : "write");
    auto log = Log::Open(ds_ + (mapped ? "-mapped" : ""), WalSync::kBatch, mapped);
    ExpectError(Code::kInvalidArgument, {log->dir(), "empty"}, [&] { log->Append(""); });
    EXPECT_EQ(log->segment_bytes(), 0u);
    log->Append("x");
    ExpectError(Code::kInvalidArgument, {}, [&] { log->Append(std::string_view()); });
    log.reset();
    EXPECT_EQ(ClaimOnly(ds_ + (mapped ? "-mapped" : "")), std::vector<std::string>{"x"});
  }
}

TEST_F(WalTest, MappedAppendSealDeleteAndClaim) {
  auto log = Log::Open(ds_, WalSync::kBatch, /*mapped=*/true);
  EXPECT_TRUE(log->mapped());
  std::string dir = log->dir();
  std::vector<std::string> first = {"a", std::string(3, '\0'), RandomBytes(1000, 1), "12345678"};
  for (const auto& p : first) log->Append(p);
  EXPECT_EQ(log->segment_bytes(), MappedRecords(first).size());
  auto files = SegmentFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(fs::path(files[0]).filename(), "000000000001.wmap");
  // Preallocated: the records sit in front of unused zero capacity.
  EXPECT_EQ(fs::file_size(files[0]), Log::kDefaultMappedCapacity);
  EXPECT_TRUE(log->Sync());
  EXPECT_FALSE(log->Sync());

  uint64_t sealed = log->Seal();
  EXPECT_EQ(sealed, 1u);
  EXPECT_EQ(log->segment_bytes(), 0u);
  EXPECT_EQ(log->Seal(), sealed);  // the empty segment stays
  // Sealed: cut after its last record, so it is exactly the records.
  EXPECT_EQ(ReadAll(files[0]), MappedRecords(first));

  std::vector<std::string> second = {"after the seal", RandomBytes(3 << 20, 2)};
  for (const auto& p : second) log->Append(p);
  files = SegmentFiles(dir);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(fs::path(files[1]).filename(), "000000000002.wmap");
  log->DeleteSealed(sealed);
  EXPECT_EQ(SegmentFiles(dir).size(), 1u);
  log->DeleteSealed(UINT64_MAX);  // never the current segment
  EXPECT_EQ(SegmentFiles(dir).size(), 1u);
  log.reset();  // as a crash

  auto claimed = ClaimAbandoned(ds_, "");
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].dir, dir);
  EXPECT_TRUE(claimed[0].records == second);
  claimed[0].Remove();
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(WalTest, MappedRecordsSpanSegments) {
  constexpr uint64_t kCapacity = 256;
  auto log = Log::Open(ds_, WalSync::kBatch, /*mapped=*/true, kCapacity);
  std::string dir = log->dir();
  std::vector<std::string> before, after;
  for (int i = 0; i < 100; ++i) {
    // Mostly small, some bigger than a whole segment.
    std::string p = i % 17 == 5 ? RandomBytes(1000 + i, i) : "record " + std::to_string(i);
    log->Append(p);
    before.push_back(p);
  }
  auto files = SegmentFiles(dir);
  EXPECT_GT(files.size(), 10u);
  // Each full segment was closed like a sealed one: cut after its records,
  // which a big record has to itself.
  std::string closed;
  for (size_t i = 0; i + 1 < files.size(); ++i) {
    EXPECT_EQ(ParseSegmentName(fs::path(files[i]).filename().string())->number, i + 1);
    std::string bytes = ReadAll(files[i]);
    EXPECT_GT(bytes.size(), 0u);
    EXPECT_TRUE(bytes.size() <= kCapacity || bytes.size() <= MappedRecordSize(1100)) << files[i];
    closed += bytes;
  }
  EXPECT_EQ(MappedRecords(before).substr(0, closed.size()), closed);

  // Seal's number covers every record appended before it, even those the
  // log moved to new segments by itself.
  uint64_t sealed = log->Seal();
  EXPECT_EQ(sealed, files.size());
  for (int i = 0; i < 30; ++i) {
    after.push_back(i % 7 == 3 ? RandomBytes(500, 1000 + i) : "later " + std::to_string(i));
    log->Append(after.back());
  }
  log.reset();
  auto all = before;
  all.insert(all.end(), after.begin(), after.end());
  EXPECT_TRUE(ClaimOnly(ds_) == all);
  // Deleting what the seal covered leaves exactly the later records.
  for (const Segment& s : ListSegments(dir)) {
    if (s.name.number <= sealed) fs::remove(s.path);
  }
  EXPECT_TRUE(ClaimOnly(ds_) == after);
}

// A mapped log writes zeros ahead of its records through the files layer
// (so that its stores find their pages in the page cache); when those
// writes fail, appends go on as before and lose nothing.
TEST_F(WalTest, MappedZerosWrittenAheadAreOnlyAnAid) {
  FaultInjectingFiles files(ds_);
  SetFilesForTesting(&files);
  auto log = Log::Open(ds_, WalSync::kBatch, /*mapped=*/true, 1 << 20);
  std::vector<std::string> records;
  auto append = [&](int n) {
    for (int i = 0; i < n; ++i) {
      records.push_back(RandomBytes(1000, records.size()));
      log->Append(records.back());
    }
  };
  append(1);
  const uint64_t first = files.count(FaultInjectingFiles::Op::kWrite);
  EXPECT_GT(first, 0u);
  append(300);  // past the first chunks
  EXPECT_GT(files.count(FaultInjectingFiles::Op::kWrite), first);
  files.FailAll(FaultInjectingFiles::Op::kWrite);
  append(900);  // the rest of the segment and into the next, whose writes fail too
  log->Seal();
  append(10);
  files.Clear();
  log->Seal();
  const uint64_t before = files.count(FaultInjectingFiles::Op::kWrite);
  append(10);
  EXPECT_GT(files.count(FaultInjectingFiles::Op::kWrite), before);
  log.reset();
  SetFilesForTesting(nullptr);
  EXPECT_TRUE(ClaimOnly(ds_) == records);
}

TEST_F(WalTest, MappedSealedSegmentsHoldExactlyTheirRecords) {
  auto log = Log::Open(ds_, WalSync::kNone, /*mapped=*/true, 100);
  std::string dir = log->dir();
  std::vector<std::string> payloads;
  for (int i = 0; i < 20; ++i) {
    payloads.push_back(std::string(static_cast<size_t>(i % 9 + 1), static_cast<char>('a' + i)));
  }
  for (const auto& p : payloads) log->Append(p);
  log->Seal();
  log.reset();
  std::string concatenated;
  auto files = SegmentFiles(dir);
  ASSERT_GT(files.size(), 2u);
  for (size_t i = 0; i + 1 < files.size(); ++i) {
    std::string bytes = ReadAll(files[i]);
    EXPECT_LE(bytes.size(), 104u);
    concatenated += bytes;
  }
  EXPECT_EQ(fs::file_size(files.back()), 104u);  // the fresh one, empty
  EXPECT_EQ(concatenated, MappedRecords(payloads));
  // A directory whose only segment is an empty one holds no records: it is
  // not claimed, and the next Open adopts it.
  for (size_t i = 0; i + 1 < files.size(); ++i) fs::remove(files[i]);
  EXPECT_TRUE(ClaimAbandoned(ds_, "").empty());
  auto again = Log::Open(ds_, WalSync::kNone, /*mapped=*/true);
  EXPECT_EQ(again->dir(), dir);
}

TEST_F(WalTest, MappedLogLeftByACrashIsClaimedWhole) {
  for (WalSync mode : {WalSync::kNone, WalSync::kBatch, WalSync::kAlways}) {
    SCOPED_TRACE(std::string(WalSyncName(mode)));
    std::string ds = ds_ + "-" + std::string(WalSyncName(mode));
    auto log = Log::Open(ds, mode, /*mapped=*/true, 1024);
    std::string dir = log->dir();
    std::vector<std::string> written;
    for (int i = 0; i < 50; ++i) {
      written.push_back("record " + std::to_string(i) + std::string(static_cast<size_t>(i), 'x'));
      log->Append(written.back());
    }
    log.reset();  // no CloseClean: the last segment keeps its zero tail
    auto files = SegmentFiles(dir);
    ASSERT_GE(files.size(), 2u);
    EXPECT_EQ(fs::file_size(files.back()), 1024u);

    EXPECT_EQ(ClaimOnly(ds), written);
    // The claim cut the unused capacity off.
    uint64_t total = 0;
    for (const std::string& f : files) total += fs::file_size(f);
    EXPECT_EQ(total, MappedRecords(written).size());
    EXPECT_EQ(ClaimOnly(ds), written);  // and reads the same again
  }
}

TEST_F(WalTest, MappedCleanCloseLeavesDirectoryForTheNextOpen) {
  auto log = Log::Open(ds_, WalSync::kBatch, /*mapped=*/true);
  std::string id = log->writer_id();
  log->Append("committed");
  log->Seal();
  log->Append("also committed");
  log->CloseClean();
  ExpectError(Code::kNotSupported, {log->dir()}, [&] { log->Append("late"); });
  EXPECT_TRUE(SegmentFiles(log->dir()).empty());
  EXPECT_TRUE(ClaimAbandoned(ds_, "").empty());
  log.reset();
  auto again = Log::Open(ds_, WalSync::kBatch, /*mapped=*/true);
  EXPECT_EQ(again->writer_id(), id);
}

// Crafts a writer directory holding the given segment files.
std::string CraftWriter(const std::string& ds,
                        const std::vector<std::pair<std::string, std::string>>& files) {
  auto log = Log::Open(ds, WalSync::kNone);
  std::string dir = log->dir();
  log.reset();
  for (const std::string& path : SegmentFiles(dir)) fs::remove(path);
  for (const auto& [name, bytes] : files) WriteAll(dir + "/" + name, bytes);
  return dir;
}

TEST_F(WalTest, MappedSegmentEndsAtTheFirstZeroLength) {
  const std::vector<std::string> good = {"first", "second record", RandomBytes(40, 1)};
  const std::string records = MappedRecords(good);
  const std::string name = SegmentFileName(1, /*mapped=*/true);

  // A zero tail is unused capacity.
  std::string dir = CraftWriter(ds_, {{name, records + std::string(1000, '\0')}});
  EXPECT_EQ(ClaimOnly(ds_), good);
  EXPECT_EQ(ReadAll(dir + "/" + name), records);  // cut after the last record

  // A record whose copy was done but whose length was never stored.
  std::string half = MappedRecord("never acknowledged");
  std::fill(half.begin(), half.begin() + 4, '\0');
  WriteAll(dir + "/" + name, records + half + std::string(64, '\0'));
  EXPECT_EQ(ClaimOnly(ds_), good);
  EXPECT_EQ(ReadAll(dir + "/" + name), records);

  // A zero length with a whole record after it is damage, not the end: a
  // page that never reached the disk. Reading on would drop every record
  // after it without a word, so it is corruption, and nothing is cut.
  WriteAll(dir + "/" + name, records + half + MappedRecord("after the end"));
  ExpectError(Code::kCorruption, {dir + "/" + name, "offset " + std::to_string(records.size())},
              [&] { ClaimAbandoned(ds_, ""); });
  EXPECT_EQ(ReadAll(dir + "/" + name), records + half + MappedRecord("after the end"));

  // Also when the zero length is the segment's first.
  WriteAll(dir + "/" + name, half + MappedRecords(good));
  ExpectError(Code::kCorruption, {dir + "/" + name, "offset 0"}, [&] { ClaimAbandoned(ds_, ""); });

  // A segment of zeros holds nothing.
  WriteAll(dir + "/" + name, std::string(4096, '\0'));
  EXPECT_TRUE(ClaimAbandoned(ds_, "").empty());

  // Records may end without padding at the very end of the file.
  WriteAll(dir + "/" + name, records + MappedRecord("abc").substr(0, kHeaderSize + 3));
  std::vector<std::string> more = good;
  more.push_back("abc");
  EXPECT_EQ(ClaimOnly(ds_), more);
}

TEST_F(WalTest, MappedTornTailIsDroppedAndDamageBeforeItIsCorruption) {
  const std::vector<std::string> good = {"first", "second record"};
  const std::string records = MappedRecords(good);
  const std::string last_payload = "the last record, being written";
  const std::string last = MappedRecord(last_payload);
  const std::string name = SegmentFileName(3, /*mapped=*/true);
  std::string dir = CraftWriter(ds_, {{name, ""}});
  const std::string path = dir + "/" + name;

  // A damaged last record followed by zeros (or nothing) is torn.
  std::string damaged = last;
  damaged[kHeaderSize + 2] ^= 0x20;
  for (size_t zeros : {0, 8, 5000}) {
    WriteAll(path, records + damaged + std::string(zeros, '\0'));
    EXPECT_EQ(ClaimOnly(ds_), good) << zeros;
    EXPECT_EQ(ReadAll(path), records) << zeros;
  }
  // So is one whose length runs past the end of the file.
  for (size_t cut = 1; cut < kHeaderSize + last_payload.size(); cut += 3) {
    WriteAll(path, records + last.substr(0, cut));
    EXPECT_EQ(ClaimOnly(ds_), good) << cut;
    EXPECT_EQ(ReadAll(path), records) << cut;
  }

  // A damaged record with a record after it is corruption.
  WriteAll(path, records + damaged + MappedRecord("next"));
  ExpectError(Code::kCorruption, {path, "offset " + std::to_string(records.size()), "checksum"},
              [&] { ClaimAbandoned(ds_, ""); });
  EXPECT_EQ(ReadAll(path), records + damaged + MappedRecord("next"));  // nothing was cut

  // So is a damaged length.
  std::string bad_length = MappedRecords({"x", "y"});
  bad_length[MappedRecordSize(1)] = 9;  // "y" claims 9 bytes: the checksum fails
  WriteAll(path, bad_length + MappedRecord("z"));
  ExpectError(Code::kCorruption, {path, "offset " + std::to_string(MappedRecordSize(1))},
              [&] { ClaimAbandoned(ds_, ""); });

  // Damage in a segment before the last one is corruption, even at its end.
  WriteAll(path, records + damaged);
  WriteAll(dir + "/" + SegmentFileName(4, /*mapped=*/true), MappedRecord("later"));
  ExpectError(Code::kCorruption, {path, "offset " + std::to_string(records.size())},
              [&] { ClaimAbandoned(ds_, ""); });
  WriteAll(path, records + last.substr(0, last.size() - 9));
  ExpectError(Code::kCorruption, {path, "runs past the end"}, [&] { ClaimAbandoned(ds_, ""); });
  // But a zero tail there is fine: a crash may have come before the cut.
  WriteAll(path, records + std::string(4096, '\0'));
  std::vector<std::string> all = good;
  all.push_back("later");
  EXPECT_EQ(ClaimOnly(ds_), all);
}

TEST_F(WalTest, MixedSegmentKindsAreReadInNumberOrder) {
  // A write-mode writer, then a mapped one, each leaving its segments.
  auto log = Log::Open(ds_ + "-write", WalSync::kBatch);
  std::string write_dir = log->dir();
  log->Append("a");
  log->Append("b");
  log->Seal();
  log->Append("d");
  log.reset();
  log = Log::Open(ds_ + "-mapped", WalSync::kBatch, /*mapped=*/true);
  std::string mapped_dir = log->dir();
  log->Append("c");
  log.reset();
  auto log2 = Log::Open(ds_ + "-mapped2", WalSync::kBatch, /*mapped=*/true);
  std::string mapped_dir2 = log2->dir();
  log2->Append("e");
  log2->Append("f");
  log2.reset();

  // One directory: 1.wal {a, b}, 2.wmap {c}, 5.wal {d}, 7.wmap {e, f} (with
  // its zero tail).
  auto write_files = SegmentFiles(write_dir);
  ASSERT_EQ(write_files.size(), 2u);
  fs::rename(write_files[1], write_dir + "/" + SegmentFileName(5));
  fs::rename(SegmentFiles(mapped_dir)[0], write_dir + "/" + SegmentFileName(2, true));
  fs::rename(SegmentFiles(mapped_dir2)[0], write_dir + "/" + SegmentFileName(7, true));
  auto claimed = ClaimAbandoned(ds_ + "-write", "");
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].records, (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
}

TEST_F(WalTest, MappedConcurrentAppendsAndSyncs) {
  AppendFromThreadsWhileSyncing(Log::Open(ds_, WalSync::kBatch, /*mapped=*/true, 4096), 2000, 300);
}

TEST_F(WalTest, MappedFullDiskIsReportedWhenASegmentIsCreated) {
  std::string mount_dir = root_ + "/small";
  std::string error;
  if (!MountSmallTmpfs(mount_dir, &error)) GTEST_SKIP() << error;
  std::string ds = mount_dir + "/ds";
  WriteAll(mount_dir + "/filler", std::string(64 << 10, 'f'));

  // The first segment is allocated when the log opens.
  ExpectError(Code::kIOError, {std::strerror(ENOSPC), ".wmap"},
              [&] { Log::Open(ds, WalSync::kAlways, /*mapped=*/true, 1 << 20); });

  auto log = Log::Open(ds, WalSync::kAlways, /*mapped=*/true, 48 << 10);
  std::vector<std::string> acked;
  bool full = false;
  for (uint32_t i = 0; i < 1000 && !full; ++i) {
    std::string record = RandomBytes(1000 + i % 7, i);
    try {
      log->Append(record);
      acked.push_back(record);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kIOError) << e.what();
      EXPECT_NE(std::string(e.what()).find(log->dir()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::strerror(ENOSPC)), std::string::npos) << e.what();
      full = true;
    }
  }
  ASSERT_TRUE(full) << "the disk never filled up";
  ASSERT_GT(acked.size(), 40u);
  // Nothing was written: the next segment could not be created.
  ExpectError(Code::kIOError, {std::strerror(ENOSPC)}, [&] { log->Append("still full"); });
  // A seal has nothing to close and creates nothing, so it cannot fail for
  // want of space; its number covers every record, for a commit to delete
  // them and free the disk.
  uint64_t sealed = log->Seal();
  auto number = [](const std::string& file) {
    return ParseSegmentName(fs::path(file).filename().string())->number;
  };
  for (const std::string& file : SegmentFiles(log->dir())) EXPECT_LE(number(file), sealed) << file;
  ExpectError(Code::kIOError, {std::strerror(ENOSPC)}, [&] { log->Append("still full"); });
  // Space comes back: the next Append creates the segment, after the seal's.
  fs::remove(mount_dir + "/filler");
  log->Append("after freeing space");
  acked.push_back("after freeing space");
  EXPECT_GT(number(SegmentFiles(log->dir()).back()), sealed);
  log.reset();

  auto claimed = ClaimAbandoned(ds, "");
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_TRUE(claimed[0].records == acked);
}

TEST_F(WalTest, OpenUnderARegularFileFails) {
  WriteAll(root_ + "/file", "not a directory");
  ExpectError(Code::kIOError, {root_ + "/file"},
              [&] { Log::Open(root_ + "/file/wal/ds", WalSync::kBatch); });
}

TEST_F(WalTest, OpenOnReadOnlyFileSystemFails) {
  std::string mount_dir = root_ + "/ro";
  std::string error;
  if (!MountSmallTmpfs(mount_dir, &error)) GTEST_SKIP() << error;
  std::string idle = mount_dir + "/idle";
  Log::Open(idle, WalSync::kBatch)->CloseClean();
  if (mount("tmpfs", mount_dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
    GTEST_SKIP() << "cannot remount " << mount_dir << " read-only: " << std::strerror(errno);
  }
  ExpectError(Code::kIOError, {mount_dir + "/fresh", std::strerror(EROFS)},
              [&] { Log::Open(mount_dir + "/fresh", WalSync::kBatch); });
  // An idle writer directory can be locked there, but no segment created.
  ExpectError(Code::kIOError, {idle, std::strerror(EROFS)},
              [&] { Log::Open(idle, WalSync::kBatch); });
}

}  // namespace
}  // namespace kv0::wal
