// The run search language on its own (tracking/run_query.h): how filters,
// orders and columns parse into terms, precedence, names with dots and
// quotes, contexts, LIKE, and page tokens. Its meaning over real
// repositories is checked against a reference in run_search_test.cc.

#include "tracking/run_query.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kv0/error.h"

namespace kv0::tracking::query {
namespace {

using nlohmann::json;

Query P(std::string filter, std::vector<std::string> order = {}) {
  return Parse(RunQuery{.filter = std::move(filter), .order_by = std::move(order)});
}

// Evaluates a filter over one run whose terms have the given values, by the
// terms' column names (absent names are missing).
bool Eval(const std::string& filter, const std::map<std::string, Value>& named) {
  Query q = P(filter);
  std::vector<Column> columns(q.terms.size(), Column{&MissingValue()});
  for (size_t i = 0; i < q.terms.size(); ++i) {
    auto found = named.find(q.terms[i].ColumnName());
    if (found != named.end()) columns[i][0] = &found->second;
  }
  return Matches(q.filter, columns, 0);
}

TEST(RunQueryTest, NamesWithDotsQuotesAndContexts) {
  Query q =
      P("params.optimizer.lr < 1 AND metrics.val.loss.min > 0 AND metrics.`loss.min` = 1 "
        "AND metrics['acc', {'subset': \"val\", 'k': 3}].max_step = 2 AND "
        "metric.train/acc >= 0 and attributes.start_time > 0");
  ASSERT_EQ(q.terms.size(), 6u);  // the default order's created_at is start_time
  EXPECT_EQ(q.terms[0].kind, Term::Kind::kParam);
  EXPECT_EQ(q.terms[0].key, "optimizer.lr");
  EXPECT_EQ(q.terms[1].key, "val.loss");
  EXPECT_EQ(q.terms[1].stat, Stat::kMin);
  EXPECT_EQ(q.terms[2].key, "loss.min");
  EXPECT_EQ(q.terms[2].stat, Stat::kLast);
  EXPECT_EQ(q.terms[3].key, "acc");
  EXPECT_EQ(q.terms[3].context, (json{{"subset", "val"}, {"k", 3}}));
  EXPECT_EQ(q.terms[3].stat, Stat::kMaxStep);
  EXPECT_EQ(q.terms[3].ColumnName(), "metrics.acc{\"k\":3,\"subset\":\"val\"}.max_step");
  EXPECT_EQ(q.terms[4].key, "train/acc");
  EXPECT_EQ(q.terms[5].attribute, Attribute::kCreatedAt);
  ASSERT_EQ(q.order.size(), 1u);
  EXPECT_EQ(q.order[0].term, 5u);  // the default order reuses the term
  EXPECT_TRUE(q.order[0].descending);
  // A backquote inside a backquoted name is doubled.
  EXPECT_EQ(P("params.`a``b` = 1").terms[0].key, "a`b");
}

TEST(RunQueryTest, AndBindsTighterThanOrAndNotNegatesAMissingComparison) {
  std::map<std::string, Value> v = {{"status", Value::Text("finished")},
                                    {"params.lr", Value::Number(0.1)}};
  EXPECT_TRUE(Eval("status = 'x' AND params.lr > 1 OR status = 'finished'", v));
  EXPECT_FALSE(Eval("status = 'x' AND (params.lr > 1 OR status = 'finished')", v));
  EXPECT_FALSE(Eval("params.missing < 1", v));
  EXPECT_TRUE(Eval("NOT params.missing < 1", v));
  EXPECT_TRUE(Eval("params.missing IS NULL AND params.lr is not null", v));
  // Typed: text never equals a number, and != needs the literal's type.
  EXPECT_FALSE(Eval("params.lr = '0.1'", v));
  EXPECT_FALSE(Eval("params.lr != 'x'", v));
  EXPECT_TRUE(Eval("params.lr != 0.2", v));
  EXPECT_TRUE(Eval("params.lr IN ('a', 0.1)", v));
  EXPECT_FALSE(Eval("params.lr NOT IN ('a', 0.2)", v));
  EXPECT_TRUE(Eval("params.lr NOT IN (0.3, 0.2)", v));
  // NaN is missing.
  v["metrics.loss.last"] = Value::Number(std::nan(""));
  EXPECT_FALSE(Eval("metrics.loss != 1", v));
  EXPECT_TRUE(Eval("metrics.loss IS NULL", v));
}

TEST(RunQueryTest, LikeMatchesCharactersNotBytes) {
  std::map<std::string, Value> v = {{"name", Value::Text("réseau-2")}};
  EXPECT_TRUE(Eval("name LIKE 'r_seau-_'", v));
  EXPECT_TRUE(Eval("name LIKE '%eau%'", v));
  EXPECT_FALSE(Eval("name LIKE 'R%'", v));
  EXPECT_TRUE(Eval("name ILIKE 'R%'", v));
  EXPECT_TRUE(Eval("name NOT LIKE 'x%'", v));
  EXPECT_TRUE(Eval("name LIKE '%'", v));
  EXPECT_FALSE(Eval("name LIKE ''", v));
}

TEST(RunQueryTest, OrderPutsMissingLastInBothDirections) {
  Value missing, nan = Value::Number(std::nan("")), one = Value::Number(1), two = Value::Number(2),
                 text = Value::Text("a");
  EXPECT_LT(CompareForOrder(one, two, false), 0);
  EXPECT_GT(CompareForOrder(one, two, true), 0);
  EXPECT_LT(CompareForOrder(two, missing, true), 0);
  EXPECT_LT(CompareForOrder(two, missing, false), 0);
  EXPECT_EQ(CompareForOrder(nan, missing, false), 0);
  EXPECT_LT(CompareForOrder(two, text, true), 0);  // numbers before text, either way
  // One entry may hold several terms.
  Query q = P("", {"params.a DESC, metrics.b", "name ASC"});
  ASSERT_EQ(q.order.size(), 3u);
  EXPECT_TRUE(q.order[0].descending);
  EXPECT_FALSE(q.order[1].descending);
}

TEST(RunQueryTest, PageTokensRoundTripAndBelongToTheirQuery) {
  RunQuery rq{.filter = "params.x > 1", .order_by = {"name", "params.x DESC"}};
  Query q = Parse(rq);
  std::vector<Value> key = {Value::Text("it's \xe2\x82\xac"), Value::Number(-0.1)};
  rq.page_token = PageToken(q, key, "run\x01id");
  Query next = Parse(rq);
  ASSERT_TRUE(next.after.has_value());
  EXPECT_EQ(*next.after, key);
  EXPECT_EQ(next.after_run_id, "run\x01id");
  rq.order_by = {"name"};
  EXPECT_THROW(Parse(rq), Error);
}

TEST(RunQueryTest, ErrorsNameThePartThePositionAndWhatWasExpected) {
  auto error = [](RunQuery q) -> std::string {
    try {
      Parse(q);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error({.filter = "status = 'a' AND"}).find("filter: at 17: expected a term"),
            std::string::npos);
  EXPECT_NE(error({.filter = "status = 'a' status"}).find("at 14: expected AND, OR"),
            std::string::npos);
  EXPECT_NE(error({.filter = "metrics['a'].avg > 1"}).find("at 14: expected a statistic"),
            std::string::npos);
  EXPECT_NE(error({.filter = "archived < true"}).find("true and false"), std::string::npos);
  EXPECT_NE(error({.filter = "name = 'open"}).find("a closing '"), std::string::npos);
  EXPECT_NE(error({.filter = "params.x = 1e"}).find("exponent"), std::string::npos);
  EXPECT_NE(error({.filter = "params.x IN (1, 2"}).find("',' or ')'"), std::string::npos);
  EXPECT_NE(error({.filter = "params.x NOT = 1"}).find("LIKE, ILIKE or IN after NOT"),
            std::string::npos);
}

// Any text either parses or fails with InvalidArgument: pieces of the
// grammar thrown together at random, and random bytes.
TEST(RunQueryTest, AnyTextParsesOrFailsCleanly) {
  const char* const pieces[] = {
      "params.", "metrics", ".",    "[",   "]",      "{",      "}",       "'",  "\"",
      "`",       "a",       "lr",   "min", " AND ",  " or ",   "NOT ",    "(",  ")",
      "=",       "<",       ">=",   "!=",  " IN ",   " LIKE ", "IS NULL", ",",  ":",
      "1",       "-2.5e3",  "true", " ",   "status", "\xff",   "\0",      "%_", "DESC"};
  std::mt19937_64 rng(7);
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    for (int n = static_cast<int>(rng() % 12); n > 0; --n) {
      if (rng() % 10 == 0) {
        text += static_cast<char>(rng() % 256);
      } else {
        text += pieces[rng() % std::size(pieces)];
      }
    }
    for (const RunQuery& q : {RunQuery{.filter = text}, RunQuery{.order_by = {text}},
                              RunQuery{.columns = std::vector<std::string>{text}}}) {
      try {
        Parse(q);
        ++parsed;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Code::kInvalidArgument) << text;
      }
    }
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace kv0::tracking::query
