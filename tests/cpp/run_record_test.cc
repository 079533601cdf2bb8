#include "tracking/run_record.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include "kv0/error.h"

namespace kv0::tracking {
namespace {

using nlohmann::json;

RunRow Row(uint64_t seq, std::optional<uint32_t> fields, std::function<void(RunInfo&)> set = {}) {
  RunRow row;
  row.seq = seq;
  row.fields = fields;
  row.record.run_id = "r1";
  row.record.updated_at_us = int64_t(seq) * 1000;
  if (set) set(row.record);
  return row;
}

// The first row of a run: every field, as create_run writes it.
RunRow Create(uint64_t seq, std::optional<uint32_t> fields = kAllRunFields) {
  return Row(seq, fields, [](RunInfo& r) {
    r.name = "base";
    r.created_at_us = 100;
    r.kind = "training";
  });
}

TEST(MergeRun, EmptyIsAbsent) { EXPECT_FALSE(MergeRun({}).has_value()); }

TEST(MergeRun, WritersOfDifferentFieldsKeepBoth) {
  // The web app renames at seq 30 from a record it read before the script
  // finished the run at seq 20; its row does not carry the stale status.
  std::vector<RunRow> rows = {
      Create(10),
      Row(20, kFieldStatus | kFieldEndedAt,
          [](RunInfo& r) {
            r.status = "finished";
            r.ended_at_us = 500;
          }),
      Row(30, kFieldName, [](RunInfo& r) { r.name = "renamed"; }),
  };
  for (int i = 0; i < 3; i++) {
    std::rotate(rows.begin(), rows.begin() + 1, rows.end());
    auto run = MergeRun(rows);
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->run_id, "r1");
    EXPECT_EQ(run->name, "renamed");
    EXPECT_EQ(run->status, "finished");
    EXPECT_EQ(run->ended_at_us, 500);
    EXPECT_EQ(run->kind, "training");
    EXPECT_EQ(run->created_at_us, 100);
    EXPECT_EQ(run->updated_at_us, 30000);
  }
}

TEST(MergeRun, LaterChangeOfSameFieldWins) {
  auto run = MergeRun({Create(10), Row(30, kFieldName, [](RunInfo& r) { r.name = "new"; }),
                       Row(20, kFieldName, [](RunInfo& r) { r.name = "old"; })});
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->name, "new");
  // A row's values outside its mask do not count, and an older row loses.
  run = MergeRun({Create(10), Row(5, kFieldName, [](RunInfo& r) { r.name = "older"; }),
                  Row(20, kFieldTags, [](RunInfo& r) {
                    r.tags = {"t"};
                    r.name = "ignored";
                  })});
  EXPECT_EQ(run->name, "base");
  EXPECT_EQ(run->tags, std::vector<std::string>{"t"});
}

TEST(MergeRun, FieldNoRowSetsKeepsDefault) {
  auto run = MergeRun({Row(10, kFieldName, [](RunInfo& r) {
    r.name = "n";
    r.status = "failed";
    r.kind = "eval";
  })});
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->name, "n");
  EXPECT_EQ(run->status, "running");
  EXPECT_FALSE(run->kind.has_value());
}

TEST(MergeRun, LegacyRowsSetEveryField) {
  auto legacy = Row(20, std::nullopt, [](RunInfo& r) {
    r.name = "legacy";
    r.status = "finished";
  });
  auto run = MergeRun({Create(10), legacy});
  EXPECT_EQ(run->name, "legacy");
  EXPECT_EQ(run->status, "finished");
  EXPECT_FALSE(run->kind.has_value());  // the legacy row sets kind, to null
  EXPECT_EQ(run->created_at_us, 0);
  // Newer masked rows still win their fields over it; it wins the rest.
  run = MergeRun({legacy, Row(30, kFieldKind, [](RunInfo& r) { r.kind = "eval"; }),
                  Row(15, kFieldName, [](RunInfo& r) { r.name = "older"; })});
  EXPECT_EQ(run->name, "legacy");
  EXPECT_EQ(run->kind, "eval");
  EXPECT_EQ(run->status, "finished");
}

TEST(MergeRun, UpdatedAtComesFromNewestRow) {
  auto run = MergeRun({Create(10), Row(40, 0u), Row(30, kFieldName)});
  EXPECT_EQ(run->updated_at_us, 40000);
}

TEST(MergeRun, TombstoneHidesRunWhateverItsSeq) {
  for (uint64_t seq : {1u, 15u, 99u}) {
    auto t = Tombstone("r1", seq, 7);
    EXPECT_TRUE(IsTombstone(t));
    EXPECT_EQ(RowFields(t), 0u);
    EXPECT_EQ(t.record.updated_at_us, 7);
    EXPECT_FALSE(MergeRun({Create(10), t, Row(20, kFieldName)}).has_value()) << seq;
  }
  // Only exactly the DELETED bit is a tombstone.
  auto not_tombstone = Row(20, kFieldDeleted | kFieldName);
  EXPECT_FALSE(IsTombstone(not_tombstone));
  EXPECT_FALSE(IsTombstone(Row(20, std::nullopt)));
  EXPECT_TRUE(MergeRun({Create(10), not_tombstone}).has_value());
}

TEST(MergeRun, EqualSeqsResolveIndependentlyOfOrder) {
  auto a = Row(10, kAllRunFields, [](RunInfo& r) {
    r.name = "a";
    r.archived = true;
  });
  auto b = Row(10, kAllRunFields, [](RunInfo& r) {
    r.name = "b";
    r.target = json{{"model", "m"}};
  });
  auto ab = MergeRun({a, b});
  auto ba = MergeRun({b, a});
  EXPECT_EQ(ab, ba);
  EXPECT_EQ(ab->name, "b");
  EXPECT_TRUE(ab->archived);
  EXPECT_TRUE(ab->target.has_value());
}

TEST(MergeRun, RejectsRowsOfDifferentRuns) {
  auto other = Row(20, kFieldName);
  other.record.run_id = "r2";
  try {
    MergeRun({Create(10), other});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
  }
}

TEST(ChangedFields, EachField) {
  const RunInfo base = Create(10).record;
  EXPECT_EQ(ChangedFields(base, base), 0u);
  const std::vector<std::pair<uint32_t, std::function<void(RunInfo&)>>> cases = {
      {kFieldName, [](RunInfo& r) { r.name.reset(); }},
      {kFieldExperiment, [](RunInfo& r) { r.experiment = "e"; }},
      {kFieldDescription, [](RunInfo& r) { r.description = ""; }},
      {kFieldTags, [](RunInfo& r) { r.tags = {"x"}; }},
      {kFieldStatus, [](RunInfo& r) { r.status = "aborted"; }},
      {kFieldArchived, [](RunInfo& r) { r.archived = true; }},
      {kFieldCreatedAt, [](RunInfo& r) { r.created_at_us = 1; }},
      {kFieldEndedAt, [](RunInfo& r) { r.ended_at_us = 2; }},
      {kFieldKind, [](RunInfo& r) { r.kind = "eval"; }},
      {kFieldTarget, [](RunInfo& r) { r.target = json::object(); }},
  };
  uint32_t all = 0;
  for (const auto& [bit, change] : cases) {
    RunInfo after = base;
    change(after);
    EXPECT_EQ(ChangedFields(base, after), bit);
    EXPECT_EQ(ChangedFields(after, base), bit);
    all |= bit;
  }
  EXPECT_EQ(all, uint32_t(kAllRunFields));
  RunInfo after = base;
  after.run_id = "other";
  after.updated_at_us = 12345;
  EXPECT_EQ(ChangedFields(base, after), 0u);
  // Applying the changed fields as a newer row gives `after`.
  after = base;
  after.status = "finished";
  after.tags = {"a", "b"};
  RunRow update{20, after, ChangedFields(base, after)};
  auto merged = MergeRun({RunRow{10, base, kAllRunFields}, update});
  after.updated_at_us = merged->updated_at_us;
  EXPECT_EQ(merged, after);
}

// Random histories for the folding property.
class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}

  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(int percent) { return Int(0, 99) < percent; }

  template <typename T>
  std::optional<T> Maybe(T value) {
    return Coin(30) ? std::nullopt : std::optional<T>(std::move(value));
  }

  // Values come from small pools, so rows of equal seq often collide.
  RunInfo Record() {
    RunInfo r;
    r.run_id = "run";
    r.name = Maybe("n" + std::to_string(Int(0, 2)));
    r.experiment = Maybe("e" + std::to_string(Int(0, 2)));
    r.description = Maybe(std::string(Int(0, 2), 'd'));
    for (int i = Int(0, 2); i > 0; i--) r.tags.push_back("t" + std::to_string(Int(0, 2)));
    static const char* const kStatuses[] = {"running", "finished", "failed", "aborted"};
    r.status = kStatuses[Int(0, 3)];
    r.archived = Coin(50);
    r.created_at_us = Int(0, 3);
    r.updated_at_us = Int(0, 5);
    r.ended_at_us = Maybe(int64_t(Int(0, 3)));
    r.kind = Maybe("k" + std::to_string(Int(0, 1)));
    if (Coin(70)) r.target = Coin(50) ? json{{"m", Int(0, 2)}} : json(Int(0, 2));
    return r;
  }

  std::optional<uint32_t> Mask() {
    int c = Int(0, 9);
    if (c == 0) return std::nullopt;
    if (c == 1) return 0u;
    if (c == 2) return uint32_t(kAllRunFields);
    uint32_t m = 0;
    for (int b = 0; b < 10; b++) {
      if (Coin(25)) m |= 1u << b;
    }
    return m;
  }

  RunRow Row(uint64_t seq) { return RunRow{seq, Record(), Mask()}; }

 private:
  std::mt19937 rng_;
};

std::vector<RunRow> Plus(std::vector<RunRow> rows, const RunRow& extra) {
  rows.push_back(extra);
  return rows;
}

TEST(FoldRun, MergesLikeTheOriginalRowsWithAnyFurtherRow) {
  Gen gen(20240611);
  size_t in_rows = 0, out_rows = 0;
  for (int iter = 0; iter < 3000; iter++) {
    std::vector<RunRow> rows;
    const int n = gen.Int(1, 8);
    for (int i = 0; i < n; i++) rows.push_back(gen.Row(10 * gen.Int(1, 10)));
    std::set<uint64_t> seqs;
    for (const RunRow& r : rows) seqs.insert(r.seq);

    const std::vector<RunRow> folded = FoldRun(rows);
    in_rows += rows.size();
    out_rows += folded.size();
    ASSERT_LE(folded.size(), rows.size());
    ASSERT_GE(folded.size(), 1u);
    for (size_t i = 0; i < folded.size(); i++) {
      ASSERT_TRUE(folded[i].fields.has_value());
      ASSERT_TRUE(seqs.count(folded[i].seq));
      if (i > 0) {
        ASSERT_LT(folded[i - 1].seq, folded[i].seq);
      }
    }
    ASSERT_EQ(MergeRun(folded), MergeRun(rows));
    ASSERT_EQ(FoldRun(folded), folded);  // idempotent

    // Further rows: below, equal to, between and above the history's seqs.
    for (int k = 0; k < 12; k++) {
      const uint64_t seq = k == 0 ? 1 : (k == 1 ? 200 : gen.Int(1, 120));
      RunRow extra = gen.Row(seq);
      if (k == 2) extra = Tombstone("run", seq, 9);
      ASSERT_EQ(MergeRun(Plus(folded, extra)), MergeRun(Plus(rows, extra)))
          << "iteration " << iter << " extra seq " << seq;
    }
  }
  EXPECT_LT(out_rows, in_rows);
}

TEST(FoldRun, TypicalRunFoldsToFewRows) {
  // create (a legacy row), rename, heartbeats, finish.
  std::vector<RunRow> rows = {Create(10, std::nullopt),
                              Row(20, kFieldName, [](RunInfo& r) { r.name = "renamed"; })};
  for (uint64_t seq = 30; seq < 80; seq += 10) rows.push_back(Row(seq, 0u));
  rows.push_back(Row(90, kFieldStatus | kFieldEndedAt, [](RunInfo& r) {
    r.status = "finished";
    r.ended_at_us = 9;
  }));
  auto folded = FoldRun(rows);
  ASSERT_EQ(folded.size(), 3u);
  EXPECT_EQ(folded[0].seq, 10u);
  EXPECT_EQ(folded[0].fields, kAllRunFields & ~(kFieldName | kFieldStatus | kFieldEndedAt));
  EXPECT_EQ(folded[1].fields, uint32_t(kFieldName));
  EXPECT_EQ(folded[2].fields, uint32_t(kFieldStatus | kFieldEndedAt));
  for (const RunRow& r : folded) EXPECT_EQ(r.record, *MergeRun(rows));

  // A create row plus a finish: two rows; a lone create row: one.
  EXPECT_EQ(FoldRun({Create(10), rows.back()}).size(), 2u);
  EXPECT_EQ(FoldRun({Create(10)}).size(), 1u);

  // A heartbeat newest keeps a mask-0 row at its seq for updated_at.
  rows.push_back(Row(100, 0u));
  folded = FoldRun(rows);
  ASSERT_EQ(folded.size(), 4u);
  EXPECT_EQ(folded.back().seq, 100u);
  EXPECT_EQ(folded.back().fields, 0u);
  EXPECT_EQ(MergeRun(folded)->updated_at_us, 100000);
}

TEST(FoldRun, TombstonedRunIsLeftAsIs) {
  std::vector<RunRow> rows = {Create(10), Row(20, kFieldName), Tombstone("r1", 15, 1), Row(30, 0u)};
  auto folded = FoldRun(rows);
  EXPECT_EQ(folded, rows);
  EXPECT_TRUE(FoldRun({}).empty());
}

TEST(RunInfoJson, RoundTrip) {
  RunInfo full;
  full.run_id = "0190a1b2c3d4";
  full.name = "n";
  full.experiment = "exp";
  full.description = "";
  full.tags = {"a", "b"};
  full.status = "finished";
  full.archived = true;
  full.created_at_us = 1718000000000000;
  full.updated_at_us = 1718000000000001;
  full.ended_at_us = 1718000000000002;
  full.kind = "eval";
  full.target = json{{"model", "m"}, {"commit", "abc"}, {"params", {1, 2.5, nullptr}}};
  json j = full;
  EXPECT_TRUE(j["created_at_us"].is_number_integer());
  EXPECT_EQ(j["target"]["model"], "m");
  EXPECT_EQ(j.get<RunInfo>(), full);
  EXPECT_EQ(json::parse(j.dump()).get<RunInfo>(), full);

  RunInfo sparse;
  sparse.run_id = "x";
  j = sparse;
  for (const char* key : {"name", "experiment", "description", "ended_at_us", "kind", "target"}) {
    EXPECT_FALSE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.get<RunInfo>(), sparse);
  EXPECT_EQ(json({{"run_id", "x"}}).get<RunInfo>(), sparse);
  EXPECT_EQ(json({{"run_id", "x"}, {"name", nullptr}, {"ended_at_us", nullptr}}).get<RunInfo>(),
            sparse);

  // A present null target stays present.
  RunInfo null_target = sparse;
  null_target.target = json(nullptr);
  j = null_target;
  EXPECT_TRUE(j.contains("target"));
  EXPECT_EQ(j.get<RunInfo>(), null_target);
}

TEST(RunInfoJson, RejectsBadValues) {
  const json bad[] = {
      json::array(),
      json{{"name", "no run id"}},
      json{{"run_id", "x"}, {"status", "paused"}},
      json{{"run_id", "x"}, {"created_at_us", 1.5}},
      json{{"run_id", "x"}, {"updated_at_us", nullptr}},
      json{{"run_id", "x"}, {"tags", {"a", 1}}},
      json{{"run_id", "x"}, {"archived", "yes"}},
      json{{"run_id", "x"}, {"ended_at_us", uint64_t(1) << 63}},
  };
  for (const json& j : bad) {
    try {
      (void)j.get<RunInfo>();
      ADD_FAILURE() << j.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument) << j.dump();
    }
  }
  for (const char* s : {"running", "finished", "failed", "aborted"}) EXPECT_TRUE(IsValidStatus(s));
  EXPECT_FALSE(IsValidStatus("Running"));
  EXPECT_FALSE(IsValidStatus(""));
}

}  // namespace
}  // namespace kv0::tracking
