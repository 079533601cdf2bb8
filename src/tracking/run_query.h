// The run search language (kv0/tracking.h, RunQuery): parsing a filter, an
// order and columns into terms and an expression tree, evaluating the tree on
// one run's values, ordering runs and the page token.
//
// Pure logic, no I/O: run_search.cc finds the values of each term in storage
// and calls this file to decide which runs match and in which order. Tests
// of the grammar and the semantics: tests/cpp/run_query_test.cc; against a
// brute-force reference over real repositories: tests/cpp/run_search_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv0/tracking.h"

namespace kv0::tracking::query {

enum class Attribute {
  kRunId,
  kName,
  kExperiment,
  kDescription,
  kStatus,
  kKind,
  kArchived,
  kCreatedAt,
  kUpdatedAt,
  kEndedAt,
};

enum class Stat {
  kLast,
  kMin,
  kMax,
  kCount,
  kFirstStep,
  kLastStep,
  kMinStep,
  kMaxStep,
  kNonFinite
};

// What a term names. Two terms are the same when all their members are.
struct Term {
  enum class Kind { kAttribute, kParam, kMetric } kind = Kind::kAttribute;
  Attribute attribute = Attribute::kRunId;            // kAttribute
  std::string key;                                    // kParam: dotted key; kMetric: name
  nlohmann::json context = nlohmann::json::object();  // kMetric
  Stat stat = Stat::kLast;                            // kMetric

  bool operator==(const Term&) const = default;
  // The column name in a RunPage: params.<key>, metrics.<name><ctx>.<stat>,
  // or the attribute's name.
  std::string ColumnName() const;
  // True for metric statistics that are steps or counts (int64 columns).
  bool IsIntegerStat() const;
};

// One value of a term for one run. Numbers are doubles: times in
// microseconds are exact up to 2^53 (the year 2255).
struct Value {
  enum class Kind { kMissing, kNumber, kText, kFlag } kind = Kind::kMissing;
  double number = 0;
  std::string text;
  bool flag = false;

  static Value Number(double v);
  static Value Text(std::string v);
  static Value Flag(bool v);
  // A JSON scalar as a value: numbers, strings and booleans; anything else
  // (null, arrays, objects) is missing.
  static Value FromJson(const nlohmann::json& j);
  // A NaN number counts as missing everywhere.
  bool missing() const;
  bool operator==(const Value&) const = default;
};

enum class Op {
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLike,
  kILike,
  kNotLike,
  kNotILike,
  kIn,
  kNotIn,
  kIsNull,
  kIsNotNull
};

struct Expr {
  enum class Kind { kAll, kAnd, kOr, kNot, kCompare } kind = Kind::kAll;
  std::vector<Expr> children;   // kAnd, kOr (two or more), kNot (one)
  size_t term = 0;              // kCompare: index into Query::terms
  Op op = Op::kEq;              // kCompare
  std::vector<Value> literals;  // kCompare: one, or the list of IN; none for IS NULL
};

struct OrderTerm {
  size_t term = 0;
  bool descending = false;
};

// A parsed RunQuery. terms holds each distinct term once, in the order they
// first appear: the filter's, then the order's, then the columns'.
struct Query {
  std::vector<Term> terms;
  Expr filter;
  std::vector<OrderTerm> order;  // never empty: created_at DESC by default
  std::vector<size_t> columns;   // the RunQuery's columns, if it named them
  bool default_columns = true;   // RunQuery::columns was unset
  size_t limit = 100;
  // A fingerprint of the filter and order, carried in page tokens.
  uint64_t fingerprint = 0;
  // The sort key after which the page starts (from the page token).
  std::optional<std::vector<Value>> after;
  std::string after_run_id;
};

// Parses query. Throws kv0::Error(kInvalidArgument) naming the part
// (filter, order_by[i], columns[i] or page_token), the 1-based character
// position and what was expected there.
Query Parse(const RunQuery& query);

// A term's values, one per run. The values are not copied into the column:
// it points at storage that outlives the evaluation (the search cache's
// values, or values the search computed once), and never holds null.
using Column = std::vector<const Value*>;

// The missing value, for runs that have none of a term.
const Value& MissingValue();

// True when run `row` satisfies expr; *columns[t][row] is its value of
// Query::terms[t] (only the columns of terms expr names are read).
bool Matches(const Expr& expr, const std::vector<Column>& columns, size_t row);

// -1, 0 or 1: a against b in the order term's direction (missing last).
int CompareForOrder(const Value& a, const Value& b, bool descending);

// The page token that resumes after a run with sort key `key` (one value per
// Query::order entry) and run id run_id.
std::string PageToken(const Query& query, const std::vector<Value>& key, const std::string& run_id);

}  // namespace kv0::tracking::query
