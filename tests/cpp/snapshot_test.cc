// Tests of view.snap: round trips through real files, damaged and cut files,
// failed writes, and the load time of a large view. The failed-write cases
// mount tmpfs file systems and need root; they skip themselves otherwise.

#include "kv/snapshot.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <xxhash.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kv0/error.h"
#include "test_util.h"

namespace kv0::kv {
namespace {

namespace fs = std::filesystem;
using kv0::testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Replaces the trailing checksum with the right one for the bytes before it,
// so a test can hand the reader a well-sealed file with bad contents.
void Reseal(std::string* file) {
  uint64_t sum = XXH3_64bits(file->data(), file->size() - 8);
  std::memcpy(file->data() + file->size() - 8, &sum, 8);  // the tests run little-endian
}

std::vector<std::string> DirNames(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// Runs body, expecting a kv0::Error with the given code whose message holds
// every needle.
template <typename Body>
void ExpectError(Code code, const std::vector<std::string>& needles, Body body) {
  try {
    body();
    ADD_FAILURE() << "expected " << CodeName(code) << ", nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "\"" << needle << "\" not in: " << e.what();
    }
  }
}

// Expects two views to hold the same entries, pieces and counters.
void ExpectSameView(const View& want, const View& got) {
  ASSERT_EQ(want.entries().size(), got.entries().size());
  auto g = got.entries().begin();
  for (const Entry* w : want.entries()) {
    const Entry* e = *g++;
    ASSERT_EQ(w->key(), e->key());
    EXPECT_EQ(w->seq(), e->seq()) << w->key();
    EXPECT_EQ(w->is_tombstone(), e->is_tombstone()) << w->key();
    EXPECT_EQ(w->is_lazy(), e->is_lazy()) << w->key();
    if (w->is_tombstone()) continue;
    EXPECT_EQ(w->value_size(), e->value_size()) << w->key();
    if (w->is_lazy()) {
      EXPECT_EQ(w->lazy_ref().version, e->lazy_ref().version) << w->key();
      EXPECT_EQ(w->lazy_ref().address, e->lazy_ref().address) << w->key();
    } else {
      EXPECT_EQ(w->value(), e->value()) << w->key();
    }
  }
  ASSERT_EQ(want.ranges().size(), got.ranges().size());
  auto gp = got.ranges().pieces().begin();
  for (const auto& [begin, piece] : want.ranges().pieces()) {
    EXPECT_EQ(begin, gp->first);
    EXPECT_EQ(piece.end, gp->second.end);
    EXPECT_EQ(piece.seq, gp->second.seq);
    ++gp;
  }
  EXPECT_EQ(want.live(), got.live());
  EXPECT_EQ(want.tombstones(), got.tombstones());
  EXPECT_EQ(want.lazy(), got.lazy());
  EXPECT_EQ(want.entry_bytes(), got.entry_bytes());
  EXPECT_EQ(want.max_seq(), got.max_seq());
}

SnapshotHeader SampleHeader() {
  SnapshotHeader h;
  h.dataset_version = 42;
  h.lazy_value_threshold = 4096;
  h.fragments.push_back({0, "data/0a1b-first.lance", 1000, "", 0});
  h.fragments.push_back({7, "data/9f8e-second.lance", 250, "_deletions/7-3-12.arrow", 3});
  h.marks["writer-a"] = 17;
  h.marks["writer-b"] = 9;
  return h;
}

// A small view with one of everything: values, an empty key and an empty
// value, a key of 0xFF bytes, binary bytes, lazy entries, tombstones, and
// range pieces (overlapping deletions split into pieces, adjacent pieces with
// equal seqs, and an entry newer than the range that covers its key).
void FillSample(View* v) {
  v->ApplyPut(1, "", "value of the empty key");
  v->ApplyPut(2, "a", "");
  v->ApplyPut(3, "apple", "red");
  v->ApplyPut(4, std::string("bin\0ary", 7), std::string("\0\1\2\xff", 4));
  v->ApplyLazy(5, "lazy-1", 123456, {40, (uint64_t{3} << 32) | 17});
  v->ApplyLazy(6, "lazy-2", Entry::kMaxValueSize, {41, 0});
  v->ApplyDelete(7, "gone");
  v->ApplyPut(8, "m-old", "deleted by the range below");
  v->ApplyDeleteRange(10, "m", "p");
  v->ApplyDeleteRange(12, "n", "r");  // overlaps: pieces [m,n)@10 [n,r)@12
  v->ApplyDeleteRange(12, "r", "s");  // touches with an equal seq
  v->ApplyPut(13, "o", "newer than the range");
  v->ApplyDelete(14, "q");
  v->ApplyPut(15, std::string(3, '\xff'), "all ones");
  v->ApplyPut(16, "zebra", std::string(300, 'z'));
  v->ApplyDeleteRange(20, "x", "y");  // the highest seq is a range
}

class SnapshotTest : public ::testing::Test {
 protected:
  TempDir dir_;
  std::string path_ = dir_ / "view.snap";
};

TEST_F(SnapshotTest, RoundTripsEverything) {
  View want;
  FillSample(&want);
  want.ApplyPut(17, "big", std::string(3 << 20, 'b'));  // larger than the 1 MiB buffers
  want.ApplyPut(18, "big-2", std::string((1 << 20) - 10, 'c'));
  ASSERT_EQ(want.ranges().size(), 4u);
  SnapshotHeader header = SampleHeader();
  WriteSnapshot(path_, header, want);

  View got;
  std::optional<SnapshotHeader> read = ReadSnapshot(path_, &got);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, header);
  ExpectSameView(want, got);
  EXPECT_EQ(got.max_seq(), 20u);
  EXPECT_EQ(DirNames(dir_.path().string()), std::vector<std::string>{"view.snap"});
}

TEST_F(SnapshotTest, RoundTripsAnEmptyView) {
  View empty;
  WriteSnapshot(path_, SnapshotHeader{}, empty);
  View got;
  std::optional<SnapshotHeader> read = ReadSnapshot(path_, &got);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, SnapshotHeader{});
  EXPECT_TRUE(got.entries().empty());
  EXPECT_TRUE(got.ranges().empty());
}

TEST_F(SnapshotTest, RoundTripsManyRecordSizes) {
  // Entries of every size around the buffer boundaries, so records are split
  // across refills at many different points.
  View want;
  std::string value;
  for (int i = 0; i < 20000; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "k%08d", i);
    value.assign(static_cast<size_t>((i * 7919) % 700), static_cast<char>('a' + i % 26));
    if (i % 5 == 0) {
      want.ApplyLazy(i + 1, key, static_cast<uint32_t>(i), {static_cast<uint64_t>(i), 99});
    } else if (i % 11 == 0) {
      want.ApplyDelete(i + 1, key);
    } else {
      want.ApplyPut(i + 1, key, value);
    }
  }
  WriteSnapshot(path_, SampleHeader(), want);
  View got;
  ASSERT_TRUE(ReadSnapshot(path_, &got).has_value());
  ExpectSameView(want, got);
}

TEST_F(SnapshotTest, ReplacesAnOlderSnapshot) {
  View first;
  first.ApplyPut(1, "old", "1");
  WriteSnapshot(path_, SampleHeader(), first);
  View second;
  FillSample(&second);
  SnapshotHeader header = SampleHeader();
  header.dataset_version = 43;
  WriteSnapshot(path_, header, second);

  View got;
  std::optional<SnapshotHeader> read = ReadSnapshot(path_, &got);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->dataset_version, 43u);
  ExpectSameView(second, got);
}

TEST_F(SnapshotTest, MissingFileIsNullopt) {
  View got;
  EXPECT_FALSE(ReadSnapshot(path_, &got).has_value());
  EXPECT_FALSE(ReadSnapshot(dir_ / "no-such-dir/view.snap", &got).has_value());
  EXPECT_TRUE(got.entries().empty());
}

TEST_F(SnapshotTest, RefusesANonEmptyView) {
  View sample;
  FillSample(&sample);
  WriteSnapshot(path_, SampleHeader(), sample);
  View busy;
  busy.ApplyPut(1, "k", "v");
  ExpectError(Code::kInvalidArgument, {"empty"}, [&] { ReadSnapshot(path_, &busy); });
  View ranged;
  ranged.ApplyDeleteRange(1, "a", "b");
  ExpectError(Code::kInvalidArgument, {"empty"}, [&] { ReadSnapshot(path_, &ranged); });
}

TEST_F(SnapshotTest, DirectoryIsNotASnapshot) {
  fs::create_directory(path_);
  View got;
  ExpectError(Code::kCorruption, {path_}, [&] { ReadSnapshot(path_, &got); });
}

// Every shorter prefix of a valid file, and the file with bytes added.
TEST_F(SnapshotTest, CutOrExtendedFileIsCorruption) {
  View sample;
  FillSample(&sample);
  WriteSnapshot(path_, SampleHeader(), sample);
  const std::string whole = ReadAll(path_);
  ASSERT_GT(whole.size(), 500u);

  for (size_t cut = 0; cut < whole.size(); ++cut) {
    WriteAll(path_, whole.substr(0, cut));
    View got;
    ExpectError(Code::kCorruption, {path_}, [&] { ReadSnapshot(path_, &got); });
    if (HasFailure()) FAIL() << "file cut to " << cut << " of " << whole.size() << " bytes";
  }
  for (const std::string& tail : {std::string(1, '\0'), std::string(8, 'x'), whole}) {
    WriteAll(path_, whole + tail);
    View got;
    ExpectError(Code::kCorruption, {path_}, [&] { ReadSnapshot(path_, &got); });
  }
}

// Every byte of a small file, each flipped in a few ways.
TEST_F(SnapshotTest, FlippedByteIsCorruption) {
  View sample;
  FillSample(&sample);
  WriteSnapshot(path_, SampleHeader(), sample);
  const std::string whole = ReadAll(path_);
  ASSERT_LT(whole.size(), 2000u);

  for (size_t i = 0; i < whole.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string damaged = whole;
      damaged[i] = static_cast<char>(damaged[i] ^ mask);
      WriteAll(path_, damaged);
      View got;
      ExpectError(Code::kCorruption, {path_}, [&] { ReadSnapshot(path_, &got); });
      if (HasFailure()) FAIL() << "byte " << i << " flipped with mask " << int(mask);
    }
  }
}

// Damage that a valid checksum does not hide: the structure checks name it.
TEST_F(SnapshotTest, SealedButMalformedIsCorruption) {
  View v;
  v.ApplyPut(1, "a", "1");
  v.ApplyPut(2, "b", "2");
  WriteSnapshot(path_, SnapshotHeader{}, v);
  const std::string whole = ReadAll(path_);
  View got;

  std::string bad_version = whole;
  bad_version[8] = 2;
  Reseal(&bad_version);
  WriteAll(path_, bad_version);
  ExpectError(Code::kCorruption, {path_, "format version 2"}, [&] { ReadSnapshot(path_, &got); });

  // The second key ("b", just before its value "2" and the checksum) becomes
  // "a": a repeated key.
  std::string repeated = whole;
  size_t b_at = repeated.size() - 8 - 2;
  ASSERT_EQ(repeated[b_at], 'b');
  repeated[b_at] = 'a';
  Reseal(&repeated);
  WriteAll(path_, repeated);
  View got2;
  ExpectError(Code::kCorruption, {path_, "ascending key order"},
              [&] { ReadSnapshot(path_, &got2); });

  std::string magic = whole;
  magic[0] = 'X';
  WriteAll(path_, magic);
  View got3;
  ExpectError(Code::kCorruption, {path_, "magic"}, [&] { ReadSnapshot(path_, &got3); });

  std::string flipped = whole;
  flipped[flipped.size() - 9] ^= 1;  // the last value byte
  WriteAll(path_, flipped);
  View got4;
  ExpectError(Code::kCorruption, {path_, "checksum"}, [&] { ReadSnapshot(path_, &got4); });
}

// Failed writes, on tmpfs mounts made for the test.
class SnapshotMountTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto it = mounts_.rbegin(); it != mounts_.rend(); ++it) {
      if (umount2(it->c_str(), 0) != 0) umount2(it->c_str(), MNT_DETACH);
    }
  }

  // Mounts a writable tmpfs of the given size at a fresh directory.
  bool Mount(const std::string& options, std::string* dir, std::string* error) {
    *dir = root_ / ("mnt" + std::to_string(mounts_.size()));
    fs::create_directories(*dir);
    if (mount("tmpfs", dir->c_str(), "tmpfs", 0, options.c_str()) != 0) {
      *error = "cannot mount a tmpfs at " + *dir + " (" + std::strerror(errno) +
               "); this test needs root";
      return false;
    }
    mounts_.push_back(*dir);
    return true;
  }

  TempDir root_;
  std::vector<std::string> mounts_;
};

TEST_F(SnapshotMountTest, ReadOnlyDirectoryKeepsTheOldSnapshot) {
  std::string dir, error;
  if (!Mount("size=1m", &dir, &error)) GTEST_SKIP() << error;
  std::string path = dir + "/view.snap";
  View old_view;
  FillSample(&old_view);
  WriteSnapshot(path, SampleHeader(), old_view);

  if (mount("tmpfs", dir.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
    GTEST_SKIP() << "cannot remount " << dir << " read-only: " << std::strerror(errno);
  }
  View new_view;
  new_view.ApplyPut(99, "new", "value");
  ExpectError(Code::kIOError, {path}, [&] { WriteSnapshot(path, SnapshotHeader{}, new_view); });

  View got;
  std::optional<SnapshotHeader> read = ReadSnapshot(path, &got);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(*read, SampleHeader());
  ExpectSameView(old_view, got);
  EXPECT_EQ(DirNames(dir), std::vector<std::string>{"view.snap"});
}

TEST_F(SnapshotMountTest, FullDiskRemovesTheTemporaryFile) {
  std::string dir, error;
  if (!Mount("size=256k", &dir, &error)) GTEST_SKIP() << error;
  std::string path = dir + "/view.snap";
  View old_view;
  FillSample(&old_view);
  WriteSnapshot(path, SampleHeader(), old_view);

  View big;
  for (int i = 0; i < 2000; ++i)
    big.ApplyPut(i + 1, "key" + std::to_string(i), std::string(500, 'v'));
  ExpectError(Code::kIOError, {path}, [&] { WriteSnapshot(path, SnapshotHeader{}, big); });

  View got;
  std::optional<SnapshotHeader> read = ReadSnapshot(path, &got);
  ASSERT_TRUE(read.has_value());
  ExpectSameView(old_view, got);
  EXPECT_EQ(DirNames(dir), std::vector<std::string>{"view.snap"});
}

// One million 16-byte keys with 100-byte values: prints the write and read
// times (they depend on the machine and the build; nothing is asserted).
TEST_F(SnapshotTest, MillionEntries) {
  constexpr int kCount = 1000000;
  View want;
  std::string value(100, '\0');
  for (int i = 0; i < kCount; ++i) {
    char key[17];
    std::snprintf(key, sizeof(key), "key-%012d", i);
    for (size_t j = 0; j < value.size(); ++j) value[j] = static_cast<char>('a' + (i + j) % 26);
    Entry* e = Entry::NewValue(static_cast<uint64_t>(i) + 1, {key, 16}, value);
    want.AppendSorted({&e, 1});
    want.IndexSorted({&e, 1});
  }
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };

  auto t0 = Clock::now();
  WriteSnapshot(path_, SampleHeader(), want);
  auto t1 = Clock::now();
  View got;
  ASSERT_TRUE(ReadSnapshot(path_, &got).has_value());
  auto t2 = Clock::now();
  std::printf("[ timing   ] %d entries, %.1f MB file: write %.1f ms, read %.1f ms\n", kCount,
              static_cast<double>(fs::file_size(path_)) / 1e6, ms(t1 - t0), ms(t2 - t1));
  ExpectSameView(want, got);
}

}  // namespace
}  // namespace kv0::kv
