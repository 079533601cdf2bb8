// The write pipeline's guarantees under failure (src/pipeline/
// write_pipeline.h), each with an injected fault, through both layers'
// public APIs: a failed seal, a failed commit, a failed replay into an
// adopted writer id, close() racing writes, damaged WAL records, a commit of
// more than 2 GiB, and reads of a run while its first flush is in flight.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "kv0/kv.h"
#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "pipeline/write_pipeline.h"
#include "test_util.h"
#include "wal/fault_files.h"

namespace kv0 {
namespace {

namespace fs = std::filesystem;
using Op = wal::FaultInjectingFiles::Op;

// Installs fault-injecting files for the WAL under `prefix` for the scope.
class FaultScope {
 public:
  explicit FaultScope(const std::string& prefix) : files_(prefix) {
    wal::SetFilesForTesting(&files_);
  }
  ~FaultScope() { wal::SetFilesForTesting(nullptr); }
  wal::FaultInjectingFiles& files() { return files_; }

 private:
  wal::FaultInjectingFiles files_;
};

// Installs a Lance commit hook for the scope.
class CommitHookScope {
 public:
  explicit CommitHookScope(lance::CommitHook hook) { lance::SetCommitHookForTesting(hook); }
  ~CommitHookScope() { lance::SetCommitHookForTesting(nullptr); }
};

// A hook that fails every commit (before it happens) while `failing` is set.
lance::CommitHook FailWhile(std::atomic<bool>* failing) {
  return [failing](const std::string&, std::string_view, bool committed) {
    if (!committed && failing->load()) throw Error(Code::kIOError, "injected commit failure");
  };
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Where each record of a segment starts (records of `align`-byte multiples:
// 1 in a ".wal" segment, 8 in a mapped ".wmap" one, whose data ends at the
// first zero length).
std::vector<size_t> RecordOffsets(const std::string& data, size_t align) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (pos + 12 <= data.size()) {
    uint32_t length;
    std::memcpy(&length, &data[pos], 4);
    if (length == 0) break;
    out.push_back(pos);
    pos += (12 + length + align - 1) / align * align;
  }
  return out;
}

// Where the records of a segment end.
size_t RecordsEnd(const std::string& data, size_t align) {
  std::vector<size_t> offsets = RecordOffsets(data, align);
  if (offsets.empty()) return 0;
  uint32_t length;
  std::memcpy(&length, &data[offsets.back()], 4);
  return std::min(data.size(), offsets.back() + (12 + length + align - 1) / align * align);
}

// Bytes of records in WAL segment files under dir. A mapped segment is
// preallocated, so its size says nothing about what it holds.
uint64_t WalBytes(const std::string& dir) {
  uint64_t bytes = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (!e.is_regular_file()) continue;
    if (name.find(".wmap") != std::string::npos) {
      bytes += RecordsEnd(ReadFile(e.path()), 8);
    } else if (name.find(".wal") != std::string::npos) {
      bytes += e.file_size();
    }
  }
  return bytes;
}

class PipelineTest : public ::testing::Test {
 protected:
  kv::Options KvOpts() {
    kv::Options o;
    o.wal_dir = Wal();
    o.flush_interval = std::chrono::hours(1);  // tests flush explicitly
    return o;
  }
  tracking::RepoOptions RepoOpts() {
    tracking::RepoOptions o;
    o.wal_dir = Wal();
    o.flush_interval = std::chrono::hours(1);
    return o;
  }
  std::string Db() { return dir_ / "db"; }
  std::string RepoUri() { return dir_ / "repo"; }
  std::string Wal() { return dir_ / "wal"; }

  static std::map<std::string, std::string> All(kv::DB& db) {
    std::map<std::string, std::string> out;
    auto it = db.NewIterator();
    for (it->SeekToFirst(); it->Valid(); it->Next()) out[std::string(it->key())] = it->value();
    return out;
  }
  static std::map<std::string, std::string> Keys(int from, int to) {
    std::map<std::string, std::string> out;
    for (int i = from; i < to; ++i) out["k" + std::to_string(i)] = "v" + std::to_string(i);
    return out;
  }
  static void Put(kv::DB& db, int from, int to) {
    for (const auto& [k, v] : Keys(from, to)) db.Put(k, v);
  }
  // The steps of run's series "loss", as a fresh handle reads them.
  std::vector<int64_t> StoredSteps(const std::string& run_id) {
    tracking::Repo repo = tracking::Repo::Open(RepoUri(), RepoOpts());
    uint64_t id = tracking::SeriesId(run_id, "loss", nlohmann::json::object());
    return repo.ReadMany(std::vector<uint64_t>{id})[id].steps;
  }
  static std::vector<int64_t> Range(int64_t n) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }

  testing::TempDir dir_;
};

// --- 1. A failed seal ---------------------------------------------------------

TEST_F(PipelineTest, KvFailedSealKeepsEveryWriteBufferedAndLogged) {
  FaultScope faults(Wal());
  auto db = kv::DB::Open(Db(), KvOpts());
  Put(*db, 0, 50);
  // The seal closes the segment and creates the next: that creation fails,
  // as on a full disk or a directory remounted read-only.
  faults.files().FailNth(Op::kCreate, 1);
  EXPECT_THROW(db->Flush(), Error);
  EXPECT_EQ(db->GetStats().buffered_ops, 50u);
  EXPECT_EQ(All(*db), Keys(0, 50));
  // The retried flush commits them.
  db->Flush();
  EXPECT_EQ(db->GetStats().buffered_ops, 0u);
  Put(*db, 50, 60);
  db->Close();
  auto reopened = kv::DB::Open(Db(), KvOpts());
  EXPECT_EQ(All(*reopened), Keys(0, 60));
}

TEST_F(PipelineTest, KvCloseWhoseSealKeepsFailingLeavesTheWalForTheNextOpen) {
  {
    FaultScope faults(Wal());
    auto db = kv::DB::Open(Db(), KvOpts());
    Put(*db, 0, 20);
    // A mapped seal that keeps failing: the segment it closes cannot be
    // synced. (One whose next segment cannot be created fails once; the
    // next seal leaves that segment to the next write.) Syncs fail from
    // before the last puts, so the background thread cannot sync them first.
    faults.files().FailAll(Op::kSync);
    Put(*db, 20, 30);
    EXPECT_THROW(db->Flush(), Error);
    EXPECT_THROW(db->Close(), Error);
    EXPECT_GT(WalBytes(Wal()), 0u) << "the WAL was deleted with the writes in it";
    // Closed: writes are refused, not acknowledged.
    EXPECT_THROW(db->Put("late", "x"), Error);
  }
  auto reopened = kv::DB::Open(Db(), KvOpts());
  EXPECT_EQ(All(*reopened), Keys(0, 30));
}

TEST_F(PipelineTest, TrackingFailedSealKeepsEveryPoint) {
  FaultScope faults(Wal());
  std::string run_id;
  {
    tracking::Repo repo = tracking::Repo::Open(RepoUri(), RepoOpts());
    tracking::Run run = repo.CreateRun({.name = "sealed"});
    run_id = run.run_id();
    for (int i = 0; i < 40; ++i) run.Track(i, "loss", {.step = i});
    // The seal preallocates the next mapped segment: the disk is full.
    faults.files().FailNth(Op::kAllocate, 1, ENOSPC);
    EXPECT_THROW(repo.Flush(), Error);
    for (int i = 40; i < 50; ++i) run.Track(i, "loss", {.step = i});
    repo.Flush();
    for (int i = 50; i < 60; ++i) run.Track(i, "loss", {.step = i});
    faults.files().FailAll(Op::kAllocate, ENOSPC);
    EXPECT_THROW(repo.Close(), Error);
    EXPECT_GT(WalBytes(Wal()), 0u);
  }
  faults.files().Clear();
  EXPECT_EQ(StoredSteps(run_id), Range(60));
}

// --- A failed commit ------------------------------------------------------------

TEST_F(PipelineTest, KvFailedCommitKeepsTheBatchAndItsSegments) {
  std::atomic<bool> failing{false};
  CommitHookScope hook(FailWhile(&failing));
  auto db = kv::DB::Open(Db(), KvOpts());
  Put(*db, 0, 20);
  failing = true;
  EXPECT_THROW(db->Flush(), Error);
  Put(*db, 20, 30);  // written while the batch is back in the buffer
  EXPECT_EQ(db->GetStats().buffered_ops, 30u);
  EXPECT_GT(WalBytes(Wal()), 0u);
  EXPECT_THROW(db->Close(), Error);
  failing = false;
  auto reopened = kv::DB::Open(Db(), KvOpts());
  EXPECT_EQ(All(*reopened), Keys(0, 30));
}

TEST_F(PipelineTest, KvSyncWriteWhoseCommitFailsIsStillLoggedAndCommittedLater) {
  std::atomic<bool> failing{true};
  CommitHookScope hook(FailWhile(&failing));
  auto db = kv::DB::Open(Db(), KvOpts());
  EXPECT_THROW(db->Put("a", "1", {.sync = true}), Error);
  EXPECT_EQ(db->Get("a"), "1");
  failing = false;
  db->Put("b", "2", {.sync = true});  // commits both
  EXPECT_EQ(db->GetStats().buffered_ops, 0u);
}

TEST_F(PipelineTest, KvWritesDuringAnOutageBackOffInsteadOfCommittingEach) {
  // Past twice write_buffer_size a writer flushes itself; while the store
  // fails, that would be one failing commit per write. After a failure,
  // flushes back off (1 s, then 2, 4, ...) and the writes go on buffering.
  std::atomic<int> attempts{0};
  std::atomic<bool> failing{true};
  CommitHookScope hook([&](const std::string&, std::string_view, bool committed) {
    if (committed) return;
    ++attempts;
    if (failing) throw Error(Code::kIOError, "injected outage");
  });
  kv::Options options = KvOpts();
  options.write_buffer_size = 1024;
  auto db = kv::DB::Open(Db(), options);
  for (int i = 0; i < 2000; ++i) db->Put("k" + std::to_string(i), std::string(100, 'v'));
  EXPECT_LT(attempts.load(), 50) << "a commit was tried for most writes";
  EXPECT_EQ(db->GetStats().buffered_ops, 2000u);
  failing = false;
  db->Flush();  // an explicit flush does not wait for the backoff
  EXPECT_EQ(db->GetStats().buffered_ops, 0u);
  EXPECT_EQ(pipeline::WritePipeline::Backoff(1), std::chrono::seconds(1));
  EXPECT_EQ(pipeline::WritePipeline::Backoff(3), std::chrono::seconds(4));
  EXPECT_EQ(pipeline::WritePipeline::Backoff(40), std::chrono::seconds(60));
}

// --- 2. Replay into an adopted writer id ------------------------------------

// Leaves a WAL whose writer is gone holding `keys`, and an idle writer
// directory whose mark is newer than all of them.
void AbandonedWalBehindANewerMark(const std::string& db_path, const kv::Options& options,
                                  std::atomic<bool>* failing, int keys) {
  auto crashed = kv::DB::Open(db_path, options);
  for (int i = 0; i < keys; ++i) crashed->Put("k" + std::to_string(i), "v" + std::to_string(i));
  {
    // While `crashed` holds its WAL, another writer commits later writes
    // and closes cleanly: its idle directory keeps a newer mark.
    auto other = kv::DB::Open(db_path, options);
    other->Put("later", "x");
    other->Close();
  }
  // `crashed` cannot commit and goes away: its WAL stays, unlocked.
  *failing = true;
  EXPECT_THROW(crashed->Close(), Error);
  crashed.reset();
}

TEST_F(PipelineTest, KvReplayCommitFailingInAnAdoptedWriterIdLosesNothing) {
  std::atomic<bool> failing{false};
  CommitHookScope hook(FailWhile(&failing));
  AbandonedWalBehindANewerMark(Db(), KvOpts(), &failing, 25);
  auto expected = Keys(0, 25);
  expected["later"] = "x";
  // This open adopts the idle id (its mark is newer than the replayed
  // writes) and replays the abandoned WAL. Its commit fails, and the open
  // still succeeds: the replayed writes are pending, like any batch whose
  // commit failed, and the abandoned directory stays claimed.
  auto db = kv::DB::Open(Db(), KvOpts());
  EXPECT_EQ(All(*db), expected);
  EXPECT_EQ(db->GetStats().buffered_ops, 25u);
  EXPECT_THROW(db->Flush(), Error);
  {
    // A second handle meanwhile finds the directory claimed: it neither
    // replays it nor sees the writes, which are not committed yet.
    auto other = kv::DB::Open(Db(), KvOpts());
    const std::map<std::string, std::string> committed{{"later", "x"}};
    EXPECT_EQ(All(*other), committed);
    other->Close();
  }
  failing = false;
  db->Flush();
  EXPECT_EQ(db->GetStats().buffered_ops, 0u);
  db->Close();
  // Replayed once: a second open finds nothing more to replay.
  auto again = kv::DB::Open(Db(), KvOpts());
  EXPECT_EQ(All(*again), expected);
  // The 26 puts and one mark per writer that committed, each stored once.
  EXPECT_EQ(again->GetStats().stored_rows, 26u + 2);
}

TEST_F(PipelineTest, KvReplayCommitFailingLeavesTheWalForTheNextOpenIfCloseFailsToo) {
  std::atomic<bool> failing{false};
  CommitHookScope hook(FailWhile(&failing));
  AbandonedWalBehindANewerMark(Db(), KvOpts(), &failing, 25);
  auto db = kv::DB::Open(Db(), KvOpts());  // replays; the commit fails
  EXPECT_THROW(db->Close(), Error);        // and the close's too
  db.reset();
  failing = false;
  auto reopened = kv::DB::Open(Db(), KvOpts());
  auto expected = Keys(0, 25);
  expected["later"] = "x";
  EXPECT_EQ(All(*reopened), expected);
  reopened->Close();
  auto again = kv::DB::Open(Db(), KvOpts());
  EXPECT_EQ(again->GetStats().stored_rows, 26u + 2);
}

TEST_F(PipelineTest, TrackingReplayCommitFailingInAnAdoptedWriterIdLosesNothing) {
  std::atomic<bool> failing{false};
  CommitHookScope hook(FailWhile(&failing));
  std::string run_id;
  {
    tracking::Repo crashed = tracking::Repo::Open(RepoUri(), RepoOpts());
    tracking::Run run = crashed.CreateRun({.name = "crashed"});
    run_id = run.run_id();
    for (int i = 0; i < 30; ++i) run.Track(i, "loss", {.step = i});
    {
      tracking::Repo other = tracking::Repo::Open(RepoUri(), RepoOpts());
      other.CreateRun({.name = "later"});
      other.Close();
    }
    failing = true;
    EXPECT_THROW(crashed.Close(), Error);
  }
  // The replay's commit fails; the open succeeds with the writes pending
  // (queries, which flush first, fail until a commit succeeds).
  tracking::Repo repo = tracking::Repo::Open(RepoUri(), RepoOpts());
  EXPECT_THROW(repo.Flush(), Error);
  EXPECT_EQ(StoredSteps(run_id), std::vector<int64_t>{});
  failing = false;
  repo.Flush();
  EXPECT_EQ(StoredSteps(run_id), Range(30));
  EXPECT_EQ(repo.Runs().size(), 2u);
  repo.Close();
  tracking::Repo again = tracking::Repo::Open(RepoUri(), RepoOpts());
  EXPECT_EQ(again.Runs().size(), 2u);
  EXPECT_EQ(StoredSteps(run_id), Range(30));
}

// --- 3. close() racing writes -----------------------------------------------------

// Writes from another thread while close() commits (slowly: the hook holds
// each commit for a moment). Every write that returned normally must be
// there afterwards; the others must have failed.
TEST_F(PipelineTest, KvCloseRacingWritesCommitsOrRefusesEach) {
  CommitHookScope hook([](const std::string&, std::string_view, bool committed) {
    if (committed) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  });
  auto db = kv::DB::Open(Db(), KvOpts());
  Put(*db, 0, 10);
  std::atomic<bool> started{false};
  std::vector<int> acked;
  std::thread writer([&] {
    for (int i = 10; i < 100000; ++i) {
      try {
        db->Put("k" + std::to_string(i), "v" + std::to_string(i));
      } catch (const Error&) {
        break;  // closed
      }
      acked.push_back(i);
      started = true;
    }
  });
  while (!started) std::this_thread::yield();
  db->Close();
  writer.join();
  auto reopened = kv::DB::Open(Db(), KvOpts());
  auto got = All(*reopened);
  for (int i : acked) {
    ASSERT_EQ(got.count("k" + std::to_string(i)), 1u) << "acknowledged write " << i << " lost";
  }
}

TEST_F(PipelineTest, TrackingCloseRacingTrackCommitsOrRefusesEach) {
  CommitHookScope hook([](const std::string&, std::string_view, bool committed) {
    if (committed) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  });
  tracking::Repo repo = tracking::Repo::Open(RepoUri(), RepoOpts());
  tracking::Run run = repo.CreateRun({.name = "racing"});
  run.Track(0, "loss", {.step = 0});
  std::atomic<bool> started{false};
  int64_t acked = 1;
  std::thread writer([&] {
    for (int64_t i = 1; i < 10'000'000; ++i) {
      try {
        run.Track(static_cast<double>(i), "loss", {.step = i});
      } catch (const Error&) {
        break;
      }
      acked = i + 1;
      started = true;
    }
  });
  while (!started) std::this_thread::yield();
  repo.Close();
  writer.join();
  EXPECT_EQ(StoredSteps(run.run_id()), Range(acked));
}

// --- 4. Damaged WAL records ----------------------------------------------------

// A writer that logged `n` puts and was then abandoned, with its WAL
// directory's only segment that holds records (the failed close's seal
// opened an empty one after it).
std::string AbandonedSegment(const std::string& db_path, const kv::Options& options, int n,
                             const std::string& wal_root) {
  {
    std::atomic<bool> failing{false};
    CommitHookScope hook(FailWhile(&failing));
    auto db = kv::DB::Open(db_path, options);
    for (int i = 0; i < n; ++i) db->Put("k" + std::to_string(i), std::string(100, 'a' + i % 26));
    failing = true;
    EXPECT_THROW(db->Close(), Error);
  }
  std::vector<std::string> segments;
  for (const auto& e : fs::recursive_directory_iterator(wal_root)) {
    if (e.path().extension() == ".wmap" && RecordsEnd(ReadFile(e.path()), 8) > 0) {
      segments.push_back(e.path());
    }
  }
  EXPECT_EQ(segments.size(), 1u);
  return segments.empty() ? "" : segments[0];
}

TEST_F(PipelineTest, KvDamagedLengthMidSegmentIsCorruptionAndKeepsTheWal) {
  std::string segment = AbandonedSegment(Db(), KvOpts(), 40, Wal());
  ASSERT_FALSE(segment.empty());
  std::string data = ReadFile(segment);
  std::vector<size_t> records = RecordOffsets(data, 8);
  ASSERT_EQ(records.size(), 40u);
  // Record 10's length becomes huge, so it seems to run past the end of the
  // file, as a torn write would; but 29 good records follow it.
  size_t at = records[10];
  data[at + 3] = '\x7f';
  WriteFile(segment, data);
  try {
    kv::DB::Open(Db(), KvOpts());
    FAIL() << "opened over a damaged WAL";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kCorruption) << e.what();
    EXPECT_NE(std::string(e.what()).find(segment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("offset " + std::to_string(at)), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ReadFile(segment), data) << "the damaged WAL was changed";
  // A torn tail, by contrast, is dropped: the second half of the last record
  // never reached the disk (a power loss leaves zeros there).
  data = ReadFile(segment);
  data[at + 3] = '\0';
  size_t end = RecordsEnd(data, 8);
  std::fill(data.begin() + static_cast<std::ptrdiff_t>((records.back() + end) / 2), data.end(),
            '\0');
  WriteFile(segment, data);
  auto db = kv::DB::Open(Db(), KvOpts());
  EXPECT_EQ(db->GetStats().entries, 39u);
}

TEST_F(PipelineTest, TrackingZeroPageMidSegmentIsCorruption) {
  std::string run_id;
  {
    std::atomic<bool> failing{false};
    CommitHookScope hook(FailWhile(&failing));
    tracking::Repo repo = tracking::Repo::Open(RepoUri(), RepoOpts());
    tracking::Run run = repo.CreateRun({.name = "paged"});
    run_id = run.run_id();
    for (int i = 0; i < 2000; ++i) run.Track(i, "loss", {.step = i});
    failing = true;
    EXPECT_THROW(repo.Close(), Error);
  }
  // The sealed segment holds the records; the one the failed close opened
  // after it holds none.
  std::string segment, data;
  std::vector<size_t> records;
  for (const auto& e : fs::recursive_directory_iterator(Wal())) {
    if (e.path().extension() != ".wmap") continue;
    std::string bytes = ReadFile(e.path());
    std::vector<size_t> offsets = RecordOffsets(bytes, 8);
    if (offsets.size() > records.size()) {
      segment = e.path();
      data = std::move(bytes);
      records = std::move(offsets);
    }
  }
  ASSERT_GT(records.size(), 1000u);
  // A page's worth of records, from a record boundary on, never reached the
  // disk: zeros, with good records after them.
  size_t at = *std::lower_bound(records.begin(), records.end(), size_t{8192});
  std::fill(data.begin() + at, data.begin() + at + 4096, '\0');
  WriteFile(segment, data);
  try {
    tracking::Repo::Open(RepoUri(), RepoOpts());
    FAIL() << "opened over a damaged WAL";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kCorruption) << e.what();
    EXPECT_NE(std::string(e.what()).find(segment), std::string::npos) << e.what();
  }
  EXPECT_EQ(ReadFile(segment), data) << "the damaged WAL was changed";
}

// --- 5. A commit of more than 2 GiB (big_commit_test.cc commits 2.25 GB) ----

TEST_F(PipelineTest, KvBatchesSplitAcrossArrowBatchesKeepTheirRowAddresses) {
  // Over the 256 MiB an Arrow batch of a commit holds: lazy values must still
  // point at their rows.
  auto db = kv::DB::Open(Db(), KvOpts());
  kv::WriteBatch batch;
  for (int i = 0; i < 5; ++i) batch.Put("big" + std::to_string(i), std::string(60 << 20, 'a' + i));
  for (int i = 0; i < 100; ++i) batch.Put("small" + std::to_string(i), std::string(5000, 'z'));
  db->Write(batch);
  db->Flush();
  EXPECT_GT(db->GetStats().lazy_values, 100u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(db->Get("big" + std::to_string(i)), std::string(60 << 20, 'a' + i));
  }
  EXPECT_EQ(db->Get("small7"), std::string(5000, 'z'));
}

TEST_F(PipelineTest, KvOversizedWriteIsRefusedBeforeItIsLogged) {
  auto db = kv::DB::Open(Db(), KvOpts());
  EXPECT_THROW(db->Put(std::string(kv::kMaxKeySize + 1, 'k'), "v"), Error);
  EXPECT_EQ(db->GetStats().buffered_ops, 0u);
  EXPECT_EQ(WalBytes(Wal()), 0u);
}

// --- 6. Reading a run while its first flush is in flight -------------------------

TEST_F(PipelineTest, UpdateOfANewRunDuringItsFlushSeesTheRun) {
  std::mutex mu;
  std::condition_variable cv;
  bool inside = false, release = false;
  CommitHookScope hook([&](const std::string& uri, std::string_view, bool committed) {
    if (committed || !uri.ends_with("/runs.lance")) return;
    std::unique_lock lock(mu);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  tracking::Repo repo = tracking::Repo::Open(RepoUri(), RepoOpts());
  tracking::Run run = repo.CreateRun({.name = "new"});
  std::thread flusher([&] { repo.Flush(); });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return inside; });
  }
  // The run's row is in the flush's batch, neither buffered nor committed.
  try {
    tracking::RunInfo updated = run.Update([](tracking::RunInfo& info) { info.name = "renamed"; });
    EXPECT_EQ(updated.name, "renamed");
  } catch (const Error& e) {
    ADD_FAILURE() << "Update during the flush threw: " << e.what();
  }
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  flusher.join();
  EXPECT_EQ(repo.GetRun(run.run_id())->name, "renamed");
}

// Marks through NoteMark's shortcut to the entry it changed last: whichever
// writer, table, clear or append comes between, every mark is the highest
// seq noted for its writer and table since the table was last cleared.
class MarksOnlyBatch : public pipeline::Batch {
 public:
  bool empty() const override { return true; }

 protected:
  void AppendWrites(Batch&&) override {}
};

TEST(BatchMarksTest, EachWriterAndTableKeepsItsHighestSeq) {
  const std::string a = "aaaaaaaaaaaaaaaa", b = "bbbbbbbbbbbbbbbb";
  MarksOnlyBatch batch;
  batch.NoteMark(3, a, 10);
  batch.NoteMark(3, a, 7);
  batch.NoteMark(3, std::string(a), 12);  // an equal id held elsewhere
  batch.NoteMark(3, b, 5);
  batch.NoteMark(1, a, 4);
  batch.NoteMark(3, a, 11);
  EXPECT_EQ(batch.marks(3), (pipeline::Batch::Marks{{a, 12}, {b, 5}}));
  EXPECT_EQ(batch.marks(1), (pipeline::Batch::Marks{{a, 4}}));

  batch.ClearMarks(3);
  batch.NoteMark(3, a, 2);  // after a clear, not the old entry
  EXPECT_EQ(batch.marks(3), (pipeline::Batch::Marks{{a, 2}}));

  MarksOnlyBatch later;
  later.NoteMark(3, a, 20);
  later.NoteMark(2, b, 30);
  batch.Append(std::move(later));
  batch.NoteMark(3, a, 1);
  EXPECT_EQ(batch.marks(3), (pipeline::Batch::Marks{{a, 20}}));
  EXPECT_EQ(batch.marks(2), (pipeline::Batch::Marks{{b, 30}}));
  EXPECT_EQ(batch.marks(1), (pipeline::Batch::Marks{{a, 4}}));
  // The appended batch starts over, its shortcut included.
  EXPECT_TRUE(later.marks(3).empty());
  later.NoteMark(3, a, 3);
  EXPECT_EQ(later.marks(3), (pipeline::Batch::Marks{{a, 3}}));
  EXPECT_EQ(batch.marks(3), (pipeline::Batch::Marks{{a, 20}}));
}

}  // namespace
}  // namespace kv0
