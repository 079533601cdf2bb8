// The lance-c boundary, exercised through kv0::lance::Dataset on a local
// directory and on memory://.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <set>
#include <thread>

#include "kv0/error.h"
#include "lance/dataset.h"
#include "test_util.h"

namespace kv0::lance {
namespace {

using arrow::BatchBuilder;
using arrow::Field;
using arrow::Type;

const arrow::Schema kSchema = {
    {"id", Type::kUInt64, false},
    {"name", Type::kUtf8, true},
    {"payload", Type::kBinary, true},
};

// A stream of one batch with ids [first, first + n): name "row<id>", null for
// ids divisible by 5; payload n bytes of (id % 256).
arrow::OwnedStream Rows(uint64_t first, uint64_t n) {
  BatchBuilder builder(kSchema);
  for (uint64_t id = first; id < first + n; ++id) {
    builder.uint64(0).Append(id);
    if (id % 5 == 0) {
      builder.utf8(1).AppendNull();
    } else {
      builder.utf8(1).Append("row" + std::to_string(id));
    }
    builder.binary(2).Append(std::string(id % 7, static_cast<char>(id % 256)));
  }
  std::vector<arrow::OwnedArray> batches(1);
  builder.Finish(batches[0].get());
  arrow::OwnedStream stream;
  arrow::MakeStream(kSchema, std::move(batches), &stream);
  return stream;
}

// Every id in a scan, in scan order.
std::vector<uint64_t> Ids(arrow::StreamReader reader) {
  std::vector<uint64_t> ids;
  while (auto batch = reader.Next()) {
    arrow::UInt64Column column(*batch, "id");
    for (int64_t i = 0; i < batch->num_rows(); ++i) ids.push_back(column.value(i));
  }
  return ids;
}

std::vector<uint64_t> Range(uint64_t first, uint64_t n) {
  std::vector<uint64_t> out;
  for (uint64_t i = first; i < first + n; ++i) out.push_back(i);
  return out;
}

class DatasetTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Uri(const std::string& name) {
    if (GetParam() == "memory") return "memory://" + name + std::to_string(counter_++);
    return dir_ / name;
  }

  testing::TempDir dir_;
  int counter_ = 0;
};

TEST_P(DatasetTest, CreateOpenExists) {
  std::string uri = Uri("a.lance");
  EXPECT_FALSE(Dataset::Exists(uri, {}));
  EXPECT_THROW(
      {
        try {
          Dataset::Open(uri, {});
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Code::kNotFound);
          throw;
        }
      },
      Error);
  Dataset created = Dataset::Create(uri, {}, kSchema);
  EXPECT_EQ(created.version(), 1u);
  EXPECT_EQ(created.CountRows(), 0u);
  EXPECT_TRUE(created.Fragments().empty());
  if (GetParam() == "local") {
    EXPECT_TRUE(Dataset::Exists(uri, {}));
    Dataset opened = Dataset::Open(uri, {});
    EXPECT_EQ(opened.version(), 1u);
    try {
      Dataset::Create(uri, {}, kSchema);
      FAIL() << "created a dataset twice";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kConflict);
    }
  }
}

TEST_P(DatasetTest, SchemaRoundTrips) {
  Dataset ds = Dataset::Create(Uri("s.lance"), {}, kSchema);
  arrow::OwnedSchema schema = ds.Schema();
  ASSERT_EQ(schema->n_children, 3);
  EXPECT_STREQ(schema->children[0]->name, "id");
  EXPECT_STREQ(schema->children[0]->format, "L");
  EXPECT_EQ(schema->children[0]->flags & ARROW_FLAG_NULLABLE, 0);
  EXPECT_STREQ(schema->children[1]->format, "u");
  EXPECT_NE(schema->children[1]->flags & ARROW_FLAG_NULLABLE, 0);
  EXPECT_STREQ(schema->children[2]->format, "z");
}

TEST_P(DatasetTest, AppendMakesOneFragmentPerCommit) {
  Dataset ds = Dataset::Create(Uri("a.lance"), {}, kSchema);
  CommitResult first = ds.Append(Rows(0, 3000));
  EXPECT_EQ(first.version, 2u);
  ASSERT_EQ(first.fragment_ids.size(), 1u);
  CommitResult second = ds.Append(Rows(3000, 10));
  EXPECT_EQ(second.version, 3u);
  ASSERT_EQ(second.fragment_ids.size(), 1u);
  EXPECT_NE(first.fragment_ids[0], second.fragment_ids[0]);

  auto fragments = ds.Fragments();
  ASSERT_EQ(fragments.size(), 2u);
  EXPECT_EQ(fragments[0].id, first.fragment_ids[0]);
  EXPECT_EQ(fragments[0].physical_rows, 3000u);
  EXPECT_EQ(fragments[1].physical_rows, 10u);
  EXPECT_FALSE(fragments[0].data_file.empty());
  EXPECT_NE(fragments[0].data_file, fragments[1].data_file);
  EXPECT_TRUE(fragments[0].deletion_file.empty());
  EXPECT_EQ(ds.CountRows(), 3010u);
  EXPECT_EQ(Ids(ds.Scan({})), Range(0, 3010));
}

TEST_P(DatasetTest, EmptyAppendCommitsNothing) {
  Dataset ds = Dataset::Create(Uri("e.lance"), {}, kSchema);
  arrow::OwnedStream empty;
  arrow::MakeStream(kSchema, std::vector<arrow::OwnedArray>{}, &empty);
  CommitResult result = ds.Append(std::move(empty));
  EXPECT_EQ(result.version, 1u);
  EXPECT_TRUE(result.fragment_ids.empty());
  EXPECT_EQ(ds.version(), 1u);
}

TEST_P(DatasetTest, ScanProjectsFiltersAndPicksFragments) {
  Dataset ds = Dataset::Create(Uri("scan.lance"), {}, kSchema);
  uint64_t f1 = ds.Append(Rows(0, 100)).fragment_ids.at(0);
  uint64_t f2 = ds.Append(Rows(100, 100)).fragment_ids.at(0);

  ScanOptions options;
  options.columns = {"name", "id"};
  options.filter = "id >= 10 AND id < 20 AND name IS NOT NULL";
  arrow::StreamReader reader = ds.Scan(options);
  ASSERT_EQ(reader.schema()->get()->n_children, 2);
  EXPECT_STREQ(reader.schema()->get()->children[0]->name, "name");
  std::vector<std::string> names;
  while (auto batch = reader.Next()) {
    arrow::Utf8Column column(*batch, "name");
    for (int64_t i = 0; i < batch->num_rows(); ++i) names.emplace_back(column.value(i));
  }
  std::vector<std::string> expected;
  for (int id = 10; id < 20; ++id) {
    if (id % 5 != 0) expected.push_back("row" + std::to_string(id));
  }
  EXPECT_EQ(names, expected);

  ScanOptions second_only;
  second_only.fragment_ids = std::vector<uint64_t>{f2};
  EXPECT_EQ(Ids(ds.Scan(second_only)), Range(100, 100));

  ScanOptions both_reversed;
  both_reversed.fragment_ids = std::vector<uint64_t>{f2, f1};
  auto ids = Ids(ds.Scan(both_reversed));
  EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), 200u);

  ScanOptions bad;
  bad.filter = "no_such_column = 3";
  EXPECT_THROW(ds.Scan(bad), Error);
  ScanOptions missing;
  missing.fragment_ids = std::vector<uint64_t>{999};
  EXPECT_THROW(ds.Scan(missing), Error);
}

TEST_P(DatasetTest, RowAddressesAndTake) {
  Dataset ds = Dataset::Create(Uri("take.lance"), {}, kSchema);
  ds.Append(Rows(0, 50));
  uint64_t fragment = ds.Append(Rows(50, 50)).fragment_ids.at(0);

  ScanOptions options;
  options.columns = {"id"};
  options.with_row_address = true;
  arrow::StreamReader reader = ds.Scan(options);
  std::map<uint64_t, uint64_t> address_of;  // id -> address
  while (auto batch = reader.Next()) {
    arrow::UInt64Column ids(*batch, "id");
    arrow::UInt64Column addresses(*batch, kRowAddress);
    for (int64_t i = 0; i < batch->num_rows(); ++i) address_of[ids.value(i)] = addresses.value(i);
  }
  ASSERT_EQ(address_of.size(), 100u);
  EXPECT_EQ(address_of[57], (fragment << 32) | 7u);

  std::vector<uint64_t> wanted = {address_of[99], address_of[3], address_of[57]};
  arrow::StreamReader taken = ds.Take(wanted, {"id", "name"});
  auto batch = taken.Next();
  ASSERT_TRUE(batch);
  arrow::UInt64Column ids(*batch, "id");
  arrow::Utf8Column names(*batch, "name");
  ASSERT_EQ(batch->num_rows(), 3);
  EXPECT_EQ(ids.value(0), 99u);
  EXPECT_EQ(ids.value(1), 3u);
  EXPECT_EQ(ids.value(2), 57u);
  EXPECT_EQ(names.value(2), "row57");
  EXPECT_THROW(ds.Take(wanted, {"nope"}), Error);
}

TEST_P(DatasetTest, TakeAfterDeleteStillReadsLiveRows) {
  Dataset ds = Dataset::Create(Uri("del.lance"), {}, kSchema);
  uint64_t fragment = ds.Append(Rows(0, 20)).fragment_ids.at(0);
  ds.Delete("id < 10");
  EXPECT_EQ(ds.CountRows(), 10u);
  auto fragments = ds.Fragments();
  ASSERT_EQ(fragments.size(), 1u);
  EXPECT_FALSE(fragments[0].deletion_file.empty());
  EXPECT_EQ(fragments[0].deleted_rows, 10u);

  // Deleting rows does not move the others: address (fragment, 15) is id 15.
  std::vector<uint64_t> wanted = {(fragment << 32) | 15u, (fragment << 32) | 12u};
  arrow::StreamReader taken = ds.Take(wanted, {"id"});
  auto batch = taken.Next();
  ASSERT_TRUE(batch);
  arrow::UInt64Column ids(*batch, "id");
  ASSERT_EQ(batch->num_rows(), 2);
  EXPECT_EQ(ids.value(0), 15u);
  EXPECT_EQ(ids.value(1), 12u);
}

// The ids ReadRanges returns, in order, with their row addresses checked.
std::vector<uint64_t> IdsInRanges(const Dataset& ds, uint64_t fragment,
                                  const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  std::vector<uint64_t> out;
  arrow::StreamReader reader = ds.ReadRanges(fragment, ranges, {"id", kRowAddress});
  while (auto batch = reader.Next()) {
    arrow::UInt64Column ids(*batch, "id"), addresses(*batch, kRowAddress);
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      EXPECT_EQ(addresses.value(i) >> 32, fragment);
      out.push_back(ids.value(i));
    }
  }
  return out;
}

TEST_P(DatasetTest, ReadRangesByPhysicalOffset) {
  Dataset ds = Dataset::Create(Uri("ranges.lance"), {}, kSchema);
  ds.Append(Rows(0, 100));
  const uint64_t fragment = ds.Append(Rows(100, 100000)).fragment_ids.at(0);

  EXPECT_EQ(IdsInRanges(ds, fragment, {{0, 3}, {50, 52}, {99998, 100000}}),
            (std::vector<uint64_t>{100, 101, 102, 150, 151, 100098, 100099}));
  // A range over several of the read's batches comes back whole and in order.
  const std::vector<uint64_t> wide = IdsInRanges(ds, fragment, {{1000, 81000}});
  ASSERT_EQ(wide.size(), 80000u);
  for (size_t i = 0; i < wide.size(); ++i) ASSERT_EQ(wide[i], 1100 + i);

  // Offsets stay physical after a delete; deleted rows are left out.
  ds.Delete("id >= 150 AND id < 160");
  EXPECT_EQ(IdsInRanges(ds, fragment, {{48, 52}, {60, 61}}),
            (std::vector<uint64_t>{148, 149, 160}));
  EXPECT_TRUE(IdsInRanges(ds, fragment, {{50, 60}}).empty());

  // Columns come by name; nothing else is asked for.
  const std::vector<std::pair<uint64_t, uint64_t>> sixth{{6, 7}};
  arrow::StreamReader named = ds.ReadRanges(fragment, sixth, {"name"});
  auto batch = named.Next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(arrow::Utf8Column(*batch, "name").value(0), "row106");
  // No columns named: every column.
  arrow::StreamReader whole = ds.ReadRanges(fragment, sixth, {});
  batch = whole.Next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(arrow::UInt64Column(*batch, "id").value(0), 106u);
  EXPECT_EQ(arrow::BinaryColumn(*batch, "payload").value(0), std::string(106 % 7, 106));
}

TEST_P(DatasetTest, ReadRangesRefusesBadRanges) {
  Dataset ds = Dataset::Create(Uri("bad_ranges.lance"), {}, kSchema);
  const uint64_t fragment = ds.Append(Rows(0, 10)).fragment_ids.at(0);
  using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;
  const auto code_of = [&](uint64_t in, const Ranges& ranges,
                           std::vector<std::string> columns) -> std::optional<Code> {
    try {
      arrow::StreamReader reader = ds.ReadRanges(in, ranges, columns);
      while (reader.Next()) {
      }
    } catch (const Error& e) {
      return e.code();
    }
    return std::nullopt;
  };
  EXPECT_EQ(code_of(fragment, Ranges{{3, 3}}, {"id"}), Code::kInvalidArgument);  // empty
  EXPECT_EQ(code_of(fragment, Ranges{{5, 7}, {6, 8}}, {"id"}), Code::kInvalidArgument);
  EXPECT_EQ(code_of(fragment, Ranges{{5, 7}, {1, 2}}, {"id"}), Code::kInvalidArgument);
  EXPECT_TRUE(code_of(fragment, Ranges{{8, 12}}, {"id"}).has_value());  // past the end
  EXPECT_EQ(code_of(fragment + 7, Ranges{{0, 1}}, {"id"}), Code::kNotFound);
  EXPECT_TRUE(code_of(fragment, Ranges{{0, 1}}, {"nope"}).has_value());
  EXPECT_EQ(code_of(fragment, Ranges{{5, 7}, {7, 8}}, {"id"}), std::nullopt);  // touching
}

TEST_P(DatasetTest, UpdateReplacesFragments) {
  Dataset ds = Dataset::Create(Uri("upd.lance"), {}, kSchema);
  uint64_t a = ds.Append(Rows(0, 10)).fragment_ids.at(0);
  uint64_t b = ds.Append(Rows(10, 10)).fragment_ids.at(0);
  uint64_t c = ds.Append(Rows(20, 10)).fragment_ids.at(0);

  UncommittedFragments merged = ds.WriteFragments(Rows(0, 20));
  std::vector<uint64_t> removed = {a, b};
  CommitResult result = ds.CommitUpdate(removed, std::move(merged));
  ASSERT_EQ(result.fragment_ids.size(), 1u);
  EXPECT_EQ(result.version, ds.version());
  std::set<uint64_t> ids;
  for (const auto& f : ds.Fragments()) ids.insert(f.id);
  EXPECT_EQ(ids, (std::set<uint64_t>{c, result.fragment_ids[0]}));
  auto all = Ids(ds.Scan({}));
  EXPECT_EQ(std::set<uint64_t>(all.begin(), all.end()).size(), 30u);
  EXPECT_EQ(all.size(), 30u);

  // Removing a fragment that is gone is a conflict and commits nothing.
  uint64_t version = ds.version();
  EXPECT_THROW(ds.CommitUpdate(removed, ds.WriteFragments(Rows(0, 1))), Error);
  EXPECT_EQ(ds.version(), version);
}

TEST_P(DatasetTest, CompactLeavesFullFragmentsAlone) {
  // The automatic compaction counts only fragments below the target, on the
  // grounds that Lance never rewrites the others; this checks those grounds.
  const arrow::Schema schema = {{"id", Type::kUInt64, false}};
  auto ids = [&](uint64_t first, uint64_t n) {
    std::vector<uint64_t> values(n);
    for (uint64_t i = 0; i < n; ++i) values[i] = first + i;
    BatchBuilder b(schema);
    b.uint64(0).Append(std::span<const uint64_t>(values));
    std::vector<arrow::OwnedArray> batches(1);
    b.Finish(batches[0].get());
    arrow::OwnedStream stream;
    arrow::MakeStream(schema, std::move(batches), &stream);
    return stream;
  };
  Dataset ds = Dataset::Create(Uri("full.lance"), {}, schema);
  std::set<uint64_t> full;
  for (uint64_t i = 0; i < 2; ++i) {
    full.insert(ds.Append(ids(i * kCompactTargetRows, kCompactTargetRows)).fragment_ids.at(0));
  }
  EXPECT_EQ(MergeableFragments(ds.Fragments()), 0u);
  std::set<uint64_t> small;
  for (uint64_t i = 0; i < 3; ++i) {
    small.insert(ds.Append(ids(3 * kCompactTargetRows + i * 10, 10)).fragment_ids.at(0));
  }
  EXPECT_EQ(MergeableFragments(ds.Fragments()), 3u);

  CompactResult result = ds.Compact({});
  EXPECT_EQ(std::set<uint64_t>(result.removed.begin(), result.removed.end()), small);
  EXPECT_EQ(MergeableFragments(ds.Fragments()), 1u);
  EXPECT_EQ(ds.Fragments().size(), 3u);
  EXPECT_EQ(ds.CountRows(), 2 * kCompactTargetRows + 30);
}

TEST_P(DatasetTest, CompactReportsReplacedFragments) {
  Dataset ds = Dataset::Create(Uri("compact.lance"), {}, kSchema);
  std::set<uint64_t> before;
  for (int i = 0; i < 5; ++i) before.insert(ds.Append(Rows(i * 10, 10)).fragment_ids.at(0));
  CompactResult result = ds.Compact({});
  EXPECT_EQ(std::set<uint64_t>(result.removed.begin(), result.removed.end()), before);
  ASSERT_EQ(result.added.size(), 1u);
  auto fragments = ds.Fragments();
  ASSERT_EQ(fragments.size(), 1u);
  EXPECT_EQ(fragments[0].id, result.added[0]);
  EXPECT_EQ(Ids(ds.Scan({})), Range(0, 50));

  CompactResult nothing = ds.Compact({});
  EXPECT_TRUE(nothing.removed.empty());
  EXPECT_TRUE(nothing.added.empty());
}

TEST_P(DatasetTest, AddNullColumnsKeepsRows) {
  Dataset ds = Dataset::Create(Uri("cols.lance"), {}, kSchema);
  ds.Append(Rows(0, 10));
  ds.AddNullColumns({{"extra", Type::kFloat64, true}, {"tags", Type::kListUtf8, true}});
  ScanOptions options;
  options.columns = {"id", "extra", "tags"};
  arrow::StreamReader reader = ds.Scan(options);
  int64_t rows = 0;
  while (auto batch = reader.Next()) {
    arrow::Float64Column extra(*batch, "extra");
    arrow::ListUtf8Column tags(*batch, "tags");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      EXPECT_TRUE(extra.is_null(i));
      EXPECT_TRUE(tags.is_null(i));
    }
    rows += batch->num_rows();
  }
  EXPECT_EQ(rows, 10);
  EXPECT_THROW(ds.AddNullColumns({{"required", Type::kInt64, false}}), Error);
}

TEST_P(DatasetTest, BTreeIndexIsCreatedThenUpdated) {
  Dataset ds = Dataset::Create(Uri("idx.lance"), {}, kSchema);
  ds.Append(Rows(0, 1000));
  ds.CreateScalarIndex("id", "id_idx");
  EXPECT_EQ(ds.Indices(), (std::map<std::string, std::string>{{"id_idx", "id"}}));
  ds.Append(Rows(1000, 10));
  uint64_t before = ds.version();
  ds.CreateScalarIndex("id", "id_idx");
  EXPECT_GT(ds.version(), before);
  ScanOptions options;
  options.filter = "id = 1005";
  EXPECT_EQ(Ids(ds.Scan(options)), std::vector<uint64_t>{1005});
}

TEST_P(DatasetTest, ZoneMapIndexServesRanges) {
  Dataset ds = Dataset::Create(Uri("zones.lance"), {}, kSchema);
  ds.Append(Rows(0, 5000));
  ds.CreateScalarIndex("id", "id_zones", Dataset::IndexKind::kZoneMap);
  EXPECT_EQ(ds.Indices(), (std::map<std::string, std::string>{{"id_zones", "id"}}));
  ScanOptions options;
  options.filter = "id >= 4990 AND id < 4993";
  EXPECT_EQ(Ids(ds.Scan(options)), (std::vector<uint64_t>{4990, 4991, 4992}));
  EXPECT_THROW(ds.CreateScalarIndex("missing", "x"), Error);
}

TEST_P(DatasetTest, ConfigAndMetadata) {
  Dataset ds = Dataset::Create(Uri("cfg.lance"), {}, kSchema);
  ds.UpdateMetadata({{"kv0.sorted_fragments", "1,2"}, {"other", "x"}});
  ds.UpdateConfig({{"kv0.test", "yes"}});
  EXPECT_EQ(ds.Metadata().at("kv0.sorted_fragments"), "1,2");
  EXPECT_EQ(ds.Config().at("kv0.test"), "yes");
  ds.UpdateMetadata({{"other", std::nullopt}});
  EXPECT_EQ(ds.Metadata().count("other"), 0u);
  EXPECT_EQ(ds.Metadata().count("kv0.sorted_fragments"), 1u);
}

TEST_P(DatasetTest, VersionsAndTags) {
  Dataset ds = Dataset::Create(Uri("ver.lance"), {}, kSchema);
  ds.Append(Rows(0, 5));
  ds.Append(Rows(5, 5));
  auto versions = ds.Versions();
  ASSERT_EQ(versions.size(), 3u);
  EXPECT_EQ(versions[0].version, 1u);
  EXPECT_EQ(versions[2].version, 3u);
  EXPECT_GT(versions[0].timestamp_us, 1'600'000'000'000'000);
  EXPECT_LE(versions[0].timestamp_us, versions[2].timestamp_us);
  EXPECT_EQ(ds.LatestVersion(), 3u);

  ds.CreateTag("first-five", 2);
  EXPECT_EQ(ds.Tags(), (std::map<std::string, uint64_t>{{"first-five", 2}}));
  EXPECT_THROW(ds.CreateTag("first-five", 3), Error);
  EXPECT_THROW(ds.CreateTag("nowhere", 99), Error);
  ds.DeleteTag("first-five");
  EXPECT_TRUE(ds.Tags().empty());
  EXPECT_THROW(ds.DeleteTag("first-five"), Error);
}

INSTANTIATE_TEST_SUITE_P(Stores, DatasetTest, ::testing::Values("local", "memory"),
                         [](const auto& info) { return info.param; });

// What needs a second handle on the same dataset runs on local storage only:
// a memory:// store is private to one handle.
class LocalDatasetTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(LocalDatasetTest, OpenAtVersionAndTag) {
  std::string uri = dir_ / "tt.lance";
  Dataset ds = Dataset::Create(uri, {}, kSchema);
  ds.Append(Rows(0, 5));
  ds.CreateTag("v2", 2);
  ds.Append(Rows(5, 5));
  EXPECT_EQ(Ids(Dataset::Open(uri, {}, 2).Scan({})), Range(0, 5));
  EXPECT_EQ(Ids(Dataset::Open(uri, {}, 0, "v2").Scan({})), Range(0, 5));
  EXPECT_EQ(Ids(Dataset::Open(uri, {}).Scan({})), Range(0, 10));
  EXPECT_THROW(Dataset::Open(uri, {}, 42), Error);
  EXPECT_THROW(Dataset::Open(uri, {}, 0, "no-such-tag"), Error);
}

TEST_F(LocalDatasetTest, LatestVersionSeesOtherWriters) {
  std::string uri = dir_ / "lv.lance";
  Dataset writer = Dataset::Create(uri, {}, kSchema);
  Dataset reader = Dataset::Open(uri, {});
  writer.Append(Rows(0, 5));
  EXPECT_EQ(reader.version(), 1u);
  EXPECT_EQ(reader.LatestVersion(), 2u);
  EXPECT_EQ(reader.CountRows(), 0u);
  reader.CheckoutLatest();
  EXPECT_EQ(reader.version(), 2u);
  EXPECT_EQ(reader.CountRows(), 5u);
}

TEST_F(LocalDatasetTest, ConcurrentAppendsBothLand) {
  std::string uri = dir_ / "ca.lance";
  Dataset a = Dataset::Create(uri, {}, kSchema);
  Dataset b = Dataset::Open(uri, {});
  a.Append(Rows(0, 10));
  // b still reads version 1; its append rebases onto a's.
  CommitResult result = b.Append(Rows(10, 10));
  EXPECT_EQ(result.version, 3u);
  EXPECT_EQ(b.CountRows(), 20u);
}

TEST_F(LocalDatasetTest, RacingCreatesNeverOverwriteAppendedRows) {
  // Each writer creates the dataset unless it exists, then appends its own
  // rows at once. A create that lost the race must fail with Conflict rather
  // than commit over the winner's dataset and drop rows appended meanwhile.
  std::string uri = dir_ / "race.lance";
  constexpr int kWriters = 8;
  std::atomic<int> created{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      try {
        std::optional<Dataset> ds;
        try {
          ds.emplace(Dataset::Create(uri, {}, kSchema));
          ++created;
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Code::kConflict) << e.what();
          ds.emplace(Dataset::Open(uri, {}));
        }
        ds->Append(Rows(w * 10, 10));
      } catch (const Error& e) {
        ADD_FAILURE() << "writer " << w << ": " << e.what();
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(created.load(), 1);
  std::vector<uint64_t> ids = Ids(Dataset::Open(uri, {}).Scan({}));
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, Range(0, kWriters * 10));
}

TEST_F(LocalDatasetTest, TwoUpdatesOverTheSameFragmentsConflict) {
  std::string uri = dir_ / "conflict.lance";
  Dataset a = Dataset::Create(uri, {}, kSchema);
  uint64_t f1 = a.Append(Rows(0, 10)).fragment_ids.at(0);
  uint64_t f2 = a.Append(Rows(10, 10)).fragment_ids.at(0);
  Dataset b = Dataset::Open(uri, {});
  std::vector<uint64_t> both = {f1, f2};

  a.CommitUpdate(both, a.WriteFragments(Rows(0, 20)));
  uint64_t b_version = b.version();
  try {
    b.CommitUpdate(both, b.WriteFragments(Rows(0, 20)));
    FAIL() << "the second update committed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kConflict) << e.what();
  }
  EXPECT_EQ(b.version(), b_version);
  b.CheckoutLatest();
  EXPECT_EQ(b.CountRows(), 20u);

  // An update alongside a concurrent append keeps the appended rows.
  Dataset c = Dataset::Open(uri, {});
  auto current = c.Fragments();
  a.Append(Rows(100, 3));
  std::vector<uint64_t> ids;
  for (const auto& f : current) ids.push_back(f.id);
  c.CommitUpdate(ids, c.WriteFragments(Rows(0, 20)));
  EXPECT_EQ(c.CountRows(), 23u);
}

TEST_F(LocalDatasetTest, TagSurvivesCleanup) {
  std::string uri = dir_ / "tag.lance";
  Dataset ds = Dataset::Create(uri, {}, kSchema);
  ds.Append(Rows(0, 10));
  ds.CreateTag("keep", 2);
  ds.Append(Rows(10, 10));
  ds.CommitUpdate(std::vector<uint64_t>{ds.Fragments()[0].id, ds.Fragments()[1].id},
                  ds.WriteFragments(Rows(0, 20)));
  ds.Append(Rows(20, 1));
  CleanupStats stats = ds.CleanupOldVersions(std::chrono::seconds(0));
  EXPECT_GE(stats.old_versions, 2u);
  std::set<uint64_t> left;
  for (const auto& v : ds.Versions()) left.insert(v.version);
  EXPECT_TRUE(left.count(2));
  EXPECT_FALSE(left.count(3));
  EXPECT_EQ(Ids(Dataset::Open(uri, {}, 0, "keep").Scan({})), Range(0, 10));
  EXPECT_THROW(Dataset::Open(uri, {}, 3), Error);
}

// Another handle's cleanup can remove the versions between a handle's read
// version and the latest, which a commit reads to rebase. Appends and updates
// of fragments nobody touched meanwhile must still commit, on the latest.
TEST_F(LocalDatasetTest, CommitsAfterAnotherHandleCleanedItsReadVersion) {
  std::string uri = dir_ / "cleaned.lance";
  Dataset a = Dataset::Create(uri, {}, kSchema);
  uint64_t mine = a.Append(Rows(0, 10)).fragment_ids.at(0);
  Dataset b = Dataset::Open(uri, {});
  uint64_t theirs = a.Append(Rows(10, 10)).fragment_ids.at(0);
  a.Append(Rows(20, 10));
  a.CommitUpdate(std::vector<uint64_t>{theirs}, a.WriteFragments(Rows(10, 10)));
  a.CleanupOldVersions(std::chrono::seconds(0));
  ASSERT_THROW(Dataset::Open(uri, {}, b.version() + 1), Error) << "the rebase range is still there";

  CommitResult appended = b.Append(Rows(30, 5));
  EXPECT_EQ(appended.version, a.LatestVersion());
  EXPECT_EQ(b.CountRows(), 35u);
  b.CommitUpdate(std::vector<uint64_t>{mine}, b.WriteFragments(Rows(0, 10)));
  std::vector<uint64_t> ids = Ids(Dataset::Open(uri, {}).Scan({}));
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, Range(0, 35));
}

// A cleanup racing a commit can remove a version after the commit listed it
// and before it read it. The commit must start again from the latest version
// rather than fail: appends from a handle a few versions behind, each beside a
// cleanup that keeps only the latest version.
TEST_F(LocalDatasetTest, AppendsBesideACleanupOfTheirRebaseRange) {
  std::string uri = dir_ / "racing-cleanup.lance";
  Dataset a = Dataset::Create(uri, {}, kSchema);
  uint64_t next_id = 0;
  for (int round = 0; round < 40; ++round) {
    Dataset b = Dataset::Open(uri, {});
    for (int i = 0; i < 4; ++i, next_id += 2) a.Append(Rows(next_id, 2));
    std::thread cleaner([&a] { a.CleanupOldVersions(std::chrono::seconds(0)); });
    try {
      b.Append(Rows(next_id, 2));
      next_id += 2;
    } catch (const Error& e) {
      ADD_FAILURE() << "round " << round << ": " << e.what();
    }
    cleaner.join();
    a.CheckoutLatest();
  }
  std::vector<uint64_t> ids = Ids(Dataset::Open(uri, {}).Scan({}));
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, Range(0, next_id));
}

// The same, when the update's fragment was changed in the versions the
// cleanup removed: without them the commit cannot know what changed, so it
// must fail with Conflict rather than undo the other writer's rewrite.
TEST_F(LocalDatasetTest, UpdateOfAFragmentChangedInCleanedVersionsConflicts) {
  std::string uri = dir_ / "cleaned-conflict.lance";
  Dataset a = Dataset::Create(uri, {}, kSchema);
  uint64_t shared = a.Append(Rows(0, 10)).fragment_ids.at(0);
  a.Append(Rows(10, 10));
  Dataset b = Dataset::Open(uri, {});
  a.Delete("id < 3");
  a.Append(Rows(20, 10));
  a.CleanupOldVersions(std::chrono::seconds(0));
  try {
    b.CommitUpdate(std::vector<uint64_t>{shared}, b.WriteFragments(Rows(0, 10)));
    FAIL() << "the update committed over a fragment changed meanwhile";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kConflict) << e.what();
  }
  b.CheckoutLatest();
  EXPECT_EQ(b.CountRows(), 27u);
}

TEST_F(LocalDatasetTest, ConcurrentCallsOnOneHandle) {
  std::string uri = dir_ / "threads.lance";
  Dataset ds = Dataset::Create(uri, {}, kSchema);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&ds, t] {
      for (int i = 0; i < 5; ++i) {
        ds.Append(Rows(t * 100 + i * 10, 10));
        ds.CountRows();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ds.CheckoutLatest();
  EXPECT_EQ(ds.CountRows(), 200u);
  EXPECT_EQ(ds.Fragments().size(), 20u);
}

TEST(LanceLog, CallbackReceivesRecords) {
  static std::atomic<int> records{0};
  SetLogCallback(
      [](int level, const char*, const char*, void*) {
        if (level >= 1 && level <= 5) records++;
      },
      nullptr, 5);
  testing::TempDir dir;
  Dataset ds = Dataset::Create(dir / "log.lance", {}, kSchema);
  ds.Append(Rows(0, 10));
  ds.Compact({});
  SetLogCallback(nullptr, nullptr, 0);
  EXPECT_GT(records.load(), 0);
}

TEST(LanceVersion, NamesLance14) { EXPECT_NE(LanceVersion().find("lance 14."), std::string::npos); }

}  // namespace
}  // namespace kv0::lance
