// Tests of flattening run parameters into rows and rebuilding them.

#include "tracking/params.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kv0/error.h"

namespace kv0::tracking {
namespace {

using nlohmann::json;

std::vector<std::string> Keys(const std::vector<ParamRow>& rows) {
  std::vector<std::string> keys;
  for (const ParamRow& row : rows) keys.push_back(row.key);
  return keys;
}

// The rows as read back from storage, all with one seq.
std::vector<Leaf> AsLeaves(const std::vector<ParamRow>& rows, uint64_t seq) {
  std::vector<Leaf> leaves;
  for (const ParamRow& row : rows) leaves.push_back({row.key, json::parse(row.value_json), seq});
  return leaves;
}

json RoundTrip(const json& params) { return Unflatten(AsLeaves(Flatten(params), 1)); }

// Calls `fn` and returns the kv0::Error it throws; fails if it throws none.
template <typename Fn>
Error ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no kv0::Error thrown";
  return Error(Code::kNotFound, "none");
}

TEST(FlattenTest, NestedObjectsBecomeDottedKeys) {
  json params = {{"optimizer", {{"lr", 0.001}, {"betas", {0.9, 0.999}}, {"name", "adam"}}},
                 {"model", {{"layers", {{"hidden", 512}}}}},
                 {"epochs", 10}};
  std::vector<ParamRow> rows = Flatten(params);
  EXPECT_EQ(Keys(rows),
            (std::vector<std::string>{"epochs", "model.layers.hidden", "optimizer.betas",
                                      "optimizer.lr", "optimizer.name"}));
  EXPECT_EQ(rows[2].value_json, "[0.9,0.999]");
  EXPECT_EQ(rows[3].value_json, "0.001");
  EXPECT_EQ(rows[3].num, 0.001);
  EXPECT_EQ(rows[4].value_json, "\"adam\"");
  EXPECT_EQ(rows[4].text, "adam");
}

TEST(FlattenTest, TypedColumnsForEachScalar) {
  json params = {{"int", -7},
                 {"big", std::numeric_limits<uint64_t>::max()},
                 {"float", 2.5},
                 {"whole_float", 3.0},
                 {"yes", true},
                 {"no", false},
                 {"str", "text"},
                 {"empty_str", ""},
                 {"nothing", nullptr},
                 {"list", {1, "two", nullptr, {{"k.with.dot", 1}}}},
                 {"empty_list", json::array()},
                 {"empty_obj", json::object()}};
  std::map<std::string, ParamRow> by_key;
  for (ParamRow& row : Flatten(params)) by_key[row.key] = row;
  ASSERT_EQ(by_key.size(), params.size());

  auto expect = [&](const std::string& key, const std::string& text, std::optional<double> num,
                    std::optional<std::string> str, std::optional<bool> flag) {
    SCOPED_TRACE(key);
    const ParamRow& row = by_key.at(key);
    EXPECT_EQ(row.value_json, text);
    EXPECT_EQ(row.num, num);
    EXPECT_EQ(row.text, str);
    EXPECT_EQ(row.flag, flag);
  };
  expect("int", "-7", -7.0, std::nullopt, std::nullopt);
  expect("big", "18446744073709551615", 18446744073709551615.0, std::nullopt, std::nullopt);
  expect("float", "2.5", 2.5, std::nullopt, std::nullopt);
  expect("whole_float", "3.0", 3.0, std::nullopt, std::nullopt);
  expect("yes", "true", std::nullopt, std::nullopt, true);
  expect("no", "false", std::nullopt, std::nullopt, false);
  expect("str", "\"text\"", std::nullopt, "text", std::nullopt);
  expect("empty_str", "\"\"", std::nullopt, "", std::nullopt);
  expect("nothing", "null", std::nullopt, std::nullopt, std::nullopt);
  // Arrays are leaves whole; objects inside them are not flattened.
  expect("list", "[1,\"two\",null,{\"k.with.dot\":1}]", std::nullopt, std::nullopt, std::nullopt);
  expect("empty_list", "[]", std::nullopt, std::nullopt, std::nullopt);
  expect("empty_obj", "{}", std::nullopt, std::nullopt, std::nullopt);
}

TEST(FlattenTest, EmptyObjectsAreLeaves) {
  EXPECT_TRUE(Flatten(json::object()).empty());
  std::vector<ParamRow> rows = Flatten({{"a", {{"b", json::object()}, {"c", 1}}}});
  EXPECT_EQ(Keys(rows), (std::vector<std::string>{"a.b", "a.c"}));
  EXPECT_EQ(rows[0].value_json, "{}");
  EXPECT_EQ(RoundTrip({{"a", {{"b", json::object()}}}}), json({{"a", {{"b", json::object()}}}}));
}

TEST(FlattenTest, SortedByWholeKey) {
  // Per level "a" < "a-b" < "a0", but '-' < '.' < '0' byte-wise.
  json params = {{"a0", 3}, {"a", {{"c", 1}, {"B", 0}}}, {"a-b", 2}, {"Z", 4}};
  EXPECT_EQ(Keys(Flatten(params)), (std::vector<std::string>{"Z", "a-b", "a.B", "a.c", "a0"}));
}

TEST(FlattenTest, UnicodeKeysAndValues) {
  json params = {{"学习", {{"率", 0.01}}}, {"émoji", "🙂 naïve"}, {"ключ", {"α", "β"}}};
  std::vector<ParamRow> rows = Flatten(params);
  // Byte-wise: é (C3 A9) < к (D0 BA) < 学 (E5 AD A6).
  EXPECT_EQ(Keys(rows), (std::vector<std::string>{"émoji", "ключ", "学习.率"}));
  EXPECT_EQ(rows[0].value_json, "\"🙂 naïve\"");
  EXPECT_EQ(rows[0].text, "🙂 naïve");
  EXPECT_EQ(rows[1].value_json, "[\"α\",\"β\"]");
  EXPECT_EQ(RoundTrip(params), params);
}

TEST(FlattenTest, RejectsAmbiguousAndUnwritable) {
  struct Case {
    json params;
    std::string in_message;
  };
  std::vector<Case> cases = {
      {{{"a.b", 1}}, "[\"a.b\"]"},
      {{{"", 1}}, "[\"\"]"},
      {{{"opt", {{"lr.x", 1}}}}, "[\"opt\",\"lr.x\"]"},
      {{{"opt", {{"", {{"x", 1}}}}}}, "[\"opt\",\"\"]"},
      {{{".", json::object()}}, "[\".\"]"},
      {{{"x", {{"nan", std::nan("")}}}}, "[\"x\",\"nan\"]"},
      {{{"inf", std::numeric_limits<double>::infinity()}}, "[\"inf\"]"},
      {{{"list", {1.0, -std::numeric_limits<double>::infinity()}}}, "[\"list\"]"},
      {{{"bin", json::binary({1, 2, 3})}}, "[\"bin\"]"},
      {{{"bad", std::string("\xff\xfe")}}, "[\"bad\"]"},
      {{{"deep", {std::string("ok \xc3")}}}, "[\"deep\"]"},
      {{{std::string("k\xc0\xaf"), 1}}, "[\"k"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.params.dump(-1, ' ', false, json::error_handler_t::replace));
    Error e = ErrorOf([&] { Flatten(c.params); });
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(c.in_message), std::string::npos) << e.what();
  }
}

// Names are checked without a JSON round trip, by the same strict rule as
// the string columns they end up in.
TEST(FlattenTest, NamesAreStrictUtf8) {
  EXPECT_EQ(Flatten({{"pl\xc3\xa9in \xf0\x9f\x99\x82", 1}}).size(), 1u);
  for (std::string bad :
       {"\xff", "\xc3", "\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xe2\x82"}) {
    SCOPED_TRACE(json(bad).dump(-1, ' ', false, json::error_handler_t::replace));
    Error e = ErrorOf([&] { Flatten({{"outer", {{bad, 1}}}}); });
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
  }
}

TEST(FlattenTest, RejectsNonObjects) {
  for (const json& params : {json(1), json("x"), json::array({1}), json(nullptr), json(true),
                             json(1.5), json::array()}) {
    SCOPED_TRACE(params.dump());
    EXPECT_EQ(ErrorOf([&] { Flatten(params); }).code(), Code::kInvalidArgument);
  }
}

TEST(UnflattenTest, RoundTripsManyShapes) {
  std::vector<json> shapes = {
      json::object(),
      {{"a", 1}},
      {{"a", {{"b", {{"c", {{"d", "deep"}}}}}}}},
      {{"a", {{"b", 1}, {"c", json::object()}}}, {"d", {1, {{"x", {{"y", 2}}}}}}},
      {{"n", nullptr}, {"t", true}, {"f", false}, {"s", ""}, {"z", 0}, {"neg", -1.25e-300}},
      {{"arr", {{1, 2}, {3}, json::array()}}, {"obj_in_arr", {{{"a.b", 1}}}}},
      {{"x", {{"y", json::object()}}}, {"x-y", 2}, {"x0", {{"1", 1}}}},
      {{"big", std::numeric_limits<int64_t>::min()}, {"u", std::numeric_limits<uint64_t>::max()}},
  };
  for (const json& shape : shapes) {
    SCOPED_TRACE(shape.dump());
    EXPECT_EQ(RoundTrip(shape), shape);
  }
  EXPECT_EQ(Unflatten({}), json::object());
}

TEST(UnflattenTest, HighestSeqWinsPerKey) {
  json expected = {{"lr", 0.3}};
  std::vector<Leaf> leaves = {{"lr", 0.1, 5}, {"lr", 0.3, 9}, {"lr", 0.2, 7}};
  do {
    EXPECT_EQ(Unflatten(leaves), expected);
  } while (std::next_permutation(leaves.begin(), leaves.end(),
                                 [](const Leaf& x, const Leaf& y) { return x.seq < y.seq; }));
}

TEST(UnflattenTest, EqualSeqOnOneKeyDoesNotDependOnOrder) {
  json first = Unflatten({{"k", "a", 3}, {"k", "b", 3}});
  json second = Unflatten({{"k", "b", 3}, {"k", "a", 3}});
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, json({{"k", "b"}}));
}

TEST(UnflattenTest, ObjectAfterScalarReplacesIt) {
  // set a=1, then a={"b":2,"c":3}
  std::vector<Leaf> leaves = {{"a", 1, 1}, {"a.b", 2, 2}, {"a.c", 3, 2}, {"z", true, 1}};
  EXPECT_EQ(Unflatten(leaves), json({{"a", {{"b", 2}, {"c", 3}}}, {"z", true}}));
}

TEST(UnflattenTest, ScalarAfterObjectHidesIt) {
  // set a={"b":2,"c":{"d":3}}, then a=[1]
  std::vector<Leaf> leaves = {{"a.b", 2, 1}, {"a.c.d", 3, 1}, {"a", {1}, 2}, {"ab", 0, 1}};
  EXPECT_EQ(Unflatten(leaves), json({{"a", {1}}, {"ab", 0}}));
}

TEST(UnflattenTest, SiblingsOfNewerWritesAreKept) {
  // set {"opt":{"lr":1,"m":0.9}}, then {"opt":{"lr":2}}, then {"opt":{"wd":{"x":1}}}
  std::vector<Leaf> leaves = {
      {"opt.lr", 1, 1}, {"opt.m", 0.9, 1}, {"opt.lr", 2, 2}, {"opt.wd.x", 1, 3}};
  EXPECT_EQ(Unflatten(leaves), json({{"opt", {{"lr", 2}, {"m", 0.9}, {"wd", {{"x", 1}}}}}}));
}

TEST(UnflattenTest, AlternatingStructure) {
  // a.b=1 @1; a=5 @2; a.c=2 @3: the scalar hid a.b, then a.c replaced the scalar.
  std::vector<Leaf> leaves = {{"a.b", 1, 1}, {"a", 5, 2}, {"a.c", 2, 3}};
  EXPECT_EQ(Unflatten(leaves), json({{"a", {{"c", 2}}}}));
  // a=5 @1; a.b.c=1 @2; a.b=7 @3: the middle level wins over both.
  leaves = {{"a", 5, 1}, {"a.b.c", 1, 2}, {"a.b", 7, 3}};
  EXPECT_EQ(Unflatten(leaves), json({{"a", {{"b", 7}}}}));
}

TEST(UnflattenTest, EmptyObjectWriteClearsSubtreeEvenAfterFolding) {
  // a.b=1 @1; a=5 @2; a={} @3. Storage may have folded a=5 away.
  json expected = {{"a", json::object()}};
  EXPECT_EQ(Unflatten({{"a.b", 1, 1}, {"a", 5, 2}, {"a", json::object(), 3}}), expected);
  EXPECT_EQ(Unflatten({{"a.b", 1, 1}, {"a", json::object(), 3}}), expected);
  // A newer a.b after the empty object fills it again.
  EXPECT_EQ(Unflatten({{"a", json::object(), 3}, {"a.b", 2, 4}}), json({{"a", {{"b", 2}}}}));
}

TEST(UnflattenTest, DeeperLeafWinsATie) {
  EXPECT_EQ(Unflatten({{"a", 1, 4}, {"a.b", 2, 4}}), json({{"a", {{"b", 2}}}}));
  EXPECT_EQ(Unflatten({{"a.b", 2, 4}, {"a", 1, 4}}), json({{"a", {{"b", 2}}}}));
}

TEST(UnflattenTest, RejectsEmptySegments) {
  for (const char* key : {"", ".", ".a", "a.", "a..b"}) {
    SCOPED_TRACE(key);
    EXPECT_EQ(ErrorOf([&] { Unflatten({{key, 1, 1}}); }).code(), Code::kInvalidArgument);
  }
}

TEST(MergeTest, Semantics) {
  json base = {{"opt", {{"lr", 0.1}, {"m", 0.9}, {"sched", {{"kind", "cos"}}}}},
               {"tags", {"a", "b"}},
               {"seed", 1}};
  // Siblings kept at every level; arrays replaced, not concatenated.
  EXPECT_EQ(Merge(base, {{"opt", {{"lr", 0.2}}}, {"tags", {"c"}}}),
            json({{"opt", {{"lr", 0.2}, {"m", 0.9}, {"sched", {{"kind", "cos"}}}}},
                  {"tags", {"c"}},
                  {"seed", 1}}));
  // A scalar replaces an object; an object replaces a scalar.
  EXPECT_EQ(Merge(base, {{"opt", nullptr}, {"seed", {{"value", 1}}}}),
            json({{"opt", nullptr}, {"tags", {"a", "b"}}, {"seed", {{"value", 1}}}}));
  // A nested empty object is a leaf and replaces; an empty patch changes nothing.
  EXPECT_EQ(Merge(base, {{"opt", {{"sched", json::object()}}}})["opt"]["sched"], json::object());
  EXPECT_EQ(Merge(base, json::object()), base);
  // New members are added; non-objects replace wholesale.
  EXPECT_EQ(Merge(json::object(), {{"a", {{"b", 1}}}}), json({{"a", {{"b", 1}}}}));
  EXPECT_EQ(Merge(base, 3), json(3));
  EXPECT_EQ(Merge(json(3), {{"a", 1}}), json({{"a", 1}}));
}

// Random parameters with few distinct names, so writes collide often.
class RandomParams {
 public:
  explicit RandomParams(uint32_t seed) : rng_(seed) {}

  json Object(int depth, int max_members) {
    json object = json::object();
    int members = Uniform(0, max_members);
    for (int i = 0; i < members; i++) object[Name()] = Value(depth);
    return object;
  }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::string Name() {
    static const char* const kNames[] = {"a", "b", "c", "a-b", "a0", "é", "日本", "Z"};
    return kNames[Uniform(0, 7)];
  }

  json Value(int depth) {
    switch (Uniform(0, depth > 0 ? 9 : 6)) {
      case 0:
        return Uniform(-1000, 1000);
      case 1:
        return std::uniform_real_distribution<double>(-1e6, 1e6)(rng_);
      case 2:
        return Uniform(0, 1) == 1;
      case 3:
        return std::string(Uniform(0, 4), 'x') + "ü";
      case 4:
        return nullptr;
      case 5:
        return json::array({Uniform(0, 9), "s", json::object({{"in.array", 1}})});
      case 6:
        return json::object();
      default:
        return Object(depth - 1, 4);
    }
  }

  std::mt19937 rng_;
};

TEST(UnflattenTest, LargeRandomRoundTrip) {
  RandomParams random(42);
  for (int i = 0; i < 200; i++) {
    json params = random.Object(5, 8);
    SCOPED_TRACE(params.dump());
    std::vector<ParamRow> rows = Flatten(params);
    ASSERT_TRUE(std::is_sorted(rows.begin(), rows.end(),
                               [](const ParamRow& x, const ParamRow& y) { return x.key < y.key; }));
    std::vector<Leaf> leaves = AsLeaves(rows, 1);
    std::shuffle(leaves.begin(), leaves.end(), std::mt19937(i));
    ASSERT_EQ(Unflatten(leaves), params);
  }
}

// Model check: writes applied with Merge() in seq order give the same object
// as Unflatten() of all their rows in any order, and of only the newest row
// of each key (what storage keeps once it folds a key's rows).
TEST(UnflattenTest, MatchesMergeOfWritesInSeqOrder) {
  RandomParams random(7);
  std::mt19937 shuffle_rng(11);
  for (int trial = 0; trial < 300; trial++) {
    json state = json::object();
    std::vector<Leaf> all;
    int writes = 1 + trial % 8;
    for (int w = 0; w < writes; w++) {
      json patch = random.Object(3, 3);
      state = Merge(std::move(state), patch);
      std::vector<Leaf> rows = AsLeaves(Flatten(patch), 100 + w);
      all.insert(all.end(), rows.begin(), rows.end());
    }
    SCOPED_TRACE(state.dump());
    std::shuffle(all.begin(), all.end(), shuffle_rng);
    ASSERT_EQ(Unflatten(all), state);

    std::map<std::string, Leaf> newest;
    for (const Leaf& leaf : all) {
      auto [it, added] = newest.emplace(leaf.key, leaf);
      if (!added && it->second.seq < leaf.seq) it->second = leaf;
    }
    std::vector<Leaf> folded;
    for (auto& [key, leaf] : newest) folded.push_back(leaf);
    ASSERT_EQ(Unflatten(folded), state);
    // The rebuilt object flattens back to exactly the visible rows.
    ASSERT_EQ(RoundTrip(state), state);
  }
}

}  // namespace
}  // namespace kv0::tracking
