// kv0::tracking::RecordsStore on local directories: table names escaped into
// directories, appends and keyed reads (ids, chunked id lists, prefixes),
// versions and tags, hidden and deleted runs, optimize, Arrow streams and the
// migration of the single records.lance of earlier versions. Expected rows
// are computed here from what the test wrote.

#include "tracking/records.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kv0/error.h"
#include "kv0/tracking.h"
#include "lance/arrow.h"
#include "lance/dataset.h"
#include "test_util.h"
#include "tracking/schema.h"
#include "util/clock.h"

namespace kv0::tracking {

static void PrintTo(const Record& r, std::ostream* os) { *os << nlohmann::json(r).dump(); }

namespace {

using nlohmann::json;
using testing::TempDir;

Record Row(std::optional<std::string> run_id, std::string item_id, json data,
           int64_t created_at_us = 0) {
  Record r;
  r.run_id = std::move(run_id);
  r.item_id = std::move(item_id);
  r.data = std::move(data);
  r.created_at_us = created_at_us;
  return r;
}

// What a read should return: (run_id, item_id) -> data of the newest write.
using Expected = std::map<std::pair<std::optional<std::string>, std::string>, json>;

void ExpectRows(const std::vector<Record>& got, const Expected& expected) {
  ASSERT_EQ(got.size(), expected.size());
  size_t i = 0;
  for (const auto& [key, data] : expected) {
    EXPECT_EQ(got[i].run_id, key.first) << "row " << i;
    EXPECT_EQ(got[i].item_id, key.second) << "row " << i;
    EXPECT_EQ(got[i].data, data) << "row " << i;
    ++i;
  }
}

std::vector<std::string> ItemIds(const std::vector<Record>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r.item_id);
  return out;
}

// The code of the kv0::Error fn throws; nullopt if it throws none.
template <typename Fn>
std::optional<Code> CodeOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  return std::nullopt;
}

uint64_t Add(RecordsStore& store, const std::string& table, const std::vector<Record>& rows) {
  return store.Append(table, rows);
}

class RecordsTest : public ::testing::Test {
 protected:
  RecordsStore NewStore(std::string uri = "") {
    return RecordsStore(uri.empty() ? dir_.path().string() : uri, {}, &clock_,
                        std::chrono::seconds(3600));
  }
  uint64_t RawRows(RecordsStore& store, const std::string& table) {
    return lance::Dataset::Open(store.TableUri(table), {}).CountRows();
  }

  TempDir dir_;
  HybridClock clock_;
  RecordsStore store_ = NewStore();
  RecordsStore::Hidden none_;
};

// ---------------------------------------------------------------------------
// Names.

TEST(RecordNames, EscapeRoundTrip) {
  const std::string name = "dataset.foo/bar baz%\xC3\xA9";
  std::string dir = EscapeTableName(name);
  EXPECT_EQ(dir, "dataset%2Efoo%2Fbar%20baz%25%C3%A9");
  for (char c : dir) {
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '%')
        << dir;
  }
  EXPECT_EQ(UnescapeTableName(dir), name);
  EXPECT_EQ(UnescapeTableName(dir + ".lance"), name);
  EXPECT_EQ(UnescapeTableName("plain_Name-1"), "plain_Name-1");
  EXPECT_EQ(CodeOf([] { EscapeTableName(""); }), Code::kInvalidArgument);
  // Only what EscapeTableName produces is a table's directory.
  for (std::string bad : {"", ".lance", "a.b", "a%2e", "a%41", "%", "%4", "a%G0", "a b"}) {
    EXPECT_EQ(UnescapeTableName(bad), std::nullopt) << bad;
  }
}

TEST(RecordNames, DistinctNamesNeverShareADirectory) {
  std::vector<std::string> names = {"a.b",    "a%2Eb",   "a/b",     "a%2Fb",  "a_b", "a-b",
                                    "a b",    "a%20b",   "a+b",     "ab",     "a",   "A",
                                    ".",      "..",      "%",       "%25",    "%%",  "\xC3\xA9",
                                    "%C3%A9", "é.lance", "records", "x.lance"};
  std::mt19937 random(7);
  for (int i = 0; i < 2000; ++i) {
    std::string s(1 + random() % 6, ' ');
    for (char& c : s) c = "ab.%/ 2F_-\xC3\xA9"[random() % 12];
    names.push_back(s);
  }
  std::map<std::string, std::string> by_dir;
  for (const auto& n : names) {
    std::string dir = EscapeTableName(n);
    auto [it, inserted] = by_dir.emplace(dir, n);
    EXPECT_TRUE(inserted || it->second == n) << n << " and " << it->second << " -> " << dir;
    EXPECT_EQ(UnescapeTableName(dir), n);
  }
}

TEST(RecordNames, PrefixUpperBound) {
  EXPECT_EQ(PrefixUpperBound("tspan/t/"), "tspan/t0");
  EXPECT_EQ(PrefixUpperBound("abc"), "abd");
  EXPECT_EQ(PrefixUpperBound("a\xF4\x8F\xBF\xBF"), "b");  // a U+10FFFF
  EXPECT_EQ(PrefixUpperBound("\xF4\x8F\xBF\xBF\xF4\x8F\xBF\xBF"), std::nullopt);
  EXPECT_EQ(PrefixUpperBound("\xED\x9F\xBF"), "\xEE\x80\x80");  // U+D7FF -> U+E000
  EXPECT_EQ(PrefixUpperBound("\xC3\xA9"), "\xC3\xAA");          // é -> ê
  EXPECT_EQ(PrefixUpperBound("\x7F"), "\xC2\x80");
  EXPECT_EQ(PrefixUpperBound(""), std::nullopt);
}

TEST(RecordJson, RoundTrip) {
  Record r = Row("run", "item", {{"x", 1}, {"y", {1.5, "two", nullptr}}}, 123);
  r.seq = 42;
  json j = r;
  EXPECT_EQ(j.at("run_id"), "run");
  EXPECT_EQ(j.at("created_at_us"), 123);
  EXPECT_EQ(j.get<Record>(), r);
  Record no_run = Row(std::nullopt, "i", "text");
  json k = no_run;
  EXPECT_TRUE(k.at("run_id").is_null());
  EXPECT_EQ(k.get<Record>(), no_run);
  EXPECT_EQ(json({{"item_id", "i"}}).get<Record>(), Row(std::nullopt, "i", nullptr));
  EXPECT_EQ(CodeOf([] { json({{"run_id", "r"}}).get<Record>(); }), Code::kInvalidArgument);
  EXPECT_EQ(CodeOf([] {
              json({{"item_id", "i"}, {"seq", -1}}).get<Record>();
            }),
            Code::kInvalidArgument);
  EXPECT_EQ(CodeOf([] {
              json({{"item_id", "i"}, {"run_id", 3}}).get<Record>();
            }),
            Code::kInvalidArgument);
  EXPECT_EQ(CodeOf([] {
              json({{"item_id", "i"}, {"created_at_us", "x"}}).get<Record>();
            }),
            Code::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Appending and reading.

TEST_F(RecordsTest, AppendThenRead) {
  EXPECT_EQ(store_.Version("evals"), 0u);
  EXPECT_TRUE(store_.Read("evals", {}, none_).empty());
  EXPECT_TRUE(store_.Tables().empty());

  int64_t before_us = static_cast<int64_t>(WallNanos() / 1000);
  std::vector<Record> rows = {Row("r2", "b", {{"score", 0.5}}), Row("r1", "b", "text"),
                              Row(std::nullopt, "z", {1, 2, 3}), Row("r1", "a", nullptr, 777)};
  uint64_t v = Add(store_, "evals", rows);
  EXPECT_GT(v, 0u);
  EXPECT_EQ(store_.Version("evals"), v);
  EXPECT_EQ(store_.Tables(), std::vector<std::string>{"evals"});
  EXPECT_TRUE(std::filesystem::is_directory(dir_.path() / "records" / "evals.lance"));

  auto got = store_.Read("evals", {}, none_);
  ExpectRows(got, {{{std::nullopt, "z"}, json{1, 2, 3}},
                   {{"r1", "a"}, nullptr},
                   {{"r1", "b"}, "text"},
                   {{"r2", "b"}, {{"score", 0.5}}}});
  std::set<uint64_t> seqs;
  for (const auto& r : got) {
    seqs.insert(r.seq);
    EXPECT_GT(r.seq, 0u);
    if (r.item_id == "a") {
      EXPECT_EQ(r.created_at_us, 777);
    } else {
      EXPECT_GE(r.created_at_us, before_us);
    }
  }
  EXPECT_EQ(seqs.size(), 4u);

  // A single run or item, and the two combined.
  RecordQuery q;
  q.run_id = "r1";
  EXPECT_EQ(ItemIds(store_.Read("evals", q, none_)), (std::vector<std::string>{"a", "b"}));
  q.item_id = "b";
  ExpectRows(store_.Read("evals", q, none_), {{{"r1", "b"}, "text"}});
  RecordQuery by_item;
  by_item.item_id = "b";
  EXPECT_EQ(store_.Read("evals", by_item, none_).size(), 2u);

  // Nothing to append: the version stays, no table is created.
  EXPECT_EQ(Add(store_, "evals", {}), v);
  EXPECT_EQ(Add(store_, "nothing", {}), 0u);
  EXPECT_EQ(store_.Tables(), std::vector<std::string>{"evals"});
}

TEST_F(RecordsTest, InvalidAppendsWriteNothing) {
  std::vector<Record> rows = {Row("r", "ok", 1), Row("r", "", 2)};
  EXPECT_EQ(CodeOf([&] { Add(store_, "t", rows); }), Code::kInvalidArgument);
  EXPECT_EQ(CodeOf([&] { Add(store_, "", {Row("r", "x", 1)}); }), Code::kInvalidArgument);
  rows = {Row("r", "ok", 1), Row("r", "bad\xFF", 2)};
  EXPECT_EQ(CodeOf([&] { Add(store_, "t", rows); }), Code::kInvalidArgument);
  rows = {Row("r", "ok", std::string("bad\xFF"))};
  EXPECT_EQ(CodeOf([&] { Add(store_, "t", rows); }), Code::kInvalidArgument);
  EXPECT_EQ(CodeOf([&] { Add(store_, "bad\xFF", {Row("r", "x", 1)}); }), Code::kInvalidArgument);
  EXPECT_TRUE(store_.Tables().empty());
  EXPECT_EQ(store_.Version("t"), 0u);

  RecordQuery both;
  both.run_id = "a";
  both.run_ids = std::vector<std::string>{"b"};
  EXPECT_EQ(CodeOf([&] { store_.Read("t", both, none_); }), Code::kInvalidArgument);
  RecordQuery items;
  items.item_id = "a";
  items.item_prefix = "b";
  EXPECT_EQ(CodeOf([&] { store_.Read("t", items, none_); }), Code::kInvalidArgument);
}

TEST_F(RecordsTest, NewestRowOfAKeyWins) {
  Add(store_, "t", {Row("r1", "a", 1), Row("r1", "b", 1), Row(std::nullopt, "a", 1)});
  Add(store_, "t", {Row("r1", "a", 2)});
  // Within one append, the later row of a key wins too.
  Add(store_, "t", {Row(std::nullopt, "a", 2), Row(std::nullopt, "a", 3)});
  auto got = store_.Read("t", {}, none_);
  ExpectRows(got, {{{std::nullopt, "a"}, 3}, {{"r1", "a"}, 2}, {{"r1", "b"}, 1}});
  EXPECT_EQ(RawRows(store_, "t"), 6u);
  // Rows read order a later write after them, whatever its clock says.
  uint64_t max_seq = 0;
  for (const auto& r : got) max_seq = std::max(max_seq, r.seq);
  EXPECT_GT(clock_.Next(), max_seq);
}

TEST_F(RecordsTest, TracesByItemPrefix) {
  // One row per span, keyed tspan/<trace>/<span>, arriving in batches.
  std::map<std::string, json> trace;
  for (int batch = 0; batch < 3; ++batch) {
    std::vector<Record> rows;
    for (int s = 0; s < 4; ++s) {
      std::string id = "tspan/T/s" + std::to_string(batch * 4 + s);
      rows.push_back(Row("run", id, {{"batch", batch}}));
      trace[id] = {{"batch", batch}};
    }
    // Neighbours that share the prefix's characters but not the prefix.
    rows.push_back(Row("run", "tspan/T0/x" + std::to_string(batch), 0));
    rows.push_back(Row("run", "tspan/T" + std::to_string(batch), 0));
    rows.push_back(Row("run", "tspan/U/s" + std::to_string(batch), 0));
    rows.push_back(Row("other", "tspan/T/other" + std::to_string(batch), 0));
    Add(store_, "traces", rows);
  }
  // A span sent again replaces its own row.
  Add(store_, "traces", {Row("run", "tspan/T/s5", "resent")});
  trace["tspan/T/s5"] = "resent";

  RecordQuery q;
  q.run_id = "run";
  q.item_prefix = "tspan/T/";
  Expected expected;
  for (const auto& [id, data] : trace) expected[{"run", id}] = data;
  ExpectRows(store_.Read("traces", q, none_), expected);

  // Without the run: the other run's spans of the trace too.
  q.run_id.reset();
  auto all = store_.Read("traces", q, none_);
  EXPECT_EQ(all.size(), trace.size() + 3);
  for (const auto& r : all) EXPECT_TRUE(r.item_id.starts_with("tspan/T/")) << r.item_id;

  // An empty prefix selects everything; a prefix with no match nothing.
  q.item_prefix = "";
  EXPECT_EQ(store_.Read("traces", q, none_).size(), store_.Read("traces", {}, none_).size());
  q.item_prefix = "tspan/V/";
  EXPECT_TRUE(store_.Read("traces", q, none_).empty());
  // The prefix goes into SQL quoted.
  Add(store_, "traces", {Row("run", "it's/1", 1), Row("run", "it's/2", 2)});
  q.item_prefix = "it's/";
  EXPECT_EQ(store_.Read("traces", q, none_).size(), 2u);
}

TEST_F(RecordsTest, ManyItemIdsAndRunIds) {
  std::vector<Record> rows;
  for (int i = 0; i < 1200; ++i) {
    rows.push_back(Row("run" + std::to_string(i % 1100), "item" + std::to_string(i), i));
  }
  Add(store_, "big", rows);

  // 1200 ids, 3 chunks; plus unknown and repeated ids.
  RecordQuery q;
  q.item_ids.emplace();
  Expected expected;
  for (int i = 0; i < 1200; i += 1) {
    q.item_ids->push_back("item" + std::to_string(i));
    if (i % 2 == 0) q.item_ids->push_back("item" + std::to_string(i));  // repeated
    expected[{"run" + std::to_string(i % 1100), "item" + std::to_string(i)}] = i;
  }
  q.item_ids->push_back("missing");
  ExpectRows(store_.Read("big", q, none_), expected);

  // A subset of the runs, across chunks.
  RecordQuery runs;
  runs.run_ids.emplace();
  Expected by_run;
  for (int r = 0; r < 1100; r += 2) {
    runs.run_ids->push_back("run" + std::to_string(r));
    by_run[{"run" + std::to_string(r), "item" + std::to_string(r)}] = r;
    if (r < 100) by_run[{"run" + std::to_string(r), "item" + std::to_string(r + 1100)}] = r + 1100;
  }
  ExpectRows(store_.Read("big", runs, none_), by_run);

  // Runs and items combined: chunks of both.
  runs.item_ids = q.item_ids;
  ExpectRows(store_.Read("big", runs, none_), by_run);
  runs.item_ids = std::vector<std::string>{"item0", "item1", "item1100", "item1102"};
  ExpectRows(store_.Read("big", runs, none_),
             {{{"run0", "item0"}, 0}, {{"run0", "item1100"}, 1100}, {{"run2", "item1102"}, 1102}});

  // Run ids and a prefix.
  RecordQuery prefix;
  prefix.run_ids = std::vector<std::string>{"run1", "run5"};
  prefix.item_prefix = "item11";
  ExpectRows(store_.Read("big", prefix, none_),
             {{{"run1", "item1101"}, 1101}, {{"run5", "item1105"}, 1105}});

  // Empty lists select nothing.
  RecordQuery empty;
  empty.item_ids.emplace();
  EXPECT_TRUE(store_.Read("big", empty, none_).empty());
  empty.item_ids.reset();
  empty.run_ids.emplace();
  EXPECT_TRUE(store_.Read("big", empty, none_).empty());
}

TEST_F(RecordsTest, HiddenRunsAreSkipped) {
  Add(store_, "t", {Row("keep", "a", 1), Row("gone", "a", 2), Row(std::nullopt, "a", 3)});
  int calls = 0;
  auto hidden = [&](const std::string& run) {
    ++calls;
    return run == "gone";
  };
  ExpectRows(store_.Read("t", {}, hidden), {{{std::nullopt, "a"}, 3}, {{"keep", "a"}, 1}});
  EXPECT_EQ(calls, 2);  // once per run, never for rows without one
}

TEST_F(RecordsTest, VersionsAndMissingTables) {
  uint64_t v1 = Add(store_, "t", {Row("r", "a", 1), Row("r", "b", 1)});
  uint64_t v2 = Add(store_, "t", {Row("r", "a", 2), Row("r", "c", 2)});
  EXPECT_GT(v2, v1);
  RecordQuery at1;
  at1.version = v1;
  ExpectRows(store_.Read("t", at1, none_), {{{"r", "a"}, 1}, {{"r", "b"}, 1}});
  ExpectRows(store_.Read("t", {}, none_), {{{"r", "a"}, 2}, {{"r", "b"}, 1}, {{"r", "c"}, 2}});
  at1.item_id = "a";
  ExpectRows(store_.Read("t", at1, none_), {{{"r", "a"}, 1}});

  RecordQuery missing_version;
  missing_version.version = v2 + 100;
  EXPECT_EQ(CodeOf([&] { store_.Read("t", missing_version, none_); }), Code::kNotFound);
  RecordQuery missing_tag;
  missing_tag.tag = "nope";
  EXPECT_EQ(CodeOf([&] { store_.Read("t", missing_tag, none_); }), Code::kNotFound);
  RecordQuery both;
  both.version = v1;
  both.tag = "x";
  EXPECT_EQ(CodeOf([&] { store_.Read("t", both, none_); }), Code::kInvalidArgument);

  // A table that does not exist: no rows, version 0, but its versions and
  // tags do not exist either.
  EXPECT_TRUE(store_.Read("other", {}, none_).empty());
  EXPECT_EQ(store_.Version("other"), 0u);
  EXPECT_EQ(CodeOf([&] { store_.Read("other", at1, none_); }), Code::kNotFound);
  EXPECT_EQ(CodeOf([&] { store_.Read("other", missing_tag, none_); }), Code::kNotFound);
  EXPECT_EQ(CodeOf([&] { store_.Tags("other"); }), Code::kNotFound);
  EXPECT_EQ(CodeOf([&] { store_.CreateTag("other", "x"); }), Code::kNotFound);
}

TEST_F(RecordsTest, TagsKeepOneTablesRows) {
  const std::string table = "dataset.foo/bar baz%\xC3\xA9";
  Add(store_, table, {Row(std::nullopt, "q1", "first"), Row(std::nullopt, "q2", "first")});
  uint64_t tagged = Add(store_, table, {Row(std::nullopt, "q3", "first")});
  auto at_tag = store_.Read(table, {}, none_);
  store_.CreateTag(table, "v1");  // the latest
  Add(store_, "other", {Row(std::nullopt, "x", 1)});
  store_.CreateTag("other", "o1");
  EXPECT_EQ(store_.Tags(table), (std::map<std::string, uint64_t>{{"v1", tagged}}));
  EXPECT_EQ(store_.Tags("other").count("v1"), 0u);
  EXPECT_EQ(store_.Tags(table).count("o1"), 0u);

  for (int i = 0; i < 3; ++i) {
    Add(store_, table, {Row(std::nullopt, "q1", i), Row(std::nullopt, "q4", i)});
  }
  store_.Optimize(none_);
  lance::Dataset::Open(store_.TableUri(table), {}).CleanupOldVersions(std::chrono::seconds(0));
  store_.Optimize(none_);

  RecordQuery q;
  q.tag = "v1";
  EXPECT_EQ(store_.Read(table, q, none_), at_tag);
  q.tag = "o1";
  EXPECT_EQ(CodeOf([&] { store_.Read(table, q, none_); }), Code::kNotFound);
  ExpectRows(store_.Read(table, {}, none_), {{{std::nullopt, "q1"}, 2},
                                             {{std::nullopt, "q2"}, "first"},
                                             {{std::nullopt, "q3"}, "first"},
                                             {{std::nullopt, "q4"}, 2}});

  // Tags at an explicit version, and deleted.
  store_.CreateTag(table, "old", tagged);
  EXPECT_EQ(store_.Tags(table).at("old"), tagged);
  store_.DeleteTag(table, "old");
  store_.DeleteTag(table, "v1");
  EXPECT_TRUE(store_.Tags(table).empty());
  EXPECT_EQ(CodeOf([&] { store_.DeleteTag(table, "v1"); }), Code::kNotFound);
  // Lance stages local tag files in a directory with '%' escaped again; it
  // is removed, and would not be listed as a table anyway.
  EXPECT_EQ(store_.Tables(), (std::vector<std::string>{table, "other"}));
  size_t dirs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path() / "records")) {
    EXPECT_TRUE(entry.path().filename() == "other.lance" ||
                entry.path().filename() == EscapeTableName(table) + ".lance")
        << entry.path().filename();
    ++dirs;
  }
  EXPECT_EQ(dirs, 2u);
  std::filesystem::create_directories(dir_.path() / "records" / "a%252Eb.lance" / "_refs" / "tags");
  EXPECT_EQ(store_.Tables(), (std::vector<std::string>{table, "other"}));
  Add(store_, "a%2Eb", {Row("r", "k", 1)});  // that directory's table, now a dataset
  EXPECT_EQ(store_.Tables(), (std::vector<std::string>{"a%2Eb", table, "other"}));
}

TEST_F(RecordsTest, EscapedNamesAreSeparateTables) {
  std::vector<std::string> names = {"a.b", "a%2Eb", "a/b", "a b", "\xC3\xA9", "%"};
  for (size_t i = 0; i < names.size(); ++i) Add(store_, names[i], {Row("r", "k", int(i))});
  auto tables = store_.Tables();
  auto sorted = names;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(tables, sorted);
  for (size_t i = 0; i < names.size(); ++i) {
    ExpectRows(store_.Read(names[i], {}, none_), {{{"r", "k"}, int(i)}});
  }
  // Every table is one directory right under records/.
  size_t dirs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path() / "records")) {
    EXPECT_TRUE(entry.is_directory());
    ++dirs;
  }
  EXPECT_EQ(dirs, names.size());
}

TEST_F(RecordsTest, FileUrisKeepEscapedNames) {
  // In a URI Lance decodes %XX once; the store compensates, so the directory
  // is the escaped name exactly, as with a plain path.
  RecordsStore store = NewStore("file://" + dir_.path().string());
  const std::string table = "a/b %c";
  Add(store, table, {Row("r", "k", 1)});
  EXPECT_TRUE(
      std::filesystem::is_directory(dir_.path() / "records" / (EscapeTableName(table) + ".lance")));
  EXPECT_EQ(store.Tables(), std::vector<std::string>{table});
  ExpectRows(store.Read(table, {}, none_), {{{"r", "k"}, 1}});
  ExpectRows(store_.Read(table, {}, none_), {{{"r", "k"}, 1}});  // the same table by path
  store.CreateTag(table, "t");
  EXPECT_EQ(store.Tags(table).size(), 1u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_.path() / "records"),
                          std::filesystem::directory_iterator()),
            1);
}

TEST_F(RecordsTest, ReadStreamHasTheSchema) {
  Add(store_, "s",
      {Row("r", "b", {{"k", 1}}, 5), Row(std::nullopt, "a", "x", 6), Row("r", "b", 2, 7)});
  RecordQuery q;
  ArrowArrayStream raw{};
  store_.ReadStream("s", q, none_, &raw);
  arrow::StreamReader reader{arrow::OwnedStream(&raw)};
  const ArrowSchema& schema = *reader.schema()->get();
  const auto& expected = RecordsSchema();
  ASSERT_EQ(schema.n_children, static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(std::string(schema.children[i]->name), expected[i].name);
  }
  EXPECT_EQ(std::string(schema.children[5]->format), "tsu:UTC");
  std::vector<std::tuple<std::optional<std::string>, std::string, std::string, int64_t>> rows;
  while (auto batch = reader.Next()) {
    arrow::Utf8Column table(*batch, "table_name"), run(*batch, "run_id"), item(*batch, "item_id"),
        data(*batch, "data");
    arrow::TimestampColumn created(*batch, "created_at");
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      EXPECT_EQ(table.value(i), "s");
      rows.emplace_back(run.is_null(i) ? std::nullopt : std::optional<std::string>(run.value(i)),
                        std::string(item.value(i)), std::string(data.value(i)), created.value(i));
    }
  }
  using R = decltype(rows)::value_type;
  EXPECT_EQ(rows, (std::vector<R>{R{std::nullopt, "a", "\"x\"", 6}, R{"r", "b", "2", 7}}));

  // Hidden runs are left out; an absent table streams no rows.
  ArrowArrayStream hidden_stream{};
  store_.ReadStream(
      "s", q, [](const std::string& r) { return r == "r"; }, &hidden_stream);
  arrow::StreamReader hidden_reader{arrow::OwnedStream(&hidden_stream)};
  int64_t n = 0;
  while (auto batch = hidden_reader.Next()) n += batch->num_rows();
  EXPECT_EQ(n, 1);
  ArrowArrayStream none{};
  store_.ReadStream("absent", q, none_, &none);
  arrow::StreamReader none_reader{arrow::OwnedStream(&none)};
  EXPECT_FALSE(none_reader.Next().has_value());
}

TEST_F(RecordsTest, DeleteRunRows) {
  Add(store_, "t1", {Row("a", "x", 1), Row("b", "x", 1), Row(std::nullopt, "x", 1)});
  Add(store_, "t2", {Row("a", "y", 1), Row("a", "z", 1)});
  uint64_t v3 = Add(store_, "t3", {Row("c", "y", 1)});
  std::vector<std::string> runs = {"a", "unknown"};
  store_.DeleteRunRows(runs);
  ExpectRows(store_.Read("t1", {}, none_), {{{std::nullopt, "x"}, 1}, {{"b", "x"}, 1}});
  EXPECT_TRUE(store_.Read("t2", {}, none_).empty());
  EXPECT_EQ(store_.Version("t3"), v3);  // no matching rows: no commit
  EXPECT_EQ(RawRows(store_, "t1"), 2u);

  // Many runs: several chunks.
  std::vector<Record> rows;
  std::vector<std::string> many;
  for (int i = 0; i < 1100; ++i) {
    rows.push_back(Row("m" + std::to_string(i), "k", i));
    if (i % 3 != 0) many.push_back("m" + std::to_string(i));
  }
  Add(store_, "t4", rows);
  store_.DeleteRunRows(many);
  auto left = store_.Read("t4", {}, none_);
  EXPECT_EQ(left.size(), 367u);
  for (const auto& r : left) EXPECT_EQ(std::stoi(r.run_id->substr(1)) % 3, 0);
}

TEST_F(RecordsTest, OptimizeFoldsAndIndexes) {
  Expected expected;
  for (int round = 0; round < 4; ++round) {
    std::vector<Record> rows;
    for (int k = 0; k < 50; ++k) {
      std::string run = "r" + std::to_string(k % 5);
      rows.push_back(Row(run, "item" + std::to_string(k), round));
      expected[{run, "item" + std::to_string(k)}] = round;
    }
    Add(store_, "t", rows);
  }
  Add(store_, "t", {Row("hidden", "h", 1)});
  EXPECT_EQ(RawRows(store_, "t"), 201u);
  auto hidden = [](const std::string& run) { return run == "hidden"; };
  auto before = store_.Read("t", {}, hidden);
  ExpectRows(before, expected);

  store_.Optimize(hidden);
  EXPECT_EQ(RawRows(store_, "t"), 50u);
  EXPECT_EQ(store_.Read("t", {}, hidden), before);
  EXPECT_EQ(store_.Read("t", {}, none_), before);  // the hidden run's rows are gone
  auto indices = lance::Dataset::Open(store_.TableUri("t"), {}).Indices();
  EXPECT_EQ(indices.at("item_id_idx"), "item_id");
  EXPECT_EQ(indices.at("run_id_idx"), "run_id");
  EXPECT_EQ(lance::Dataset::Open(store_.TableUri("t"), {}).Fragments().size(), 1u);

  // Again with nothing new: no commit at all.
  uint64_t version = store_.Version("t");
  store_.Optimize(hidden);
  EXPECT_EQ(store_.Version("t"), version);

  // Reads through the indices, including rows appended after them.
  Add(store_, "t", {Row("r1", "item1", "new"), Row("r9", "item_new", "new")});
  expected[{"r1", "item1"}] = "new";
  expected[{"r9", "item_new"}] = "new";
  RecordQuery q;
  q.run_ids = std::vector<std::string>{"r1", "r9"};
  q.item_prefix = "item1";
  Expected want;
  for (const auto& [key, data] : expected) {
    if ((key.first == "r1" || key.first == "r9") && key.second.starts_with("item1")) {
      want[key] = data;
    }
  }
  ExpectRows(store_.Read("t", q, none_), want);
  store_.Optimize(hidden);
  EXPECT_EQ(RawRows(store_, "t"), 51u);
  ExpectRows(store_.Read("t", q, none_), want);
  ExpectRows(store_.Read("t", {}, none_), expected);

  // Deleted rows are materialised by the next optimize.
  std::vector<std::string> r0 = {"r0"};
  store_.DeleteRunRows(r0);
  store_.Optimize(hidden);
  auto fragments = lance::Dataset::Open(store_.TableUri("t"), {}).Fragments();
  ASSERT_EQ(fragments.size(), 1u);
  EXPECT_EQ(fragments[0].deleted_rows, 0u);
  EXPECT_EQ(RawRows(store_, "t"), 41u);

  // Every row deleted, then new rows: the one new fragment is indexed too
  // (a second optimize changes nothing).
  store_.Optimize([](const std::string&) { return true; });
  Add(store_, "t", {Row("late", "item_late", 1)});
  store_.Optimize(hidden);
  version = store_.Version("t");
  store_.Optimize(hidden);
  EXPECT_EQ(store_.Version("t"), version);
  RecordQuery late;
  late.run_id = "late";
  ExpectRows(store_.Read("t", late, none_), {{{"late", "item_late"}, 1}});

  // Every row hidden: the table is emptied, not dropped.
  store_.Optimize([](const std::string&) { return true; });
  RecordQuery only_runs;
  EXPECT_EQ(store_.Read("t", only_runs, none_).size(), 0u);
  EXPECT_EQ(store_.Tables(), std::vector<std::string>{"t"});
}

TEST_F(RecordsTest, ConcurrentFirstAppends) {
  // Writers racing to create one table all succeed, and no row is lost.
  RecordsStore other = NewStore();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      RecordsStore& store = t % 2 ? other : store_;
      Add(store, "race", {Row("w" + std::to_string(t), "k", t)});
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(store_.Read("race", {}, none_).size(), 4u);
}

TEST_F(RecordsTest, MigratesTheLegacyTable) {
  EXPECT_FALSE(store_.HasLegacy());
  store_.MigrateLegacy();  // nothing to do
  EXPECT_TRUE(store_.Tables().empty());

  // records.lance as earlier versions wrote it: every table's rows together.
  std::string legacy_uri = dir_ / "records.lance";
  auto legacy = lance::Dataset::Create(legacy_uri, {}, RecordsSchema());
  arrow::BatchBuilder b(RecordsSchema());
  struct Old {
    uint64_t seq;
    std::string table;
    std::optional<std::string> run;
    std::string item;
    std::string data;
    int64_t created;
  };
  std::vector<Old> old = {{10, "evals", "r1", "a", "1", 100},
                          {11, "dataset.x", std::nullopt, "q1", "{\"in\":\"hi\"}", 101},
                          {12, "evals", "r1", "a", "2", 102},
                          {13, "evals", "r2", "a", "3", 103},
                          {14, "dataset.x", std::nullopt, "q2", "[1]", 104}};
  for (const auto& o : old) {
    b.uint64(0).Append(o.seq);
    b.utf8(1).Append(o.table);
    if (o.run) {
      b.utf8(2).Append(*o.run);
    } else {
      b.utf8(2).AppendNull();
    }
    b.utf8(3).Append(o.item);
    b.utf8(4).Append(o.data);
    b.timestamp(5).Append(o.created);
  }
  std::vector<arrow::OwnedArray> batches(1);
  b.Finish(batches[0].get());
  arrow::OwnedStream stream;
  arrow::MakeStream(RecordsSchema(), std::move(batches), &stream);
  legacy.Append(std::move(stream));

  EXPECT_TRUE(store_.HasLegacy());
  store_.MigrateLegacy();
  EXPECT_EQ(store_.Tables(), (std::vector<std::string>{"dataset.x", "evals"}));
  auto evals = store_.Read("evals", {}, none_);
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0], (Record{12, "r1", "a", 2, 102}));
  EXPECT_EQ(evals[1], (Record{13, "r2", "a", 3, 103}));
  auto dataset = store_.Read("dataset.x", {}, none_);
  ASSERT_EQ(dataset.size(), 2u);
  EXPECT_EQ(dataset[0], (Record{11, std::nullopt, "q1", {{"in", "hi"}}, 101}));
  EXPECT_EQ(dataset[1], (Record{14, std::nullopt, "q2", {1}, 104}));
  EXPECT_EQ(RawRows(store_, "evals"), 3u);
  // Later writes order after the migrated rows.
  EXPECT_GT(clock_.Next(), 14u);

  // Marked: a second migration adds nothing; records.lance stays.
  uint64_t version = store_.Version("evals");
  store_.MigrateLegacy();
  EXPECT_EQ(RawRows(store_, "evals"), 3u);
  EXPECT_EQ(RawRows(store_, "dataset.x"), 2u);
  EXPECT_EQ(store_.Version("evals"), version);
  EXPECT_TRUE(store_.HasLegacy());
  EXPECT_EQ(lance::Dataset::Open(legacy_uri, {}).CountRows(), 5u);
  EXPECT_EQ(lance::Dataset::Open(legacy_uri, {}).Metadata().at("kv0.migrated"), "1");

  // Interrupted before the mark: running again only duplicates rows, which
  // reads and optimize fold.
  lance::Dataset::Open(legacy_uri, {}).UpdateMetadata({{"kv0.migrated", std::nullopt}});
  store_.MigrateLegacy();
  EXPECT_EQ(RawRows(store_, "evals"), 6u);
  EXPECT_EQ(store_.Read("evals", {}, none_), evals);
  store_.Optimize(none_);
  EXPECT_EQ(RawRows(store_, "evals"), 2u);
  EXPECT_EQ(store_.Read("evals", {}, none_), evals);

  // Deleting a run reaches the kept records.lance too.
  std::vector<std::string> r1 = {"r1"};
  store_.DeleteRunRows(r1);
  EXPECT_EQ(lance::Dataset::Open(legacy_uri, {}).CountRows(), 3u);
  EXPECT_EQ(store_.LegacyUri(), legacy_uri);
  ExpectRows(store_.Read("evals", {}, none_), {{{"r2", "a"}, 3}});
}

}  // namespace
}  // namespace kv0::tracking
