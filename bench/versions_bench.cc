#include "bench/versions_bench.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kv0/arrow_c.h"
#include "lance/arrow.h"
#include "lance/auto_cleanup.h"

namespace kv0::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kWindow = 1000;      // commits in each window compared
constexpr uint64_t kFirstVersion = 20;  // the early window starts here
constexpr size_t kMaxFragments = 32;    // the tracking layer's default max_fragments

const arrow::Schema kSchema = {{"id", arrow::Type::kUInt64, false}};

arrow::OwnedStream Row(uint64_t id) {
  arrow::BatchBuilder builder(kSchema);
  builder.uint64(0).Append(id);
  return arrow::OneBatch(kSchema, builder);
}

struct Window {
  uint64_t first_version = 0;
  std::vector<double> ms;

  json Json() const {
    return {{"first_version", first_version},
            {"commits", ms.size()},
            {"p50_ms", Percentile(ms, 0.5)},
            {"p95_ms", Percentile(ms, 0.95)},
            {"max_ms", Percentile(ms, 1.0)},
            {"mean_ms", ms.empty() ? 0.0
                                   : std::accumulate(ms.begin(), ms.end(), 0.0) /
                                         static_cast<double>(ms.size())}};
  }
};

struct RunResult {
  std::string name;
  uint64_t commits = 0;      // appends, the commits timed
  uint64_t compactions = 0;  // commits that merged the fragments, not timed
  Window early, late;
  double wall_s = 0, cpu_s = 0;
  double rss_mb = 0;            // the process's resident memory with the dataset still open
  uint64_t oldest_version = 0;  // the oldest version kept at the end
  uint64_t cleanups = 0;        // cleanups kv0's AutoCleanup ran (0 for Lance's hook)
  bool complete = true;
};

// Appends one row per commit until the dataset is at version `versions`,
// timing each commit, then waits for background work and checks the rows.
RunResult Run(const std::string& name, const std::string& uri, const lance::StorageOptions& storage,
              uint64_t versions, std::chrono::seconds retention, bool lances_hook) {
  RunResult result;
  result.name = name;
  auto start = Clock::now();
  double cpu_start = CpuSeconds();
  auto cleanup = std::make_shared<lance::AutoCleanup>(retention);
  {
    lance::Dataset dataset = lance::Dataset::Create(uri, storage, kSchema);
    if (lances_hook) {
      dataset.UpdateConfig(
          {{"lance.auto_cleanup.interval", "20"},
           {"lance.auto_cleanup.older_than", std::to_string(retention.count()) + "s"}});
    } else {
      dataset.SetAutoCleanup(cleanup);
    }
    result.early.first_version = kFirstVersion;
    result.late.first_version = versions > kWindow ? versions - kWindow + 1 : 1;
    uint64_t rows = 0;
    std::vector<double> recent;  // for progress on stderr
    while (dataset.version() < versions) {
      auto at = Clock::now();
      dataset.Append(Row(rows++));
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - at).count();
      uint64_t v = dataset.version();
      if (v >= result.early.first_version && result.early.ms.size() < kWindow) {
        result.early.ms.push_back(ms);
      }
      if (v >= result.late.first_version) result.late.ms.push_back(ms);
      // As kv0's layers do, so that the manifest's fragment list (which
      // every commit rewrites) stays short and only the versions grow.
      if (dataset.Fragments().size() > kMaxFragments) {
        dataset.Compact({});
        ++result.compactions;
      }
      recent.push_back(ms);
      if (recent.size() == 1000) {
        std::cerr << "  " << name << ": version " << v << ", the last 1,000 commits p50 "
                  << Fixed(Percentile(recent, 0.5), 2) << " ms, p95 "
                  << Fixed(Percentile(recent, 0.95), 2) << " ms\n";
        recent.clear();
      }
    }
    result.commits = rows;
    cleanup->WaitIdle();
    result.cleanups = cleanup->cleanups();
    lance::Dataset reopened = lance::Dataset::Open(uri, storage);
    result.complete = reopened.CountRows() == rows;
    result.oldest_version = reopened.OldestVersion().version;
    result.rss_mb = ProcessMemory().resident_mb;
  }
  result.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  result.cpu_s = CpuSeconds() - cpu_start;
  return result;
}

json RunJson(const RunResult& r) {
  return {{"name", r.name},          {"commits", r.commits},   {"compactions", r.compactions},
          {"early", r.early.Json()}, {"late", r.late.Json()},  {"wall_s", r.wall_s},
          {"cpu_s", r.cpu_s},        {"complete", r.complete}, {"oldest_version", r.oldest_version},
          {"cleanups", r.cleanups}};
}

void PrintRow(const RunResult& r) {
  auto early = r.early.Json(), late = r.late.Json();
  std::printf("| %s | %s | %s / %s / %s | %s / %s / %s | %.2fx | %s | %s | %s | %s | %s |\n",
              r.name.c_str(), WithCommas(static_cast<double>(r.commits)).c_str(),
              Fixed(early["p50_ms"], 2).c_str(), Fixed(early["p95_ms"], 2).c_str(),
              Fixed(early["max_ms"], 1).c_str(), Fixed(late["p50_ms"], 2).c_str(),
              Fixed(late["p95_ms"], 2).c_str(), Fixed(late["max_ms"], 1).c_str(),
              late["mean_ms"].get<double>() / early["mean_ms"].get<double>(),
              Fixed(r.wall_s, 1).c_str(), Fixed(r.cpu_s, 1).c_str(), WithCommas(r.rss_mb).c_str(),
              WithCommas(static_cast<double>(r.oldest_version)).c_str(),
              r.name == "lance" ? "-" : std::to_string(r.cleanups).c_str());
}

}  // namespace

int RunVersionsBench(const VersionsBenchArgs& args) {
  std::unique_ptr<ScratchDir> scratch;
  std::string prefix = args.uri;
  if (prefix.empty()) {
    scratch = std::make_unique<ScratchDir>(args.dir, "kv0-bench-versions");
    prefix = scratch->path().string();
  }
  auto stamp = std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  const std::chrono::seconds retention(args.retention_s);
  // A first dataset warms the process up (threads, allocator, caches), so
  // that the first measured commits are not slower for being the first.
  Run("warm-up", prefix + "/warm-up-" + stamp + ".lance", args.storage, kFirstVersion + kWindow,
      retention, false);
  std::vector<RunResult> runs;
  runs.push_back(Run("kv0", prefix + "/kv0-" + stamp + ".lance", args.storage, args.versions,
                     retention, false));
  runs.push_back(Run("lance", prefix + "/lance-" + stamp + ".lance", args.storage,
                     args.lance_versions, retention, true));

  std::printf("\nOne writer, one row per commit, retention %llu s; %s\n",
              static_cast<unsigned long long>(args.retention_s), Timestamp().c_str());
  std::printf("commit ms: %llu commits from version %llu (early) and the last %llu (late)\n\n",
              static_cast<unsigned long long>(kWindow),
              static_cast<unsigned long long>(kFirstVersion),
              static_cast<unsigned long long>(kWindow));
  std::printf(
      "| cleanup | commits | early p50 / p95 / max | late p50 / p95 / max | late/early mean "
      "| wall s | CPU s | RSS MB | oldest version kept | cleanups |\n"
      "|---|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
  bool complete = true;
  json out = json::array();
  for (const auto& r : runs) {
    PrintRow(r);
    out.push_back(RunJson(r));
    complete = complete && r.complete;
    if (!r.complete) std::cerr << "ERROR: " << r.name << " lost rows\n";
  }
  if (!args.json_path.empty()) {
    std::ofstream(args.json_path) << json{{"timestamp", Timestamp()}, {"runs", out}}.dump(2)
                                  << "\n";
  }
  return complete ? 0 : 1;
}

}  // namespace kv0::bench
