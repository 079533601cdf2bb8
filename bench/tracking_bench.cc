// `kv0 bench tracking`: the tracking layer at the scale of a busy tracker.
//
// Phases, in order, on one fresh repository with its WAL beside it:
//
//  - logging: N runs (default 2000) logged one after another through one
//    Repo handle, as N training scripts run in turn would: CreateRun,
//    SetParams with 20 parameters (nested objects, a list), 10 series (5
//    names x contexts {"subset": "train"} and {"subset": "val"}) of 1000
//    steps through Run::Track with an explicit step and epoch, and
//    Run::Finish, which commits the run. The figure is the whole loop.
//  - track: one more run, M points (default 5,000,000) over 5 series with an
//    empty context, Track() called step by step with an explicit step. Timed
//    without the final Finish() (background flushes, and the waits for them
//    when Track gets too far ahead, are included) and with it.
//  - range read, before optimize: ReadMany of one series of the track run
//    (M / 5 points), steps [M/10 - 50,000, M/10 + 50,000), five times, each
//    through the same handle; the figure is the median.
//  - refresh, before optimize: the writer closes its handle, and a new
//    process (this executable, `bench tracking-refresh`) opens the repository
//    and times what a tracker's server does to refresh its catalog: Runs(),
//    AllParams(), AllSeries() and GetSeriesStats() of every series. It does
//    this twice; the first is the cold figure the target is about.
//  - optimize: Repo::Optimize() on a new handle, then again (nothing new to
//    rewrite).
//  - refresh after optimize, as before.
//  - range read after optimize, on a new handle, as before.
//
// Nothing here asserts on a timing: the summary prints each figure next to
// its target. The results read back are checked (run, series and statistics
// counts, the points of the range read); a wrong one is an error and makes
// the command fail.

#include "tracking_bench.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "kv0/error.h"
#include "kv0/tracking.h"

namespace kv0::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using tracking::Repo;
using tracking::RepoOptions;

constexpr int kStepsPerRun = 1000;
constexpr int kEpochSteps = 100;
const char* const kRunMetrics[] = {"loss", "accuracy", "lr", "grad_norm", "throughput"};
const char* const kSubsets[] = {"train", "val"};
constexpr int kSeriesPerRun = 10;
constexpr int kTrackSeries = 5;
constexpr int64_t kRangeSteps = 100'000;
constexpr int kRangeReads = 5;
constexpr int kProgressParts = 10;

// Targets from issue 20, stated for the defaults (2,000 runs, a series of
// 1,000,000 points); a figure meets its target when at or below it (at or
// above, for a rate).
constexpr double kLoggingTargetSeconds = 45;
constexpr double kTrackTargetPointsPerSecond = 3'000'000;
constexpr double kStatsTargetMs = 50;           // GetSeriesStats, before optimize
constexpr double kRefreshTargetSeconds = 0.15;  // the four queries, before optimize
constexpr double kRangeBeforeTargetMs = 50;
constexpr double kRangeAfterTargetMs = 10;

// The 20 parameters of run i: 9 at the top (one a list), 11 in nested
// objects up to three levels deep.
json ParamsFor(uint64_t i) {
  return {
      {"lr", 1e-3 * static_cast<double>(1 + i % 7)},
      {"batch_size", 32 << (i % 4)},
      {"epochs", 10},
      {"seed", i},
      {"warmup_steps", 100},
      {"weight_decay", 0.01},
      {"grad_clip", 1.0},
      {"mixed_precision", i % 2 == 0},
      {"layers_to_freeze", json::array({0, 1, 2})},
      {"optimizer", {{"name", "adamw"}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}}},
      {"model",
       {{"arch", "transformer"}, {"layers", 12}, {"hidden", 768}, {"dropout", 0.1 * (i % 3)}}},
      {"data", {{"dataset", "corpus-" + std::to_string(i % 5)}, {"augment", {{"flip", true}}}}},
      {"scheduler", {{"name", "cosine"}}},
  };
}

// A loss-like curve with deterministic noise.
double Value(int metric, int subset, int64_t step, uint64_t run) {
  double t = static_cast<double>(step);
  double noise = static_cast<double>((run * 2654435761u + step * 40503u + metric) % 1000) / 1e4;
  switch (metric) {
    case 0:
      return 2.5 * std::exp(-t / 300) + 0.1 * subset + noise;
    case 1:
      return 1 - 0.9 * std::exp(-t / 250) - 0.05 * subset + noise;
    case 2:
      return 1e-3 * std::cos(t / kStepsPerRun * M_PI / 2);
    case 3:
      return 1 + noise * 10;
    default:
      return 1000 + noise * 1e3;
  }
}

// ---------------------------------------------------------------------------
// Figures.

struct Refresh {
  bool done = false;
  json figures;  // what the reader process printed
};

struct Report {
  uint64_t runs = 0;
  uint64_t track_points = 0;

  std::optional<double> logging_seconds;
  std::vector<std::pair<uint64_t, double>> logging_progress;  // runs done, seconds
  std::optional<double> track_seconds, track_flush_seconds;
  std::vector<double> range_before_ms, range_after_ms;
  uint64_t range_points = 0;
  Refresh refresh_before, refresh_after;
  std::optional<double> optimize_seconds, optimize_again_seconds;
  json optimize_stats, optimize_again_stats;
  std::vector<std::string> errors;

  void Error(const std::string& message) {
    errors.push_back(message);
    std::cerr << "  ERROR: " << message << "\n";
  }
};

json OptimizeJson(const tracking::OptimizeStats& s) {
  return {{"run_rows_before", s.run_rows_before},
          {"run_rows_after", s.run_rows_after},
          {"points_rewritten", s.points_rewritten},
          {"full_rewrite", s.full_rewrite}};
}

// Runs one phase, reporting progress; an exception becomes an error in the
// report and a false return.
bool Phase(Report& report, const std::string& what, const std::function<void()>& fn) {
  std::cerr << "  " << what << " ..." << std::flush;
  auto start = Clock::now();
  try {
    fn();
  } catch (const std::exception& e) {
    std::cerr << " failed\n";
    report.Error(what + ": " + e.what());
    return false;
  }
  std::cerr << " " << Fixed(Seconds(Clock::now() - start), 2) << " s\n";
  return true;
}

// ---------------------------------------------------------------------------
// Phases.

void LogRuns(Repo& repo, Report& report) {
  std::vector<tracking::TrackOptions> opts(kSeriesPerRun);
  for (int k = 0; k < kSeriesPerRun; ++k) opts[k].context = {{"subset", kSubsets[k % 2]}};
  uint64_t part = std::max<uint64_t>(1, report.runs / kProgressParts);
  auto start = Clock::now();
  for (uint64_t i = 0; i < report.runs; ++i) {
    tracking::NewRun spec;
    spec.name = "run-" + std::to_string(i);
    spec.experiment = "experiment-" + std::to_string(i % 20);
    spec.kind = "training";
    spec.tags = {"bench", i % 2 ? "odd" : "even"};
    spec.target = {{"model", "transformer"}, {"dataset", "corpus-" + std::to_string(i % 5)}};
    auto run = repo.CreateRun(spec);
    run.SetParams(ParamsFor(i));
    for (int64_t step = 0; step < kStepsPerRun; ++step) {
      for (int k = 0; k < kSeriesPerRun; ++k) {
        opts[k].step = step;
        opts[k].epoch = step / kEpochSteps;
        run.Track(Value(k / 2, k % 2, step, i), kRunMetrics[k / 2], opts[k]);
      }
    }
    run.Finish();
    if ((i + 1) % part == 0 || i + 1 == report.runs) {
      double s = Seconds(Clock::now() - start);
      report.logging_progress.emplace_back(i + 1, s);
      std::cerr << " " << i + 1 << " (" << Fixed(s, 1) << " s)" << std::flush;
    }
  }
  report.logging_seconds = Seconds(Clock::now() - start);
}

// The track run; returns its first series' id.
uint64_t TrackPoints(Repo& repo, Report& report) {
  tracking::NewRun spec;
  spec.name = "track-throughput";
  spec.kind = "bench";
  auto run = repo.CreateRun(spec);
  std::vector<std::string> names;
  for (int k = 0; k < kTrackSeries; ++k) names.push_back("series-" + std::to_string(k));
  int64_t steps = static_cast<int64_t>(report.track_points / kTrackSeries);
  tracking::TrackOptions opts;
  auto start = Clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    opts.step = step;
    for (int k = 0; k < kTrackSeries; ++k) {
      run.Track(static_cast<double>(step) * 1e-3 + k, names[k], opts);
    }
  }
  auto tracked = Clock::now();
  run.Finish();
  auto finished = Clock::now();
  report.track_seconds = Seconds(tracked - start);
  report.track_flush_seconds = Seconds(finished - start);
  return tracking::SeriesId(run.run_id(), names[0], json::object());
}

// Five reads of the same range of one series; checks what they return.
std::vector<double> RangeReads(Repo& repo, uint64_t series_id, int64_t series_steps, Report& report,
                               const std::string& what) {
  int64_t length = std::min<int64_t>(kRangeSteps, series_steps);
  tracking::StepRange range{.start = series_steps / 2 - length / 2, .stop = 0};
  range.stop = range.start + length;
  report.range_points = static_cast<uint64_t>(length);
  std::vector<uint64_t> ids{series_id};
  std::vector<double> ms;
  for (int i = 0; i < kRangeReads; ++i) {
    auto start = Clock::now();
    auto data = repo.ReadMany(ids, range);
    ms.push_back(Seconds(Clock::now() - start) * 1e3);
    auto it = data.find(series_id);
    size_t got = it == data.end() ? 0 : it->second.size();
    bool ok = got == static_cast<size_t>(length);
    if (ok && length > 0) {
      ok = it->second.steps.front() == range.start && it->second.steps.back() == range.stop - 1;
    }
    if (!ok) {
      report.Error(what + ": read " + std::to_string(got) + " points of steps [" +
                   std::to_string(range.start) + ", " + std::to_string(range.stop) +
                   "), expected " + std::to_string(length));
      break;
    }
  }
  return ms;
}

// Runs `bench tracking-refresh` in a new process and returns what it printed.
json SpawnRefresh(const std::string& uri, const std::string& wal_dir) {
  return json::parse(RunSelf({"bench", "tracking-refresh", uri, "--dir", wal_dir}));
}

void CheckRefresh(const json& r, uint64_t runs, uint64_t series, Report& report,
                  const std::string& what) {
  auto check = [&](const char* key, uint64_t expected) {
    uint64_t got = r.at(key).get<uint64_t>();
    if (got != expected) {
      report.Error(what + ": " + key + " " + std::to_string(got) + ", expected " +
                   std::to_string(expected));
    }
  };
  check("runs", runs);
  check("series", series);
  check("stats", series);
}

// ---------------------------------------------------------------------------
// Output.

// "<= 45 s: met", from the figure, the target and the unit.
std::string AtMost(double figure, double target, int digits, const std::string& unit) {
  return "<= " + Fixed(target, digits) + unit + (figure <= target ? ": met" : ": MISSED");
}

void PrintSummary(const Report& r) {
  std::printf(
      "\nkv0 %s bench tracking: %s runs x %d series x %s steps, 20 parameters each; "
      "%u cores\n\n",
      KV0_VERSION, WithCommas(static_cast<double>(r.runs)).c_str(), kSeriesPerRun,
      WithCommas(kStepsPerRun).c_str(), std::thread::hardware_concurrency());
  auto row = [](const std::string& what, const std::string& figure, const std::string& target) {
    std::printf("%-50s %18s  %s\n", what.c_str(), figure.c_str(), target.c_str());
  };
  row("phase", "figure", "target");
  auto seconds = [](const std::optional<double>& s) {
    return s ? Fixed(*s, 2) + " s" : std::string("failed");
  };

  double points = static_cast<double>(r.runs) * kSeriesPerRun * kStepsPerRun;
  row("logging (" + WithCommas(static_cast<double>(r.runs)) + " runs)", seconds(r.logging_seconds),
      r.logging_seconds ? AtMost(*r.logging_seconds, kLoggingTargetSeconds, 0, " s") : "");
  if (r.logging_seconds && *r.logging_seconds > 0) {
    row("  points/s, commits included", WithCommas(points / *r.logging_seconds), "");
    row("  runs/s", Fixed(static_cast<double>(r.runs) / *r.logging_seconds, 1), "");
  }

  double tp = static_cast<double>(r.track_points / kTrackSeries * kTrackSeries);
  row("Track() of " + WithCommas(tp) + " points, 5 series", "", "");
  if (r.track_seconds && *r.track_seconds > 0) {
    double rate = tp / *r.track_seconds;
    row("  points/s, without the final flush", WithCommas(rate),
        ">= " + WithCommas(kTrackTargetPointsPerSecond) + "/s" +
            (rate >= kTrackTargetPointsPerSecond ? ": met" : ": MISSED"));
  } else {
    row("  points/s, without the final flush", "failed", "");
  }
  if (r.track_flush_seconds && *r.track_flush_seconds > 0) {
    row("  points/s, with the final flush", WithCommas(tp / *r.track_flush_seconds), "");
  }

  auto refresh_rows = [&](const Refresh& refresh, const std::string& when) {
    row("catalog refresh from a new process, " + when, "", "");
    if (!refresh.done) {
      row("  queries", "failed", "");
      return;
    }
    const json& f = refresh.figures;
    const json& cold = f["cold"];
    row("  Repo::Open", Fixed(f["open_seconds"].get<double>() * 1e3, 1) + " ms", "");
    row("  Runs() (" + WithCommas(f["runs"].get<double>()) + ")",
        Fixed(cold["runs_seconds"].get<double>() * 1e3, 1) + " ms", "");
    row("  AllParams() (" + WithCommas(f["params_runs"].get<double>()) + " runs)",
        Fixed(cold["params_seconds"].get<double>() * 1e3, 1) + " ms", "");
    row("  AllSeries() (" + WithCommas(f["series"].get<double>()) + ")",
        Fixed(cold["series_seconds"].get<double>() * 1e3, 1) + " ms", "");
    const double stats_ms = cold["stats_seconds"].get<double>() * 1e3;
    row("  GetSeriesStats(all) (" + WithCommas(f["stats"].get<double>()) + ")",
        Fixed(stats_ms, 1) + " ms",
        when == "before optimize" ? AtMost(stats_ms, kStatsTargetMs, 0, " ms") : "");
    double total = cold["total_seconds"].get<double>();
    row("  the four queries", Fixed(total, 3) + " s",
        when == "before optimize" ? AtMost(total, kRefreshTargetSeconds, 2, " s") : "");
    row("  the four queries, again in the same process",
        Fixed(f["warm"]["total_seconds"].get<double>(), 3) + " s", "");
  };
  refresh_rows(r.refresh_before, "before optimize");
  row("optimize", seconds(r.optimize_seconds), "");
  row("  again, nothing new", seconds(r.optimize_again_seconds), "");
  refresh_rows(r.refresh_after, "after optimize");

  auto range_row = [&](const std::vector<double>& ms, const std::string& when, double target) {
    std::string label = "range read of " + WithCommas(static_cast<double>(r.range_points)) +
                        " steps, " + when + " (median of " + std::to_string(kRangeReads) + ")";
    if (ms.empty()) {
      row(label, "failed", "");
      return;
    }
    double m = Median(ms);
    row(label, Fixed(m, 1) + " ms", AtMost(m, target, 0, " ms"));
  };
  std::printf("(range reads: one series of %s points)\n",
              WithCommas(static_cast<double>(r.track_points / kTrackSeries)).c_str());
  range_row(r.range_before_ms, "before optimize", kRangeBeforeTargetMs);
  range_row(r.range_after_ms, "after optimize", kRangeAfterTargetMs);

  if (!r.errors.empty()) {
    std::printf("\nERRORS:\n");
    for (const auto& e : r.errors) std::printf("  %s\n", e.c_str());
  }
  std::fflush(stdout);
}

json ReportJson(const Report& r) {
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  auto rate = [](double n, const std::optional<double>& s) {
    return s && *s > 0 ? json(n / *s) : json(nullptr);
  };
  double points = static_cast<double>(r.runs) * kSeriesPerRun * kStepsPerRun;
  double tp = static_cast<double>(r.track_points / kTrackSeries * kTrackSeries);
  json progress = json::array();
  for (const auto& [runs, s] : r.logging_progress)
    progress.push_back({{"runs", runs}, {"seconds", s}});
  auto range = [&](const std::vector<double>& ms) {
    return json{{"ms", ms}, {"median_ms", ms.empty() ? json(nullptr) : json(Median(ms))}};
  };
  RepoOptions defaults;
  json j;
  j["timestamp"] = Timestamp();
  j["cores"] = std::thread::hardware_concurrency();
  j["kv0_version"] = KV0_VERSION;
  j["config"] = {{"runs", r.runs},
                 {"series_per_run", kSeriesPerRun},
                 {"steps_per_run", kStepsPerRun},
                 {"params_per_run", 20},
                 {"track_points", tp},
                 {"track_series", kTrackSeries},
                 {"range_steps", r.range_points},
                 {"range_reads", kRangeReads},
                 {"flush_rows", defaults.flush_rows},
                 {"flush_interval_ms", defaults.flush_interval.count()},
                 {"max_fragments", defaults.max_fragments},
                 {"wal_sync", "batch"}};
  j["targets"] = {{"logging_seconds", kLoggingTargetSeconds},
                  {"track_points_per_second", kTrackTargetPointsPerSecond},
                  {"stats_before_optimize_ms", kStatsTargetMs},
                  {"refresh_before_optimize_seconds", kRefreshTargetSeconds},
                  {"range_read_before_optimize_ms", kRangeBeforeTargetMs},
                  {"range_read_after_optimize_ms", kRangeAfterTargetMs}};
  j["logging"] = {{"seconds", opt(r.logging_seconds)},
                  {"points", points},
                  {"points_per_second", rate(points, r.logging_seconds)},
                  {"progress", progress}};
  j["track"] = {{"points", tp},
                {"seconds_without_final_flush", opt(r.track_seconds)},
                {"seconds_with_final_flush", opt(r.track_flush_seconds)},
                {"points_per_second_without_final_flush", rate(tp, r.track_seconds)},
                {"points_per_second_with_final_flush", rate(tp, r.track_flush_seconds)}};
  j["refresh_before_optimize"] = r.refresh_before.done ? r.refresh_before.figures : json(nullptr);
  j["optimize"] = {{"seconds", opt(r.optimize_seconds)},
                   {"stats", r.optimize_stats},
                   {"again_seconds", opt(r.optimize_again_seconds)},
                   {"again_stats", r.optimize_again_stats}};
  j["refresh_after_optimize"] = r.refresh_after.done ? r.refresh_after.figures : json(nullptr);
  j["range_read"] = {{"series_points", r.track_points / kTrackSeries},
                     {"steps", r.range_points},
                     {"before_optimize", range(r.range_before_ms)},
                     {"after_optimize", range(r.range_after_ms)}};
  j["errors"] = r.errors;
  return j;
}

}  // namespace

int RunTrackingBench(const TrackingBenchArgs& args) {
  if (args.runs == 0) throw Error(Code::kInvalidArgument, "--runs must be at least 1");
  if (args.points < kTrackSeries) {
    throw Error(Code::kInvalidArgument,
                "--points must be at least " + std::to_string(kTrackSeries));
  }
  Report report;
  report.runs = args.runs;
  report.track_points = args.points;
  ScratchDir temp(args.dir, "kv0-bench-tracking");
  std::string uri = (temp.path() / "repo").string();
  std::string wal = (temp.path() / "wal").string();
  std::string reader_wal = (temp.path() / "reader-wal").string();
  std::cerr << "kv0 bench tracking: " << args.runs << " runs, " << args.points
            << " track points, in " << temp.path().string() << "\n";
  RepoOptions options;
  options.wal_dir = wal;
  uint64_t series_id = 0;
  int64_t series_steps = static_cast<int64_t>(args.points / kTrackSeries);

  bool written = false;
  {
    std::optional<Repo> repo;
    written = Phase(report, "logging", [&] {
      repo.emplace(Repo::Open(uri, options));
      LogRuns(*repo, report);
    });
    written = written && Phase(report, "track", [&] { series_id = TrackPoints(*repo, report); });
    if (written) {
      Phase(report, "range read before optimize", [&] {
        report.range_before_ms = RangeReads(*repo, series_id, series_steps, report, "range read");
      });
    }
    Phase(report, "close", [&] {
      if (repo) repo->Close();
    });
  }
  uint64_t runs = args.runs + 1;
  uint64_t series = args.runs * kSeriesPerRun + kTrackSeries;
  if (written) {
    report.refresh_before.done = Phase(report, "refresh before optimize (new process)", [&] {
      report.refresh_before.figures = SpawnRefresh(uri, reader_wal);
    });
    if (report.refresh_before.done) {
      CheckRefresh(report.refresh_before.figures, runs, series, report, "refresh before optimize");
    }
    Phase(report, "optimize", [&] {
      auto repo = Repo::Open(uri, options);
      auto start = Clock::now();
      auto stats = repo.Optimize();
      report.optimize_seconds = Seconds(Clock::now() - start);
      report.optimize_stats = OptimizeJson(stats);
      start = Clock::now();
      auto again = repo.Optimize();
      report.optimize_again_seconds = Seconds(Clock::now() - start);
      report.optimize_again_stats = OptimizeJson(again);
      if (again.points_rewritten != 0) {
        report.Error("a second optimize rewrote " + std::to_string(again.points_rewritten) +
                     " points");
      }
      repo.Close();
    });
    report.refresh_after.done = Phase(report, "refresh after optimize (new process)", [&] {
      report.refresh_after.figures = SpawnRefresh(uri, reader_wal);
    });
    if (report.refresh_after.done) {
      CheckRefresh(report.refresh_after.figures, runs, series, report, "refresh after optimize");
    }
    Phase(report, "range read after optimize", [&] {
      auto repo = Repo::Open(uri, options);
      report.range_after_ms = RangeReads(repo, series_id, series_steps, report, "range read");
      repo.Close();
    });
  }

  PrintSummary(report);
  if (!args.json_path.empty()) {
    std::ofstream out(args.json_path);
    out << ReportJson(report).dump(2) << "\n";
    out.close();
    if (!out) throw Error(Code::kIOError, "cannot write " + args.json_path);
    std::cerr << "wrote " << args.json_path << "\n";
  }
  return report.errors.empty() ? 0 : 1;
}

int RunTrackingRefresh(const std::string& uri, const std::string& wal_dir) {
  RepoOptions options;
  options.wal_dir = wal_dir;
  auto start = Clock::now();
  auto repo = Repo::Open(uri, options);
  double open_seconds = Seconds(Clock::now() - start);

  json out;
  out["open_seconds"] = open_seconds;
  for (const char* pass : {"cold", "warm"}) {
    json f;
    auto t0 = Clock::now();
    auto runs = repo.Runs();
    auto t1 = Clock::now();
    auto params = repo.AllParams();
    auto t2 = Clock::now();
    auto series = repo.AllSeries();
    auto t3 = Clock::now();
    std::vector<uint64_t> ids;
    ids.reserve(series.size());
    for (const auto& s : series) ids.push_back(s.series_id);
    auto stats = repo.GetSeriesStats(ids);
    auto t4 = Clock::now();
    f["runs_seconds"] = Seconds(t1 - t0);
    f["params_seconds"] = Seconds(t2 - t1);
    f["series_seconds"] = Seconds(t3 - t2);
    f["stats_seconds"] = Seconds(t4 - t3);
    f["total_seconds"] = Seconds(t4 - t0);
    out[pass] = f;
    out["runs"] = runs.size();
    out["params_runs"] = params.size();
    out["series"] = series.size();
    out["stats"] = stats.size();
  }
  start = Clock::now();
  auto versions = repo.LatestVersions();
  out["latest_versions_seconds"] = Seconds(Clock::now() - start);
  out["versions"] = {{"runs", versions.runs},
                     {"params", versions.params},
                     {"series", versions.series},
                     {"metrics", versions.metrics}};
  repo.Close();
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace kv0::bench
