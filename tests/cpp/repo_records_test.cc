// The repository-level parts of records, deletion and purge: records of
// deleted runs, purge against tags, the legacy records table on open, and
// in-memory repositories.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kv0/error.h"
#include "kv0/tracking.h"
#include "lance/arrow.h"
#include "lance/dataset.h"
#include "test_util.h"
#include "tracking/schema.h"

namespace kv0::tracking {
namespace {

class RepoRecordsTest : public ::testing::Test {
 protected:
  RepoOptions Opts() {
    RepoOptions o;
    o.wal_dir = dir_ / "wal";
    o.flush_interval = std::chrono::hours(1);
    return o;
  }
  std::string Uri() { return dir_ / "repo"; }
  Repo Open() { return Repo::Open(Uri(), Opts()); }

  // Files under the repository that contain `needle`.
  std::vector<std::string> FilesHolding(const std::string& needle) {
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(Uri())) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (bytes.find(needle) != std::string::npos) out.push_back(entry.path().string());
    }
    return out;
  }

  testing::TempDir dir_;
};

std::vector<Record> Rows(std::initializer_list<std::pair<std::string, nlohmann::json>> items,
                         std::optional<std::string> run_id) {
  std::vector<Record> out;
  for (const auto& [item, data] : items) out.push_back(Record{0, run_id, item, data, 0});
  return out;
}

TEST_F(RepoRecordsTest, RecordsOfDeletedRunsAreHiddenAndDeleted) {
  Repo repo = Open();
  tracking::Run gone = repo.CreateRun(NewRun{.name = "gone"});
  tracking::Run kept = repo.CreateRun(NewRun{.name = "kept"});
  repo.AppendRecords("evals", Rows({{"a", 1}, {"b", 2}}, gone.run_id()));
  repo.AppendRecords("evals", Rows({{"a", 3}}, kept.run_id()));
  repo.AppendRecords("dataset.x/y", Rows({{"q1", "hi"}}, std::nullopt));
  EXPECT_EQ(repo.Records("evals").size(), 3u);
  EXPECT_EQ(repo.RecordTables(), (std::vector<std::string>{"dataset.x/y", "evals"}));

  std::vector<std::string> ids = {gone.run_id()};
  repo.DeleteRuns(ids);
  auto rows = repo.Records("evals");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].run_id, kept.run_id());
  EXPECT_EQ(lance::Dataset::Open(Uri() + "/records/evals.lance", {}).CountRows(), 1u);
  EXPECT_EQ(repo.Records("dataset.x/y").size(), 1u);
}

TEST_F(RepoRecordsTest, PurgeRefusesATagHoldingADeletedRunThenForceRemovesEveryByte) {
  const std::string marker = "SECRET-7f3a9c";
  Repo repo = Open();
  tracking::Run run = repo.CreateRun(NewRun{.name = marker + "-name"});
  run.SetParams({{"note", marker + "-param"}});
  run.Track(1.0, marker + "-metric");
  tracking::Run other = repo.CreateRun(NewRun{.name = "other"});
  other.Track(2.0, "loss");
  repo.AppendRecords("evals", Rows({{"a", marker + "-record"}}, run.run_id()));
  repo.AppendRecords("evals", Rows({{"b", "kept-value"}}, other.run_id()));
  repo.AppendRecords("clean", Rows({{"c", "clean-value"}}, other.run_id()));
  repo.Flush();
  repo.CreateRecordsTag("evals", "t1");
  repo.CreateRecordsTag("clean", "keep");
  std::vector<Record> clean_rows = repo.Records("clean");
  ASSERT_FALSE(FilesHolding(marker).empty());

  std::vector<std::string> ids = {run.run_id()};
  repo.DeleteRuns(ids);
  try {
    repo.Purge();
    FAIL() << "purge ignored a tag holding a deleted run's rows";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kBusy);
    EXPECT_NE(std::string(e.what()).find("t1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(repo.RecordsTags("evals").count("t1"), 1u);  // nothing changed

  PurgeStats stats = repo.Purge(/*force=*/true);
  EXPECT_EQ(stats.tags_deleted, (std::vector<std::string>{"records/evals:t1"}));
  EXPECT_GT(stats.versions_removed, 0u);
  EXPECT_EQ(FilesHolding(marker), std::vector<std::string>{});
  // What is live, and the clean tag, are untouched.
  EXPECT_EQ(repo.Runs().size(), 1u);
  EXPECT_EQ(repo.Records("evals").size(), 1u);
  EXPECT_EQ(repo.Records("clean", RecordQuery{.tag = "keep"}), clean_rows);
  EXPECT_EQ(repo.RecordsTags("clean").count("keep"), 1u);
}

TEST_F(RepoRecordsTest, LegacyRecordsTableIsMigratedOnOpenAndKept) {
  std::filesystem::create_directories(Uri());
  {
    auto legacy = lance::Dataset::Create(Uri() + "/records.lance", {}, RecordsSchema());
    arrow::BatchBuilder b(RecordsSchema());
    for (auto [seq, table, item] : {std::tuple{10, "evals", "a"}, {11, "labels", "b"}}) {
      b.uint64(0).Append(seq);
      b.utf8(1).Append(table);
      b.utf8(2).AppendNull();
      b.utf8(3).Append(item);
      b.utf8(4).Append("{\"v\":1}");
      b.timestamp(5).Append(100);
    }
    std::vector<arrow::OwnedArray> batches(1);
    b.Finish(batches[0].get());
    arrow::OwnedStream stream;
    arrow::MakeStream(RecordsSchema(), std::move(batches), &stream);
    legacy.Append(std::move(stream));
  }
  Repo repo = Open();
  EXPECT_TRUE(repo.HasLegacyRecords());
  EXPECT_EQ(repo.RecordTables(), (std::vector<std::string>{"evals", "labels"}));
  auto rows = repo.Records("labels");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].item_id, "b");
  EXPECT_EQ(rows[0].data, nlohmann::json({{"v", 1}}));
  repo.Close();
  // A second open migrates nothing again.
  Repo again = Open();
  EXPECT_EQ(lance::Dataset::Open(Uri() + "/records/labels.lance", {}).CountRows(), 1u);
}

TEST_F(RepoRecordsTest, InMemoryRepositoriesWork) {
  Repo repo = Repo::Open("memory://kv0-test-repo", Opts());
  tracking::Run run = repo.CreateRun(NewRun{.name = "m"});
  for (int i = 0; i < 5; ++i) run.Track(i, "loss");
  run.Finish();
  ASSERT_EQ(repo.Runs().size(), 1u);
  uint64_t id = SeriesId(run.run_id(), "loss", nlohmann::json::object());
  EXPECT_EQ(repo.ReadMany(std::vector<uint64_t>{id}).at(id).size(), 5u);
  EXPECT_EQ(repo.GetSeriesStats(std::vector<uint64_t>{id}).at(id).count, 5u);
}

}  // namespace
}  // namespace kv0::tracking
