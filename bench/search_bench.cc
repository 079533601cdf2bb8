// `kv0 bench search`: Repo::SearchRuns beside the brute-force path.
//
// Phases, on one fresh repository with its WAL beside it:
//
//  - build: N runs (default 100,000) through one handle, each with 20
//    parameters (numbers, text, a flag, nested objects) and 10 series (5
//    names, contexts {} and {"subset": "val"}) of 3 points; no run is
//    finished one by one (that would be N commits), the buffer flushes as it
//    fills.
//  - before optimize, then after it: three queries of one, two and four
//    conditions, each with an order and limit 100:
//      warm         the same handle, `repeat` times: p50 and p95;
//      new process  this executable, `bench search-query`, opens the
//                   repository and runs the query once (`slow_repeat`
//                   times, 3 by default: median);
//      brute force  Runs(), AllParams(), AllSeries() and GetSeriesStats()
//                   of every series, then filter and sort in memory
//                   (`slow_repeat` times: median), and its result must
//                   equal the search's. It holds the whole repository in
//                   memory, so larger runs can go without it
//                   (`brute_force`), unchecked.
//
// Nothing asserts on a timing; a result that differs is an error.

#include "bench/search_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kv0/error.h"
#include "kv0/tracking.h"

namespace kv0::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using tracking::Repo;
using tracking::RunInfo;
using tracking::SeriesStats;

constexpr int kPointsPerSeries = 3;
const char* const kMetrics[] = {"loss", "acc", "val_loss", "grad_norm", "lr"};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// A deterministic number in [0, 1) from a run and a salt.
double Unit(uint64_t run, uint64_t salt) {
  uint64_t x = (run + 1) * 0x9E3779B97F4A7C15ull ^ (salt * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / 9007199254740992.0;
}

json ParamsFor(uint64_t i) {
  static const double kRates[] = {1e-2, 3e-3, 1e-3, 3e-4, 1e-4};
  return {
      {"lr", kRates[i % 5]},
      {"batch_size", 32 << (i % 4)},
      {"epochs", 10 + static_cast<int>(i % 3)},
      {"seed", i},
      {"warmup_steps", 100},
      {"weight_decay", 0.01},
      {"grad_clip", 1.0},
      {"mixed_precision", i % 2 == 0},
      {"optimizer", {{"name", i % 3 == 0 ? "sgd" : "adam"}, {"beta1", 0.9}, {"beta2", 0.999}}},
      {"model", {{"arch", "transformer"}, {"layers", 6 + 6 * (i % 2)}, {"hidden", 768}}},
      {"data", {{"dataset", "corpus-" + std::to_string(i % 5)}, {"shuffle", true}}},
      {"scheduler", {{"name", "cosine"}}},
  };
}

// The queries: their text, and their meaning for the brute-force path.
struct World {
  std::vector<RunInfo> runs;
  std::map<std::string, json> params;
  std::map<uint64_t, SeriesStats> stats;
};

std::optional<double> Stat(const World& w, const RunInfo& r, const char* name, bool min) {
  auto s = w.stats.find(tracking::SeriesId(r.run_id, name, json::object()));
  if (s == w.stats.end()) return std::nullopt;
  double v = min ? s->second.min : s->second.last;
  return std::isnan(v) ? std::nullopt : std::optional(v);
}

std::optional<double> Lr(const World& w, const RunInfo& r) {
  auto p = w.params.find(r.run_id);
  if (p == w.params.end() || !p->second.contains("lr") || !p->second["lr"].is_number()) {
    return std::nullopt;
  }
  return p->second["lr"].get<double>();
}

struct Query {
  std::string name;
  tracking::RunQuery query;
  std::function<bool(const World&, const RunInfo&)> matches;
  // Sorted by acc's last value, descending, missing last, then run id.
};

// Ordered by acc's last value, descending; 100 runs; no columns.
tracking::RunQuery Search(std::string filter) {
  return {.filter = std::move(filter),
          .order_by = {"metrics.acc DESC"},
          .limit = 100,
          .columns = std::vector<std::string>{}};
}

std::vector<Query> Queries() {
  std::vector<Query> q;
  q.push_back({"1 condition", Search("params.lr < 0.001"), [](const World& w, const RunInfo& r) {
                 auto lr = Lr(w, r);
                 return lr && *lr < 0.001;
               }});
  q.push_back({"2 conditions", Search("params.lr < 0.001 AND metrics.val_loss.min < 0.3"),
               [](const World& w, const RunInfo& r) {
                 auto lr = Lr(w, r);
                 auto v = Stat(w, r, "val_loss", true);
                 return lr && *lr < 0.001 && v && *v < 0.3;
               }});
  q.push_back({"4 conditions",
               Search("params.lr < 0.001 AND params.optimizer.name = 'adam' AND "
                      "metrics.val_loss.min < 0.3 AND kind = 'training'"),
               [](const World& w, const RunInfo& r) {
                 auto lr = Lr(w, r);
                 auto v = Stat(w, r, "val_loss", true);
                 auto p = w.params.find(r.run_id);
                 bool adam = p != w.params.end() && p->second.contains("optimizer") &&
                             p->second["optimizer"].value("name", "") == "adam";
                 return lr && *lr < 0.001 && v && *v < 0.3 && adam && r.kind == "training";
               }});
  return q;
}

std::vector<std::string> BruteForce(Repo& repo, const Query& q) {
  World w;
  w.runs = repo.Runs();
  w.params = repo.AllParams();
  std::vector<uint64_t> ids;
  for (const auto& s : repo.AllSeries()) ids.push_back(s.series_id);
  w.stats = repo.GetSeriesStats(ids);
  std::vector<std::pair<std::optional<double>, std::string>> hits;
  for (const auto& r : w.runs) {
    if (q.matches(w, r)) hits.emplace_back(Stat(w, r, "acc", false), r.run_id);
  }
  std::sort(hits.begin(), hits.end(), [](const auto& a, const auto& b) {
    if (a.first.has_value() != b.first.has_value()) return a.first.has_value();
    if (a.first && *a.first != *b.first) return *a.first > *b.first;
    return a.second < b.second;
  });
  std::vector<std::string> out;
  for (size_t i = 0; i < hits.size() && i < q.query.limit; ++i) out.push_back(hits[i].second);
  return out;
}

std::vector<std::string> Ids(const tracking::RunPage& page) {
  std::vector<std::string> out;
  for (const auto& r : page.runs) out.push_back(r.run_id);
  return out;
}

tracking::RepoOptions Options(const std::string& wal_dir) {
  tracking::RepoOptions o;
  o.wal_dir = wal_dir;
  o.flush_rows = 200'000;
  return o;
}

void Build(const std::string& uri, const std::string& wal_dir, uint64_t runs) {
  Repo repo = Repo::Open(uri, Options(wal_dir));
  for (uint64_t i = 0; i < runs; ++i) {
    tracking::Run run =
        repo.CreateRun({.name = "run-" + std::to_string(i),
                        .experiment = "exp-" + std::to_string(i % 10),
                        .kind = i % 4 == 0 ? "eval" : "training",
                        .created_at_us = 1'767'225'600'000'000 + static_cast<int64_t>(i) * 1000});
    run.SetParams(ParamsFor(i));
    for (int m = 0; m < 5; ++m) {
      for (int subset = 0; subset < 2; ++subset) {
        json context = subset ? json{{"subset", "val"}} : json::object();
        for (int step = 0; step < kPointsPerSeries; ++step) {
          double v = Unit(i, static_cast<uint64_t>(m * 10 + subset * 3 + step));
          run.Track(m == 1 ? v : v * 2, kMetrics[m], {.step = step, .context = context});
        }
      }
    }
    if ((i + 1) % (runs / 10 == 0 ? 1 : runs / 10) == 0) {
      std::cerr << "  built " << i + 1 << " runs\n";
    }
  }
  repo.Close();
}

struct Phase {
  std::vector<double> warm_ms[3];
  double new_process_ms[3] = {0, 0, 0}, open_ms[3] = {0, 0, 0};
  double brute_ms[3] = {0, 0, 0};
  uint64_t matched[3] = {0, 0, 0};
};

// Without the brute force its time is null in the JSON and "skipped" in the
// table, never a zero that reads as a figure.
json PhaseJson(const Phase& p, const std::vector<Query>& queries, bool brute_force) {
  json out = json::array();
  for (size_t i = 0; i < queries.size(); ++i) {
    out.push_back({{"query", queries[i].name},
                   {"filter", queries[i].query.filter},
                   {"matched", p.matched[i]},
                   {"warm_p50_ms", Percentile(p.warm_ms[i], 0.5)},
                   {"warm_p95_ms", Percentile(p.warm_ms[i], 0.95)},
                   {"new_process_open_ms", p.open_ms[i]},
                   {"new_process_total_ms", p.new_process_ms[i]},
                   {"brute_force_ms", brute_force ? json(p.brute_ms[i]) : json(nullptr)}});
  }
  return out;
}

// Times every query; false when a result differs from the brute force.
bool Measure(const std::string& uri, const std::string& wal_dir, const SearchBenchArgs& args,
             const std::vector<Query>& queries, Phase* phase) {
  bool ok = true;
  Repo repo = Repo::Open(uri, Options(wal_dir));
  for (size_t q = 0; q < queries.size(); ++q) {
    std::vector<std::string> got;
    for (uint64_t i = 0; i < args.repeat; ++i) {
      auto start = Clock::now();
      tracking::RunPage page = repo.SearchRuns(queries[q].query);
      phase->warm_ms[q].push_back(Ms(Clock::now() - start));
      got = Ids(page);
      phase->matched[q] = page.matched;
    }
    std::vector<double> brute;
    std::vector<std::string> want;
    for (uint64_t i = 0; args.brute_force && i < args.slow_repeat; ++i) {
      auto start = Clock::now();
      want = BruteForce(repo, queries[q]);
      brute.push_back(Ms(Clock::now() - start));
    }
    phase->brute_ms[q] = Median(brute);
    if (args.brute_force && got != want) {
      std::cerr << "  ERROR: " << queries[q].name << ": the search returned " << got.size()
                << " runs, the brute force " << want.size() << " (or another order)\n";
      ok = false;
    }
    std::vector<double> total, open;
    for (uint64_t i = 0; i < args.slow_repeat; ++i) {
      json child =
          json::parse(RunSelf({"bench", "search-query", uri, std::to_string(q), "--dir", wal_dir}));
      total.push_back(child.at("open_ms").get<double>() + child.at("query_ms").get<double>());
      open.push_back(child.at("open_ms").get<double>());
    }
    phase->new_process_ms[q] = Median(total);
    phase->open_ms[q] = Median(open);
    std::cerr << "  " << queries[q].name << ": matched " << phase->matched[q] << ", warm p50 "
              << Fixed(Percentile(phase->warm_ms[q], 0.5), 1) << " ms, new process "
              << Fixed(phase->new_process_ms[q], 1) << " ms, brute force "
              << (args.brute_force ? Fixed(phase->brute_ms[q], 1) + " ms" : "skipped") << "\n";
  }
  return ok;
}

}  // namespace

int RunSearchQuery(const std::string& uri, const std::string& wal_dir, int query) {
  std::vector<Query> queries = Queries();
  auto start = Clock::now();
  Repo repo = Repo::Open(uri, Options(wal_dir));
  auto opened = Clock::now();
  tracking::RunPage page = repo.SearchRuns(queries.at(static_cast<size_t>(query)).query);
  auto done = Clock::now();
  std::cout << json{{"open_ms", Ms(opened - start)},
                    {"query_ms", Ms(done - opened)},
                    {"matched", page.matched}}
                   .dump()
            << "\n";
  return 0;
}

int RunSearchBench(const SearchBenchArgs& args) {
  ScratchDir scratch(args.dir, "kv0-bench-search");
  const std::string uri = (scratch.path() / "repo").string();
  const std::string wal_dir = (scratch.path() / "wal").string();
  std::vector<Query> queries = Queries();

  std::cerr << "building " << WithCommas(static_cast<double>(args.runs)) << " runs\n";
  auto start = Clock::now();
  Build(uri, wal_dir, args.runs);
  double build_s = Ms(Clock::now() - start) / 1000;

  Phase before, after;
  std::cerr << "before optimize\n";
  bool ok = Measure(uri, wal_dir, args, queries, &before);
  std::cerr << "optimize\n";
  start = Clock::now();
  {
    Repo repo = Repo::Open(uri, Options(wal_dir));
    repo.Optimize();
  }
  double optimize_s = Ms(Clock::now() - start) / 1000;
  std::cerr << "after optimize\n";
  ok = Measure(uri, wal_dir, args, queries, &after) && ok;

  std::printf(
      "kv0 bench search: %s runs (20 parameters, 10 series each), built in %.1f s, "
      "optimize %.1f s\n",
      WithCommas(static_cast<double>(args.runs)).c_str(), build_s, optimize_s);
  std::printf("%-14s %-9s %9s %10s %10s %12s %12s %10s\n", "query", "optimize", "matched",
              "warm p50", "warm p95", "new process", "brute force", "speed-up");
  for (int pass = 0; pass < 2; ++pass) {
    const Phase& p = pass ? after : before;
    for (size_t q = 0; q < queries.size(); ++q) {
      double p50 = Percentile(p.warm_ms[q], 0.5);
      std::string brute = "skipped", speed_up = "skipped";
      if (args.brute_force) {
        brute = Fixed(p.brute_ms[q], 1) + " ms";
        speed_up = p50 > 0 ? Fixed(p.brute_ms[q] / p50, 1) + "x" : "-";
      }
      std::printf(
          "%-14s %-9s %9llu %8.1f ms %8.1f ms %9.1f ms %12s %10s\n", queries[q].name.c_str(),
          pass ? "after" : "before", static_cast<unsigned long long>(p.matched[q]), p50,
          Percentile(p.warm_ms[q], 0.95), p.new_process_ms[q], brute.c_str(), speed_up.c_str());
    }
  }
  if (!args.json_path.empty()) {
    json out = {{"benchmark", "kv0 bench search"},
                {"when", Timestamp()},
                {"runs", args.runs},
                {"repeat", args.repeat},
                {"slow_repeat", args.slow_repeat},
                {"brute_force", args.brute_force},
                {"build_s", build_s},
                {"optimize_s", optimize_s},
                {"before_optimize", PhaseJson(before, queries, args.brute_force)},
                {"after_optimize", PhaseJson(after, queries, args.brute_force)}};
    std::ofstream(args.json_path) << out.dump(2) << "\n";
  }
  return ok ? 0 : 1;
}

}  // namespace kv0::bench
