// fork() and kv0 handles: a child opens and uses handles of its own, every
// call on a handle it inherited fails with NotSupported and destroying one
// does nothing, and the parent loses nothing whatever the child does.
//
// A child reports through its exit code only (no gtest in the child), and
// the parent waits for it with a deadline: a hang fails the test.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kv0/kv.h"
#include "kv0/tracking.h"
#include "test_util.h"

namespace kv0 {
namespace {
bool in_forked_child = false;
}  // namespace
}  // namespace kv0

// LeakSanitizer's check at a forked child's exit: the parent's threads are
// gone there, so what only they referenced (their runtime's tasks and
// thread records) would be reported as leaked. The parent is checked as
// usual.
extern "C" int __lsan_is_turned_off() { return kv0::in_forked_child ? 1 : 0; }

namespace kv0 {
namespace {

namespace fs = std::filesystem;
namespace tr = kv0::tracking;
using kv::DB;

constexpr auto kChildDeadline = std::chrono::seconds(60);

// Waits for the child; kills it past the deadline. Returns its exit code, or
// -1 if it hung or died of a signal.
int WaitForChild(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + kChildDeadline;
  for (;;) {
    int status = 0;
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Runs body in a forked child and returns its exit code (see WaitForChild).
// The child leaves with _exit, unless body leaves by itself.
int InChild(const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    in_forked_child = true;
    int code = 99;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    _exit(code);
  }
  return WaitForChild(pid);
}

// Every call in `calls` must throw NotSupported; returns how many did not.
int CountAccepted(const std::vector<std::pair<const char*, std::function<void()>>>& calls) {
  int accepted = 0;
  for (const auto& [name, call] : calls) {
    try {
      call();
      std::fprintf(stderr, "child: %s was accepted\n", name);
      accepted++;
    } catch (const Error& e) {
      if (e.code() != Code::kNotSupported) {
        std::fprintf(stderr, "child: %s: %s\n", name, e.what());
        accepted++;
      }
    }
  }
  return accepted;
}

// Every file under dir with its bytes.
std::map<std::string, std::string> FilesUnder(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    files[entry.path().string()] = bytes.str();
  }
  return files;
}

kv::Options KvOptions(const testing::TempDir& dir) {
  kv::Options options;
  options.wal_dir = dir / "wal";
  options.flush_interval = std::chrono::hours(1);  // nothing moves unless asked
  return options;
}

tr::RepoOptions RepoOptions(const testing::TempDir& dir) {
  tr::RepoOptions options;
  options.wal_dir = dir / "wal";
  options.flush_interval = std::chrono::hours(1);
  return options;
}

std::string Key(int i) { return "key/" + std::to_string(i); }

TEST(ForkTest, ChildOpensAndUsesItsOwnDatabases) {
  testing::TempDir dir;
  auto parent = DB::Open(dir / "shared", KvOptions(dir));
  parent->Put("from-parent", "1");
  parent->Flush();  // Lance's runtime threads now exist in the parent

  int code = InChild([&] {
    auto own = DB::Open(dir / "child-only", KvOptions(dir));
    own->Put("from-child", "2");
    own->Flush();
    own->Close();
    auto shared = DB::Open(dir / "shared", KvOptions(dir));
    if (shared->Get("from-parent") != "1") return 1;
    shared->Put("child-wrote", "3");
    shared->Close();
    return 0;
  });
  ASSERT_EQ(code, 0);

  EXPECT_EQ(DB::Open(dir / "child-only", KvOptions(dir))->Get("from-child"), "2");
  parent->Refresh();
  EXPECT_EQ(parent->Get("child-wrote"), "3");
}

TEST(ForkTest, InheritedDatabaseRefusesEveryCallAndTouchesNothing) {
  testing::TempDir dir;
  auto db = DB::Open(dir / "db", KvOptions(dir));
  for (int i = 0; i < 100; i++) db->Put(Key(i), "flushed");
  db->Flush();
  for (int i = 100; i < 200; i++) db->Put(Key(i), "logged only");
  auto it = db->NewIterator();
  it->SeekToFirst();
  const auto wal_before = FilesUnder(dir / "wal");
  ASSERT_FALSE(wal_before.empty());

  int code = InChild([&] {
    kv::WriteBatch batch;
    batch.Put("k", "v");
    std::vector<std::string_view> keys = {"k"};
    int accepted = CountAccepted({
        {"Put", [&] { db->Put("child", "x"); }},
        {"Delete", [&] { db->Delete(Key(1)); }},
        {"DeleteRange", [&] { db->DeleteRange("a", "z"); }},
        {"Write", [&] { db->Write(batch); }},
        {"Get", [&] { db->Get(Key(1)); }},
        {"MultiGet", [&] { db->MultiGet(keys); }},
        {"KeyMayExist", [&] { db->KeyMayExist(Key(1)); }},
        {"NewIterator", [&] { db->NewIterator(); }},
        {"Flush", [&] { db->Flush(); }},
        {"CompactRange", [&] { db->CompactRange(); }},
        {"Refresh", [&] { db->Refresh(); }},
        {"version", [&] { db->version(); }},
        {"Versions", [&] { db->Versions(); }},
        {"CleanupOldVersions", [&] { db->CleanupOldVersions(std::chrono::seconds(0)); }},
        {"CreateTag", [&] { db->CreateTag("t"); }},
        {"DeleteTag", [&] { db->DeleteTag("t"); }},
        {"Tags", [&] { db->Tags(); }},
        {"Purge", [&] { db->Purge(); }},
        {"GetStats", [&] { db->GetStats(); }},
        {"uri", [&] { db->uri(); }},
        {"Close", [&] { db->Close(); }},
        {"Iterator::Seek", [&] { it->Seek(Key(5)); }},
        {"Iterator::SeekToFirst", [&] { it->SeekToFirst(); }},
        {"Iterator::SeekToLast", [&] { it->SeekToLast(); }},
        {"Iterator::SeekForPrev", [&] { it->SeekForPrev(Key(5)); }},
        {"Iterator::Next", [&] { it->Next(); }},
        {"Iterator::Prev", [&] { it->Prev(); }},
    });
    // Destroying them, and a normal exit (atexit handlers, static
    // destructors), must not flush, close or remove anything either.
    it.reset();
    db.reset();
    std::exit(accepted);
    return accepted;  // not reached
  });
  ASSERT_EQ(code, 0) << "calls the child's inherited handle accepted (see stderr)";

  EXPECT_EQ(FilesUnder(dir / "wal"), wal_before) << "the child changed the parent's WAL";
  for (int i = 200; i < 300; i++) db->Put(Key(i), "after the fork");
  it.reset();
  db->Close();
  db.reset();

  auto reopened = DB::Open(dir / "db", KvOptions(dir));
  for (int i = 0; i < 300; i++) {
    ASSERT_TRUE(reopened->Get(Key(i)).has_value()) << Key(i);
  }
  EXPECT_FALSE(reopened->Get("child").has_value());
}

// A child that outlives its parent must not keep the parent's WAL locked:
// the next open must replay what the dead parent acknowledged.
TEST(ForkTest, OrphanedChildDoesNotHoldTheParentsWal) {
  testing::TempDir dir;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  std::fflush(nullptr);
  pid_t writer = fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {
    close(ready[0]);
    pid_t sleeper = -1;
    try {
      auto db = DB::Open(dir / "db", KvOptions(dir));
      for (int i = 0; i < 100; i++) db->Put(Key(i), "acknowledged");
      sleeper = fork();
      if (sleeper == 0) {
        sleep(120);  // killed by the test long before
        _exit(0);
      }
      if (write(ready[1], &sleeper, sizeof sleeper) != sizeof sleeper) _exit(1);
      pause();  // killed by the test, with db open: its WAL stays behind
    } catch (...) {
    }
    _exit(1);
  }
  close(ready[1]);
  pid_t sleeper = -1;
  ASSERT_EQ(read(ready[0], &sleeper, sizeof sleeper), static_cast<ssize_t>(sizeof sleeper));
  close(ready[0]);
  ASSERT_GT(sleeper, 0);
  kill(writer, SIGKILL);
  waitpid(writer, nullptr, 0);

  // The sleeper is alive and holds copies of the dead writer's descriptors.
  auto db = DB::Open(dir / "db", KvOptions(dir));
  int found = 0;
  for (int i = 0; i < 100; i++) found += db->Get(Key(i)).has_value();
  kill(sleeper, SIGKILL);
  EXPECT_EQ(found, 100) << "the writer's WAL was not replayed while its child lived";
}

TEST(ForkTest, InheritedRepoRefusesEveryCallAndTheParentLosesNothing) {
  testing::TempDir dir;
  tr::Repo repo = tr::Repo::Open(dir / "repo", RepoOptions(dir));
  tr::Run run = repo.CreateRun({.name = "parent"});
  run.SetParams({{"lr", 0.1}});
  for (int64_t step = 0; step < 100; step++) run.Track(1.0 * step, "loss", {.step = step});
  repo.Flush();
  for (int64_t step = 100; step < 150; step++) run.Track(1.0 * step, "loss", {.step = step});
  const std::string parent_run = run.run_id();
  const uint64_t parent_series = tr::SeriesId(parent_run, "loss", nlohmann::json::object());
  const auto wal_before = FilesUnder(dir / "wal");

  int code = InChild([&] {
    std::vector<uint64_t> ids = {parent_series};
    std::vector<std::string> run_ids = {parent_run};
    std::vector<tr::Record> rows = {{.item_id = "i", .data = 1}};
    int accepted = CountAccepted({
        {"Run::Track", [&] { run.Track(0.5, "loss"); }},
        {"Run::SetParams",
         [&] {
           run.SetParams({{"lr", 0.2}});
         }},
        {"Run::Update", [&] { run.Update([](tr::RunInfo& i) { i.name = "x"; }); }},
        {"Run::Finish", [&] { run.Finish(); }},
        {"Run::TryTrack", [&] { run.TryTrack(0.5, "loss"); }},
        {"CreateRun", [&] { repo.CreateRun({}); }},
        {"ResumeRun", [&] { repo.ResumeRun(parent_run); }},
        {"UpdateRun", [&] { repo.UpdateRun(parent_run, [](tr::RunInfo&) {}); }},
        {"Flush", [&] { repo.Flush(); }},
        {"Runs", [&] { repo.Runs(); }},
        {"GetRun", [&] { repo.GetRun(parent_run); }},
        {"Params", [&] { repo.Params(parent_run); }},
        {"AllParams", [&] { repo.AllParams(); }},
        {"Series", [&] { repo.Series(parent_run); }},
        {"AllSeries", [&] { repo.AllSeries(); }},
        {"GetSeriesStats", [&] { repo.GetSeriesStats(ids); }},
        {"ReadMany", [&] { repo.ReadMany(ids); }},
        {"ReadManyIn", [&] { repo.ReadManyIn(ids, {}); }},
        {"LatestVersions", [&] { repo.LatestVersions(); }},
        {"Versions", [&] { repo.Versions(); }},
        {"Optimize", [&] { repo.Optimize(); }},
        {"DeleteRuns", [&] { repo.DeleteRuns(run_ids); }},
        {"AppendRecords", [&] { repo.AppendRecords("t", rows); }},
        {"Records", [&] { repo.Records("t"); }},
        {"RecordsVersion", [&] { repo.RecordsVersion("t"); }},
        {"RecordTables", [&] { repo.RecordTables(); }},
        {"CreateRecordsTag", [&] { repo.CreateRecordsTag("t", "tag"); }},
        {"DeleteRecordsTag", [&] { repo.DeleteRecordsTag("t", "tag"); }},
        {"RecordsTags", [&] { repo.RecordsTags("t"); }},
        {"HasLegacyRecords", [&] { repo.HasLegacyRecords(); }},
        {"Purge", [&] { repo.Purge(); }},
        {"RecomputeSeriesStats", [&] { repo.RecomputeSeriesStats(ids); }},
        {"uri", [&] { repo.uri(); }},
        {"Close", [&] { repo.Close(); }},
    });
    if (accepted != 0) return accepted;
    // The child's own handle on the same repository works.
    tr::Repo own = tr::Repo::Open(dir / "repo", RepoOptions(dir));
    tr::Run child_run = own.CreateRun({.name = "child"});
    for (int64_t step = 0; step < 100; step++) child_run.Track(2.0, "loss", {.step = step});
    child_run.Finish();
    own.Close();
    {
      // Destroying the inherited handles must not close the parent's.
      tr::Run dropped_run = std::move(run);
      tr::Repo dropped_repo = std::move(repo);
    }
    std::exit(0);
    return 0;  // not reached
  });
  ASSERT_EQ(code, 0) << "see the child's stderr";
  // The child's own handle has a WAL directory of its own; the parent's
  // files are all there, unchanged.
  const auto wal_after = FilesUnder(dir / "wal");
  for (const auto& [path, bytes] : wal_before) {
    auto found = wal_after.find(path);
    ASSERT_NE(found, wal_after.end()) << path << " was removed by the child";
    EXPECT_EQ(found->second, bytes) << path << " was changed by the child";
  }

  for (int64_t step = 150; step < 250; step++) run.Track(1.0 * step, "loss", {.step = step});
  run.Finish();
  repo.Close();

  tr::Repo reopened = tr::Repo::Open(dir / "repo", RepoOptions(dir));
  std::vector<uint64_t> ids = {parent_series};
  auto points = reopened.ReadMany(ids);
  ASSERT_EQ(points[parent_series].size(), 250u);
  for (int64_t step = 0; step < 250; step++) {
    EXPECT_EQ(points[parent_series].steps[step], step);
    EXPECT_EQ(points[parent_series].values[step], 1.0 * step);
  }
  auto runs = reopened.Runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(reopened.GetRun(parent_run)->status, "finished");
  EXPECT_EQ(reopened.Params(parent_run), nlohmann::json({{"lr", 0.1}}));
}

// Run ids are UUIDv7: milliseconds, then random bits. A child drawing its
// bits from its copy of the parent's generator would repeat the parent's,
// and two workers creating runs in the same millisecond would share an id.
TEST(ForkTest, ChildAndParentDrawDifferentRunIds) {
  testing::TempDir dir;
  tr::Repo repo = tr::Repo::Open(dir / "repo", RepoOptions(dir));
  repo.CreateRun({});  // the generator exists before the fork
  int ids[2];
  ASSERT_EQ(pipe(ids), 0);
  int code = InChild([&] {
    tr::Repo own = tr::Repo::Open(dir / "repo", RepoOptions(dir));
    std::string id = own.CreateRun({}).run_id();
    own.Close();
    return write(ids[1], id.data(), id.size()) == static_cast<ssize_t>(id.size()) ? 0 : 1;
  });
  ASSERT_EQ(code, 0);
  char child_id[32];
  ASSERT_EQ(read(ids[0], child_id, sizeof child_id), 32);
  close(ids[0]);
  close(ids[1]);
  const std::string parent_id = repo.CreateRun({}).run_id();
  // The last 16 hex digits are random bits only.
  EXPECT_NE(parent_id.substr(16), std::string(child_id + 16, 16));
}

}  // namespace
}  // namespace kv0
