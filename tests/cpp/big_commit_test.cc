// Commits of more than 2 GiB, which Arrow's 32-bit offsets cannot hold in
// one batch: what the limits in kv.h and tracking.h admit must be committed
// and read back. Each test holds about 12 GB, so ctest runs this suite
// alone, and not under sanitizers, whose shadow memory would double that.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv0/kv.h"
#include "kv0/tracking.h"
#include "test_util.h"

namespace kv0 {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

constexpr size_t kBig = size_t{750} << 20;

TEST(BigCommitTest, KvBatchOverTwoGibIsCommittedAndReadBack) {
  if (kSanitized) GTEST_SKIP() << "needs about 12 GB without a sanitizer's shadow memory";
  testing::TempDir dir;
  kv::Options options;
  options.wal_dir = dir / "wal";
  {
    auto db = kv::DB::Open(dir / "db", options);
    kv::WriteBatch batch;
    for (char c : {'a', 'b', 'c'}) batch.Put(std::string(1, c), std::string(kBig, c));
    db->Write(batch);  // one WAL record, one commit, 2.25 GB of values
    db->Flush();
    db->Close();
  }
  // A fresh handle loads the view from the fragment (decoding the three
  // values together would overflow) and reads each value back.
  kv::Options read = options;
  read.read_only = true;
  auto reopened = kv::DB::Open(dir / "db", read);
  auto values = reopened->MultiGet(std::vector<std::string_view>{"a", "b", "c"});
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(values[i].has_value());
    EXPECT_EQ(values[i]->size(), kBig);
    EXPECT_EQ(values[i]->find_first_not_of(static_cast<char>('a' + i)), std::string::npos);
  }
}

TEST(BigCommitTest, TrackingRunsOverTwoGibAreCommitted) {
  if (kSanitized) GTEST_SKIP() << "needs about 12 GB without a sanitizer's shadow memory";
  testing::TempDir dir;
  tracking::RepoOptions options;
  options.wal_dir = dir / "wal";
  tracking::Repo repo = tracking::Repo::Open(dir / "repo", options);
  std::vector<std::string> ids;
  for (char c : {'a', 'b', 'c'}) {
    tracking::NewRun run;
    run.description = std::string(kBig, c);
    ids.push_back(repo.CreateRun(run).run_id());
  }
  repo.Flush();  // one runs commit of 2.25 GB
  for (const auto& id : ids) {
    auto run = repo.GetRun(id);
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->description->size(), kBig);
  }
}

}  // namespace
}  // namespace kv0
