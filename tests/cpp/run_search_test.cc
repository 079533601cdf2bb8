// Repo::SearchRuns against a brute-force reference: random queries, each
// built here together with its meaning (a predicate and an order written
// directly from the rules in kv0/tracking.h), evaluated over Runs(),
// AllParams() and GetSeriesStats() of randomized repositories: missing and
// NaN values, ties, text and numbers under one key, subtrees replaced by a
// later write, runs written after optimize, deleted runs and a second
// writer. Every page of a walk is checked: nothing repeated or skipped.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kv0/error.h"
#include "kv0/tracking.h"
#include "test_util.h"
#include "tracking/search_cache.h"

namespace kv0::tracking {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A term's value for one run, as the reference sees it.
struct Ref {
  enum Kind { kNumber = 0, kText = 1, kFlag = 2, kMissing = 3 } kind = kMissing;
  double number = 0;
  std::string text;
  bool flag = false;
};
Ref Number(double v) { return std::isnan(v) ? Ref{} : Ref{Ref::kNumber, v, "", false}; }
Ref Text(std::string v) { return Ref{Ref::kText, 0, std::move(v), false}; }
Ref Flag(bool v) { return Ref{Ref::kFlag, 0, "", v}; }

// What the reference knows of a repository.
struct World {
  std::vector<RunInfo> runs;
  std::map<std::string, json> params;
  std::map<uint64_t, SeriesStats> stats;
};

// One term: its text in a query and its value in the world.
struct RefTerm {
  std::string text;
  std::function<Ref(const World&, const RunInfo&)> value;
  enum Literals { kAny, kNumbers, kTexts, kFlags } literals = kAny;
};

Ref ParamRef(const World& w, const RunInfo& run, const std::string& key) {
  auto p = w.params.find(run.run_id);
  if (p == w.params.end()) return {};
  const json* at = &p->second;
  std::stringstream parts(key);
  for (std::string part; std::getline(parts, part, '.');) {
    if (!at->is_object() || !at->contains(part)) return {};
    at = &(*at)[part];
  }
  if (at->is_boolean()) return Flag(at->get<bool>());
  if (at->is_number()) return Number(at->get<double>());
  if (at->is_string()) return Text(at->get<std::string>());
  return {};
}

Ref MetricRef(const World& w, const RunInfo& run, const std::string& name, const json& context,
              const std::string& stat) {
  auto s = w.stats.find(SeriesId(run.run_id, name, context));
  if (s == w.stats.end()) return {};
  const SeriesStats& x = s->second;
  bool finite = !std::isnan(x.min);
  if (stat == "last") return Number(x.last);
  if (stat == "min") return Number(x.min);
  if (stat == "max") return Number(x.max);
  if (stat == "count") return Number(static_cast<double>(x.count));
  if (stat == "first_step") return Number(static_cast<double>(x.first_step));
  if (stat == "last_step") return Number(static_cast<double>(x.last_step));
  if (stat == "min_step") return finite ? Number(static_cast<double>(x.min_step)) : Ref{};
  if (stat == "max_step") return finite ? Number(static_cast<double>(x.max_step)) : Ref{};
  if (stat == "non_finite") return Number(static_cast<double>(x.non_finite));
  ADD_FAILURE() << "no stat " << stat;
  return {};
}

std::vector<RefTerm> Terms() {
  std::vector<RefTerm> t;
  auto text_attr = [&](std::string name,
                       std::function<std::optional<std::string>(const RunInfo&)> get) {
    t.push_back({name,
                 [get](const World&, const RunInfo& r) {
                   auto v = get(r);
                   return v ? Text(*v) : Ref{};
                 },
                 RefTerm::kTexts});
  };
  text_attr("status", [](const RunInfo& r) { return r.status; });
  text_attr("attributes.name", [](const RunInfo& r) { return r.name; });
  text_attr("kind", [](const RunInfo& r) { return r.kind; });
  text_attr("experiment", [](const RunInfo& r) { return r.experiment; });
  text_attr("run_id", [](const RunInfo& r) { return r.run_id; });
  t.push_back({"created_at",
               [](const World&, const RunInfo& r) { return Number(double(r.created_at_us)); },
               RefTerm::kNumbers});
  t.push_back({"ended_at",
               [](const World&, const RunInfo& r) {
                 return r.ended_at_us ? Number(double(*r.ended_at_us)) : Ref{};
               },
               RefTerm::kNumbers});
  t.push_back({"archived", [](const World&, const RunInfo& r) { return Flag(r.archived); },
               RefTerm::kFlags});
  for (std::string key : {"lr", "opt.name", "opt.beta", "layers", "flag", "notes", "opt"}) {
    t.push_back(
        {"params." + key, [key](const World& w, const RunInfo& r) { return ParamRef(w, r, key); }});
  }
  t.push_back({"params.`weird key`",
               [](const World& w, const RunInfo& r) { return ParamRef(w, r, "weird key"); }});
  for (std::string stat : {"", ".last", ".min", ".max", ".count", ".first_step", ".last_step",
                           ".min_step", ".max_step", ".non_finite"}) {
    std::string s = stat.empty() ? "last" : stat.substr(1);
    t.push_back({"metrics.loss" + stat,
                 [s](const World& w, const RunInfo& r) {
                   return MetricRef(w, r, "loss", json::object(), s);
                 },
                 RefTerm::kNumbers});
  }
  for (std::string stat : {"", ".min", ".count"}) {
    std::string s = stat.empty() ? "last" : stat.substr(1);
    t.push_back({"metrics['acc', {'subset': 'val'}]" + stat,
                 [s](const World& w, const RunInfo& r) {
                   return MetricRef(w, r, "acc", {{"subset", "val"}}, s);
                 },
                 RefTerm::kNumbers});
    t.push_back({"metrics.train/acc" + stat,
                 [s](const World& w, const RunInfo& r) {
                   return MetricRef(w, r, "train/acc", json::object(), s);
                 },
                 RefTerm::kNumbers});
  }
  return t;
}

// Literals near the values the data holds, so that comparisons split runs.
Ref RandomLiteral(std::mt19937_64& rng, const RefTerm& term, const World& w) {
  auto kind = term.literals;
  if (kind == RefTerm::kAny) {
    kind = static_cast<RefTerm::Literals>(1 + rng() % 3);
  }
  // Mostly a value some run has.
  if (rng() % 4 != 0 && !w.runs.empty()) {
    const RunInfo& r = w.runs[rng() % w.runs.size()];
    Ref v = term.value(w, r);
    if (v.kind != Ref::kMissing &&
        ((kind == RefTerm::kNumbers && v.kind == Ref::kNumber) ||
         (kind == RefTerm::kTexts && v.kind == Ref::kText) ||
         (kind == RefTerm::kFlags && v.kind == Ref::kFlag)) &&
        std::isfinite(v.number)) {
      return v;
    }
  }
  switch (kind) {
    case RefTerm::kNumbers:
      return Number(std::vector<double>{-1, 0, 0.001, 0.5, 1, 3, 1e9, 1.7e15}[rng() % 8]);
    case RefTerm::kFlags:
      return Flag(rng() % 2);
    default:
      return Text(std::vector<std::string>{"finished", "running", "adam", "sgd", "auto", "", "r1",
                                           "it's"}[rng() % 8]);
  }
}

std::string LiteralText(const Ref& v) {
  switch (v.kind) {
    case Ref::kNumber: {
      std::ostringstream os;
      os.precision(17);
      os << v.number;
      return os.str();
    }
    case Ref::kText: {
      std::string out = "'";
      for (char c : v.text) out += c == '\'' ? std::string("''") : std::string(1, c);
      return out + "'";
    }
    case Ref::kFlag:
      return v.flag ? "true" : "FALSE";
    default:
      return "?";
  }
}

bool SameRef(const Ref& a, const Ref& b) {
  if (a.kind != b.kind || a.kind == Ref::kMissing) return false;
  if (a.kind == Ref::kNumber) return a.number == b.number;
  if (a.kind == Ref::kText) return a.text == b.text;
  return a.flag == b.flag;
}

bool LikeRef(const std::string& text, const std::string& pattern, bool fold) {
  // Dynamic programming over characters (the data here is ASCII).
  auto low = [fold](char c) { return fold ? static_cast<char>(std::tolower(c)) : c; };
  std::vector<std::vector<bool>> m(text.size() + 1, std::vector<bool>(pattern.size() + 1));
  m[0][0] = true;
  for (size_t j = 1; j <= pattern.size(); ++j) m[0][j] = m[0][j - 1] && pattern[j - 1] == '%';
  for (size_t i = 1; i <= text.size(); ++i) {
    for (size_t j = 1; j <= pattern.size(); ++j) {
      char p = pattern[j - 1];
      if (p == '%') {
        m[i][j] = m[i][j - 1] || m[i - 1][j];
      } else {
        m[i][j] = m[i - 1][j - 1] && (p == '_' || low(p) == low(text[i - 1]));
      }
    }
  }
  return m[text.size()][pattern.size()];
}

using Predicate = std::function<bool(const World&, const RunInfo&)>;

// A random condition: its text and its meaning.
std::pair<std::string, Predicate> RandomCondition(std::mt19937_64& rng,
                                                  const std::vector<RefTerm>& terms, const World& w,
                                                  int depth) {
  int shape = depth >= 2 ? 0 : static_cast<int>(rng() % 6);
  if (shape == 3 || shape == 4) {
    auto [a, pa] = RandomCondition(rng, terms, w, depth + 1);
    auto [b, pb] = RandomCondition(rng, terms, w, depth + 1);
    bool both = shape == 3;
    std::string text = "(" + a + (both ? ") AND (" : ") or (") + b + ")";
    return {text, [pa, pb, both](const World& w, const RunInfo& r) {
              return both ? pa(w, r) && pb(w, r) : pa(w, r) || pb(w, r);
            }};
  }
  if (shape == 5) {
    auto [a, pa] = RandomCondition(rng, terms, w, depth + 1);
    return {"NOT (" + a + ")", [pa](const World& w, const RunInfo& r) { return !pa(w, r); }};
  }
  const RefTerm& term = terms[rng() % terms.size()];
  auto value = term.value;
  int op = static_cast<int>(rng() % 12);
  if (op == 10) {
    bool negated = rng() % 2;
    return {term.text + (negated ? " IS NOT NULL" : " is null"),
            [value, negated](const World& w, const RunInfo& r) {
              return (value(w, r).kind == Ref::kMissing) != negated;
            }};
  }
  if (op == 11) {  // IN and NOT IN
    std::vector<Ref> list;
    for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n; ++i) {
      list.push_back(RandomLiteral(rng, term, w));
    }
    if (term.literals == RefTerm::kAny && rng() % 2) list.push_back(Text("mixed"));
    bool negated = rng() % 2;
    std::string text = term.text + (negated ? " NOT IN (" : " IN (");
    for (size_t i = 0; i < list.size(); ++i) text += (i ? ", " : "") + LiteralText(list[i]);
    return {text + ")", [value, list, negated](const World& w, const RunInfo& r) {
              Ref v = value(w, r);
              if (v.kind == Ref::kMissing) return false;
              if (!negated) {
                return std::any_of(list.begin(), list.end(),
                                   [&](const Ref& l) { return SameRef(v, l); });
              }
              return std::all_of(list.begin(), list.end(),
                                 [&](const Ref& l) { return l.kind == v.kind && !SameRef(v, l); });
            }};
  }
  bool texty = term.literals == RefTerm::kTexts || term.literals == RefTerm::kAny;
  if (op >= 8 && texty) {  // LIKE family
    std::string pattern =
        std::vector<std::string>{"%a%", "r_", "%", "AD%", "_un%", "fin%ed", "%''%"}[rng() % 7];
    std::string raw = pattern == "%''%" ? "%'%" : pattern;
    bool fold = rng() % 2, negated = rng() % 3 == 0;
    std::string text =
        term.text + (negated ? " NOT " : " ") + (fold ? "ILIKE" : "like") + " '" + pattern + "'";
    return {text, [value, raw, fold, negated](const World& w, const RunInfo& r) {
              Ref v = value(w, r);
              if (v.kind != Ref::kText) return false;
              return LikeRef(v.text, raw, fold) != negated;
            }};
  }
  Ref literal = RandomLiteral(rng, term, w);
  static const char* kOps[] = {"=", "!=", "<", "<=", ">", ">=", "==", "<>"};
  int o = static_cast<int>(rng() % 8);
  if (literal.kind == Ref::kFlag) o = rng() % 2 ? 0 : 1;
  std::string text = term.text + " " + kOps[o] + " " + LiteralText(literal);
  return {text, [value, literal, o](const World& w, const RunInfo& r) {
            Ref v = value(w, r);
            if (v.kind == Ref::kMissing || v.kind != literal.kind) return false;
            int c = 0;
            if (v.kind == Ref::kNumber)
              c = v.number < literal.number ? -1 : v.number > literal.number;
            if (v.kind == Ref::kText) c = v.text < literal.text ? -1 : v.text > literal.text;
            if (v.kind == Ref::kFlag) c = int(v.flag) - int(literal.flag);
            switch (o) {
              case 0:
              case 6:
                return c == 0;
              case 1:
              case 7:
                return c != 0;
              case 2:
                return c < 0;
              case 3:
                return c <= 0;
              case 4:
                return c > 0;
              default:
                return c >= 0;
            }
          }};
}

struct OrderRef {
  std::string text;
  std::function<Ref(const World&, const RunInfo&)> value;
  bool descending;
};

std::vector<std::string> Expected(const World& w, const Predicate& pred,
                                  const std::vector<OrderRef>& order) {
  std::vector<const RunInfo*> hits;
  for (const auto& r : w.runs) {
    if (pred(w, r)) hits.push_back(&r);
  }
  std::sort(hits.begin(), hits.end(), [&](const RunInfo* a, const RunInfo* b) {
    for (const auto& o : order) {
      Ref x = o.value(w, *a), y = o.value(w, *b);
      if (x.kind != y.kind) return x.kind < y.kind;
      if (x.kind == Ref::kMissing) continue;
      int c = 0;
      if (x.kind == Ref::kNumber) c = x.number < y.number ? -1 : x.number > y.number;
      if (x.kind == Ref::kText) c = x.text < y.text ? -1 : x.text > y.text;
      if (x.kind == Ref::kFlag) c = int(x.flag) - int(y.flag);
      if (c) return o.descending ? c > 0 : c < 0;
    }
    return a->run_id < b->run_id;
  });
  std::vector<std::string> ids;
  for (const RunInfo* r : hits) ids.push_back(r->run_id);
  return ids;
}

class RunSearchTest : public ::testing::Test {
 protected:
  RepoOptions Opts() {
    RepoOptions o;
    o.wal_dir = dir_ / "wal";
    o.flush_interval = std::chrono::hours(1);
    return o;
  }
  Repo Open() { return Repo::Open(dir_ / "repo", Opts()); }

  World Load(Repo& repo) {
    World w;
    w.runs = repo.Runs();
    w.params = repo.AllParams();
    std::vector<uint64_t> ids;
    for (const auto& s : repo.AllSeries()) ids.push_back(s.series_id);
    w.stats = repo.GetSeriesStats(ids);
    return w;
  }

  testing::TempDir dir_;
};

// Writes runs with every kind of value the language must handle.
void WriteRuns(Repo& repo, std::mt19937_64& rng, int count, int64_t base_time,
               std::vector<std::string>* ids) {
  static const char* kStatuses[] = {"finished", "failed", "aborted"};
  for (int i = 0; i < count; ++i) {
    NewRun n;
    if (rng() % 5) n.name = "r" + std::to_string(rng() % 30);
    if (rng() % 2) n.kind = rng() % 2 ? "training" : "eval";
    if (rng() % 3) n.experiment = rng() % 2 ? "mnist" : "it's";
    n.created_at_us = base_time + static_cast<int64_t>(rng() % 20) * 1000;  // ties
    Run run = repo.CreateRun(n);
    ids->push_back(run.run_id());
    json p = json::object();
    switch (rng() % 5) {
      case 0:
        p["lr"] = "auto";
        break;  // text under a numeric key
      case 1:
        break;  // missing
      default:
        p["lr"] = std::vector<double>{0.1, 0.01, 0.001, 0.5}[rng() % 4];
    }
    if (rng() % 4) p["opt"] = {{"name", rng() % 2 ? "adam" : "sgd"}, {"beta", (rng() % 10) / 10.0}};
    if (rng() % 2) p["layers"] = static_cast<int>(rng() % 4);
    if (rng() % 2) p["flag"] = rng() % 2 == 0;
    if (rng() % 3 == 0) p["notes"] = rng() % 2 ? json(nullptr) : json::array({1, 2});
    if (rng() % 4 == 0) p["weird key"] = rng() % 2 ? json("x") : json(1);
    run.SetParams(p);
    if (rng() % 5 == 0) run.SetParams({{"lr", 0.02}});     // the newest wins
    if (rng() % 6 == 0) run.SetParams({{"opt", "none"}});  // replaces the subtree
    int points = static_cast<int>(rng() % 6);
    for (int s = 0; s < points; ++s) {
      double v = rng() % 7 == 0 ? kNaN : rng() % 11 == 0 ? kInf : (rng() % 100) / 10.0;
      run.Track(v, "loss", {.step = s * 3});
    }
    if (rng() % 6 == 0) run.Track(kNaN, "loss", {.step = 100});
    if (rng() % 2) run.Track((rng() % 10) / 10.0, "acc", {.context = {{"subset", "val"}}});
    if (rng() % 2) run.Track((rng() % 10) / 10.0, "acc");  // another series: empty context
    if (rng() % 3) run.Track((rng() % 10) / 10.0, "train/acc");
    if (rng() % 3 == 0) run.Update([&](RunInfo& r) { r.archived = true; });
    if (rng() % 2) run.Finish(kStatuses[rng() % 3]);
  }
}

void CheckQueries(Repo& repo, const World& w, std::mt19937_64& rng, int queries) {
  std::vector<RefTerm> terms = Terms();
  for (int q = 0; q < queries; ++q) {
    auto [filter, pred] = rng() % 10 == 0
                              ? std::pair<std::string, Predicate>(
                                    "", [](const World&, const RunInfo&) { return true; })
                              : RandomCondition(rng, terms, w, 0);
    std::vector<OrderRef> order;
    RunQuery query;
    query.filter = filter;
    for (int i = 0, n = static_cast<int>(rng() % 3); i < n; ++i) {
      const RefTerm& t = terms[rng() % terms.size()];
      bool desc = rng() % 2;
      order.push_back({t.text, t.value, desc});
      query.order_by.push_back(t.text + (desc ? " DESC" : rng() % 2 ? " asc" : ""));
    }
    if (order.empty()) {
      order.push_back(
          {"created_at",
           [](const World&, const RunInfo& r) { return Number(double(r.created_at_us)); }, true});
    }
    std::vector<std::string> expected = Expected(w, pred, order);
    std::string what = "filter: " + filter + "; order: " + ::testing::PrintToString(query.order_by);

    // Walk the pages: every run once, in order.
    query.limit = q % 3 == 0 ? 1 + rng() % 7 : 100000;
    query.columns = std::vector<std::string>{};
    std::vector<std::string> got;
    for (int page = 0;; ++page) {
      ASSERT_LE(page, 1000) << what;
      RunPage p = repo.SearchRuns(query);
      ASSERT_EQ(p.matched, expected.size()) << what;
      ASSERT_LE(p.runs.size(), query.limit) << what;
      for (const auto& r : p.runs) got.push_back(r.run_id);
      if (p.next_page_token.empty()) break;
      ASSERT_EQ(p.runs.size(), query.limit) << what;
      query.page_token = p.next_page_token;
    }
    ASSERT_EQ(got, expected) << what;
  }
}

TEST_F(RunSearchTest, RandomQueriesMatchTheBruteForceReference) {
  const int queries = static_cast<int>(testing::EnvNumber("KV0_SEARCH_QUERIES", 1000));
  std::mt19937_64 rng(20261202);
  std::vector<std::string> ids;
  Repo repo = Open();
  WriteRuns(repo, rng, 40, 1'700'000'000'000'000, &ids);
  repo.Optimize();
  // Runs written after optimize, deleted runs and a second writer's runs
  // and changes.
  WriteRuns(repo, rng, 20, 1'700'000'000'010'000, &ids);
  repo.DeleteRuns(std::vector<std::string>{ids[3], ids[45]});
  {
    Repo other = Open();
    std::vector<std::string> theirs;
    WriteRuns(other, rng, 10, 1'700'000'000'005'000, &theirs);
    other.UpdateRun(ids[7], [](RunInfo& r) { r.status = "failed"; });
    other.Close();
  }
  World w = Load(repo);
  ASSERT_EQ(w.runs.size(), 68u);
  CheckQueries(repo, w, rng, queries / 3);
  // Another writer appends: new runs, a changed run, new parameters and
  // points of runs the handle has searched (its cache reads only the new
  // fragments).
  {
    Repo other = Open();
    std::vector<std::string> theirs;
    WriteRuns(other, rng, 8, 1'700'000'000'020'000, &theirs);
    other.UpdateRun(ids[10], [](RunInfo& r) { r.name = "renamed"; });
    tracking::Run resumed = other.ResumeRun(ids[11]);
    resumed.SetParams({{"lr", 0.3}, {"opt", {{"name", "adam"}}}});
    resumed.Track(-5, "loss", {.step = 500});
    resumed.Track(0.75, "acc", {.step = 9, .context = {{"subset", "val"}}});
    other.Close();
  }
  w = Load(repo);
  ASSERT_EQ(w.runs.size(), 76u);
  CheckQueries(repo, w, rng, queries / 3);
  // A delete and optimize rewrite fragments the cache has read: it starts over.
  repo.DeleteRuns(std::vector<std::string>{ids[12]});
  repo.Optimize();
  w = Load(repo);
  ASSERT_EQ(w.runs.size(), 75u);
  CheckQueries(repo, w, rng, queries - 2 * (queries / 3));
}

// Searches from two threads share the handle's cache while a third thread
// creates runs and flushes: every search sees at least the runs the one
// before it saw, and the last sees them all.
TEST_F(RunSearchTest, SearchesFromThreadsBesideAWriter) {
  Repo repo = Open();
  constexpr int kRuns = 40;
  std::atomic<bool> done = false, failed = false;
  std::thread writer([&] {
    try {
      for (int i = 0; i < kRuns; ++i) {
        tracking::Run run = repo.CreateRun({.name = "w" + std::to_string(i)});
        run.SetParams({{"i", i}});
        run.Track(i, "loss");
        if (i % 4 == 3) repo.Flush();
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "writer: " << e.what();
      failed = true;
    }
    done = true;
  });
  auto searcher = [&] {
    uint64_t seen = 0;
    try {
      while (!done) {
        RunPage page = repo.SearchRuns({.filter = "params.i >= 0 AND metrics.loss >= 0",
                                        .order_by = {"params.i DESC"},
                                        .columns = std::vector<std::string>{}});
        EXPECT_GE(page.matched, seen);
        seen = page.matched;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "searcher: " << e.what();
      failed = true;
    }
  };
  std::thread a(searcher), b(searcher);
  writer.join();
  a.join();
  b.join();
  ASSERT_FALSE(failed);
  RunPage page = repo.SearchRuns(
      {.filter = "params.i >= 0 AND metrics.loss >= 0", .order_by = {"params.i DESC"}, .limit = 1});
  EXPECT_EQ(page.matched, static_cast<uint64_t>(kRuns));
  ASSERT_EQ(page.runs.size(), 1u);
  EXPECT_EQ(page.runs[0].name, "w" + std::to_string(kRuns - 1));
}

TEST_F(RunSearchTest, ColumnsHoldThePageRunsValues) {
  Repo repo = Open();
  tracking::Run a = repo.CreateRun({.name = "a"});
  a.SetParams({{"lr", 0.01}, {"opt", {{"name", "adam"}}}, {"tags", json::array({"x"})}});
  a.Track(0.5, "loss", {.step = 1});
  a.Track(0.25, "loss", {.step = 2});
  a.Track(0.9, "acc", {.context = {{"subset", "val"}}});
  tracking::Run b = repo.CreateRun({.name = "b"});
  b.SetParams({{"lr", "auto"}});
  b.Track(kNaN, "loss");

  RunPage page = repo.SearchRuns({.order_by = {"name"}});
  ASSERT_EQ(page.runs.size(), 2u);
  EXPECT_EQ(page.runs[0].name, "a");
  std::vector<std::string> want = {"params.lr", "params.opt.name", "params.tags",
                                   "metrics.acc{\"subset\":\"val\"}.last", "metrics.loss.last"};
  EXPECT_EQ(page.columns, want);
  EXPECT_EQ(page.values[0][0], 0.01);
  EXPECT_EQ(page.values[0][1], "adam");
  EXPECT_EQ(page.values[0][2], json::array({"x"}));
  EXPECT_EQ(page.values[0][3], 0.9);
  EXPECT_EQ(page.values[0][4], 0.25);
  EXPECT_EQ(page.values[1][0], "auto");
  EXPECT_TRUE(page.values[1][1].is_null());
  EXPECT_TRUE(page.values[1][4].is_null());  // NaN: no value

  page = repo.SearchRuns(
      {.filter = "metrics.loss.count >= 1",
       .order_by = {"metrics.loss.count DESC"},
       .columns = std::vector<std::string>{"metrics.loss.count", "metrics.loss.min", "params.lr"}});
  ASSERT_EQ(page.runs.size(), 2u);
  EXPECT_EQ(page.columns,
            (std::vector<std::string>{"metrics.loss.count", "metrics.loss.min", "params.lr"}));
  EXPECT_EQ(page.values[0][0], 2);
  EXPECT_EQ(page.values[0][1], 0.25);
  EXPECT_EQ(page.values[1][0], 1);
  EXPECT_TRUE(page.values[1][1].is_null());  // no finite value

  // The Arrow form has the run columns, then one per RunPage column.
  ArrowArrayStream stream{};
  RunPageToArrow(page, &stream);
  ArrowSchema schema{};
  ASSERT_EQ(stream.get_schema(&stream, &schema), 0);
  ASSERT_EQ(schema.n_children, 15);
  EXPECT_STREQ(schema.children[0]->name, "run_id");
  EXPECT_STREQ(schema.children[12]->name, "metrics.loss.count");
  EXPECT_STREQ(schema.children[12]->format, "l");
  EXPECT_STREQ(schema.children[13]->format, "g");
  EXPECT_STREQ(schema.children[14]->format, "u");
  ArrowArray array{};
  ASSERT_EQ(stream.get_next(&stream, &array), 0);
  EXPECT_EQ(array.length, 2);
  array.release(&array);
  schema.release(&schema);
  stream.release(&stream);
}

// A query naming more parameters and metrics than the cache keeps
// (SearchCache::kMaxParts): every part it names stays until the search
// ends, so every term has its value, on a first search and on a later one
// (whose parts the search before trimmed in part).
TEST_F(RunSearchTest, AQueryNamingMorePartsThanTheCacheKeepsSeesEveryValue) {
  constexpr int kKeys = static_cast<int>(SearchCache::kMaxParts) + 8;
  Repo repo = Open();
  for (int i = 0; i < kKeys; ++i) {
    tracking::Run run = repo.CreateRun({.name = "r" + std::to_string(i)});
    run.SetParams({{"k" + std::to_string(i), 1}});
    run.Track(1, "m" + std::to_string(i));
  }
  std::string params, metrics;
  for (int i = 0; i < kKeys; ++i) {
    params += (i ? " OR params.k" : "params.k") + std::to_string(i) + " = 1";
    metrics += (i ? " OR metrics.m" : "metrics.m") + std::to_string(i) + " = 1";
  }
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(repo.SearchRuns({.filter = params}).matched, static_cast<uint64_t>(kKeys)) << round;
    EXPECT_EQ(repo.SearchRuns({.filter = metrics}).matched, static_cast<uint64_t>(kKeys)) << round;
    EXPECT_EQ(repo.SearchRuns({.filter = "(" + params + ") AND (" + metrics + ")"}).matched,
              static_cast<uint64_t>(kKeys))
        << round;
  }
}

TEST_F(RunSearchTest, BadQueriesFailWithTheirPositionAndReadNothing) {
  Repo repo = Open();
  repo.CreateRun({.name = "a"}).SetParams({{"lr", 1}});
  TableVersions before = repo.Versions();
  auto message = [&](RunQuery q) -> std::string {
    try {
      repo.SearchRuns(q);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error for " << q.filter;
    return "";
  };
  EXPECT_NE(message({.filter = "params.lr <"}).find("filter: at 12: expected a value"),
            std::string::npos);
  EXPECT_NE(message({.filter = "colour = 'red'"}).find("unknown 'colour'"), std::string::npos);
  EXPECT_NE(message({.filter = "status = 1"}).find("a quoted string"), std::string::npos);
  EXPECT_NE(message({.filter = "metrics.loss LIKE 'a'"}).find("not LIKE"), std::string::npos);
  EXPECT_NE(message({.filter = "(status = 'x'"}).find("')'"), std::string::npos);
  EXPECT_NE(message({.order_by = {"name", "params.lr SIDEWAYS"}}).find("order_by[1]: at 11"),
            std::string::npos);
  EXPECT_NE(message({.columns = std::vector<std::string>{"status"}}).find("columns[0]"),
            std::string::npos);
  EXPECT_NE(message({.limit = 0}).find("limit"), std::string::npos);
  EXPECT_NE(message({.page_token = "zz"}).find("page_token"), std::string::npos);
  EXPECT_EQ(repo.Versions(), before);  // the failed queries flushed nothing
  // A token of another query.
  repo.CreateRun({.name = "b"});
  RunPage first = repo.SearchRuns({.limit = 1});
  ASSERT_FALSE(first.next_page_token.empty());
  EXPECT_NE(message({.filter = "name = 'b'", .page_token = first.next_page_token})
                .find("another filter or order"),
            std::string::npos);
}

}  // namespace
}  // namespace kv0::tracking
