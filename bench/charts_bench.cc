#include "bench/charts_bench.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kv0/arrow_c.h"
#include "kv0/tracking.h"

namespace kv0::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using tracking::Repo;

constexpr double kSpike = 1000;
constexpr const char* kMetric = "loss";

// Where a run's spike and NaN are: near 60 % of the history, a little apart
// from run to run, the NaN 100 steps after the spike.
int64_t SpikeStep(const ChartsBenchArgs& args, uint64_t run) {
  return static_cast<int64_t>(args.points * 6 / 10 + run % 50);
}
int64_t NanStep(const ChartsBenchArgs& args, uint64_t run) { return SpikeStep(args, run) + 100; }

// A decaying loss with deterministic noise in [0, 0.1).
double Value(const ChartsBenchArgs& args, uint64_t run, int64_t step) {
  if (step == SpikeStep(args, run)) return kSpike;
  if (step == NanStep(args, run)) return std::numeric_limits<double>::quiet_NaN();
  double noise =
      static_cast<double>((run * 2654435761u + static_cast<uint64_t>(step) * 40503u) % 1000) / 1e4;
  return 2 * std::exp(-static_cast<double>(step) / static_cast<double>(args.points / 4)) + 0.2 +
         noise;
}

// --- What the process does while it reads ----------------------------------

// Bytes this process has read through read(2) and its kind (rchar), which
// Lance's local reads are.
uint64_t BytesRead() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return 0;
}

// Makes VmHWM start again from the current resident size (Linux 4.0 on).
void ResetPeak() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct Timing {
  std::vector<double> ms;
  double cpu_s = 0;
  uint64_t bytes = 0;    // the largest of the repeats
  double extra_mb = 0;   // peak resident over the resident before, the largest
  uint64_t points = 0;   // read (raw) or counted in buckets (downsampled)
  uint64_t buckets = 0;  // returned (downsampled)

  json Json() const {
    return {{"p50_ms", Percentile(ms, 0.5)},
            {"p95_ms", Percentile(ms, 0.95)},
            {"cpu_s", cpu_s},
            {"bytes_read", bytes},
            {"peak_extra_mb", extra_mb},
            {"points", points},
            {"buckets", buckets}};
  }
};

// Runs read `repeat` times, recording each.
template <typename Read>
Timing Time(uint64_t repeat, const Read& read) {
  Timing t;
  for (uint64_t i = 0; i < repeat; ++i) {
    ResetPeak();
    double rss_before = ProcessMemory().resident_mb, cpu = CpuSeconds();
    uint64_t bytes = BytesRead();
    auto start = Clock::now();
    read(t);
    t.ms.push_back(Seconds(Clock::now() - start) * 1e3);
    t.cpu_s += CpuSeconds() - cpu;
    t.bytes = std::max(t.bytes, BytesRead() - bytes);
    t.extra_mb = std::max(t.extra_mb, ProcessMemory().peak_mb - rss_before);
  }
  return t;
}

// --- The reads ----------------------------------------------------------------

struct View {
  std::string name;
  std::optional<int64_t> start, stop;  // unset: the whole history
};

// The four windows over a history of `history` steps, centred on the spikes.
std::vector<View> Views(const ChartsBenchArgs& args, int64_t history) {
  const int64_t centre = SpikeStep(args, 0) + 25;
  auto around = [&](const std::string& name, int64_t width) {
    View v{name, std::max<int64_t>(0, centre - width / 2),
           std::min<int64_t>(history, centre + width / 2)};
    return v;
  };
  return {View{"full", std::nullopt, std::nullopt}, around("1/10", history / 10),
          around("1/100", history / 100), around("1,000 steps", 1000)};
}

struct Checker {
  const ChartsBenchArgs& args;
  int64_t history;
  std::vector<std::string> errors;

  void Error(const std::string& message) {
    if (errors.size() < 20) std::cerr << "  ERROR: " << message << "\n";
    errors.push_back(message);
  }

  // Every point of the window counted, the spike a maximum, the NaN counted.
  void Check(const View& view, uint64_t run, const tracking::DownsampledSeries& s) {
    const int64_t start = view.start.value_or(0), stop = view.stop.value_or(history);
    uint64_t count = 0, non_finite = 0;
    bool spike = false;
    for (const tracking::Bucket& b : s.buckets) {
      count += b.count;
      non_finite += b.non_finite;
      spike = spike ||
              (b.count > b.non_finite && b.max == kSpike && b.max_step == SpikeStep(args, run));
    }
    const std::string where = view.name + ", run " + std::to_string(run);
    if (count != static_cast<uint64_t>(stop - start)) {
      Error(where + ": " + std::to_string(count) + " points in buckets, " +
            std::to_string(stop - start) + " in the window");
    }
    auto in = [&](int64_t step) { return start <= step && step < stop; };
    if (in(SpikeStep(args, run)) && !spike) Error(where + ": the spike is not a maximum");
    if (non_finite != (in(NanStep(args, run)) ? 1u : 0u)) {
      Error(where + ": " + std::to_string(non_finite) + " non-finite values counted");
    }
  }
};

json ReadViews(Repo& repo, const std::vector<uint64_t>& ids, const ChartsBenchArgs& args,
               int64_t history, uint64_t repeat, Checker& checker, const std::string& phase) {
  json out = json::array();
  for (const View& view : Views(args, history)) {
    std::cerr << "  " << phase << ", " << view.name << " ..." << std::flush;
    tracking::DownsampleOptions options;
    options.buckets = static_cast<int64_t>(args.buckets);
    options.start = view.start;
    options.stop = view.stop;
    bool checked = false;
    Timing downsampled = Time(repeat, [&](Timing& t) {
      auto series = repo.ReadDownsampled(ids, options);
      t.points = t.buckets = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        const auto& s = series.at(ids[i]);
        t.buckets += s.buckets.size();
        for (const auto& b : s.buckets) t.points += b.count;
        if (!checked) checker.Check(view, i, s);
      }
      checked = true;
    });
    tracking::StepRange range;
    if (view.start) range = {*view.start, *view.stop};
    Timing raw = Time(repeat, [&](Timing& t) {
      ArrowArrayStream stream{};
      repo.ReadManyStream(ids, range, &stream);
      t.points = 0;
      ArrowArray batch{};
      while (stream.get_next(&stream, &batch) == 0 && batch.release != nullptr) {
        t.points += static_cast<uint64_t>(batch.length);
        batch.release(&batch);
      }
      stream.release(&stream);
    });
    if (raw.points != downsampled.points) {
      checker.Error(phase + ", " + view.name + ": the raw read has " + std::to_string(raw.points) +
                    " points, the buckets " + std::to_string(downsampled.points));
    }
    std::cerr << " downsampled p50 " << Fixed(Percentile(downsampled.ms, 0.5), 1) << " ms, raw "
              << Fixed(Percentile(raw.ms, 0.5), 1) << " ms\n";
    out.push_back({{"view", view.name},
                   {"start", view.start ? json(*view.start) : json()},
                   {"stop", view.stop ? json(*view.stop) : json()},
                   {"downsampled", downsampled.Json()},
                   {"raw", raw.Json()}});
  }
  return out;
}

// --- Building the repository ----------------------------------------------------

// Tracks steps [from, to) of every run, run after run, each finished.
void Log(Repo& repo, const std::vector<std::string>& run_ids, const ChartsBenchArgs& args,
         int64_t from, int64_t to, bool create) {
  tracking::TrackOptions opts;
  for (uint64_t r = 0; r < run_ids.size(); ++r) {
    tracking::Run run = [&] {
      if (!create) return repo.ResumeRun(run_ids[r]);
      tracking::NewRun spec;
      spec.run_id = run_ids[r];
      spec.name = run_ids[r];
      spec.experiment = "charts";
      return repo.CreateRun(spec);
    }();
    for (int64_t step = from; step < to; ++step) {
      opts.step = step;
      run.Track(Value(args, r, step), kMetric, opts);
    }
    run.Finish();
  }
}

uint64_t TableBytes(const fs::path& repo, const std::string& table) {
  uint64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(repo)) {
    if (entry.path().filename().string().rfind(table, 0) != 0) continue;
    for (const auto& f : fs::recursive_directory_iterator(entry.path())) {
      if (f.is_regular_file()) bytes += f.file_size();
    }
  }
  return bytes;
}

void PrintPhase(const std::string& phase, const json& views) {
  std::printf("\n%s\n\n", phase.c_str());
  std::printf(
      "| window | downsampled p50 / p95 ms | CPU s, all reads | MB read | peak +MB | buckets "
      "| raw read_many p50 / p95 ms | CPU s, all reads | MB read | peak +MB | points | raw / "
      "downsampled "
      "|\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const json& v : views) {
    const json &d = v["downsampled"], &r = v["raw"];
    auto mb = [](const json& t) { return Fixed(t["bytes_read"].get<double>() / (1 << 20), 0); };
    std::printf("| %s | %s / %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s | %.2fx |\n",
                v["view"].get<std::string>().c_str(), Fixed(d["p50_ms"], 1).c_str(),
                Fixed(d["p95_ms"], 1).c_str(), Fixed(d["cpu_s"], 2).c_str(), mb(d).c_str(),
                WithCommas(d["peak_extra_mb"]).c_str(), WithCommas(d["buckets"]).c_str(),
                Fixed(r["p50_ms"], 1).c_str(), Fixed(r["p95_ms"], 1).c_str(),
                Fixed(r["cpu_s"], 2).c_str(), mb(r).c_str(), WithCommas(r["peak_extra_mb"]).c_str(),
                WithCommas(r["points"]).c_str(),
                r["p50_ms"].get<double>() / d["p50_ms"].get<double>());
  }
}

}  // namespace

int RunChartsBench(const ChartsBenchArgs& args) {
  if (args.points < 2000 || args.runs == 0 || args.buckets == 0 || args.repeat == 0) {
    std::cerr << "kv0 bench charts needs --points >= 2000 and positive --runs, --buckets and "
                 "--repeat\n";
    return 2;
  }
  ScratchDir scratch(args.dir, "kv0-bench-charts");
  const fs::path repo_path = scratch.path() / "repo";
  tracking::RepoOptions options;
  options.wal_dir = (scratch.path() / "wal").string();
  const auto history = static_cast<int64_t>(args.points);

  std::vector<std::string> run_ids;
  std::vector<uint64_t> ids;
  for (uint64_t r = 0; r < args.runs; ++r) {
    run_ids.push_back("chart-run-" + std::to_string(r));
    ids.push_back(tracking::SeriesId(run_ids.back(), kMetric, json::object()));
  }

  json report = {{"timestamp", Timestamp()},      {"runs", args.runs},
                 {"points_per_run", args.points}, {"tail", args.tail},
                 {"buckets", args.buckets},       {"repeat", args.repeat}};
  Checker checker{args, history, {}};

  std::cerr << "  logging " << WithCommas(static_cast<double>(args.runs * args.points))
            << " points ..." << std::flush;
  auto start = Clock::now();
  {
    Repo repo = Repo::Open(repo_path.string(), options);
    Log(repo, run_ids, args, 0, history, true);
    repo.Close();
  }
  report["logging_s"] = Seconds(Clock::now() - start);
  std::cerr << " " << Fixed(report["logging_s"], 1) << " s\n";

  {
    Repo repo = Repo::Open(repo_path.string(), options);
    report["before_optimize"] = ReadViews(repo, ids, args, history, 1, checker, "before optimize");
  }
  {
    Repo repo = Repo::Open(repo_path.string(), options);
    start = Clock::now();
    const tracking::OptimizeStats optimized = repo.Optimize();
    report["level_cells"] = optimized.level_cells;
    report["level_bytes"] = optimized.level_bytes;
    report["directory_rows"] = optimized.directory_rows;
    report["optimize_s"] = Seconds(Clock::now() - start);
    report["metrics_table_bytes"] = TableBytes(repo_path, "metrics");
  }
  {
    Repo repo = Repo::Open(repo_path.string(), options);
    report["after_optimize"] =
        ReadViews(repo, ids, args, history, args.repeat, checker, "after optimize");
  }
  if (args.tail > 0) {
    Repo repo = Repo::Open(repo_path.string(), options);
    const int64_t tail_end = history + static_cast<int64_t>(args.tail);
    Log(repo, run_ids, args, history, tail_end, false);
    checker.history = tail_end;
    report["unoptimized_tail"] =
        ReadViews(repo, ids, args, tail_end, args.repeat, checker, "unoptimized tail");
  }

  std::printf("\n%llu runs x %s points of one series, %llu buckets, %llu repeats; %s\n",
              static_cast<unsigned long long>(args.runs),
              WithCommas(static_cast<double>(args.points)).c_str(),
              static_cast<unsigned long long>(args.buckets),
              static_cast<unsigned long long>(args.repeat), Timestamp().c_str());
  const double level_mb = report["level_bytes"].get<double>() / (1 << 20);
  const double table_mb = report["metrics_table_bytes"].get<double>() / (1 << 20);
  std::printf(
      "logging %s s, optimize %s s, metrics table %s MB, of which levels %s MB encoded (%s cells, "
      "%s %% of the table before Lance compresses them), %s directory rows\n",
      Fixed(report["logging_s"], 1).c_str(), Fixed(report["optimize_s"], 1).c_str(),
      Fixed(table_mb, 0).c_str(), Fixed(level_mb, 1).c_str(),
      WithCommas(report["level_cells"]).c_str(), Fixed(100 * level_mb / table_mb, 1).c_str(),
      WithCommas(report["directory_rows"]).c_str());
  PrintPhase("before optimize (each read once)", report["before_optimize"]);
  PrintPhase("after optimize", report["after_optimize"]);
  if (report.contains("unoptimized_tail")) {
    PrintPhase("after optimize, then " + WithCommas(static_cast<double>(args.tail)) +
                   " more points per run",
               report["unoptimized_tail"]);
  }
  report["errors"] = checker.errors;
  if (!args.json_path.empty()) std::ofstream(args.json_path) << report.dump(2) << "\n";
  if (!checker.errors.empty()) {
    std::cerr << checker.errors.size() << " wrong results\n";
    return 1;
  }
  return 0;
}

}  // namespace kv0::bench
