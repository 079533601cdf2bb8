#include "tools/stress.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kv0/kv.h"
#include "kv0/tracking.h"
#include "lance/dataset.h"
#include "wal/fault_files.h"

extern char** environ;

namespace kv0::tools {
namespace {

namespace tr = kv0::tracking;
using Clock = std::chrono::steady_clock;

// Operations a child thread runs in one round; it stops earlier when killed.
constexpr int64_t kOpsPerRound = 3000;

std::string DbPath(const std::string& dir) { return dir + "/db"; }
std::string RepoPath(const std::string& dir) { return dir + "/repo"; }
std::string WalDir(const std::string& dir) { return dir + "/wal"; }

// Even threads write the key-value database, odd ones the repository.
bool IsKvThread(int thread) { return thread % 2 == 0; }

std::mt19937_64 OpRng(uint64_t seed, int64_t round, int thread, int64_t i) {
  std::seed_seq seq{seed, static_cast<uint64_t>(round), static_cast<uint64_t>(thread),
                    static_cast<uint64_t>(i)};
  return std::mt19937_64(seq);
}

// --- Key-value operations --------------------------------------------------------

using KvModel = std::map<std::string, std::string>;

struct KvOp {
  enum Kind { kWrite, kSyncWrite, kFlush, kCompact } kind = kWrite;
  kv::WriteBatch batch;
};

std::string KvPrefix(int thread) { return "t" + std::to_string(thread) + "/"; }

KvOp MakeKvOp(uint64_t seed, int64_t round, int thread, int64_t i) {
  auto rng = OpRng(seed, round, thread, i);
  auto key = [&] { return KvPrefix(thread) + "k" + std::to_string(rng() % 40); };
  auto value = [&] {
    return "r" + std::to_string(round) + "i" + std::to_string(i) + std::string(rng() % 64, 'v');
  };
  KvOp op;
  int roll = static_cast<int>(rng() % 100);
  if (roll < 45) {
    op.batch.Put(key(), value());
  } else if (roll < 60) {
    op.batch.Delete(key());
  } else if (roll < 68) {
    std::string a = key(), b = key();
    if (a > b) std::swap(a, b);
    op.batch.DeleteRange(a, b);
  } else if (roll < 85) {
    for (int n = 2 + static_cast<int>(rng() % 4); n > 0; --n) {
      if (rng() % 3 == 0) {
        op.batch.Delete(key());
      } else {
        op.batch.Put(key(), value());
      }
    }
  } else if (roll < 92) {
    op.kind = KvOp::kSyncWrite;
    op.batch.Put(key(), value());
  } else if (roll < 99) {
    op.kind = KvOp::kFlush;
  } else {
    op.kind = KvOp::kCompact;
  }
  return op;
}

void ApplyKv(const KvOp& op, KvModel& model) {
  for (const auto& w : op.batch.ops()) {
    switch (w.kind) {
      case kv::WriteBatch::Kind::kPut:
        model[w.key] = w.value;
        break;
      case kv::WriteBatch::Kind::kDelete:
        model.erase(w.key);
        break;
      case kv::WriteBatch::Kind::kDeleteRange:
        model.erase(model.lower_bound(w.key), model.lower_bound(w.value));
        break;
    }
  }
}

// --- Tracking operations ---------------------------------------------------------------

struct RunModel {
  bool exists = false;
  std::string name;
  std::map<std::string, std::map<int64_t, double>> series;  // metric -> step -> value
  std::map<std::string, double> params;

  bool operator==(const RunModel&) const = default;
};

struct TrackOp {
  enum Kind { kCreate, kTrack, kParams, kRename, kFlush, kOptimize } kind = kTrack;
  std::string metric;  // kTrack
  int64_t step = 0;
  std::string key;   // kParams
  std::string name;  // kCreate, kRename
  double value = 0;  // kTrack, kParams
};

std::string RunId(int64_t round, int thread) {
  return "r" + std::to_string(round) + "-t" + std::to_string(thread);
}

const std::vector<std::string>& Metrics() {
  static const std::vector<std::string> metrics = {"loss", "acc", "lr"};
  return metrics;
}

TrackOp MakeTrackOp(uint64_t seed, int64_t round, int thread, int64_t i) {
  auto rng = OpRng(seed, round, thread, i);
  TrackOp op;
  // Distinct in every operation, so a value names the write that made it.
  op.value = static_cast<double>(round) * 1e7 + static_cast<double>(i) + 0.25;
  if (i == 0) {
    op.kind = TrackOp::kCreate;
    op.name = "run " + RunId(round, thread);
    return op;
  }
  int roll = static_cast<int>(rng() % 100);
  if (roll < 80) {
    op.metric = Metrics()[rng() % Metrics().size()];
    // A small window of steps: many writes overwrite an earlier step.
    op.step = static_cast<int64_t>(rng() % 60);
  } else if (roll < 88) {
    op.kind = TrackOp::kParams;
    op.key = "p" + std::to_string(rng() % 5);
  } else if (roll < 92) {
    op.kind = TrackOp::kRename;
    op.name = "name " + std::to_string(i);
  } else if (roll < 99) {
    op.kind = TrackOp::kFlush;
  } else {
    op.kind = TrackOp::kOptimize;
  }
  return op;
}

void ApplyTrack(const TrackOp& op, RunModel& model) {
  switch (op.kind) {
    case TrackOp::kCreate:
      model.exists = true;
      model.name = op.name;
      break;
    case TrackOp::kTrack:
      model.series[op.metric][op.step] = op.value;
      break;
    case TrackOp::kParams:
      model.params[op.key] = op.value;
      break;
    case TrackOp::kRename:
      model.name = op.name;
      break;
    case TrackOp::kFlush:
    case TrackOp::kOptimize:
      break;
  }
}

kv::Options KvOptions(const std::string& dir) {
  kv::Options o;
  o.wal_dir = WalDir(dir);
  o.write_buffer_size = 64 << 10;  // many commits
  o.flush_interval = std::chrono::milliseconds(200);
  o.max_fragments = 6;  // and compactions
  o.tombstone_grace = std::chrono::seconds(3600);
  return o;
}

tr::RepoOptions RepoOptions(const std::string& dir) {
  tr::RepoOptions o;
  o.wal_dir = WalDir(dir);
  o.flush_rows = 500;
  o.flush_interval = std::chrono::milliseconds(200);
  o.max_fragments = 6;
  return o;
}

// --- The child ---------------------------------------------------------------------

class Reporter {
 public:
  void Line(const std::string& line) {
    std::lock_guard lock(mu_);
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
};

void RunKvThread(kv::DB& db, uint64_t seed, int64_t round, int thread, Reporter& out) {
  for (int64_t i = 0; i < kOpsPerRound; ++i) {
    KvOp op = MakeKvOp(seed, round, thread, i);
    try {
      switch (op.kind) {
        case KvOp::kWrite:
          db.Write(op.batch);
          break;
        case KvOp::kSyncWrite:
          db.Write(op.batch, {.sync = true});
          break;
        case KvOp::kFlush:
          db.Flush();
          break;
        case KvOp::kCompact:
          db.CompactRange();
          break;
      }
    } catch (const Error&) {
      // A failed write may still be logged (a sync write whose commit
      // failed): this thread stops, and its last operation counts as in
      // flight.
      out.Line(std::to_string(thread) + " " + std::to_string(i) + " failed");
      return;
    }
    out.Line(std::to_string(thread) + " " + std::to_string(i));
  }
}

void RunTrackThread(tr::Repo& repo, uint64_t seed, int64_t round, int thread, Reporter& out) {
  std::optional<tr::Run> run;
  for (int64_t i = 0; i < kOpsPerRound; ++i) {
    TrackOp op = MakeTrackOp(seed, round, thread, i);
    try {
      switch (op.kind) {
        case TrackOp::kCreate:
          run = repo.CreateRun({.run_id = RunId(round, thread), .name = op.name});
          break;
        case TrackOp::kTrack:
          run->Track(op.value, op.metric, {.step = op.step});
          break;
        case TrackOp::kParams:
          run->SetParams({{op.key, op.value}});
          break;
        case TrackOp::kRename:
          run->Update([&](tr::RunInfo& info) { info.name = op.name; });
          break;
        case TrackOp::kFlush:
          repo.Flush();
          break;
        case TrackOp::kOptimize:
          repo.Optimize();
          break;
      }
    } catch (const Error&) {
      out.Line(std::to_string(thread) + " " + std::to_string(i) + " failed");
      return;
    }
    out.Line(std::to_string(thread) + " " + std::to_string(i));
  }
}

// Injects failures while the child runs: now and then the Nth WAL file
// operation of some kind fails, and a few commits fail before they happen.
std::thread StartFaults(wal::FaultInjectingFiles* files, uint64_t seed, std::atomic<bool>* stop) {
  std::thread injector([files, seed, stop] {
    std::mt19937_64 rng(seed);
    using Op = wal::FaultInjectingFiles::Op;
    const Op kinds[] = {Op::kCreate,   Op::kWrite,  Op::kSync,  Op::kTruncate,
                        Op::kAllocate, Op::kRename, Op::kRemove};
    while (!stop->load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 80));
      Op op = kinds[rng() % std::size(kinds)];
      files->FailNth(op, 1 + rng() % 300, rng() % 2 ? EIO : ENOSPC, /*tear=*/rng() % 2 == 0);
    }
  });
  auto commit_rng = std::make_shared<std::mt19937_64>(seed + 1);
  auto commit_mu = std::make_shared<std::mutex>();
  lance::SetCommitHookForTesting(
      [commit_rng, commit_mu](const std::string&, std::string_view, bool committed) {
        if (committed) return;
        std::lock_guard lock(*commit_mu);
        if ((*commit_rng)() % 100 < 3)
          throw Error(Code::kIOError, "stress: injected commit failure");
      });
  return injector;
}

// --- The parent --------------------------------------------------------------------

struct Config {
  std::string dir = "kv0-stress";
  double duration_s = 60;
  int threads = 4;
  uint64_t seed = 0;
  bool faults = false;
};

// What a round's child reported.
struct Report {
  bool ready = false;
  bool closed = false;         // it finished its operations and closed
  std::vector<int64_t> acked;  // per thread: operations acknowledged (a prefix)
  std::vector<bool> stopped;   // per thread: its next operation failed
};

// The states a thread's data may be in: what its acknowledged operations
// produce, with or without the operation in flight.
template <typename Model>
using Candidates = std::vector<Model>;

template <typename Model>
void AddUnique(Candidates<Model>& set, Model m) {
  for (const auto& c : set) {
    if (c == m) return;
  }
  set.push_back(std::move(m));
}

class Stresser {
 public:
  explicit Stresser(Config config) : c_(std::move(config)) { kv_.resize(c_.threads, {KvModel{}}); }

  int Run() {
    std::filesystem::create_directories(c_.dir);
    std::mt19937_64 rng(c_.seed);
    auto start = Clock::now();
    std::chrono::duration<double> limit(c_.duration_s);
    while (Clock::now() - start < limit && losses_ == 0) {
      ++round_;
      int kill_after_ms = rng() % 10 == 0 ? -1 : static_cast<int>(100 + rng() % 2400);
      Report report = RunChild(kill_after_ms);
      Settle(report);
      // Most rounds are checked at once; some leave recovery to the next
      // child, whose open replays this one's WAL.
      if (rng() % 4 != 0 || Clock::now() - start >= limit) Verify();
    }
    if (losses_ == 0) Verify();
    std::cout << "kv0 stress: " << round_ << " rounds, " << kills_ << " kills, " << acked_
              << " operations acknowledged, " << verified_ << " verified, " << losses_
              << " losses\n";
    return losses_ == 0 ? 0 : 1;
  }

 private:
  Report RunChild(int kill_after_ms) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::vector<std::string> args = {self,
                                     "stress-child",
                                     c_.dir,
                                     std::to_string(c_.seed),
                                     std::to_string(round_),
                                     std::to_string(c_.threads),
                                     c_.faults ? "faults" : "clean"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start " + self);
    }
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);

    Report report;
    report.acked.assign(c_.threads, 0);
    report.stopped.assign(c_.threads, false);
    std::string pending;
    auto handle = [&](const std::string& line) {
      if (line == "ready") {
        report.ready = true;
      } else if (line == "closed") {
        report.closed = true;
      } else {
        int thread = 0;
        long long i = 0;
        char failed[16] = {};
        int n = std::sscanf(line.c_str(), "%d %lld %15s", &thread, &i, failed);
        if (n < 2 || thread < 0 || thread >= c_.threads) return;
        if (n == 3) {
          report.stopped[thread] = true;
        } else {
          report.acked[thread] = i + 1;
        }
      }
    };
    auto read_some = [&](int timeout_ms) -> bool {
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return true;
      char buf[4096];
      ssize_t n = read(out[0], buf, sizeof(buf));
      if (n <= 0) return false;
      pending.append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        handle(pending.substr(0, nl));
        pending.erase(0, nl + 1);
      }
      return true;
    };
    // The kill clock starts once the child has opened both stores.
    auto deadline = Clock::now() + std::chrono::seconds(120);
    while (!report.ready && Clock::now() < deadline && read_some(100)) {
    }
    if (report.ready && kill_after_ms >= 0) {
      auto kill_at = Clock::now() + std::chrono::milliseconds(kill_after_ms);
      while (Clock::now() < kill_at && read_some(10)) {
      }
      kill(pid, SIGKILL);
      ++kills_;
    }
    while (read_some(1000)) {
    }
    int status = 0;
    waitpid(pid, &status, 0);
    close(out[0]);
    if (!report.ready) {
      std::cerr << "kv0 stress: round " << round_ << ": the child did not open (status " << status
                << ")\n";
    }
    for (int64_t a : report.acked) acked_ += a;
    return report;
  }

  // Turns a round's report into the states each thread's data may be in.
  void Settle(const Report& report) {
    for (int t = 0; t < c_.threads; ++t) {
      int64_t acked = report.acked[t];
      // The operation after the acknowledged ones was in flight (or failed)
      // unless the thread ran all of its operations.
      bool in_flight = acked < kOpsPerRound && (report.ready || acked > 0);
      if (IsKvThread(t)) {
        Candidates<KvModel> next;
        for (const KvModel& base : kv_[t]) {
          KvModel m = base;
          for (int64_t i = 0; i < acked; ++i) ApplyKv(MakeKvOp(c_.seed, round_, t, i), m);
          if (in_flight) {
            KvModel with = m;
            ApplyKv(MakeKvOp(c_.seed, round_, t, acked), with);
            AddUnique(next, std::move(with));
          }
          AddUnique(next, std::move(m));
        }
        kv_[t] = std::move(next);
      } else {
        Candidates<RunModel> runs;
        RunModel m;
        for (int64_t i = 0; i < acked; ++i) ApplyTrack(MakeTrackOp(c_.seed, round_, t, i), m);
        if (in_flight) {
          RunModel with = m;
          ApplyTrack(MakeTrackOp(c_.seed, round_, t, acked), with);
          AddUnique(runs, std::move(with));
        }
        AddUnique(runs, std::move(m));
        unsettled_runs_[RunId(round_, t)] = std::move(runs);
      }
    }
  }

  void Loss(const std::string& what) {
    ++losses_;
    std::cerr << "kv0 stress: round " << round_ << ": " << what << "\n";
  }

  // Opens both stores (replaying the last child's WALs) and checks every
  // thread's data against its candidates; the match becomes the model.
  void Verify() {
    {
      auto db = kv::DB::Open(DbPath(c_.dir), KvOptions(c_.dir));
      for (int t = 0; t < c_.threads; ++t) {
        if (!IsKvThread(t)) continue;
        KvModel got;
        auto it = db->NewIterator();
        std::string prefix = KvPrefix(t);
        for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
          got[std::string(it->key())] = std::string(it->value());
        }
        bool matched = false;
        for (const KvModel& c : kv_[t]) matched |= (c == got);
        if (!matched) {
          Loss("thread " + std::to_string(t) + ": the database holds " +
               std::to_string(got.size()) + " keys matching none of " +
               std::to_string(kv_[t].size()) + " acknowledged states");
        } else {
          kv_[t] = {got};
          verified_ += got.size();
        }
      }
      db->Close();
    }
    tr::Repo repo = tr::Repo::Open(RepoPath(c_.dir), RepoOptions(c_.dir));
    for (auto& [run_id, candidates] : unsettled_runs_) {
      RunModel got = ReadRun(repo, run_id);
      bool matched = false;
      for (const RunModel& c : candidates) matched |= (c == got);
      if (!matched) {
        Loss("run " + run_id + " matches none of its " + std::to_string(candidates.size()) +
             " acknowledged states (" + Describe(got, candidates) + ")");
        continue;
      }
      settled_runs_[run_id] = got;
      for (const auto& [metric, steps] : got.series) verified_ += steps.size();
    }
    unsettled_runs_.clear();
    // An older run, rewritten since by compactions and optimize, still holds
    // exactly what it held.
    if (!settled_runs_.empty()) {
      auto it = settled_runs_.begin();
      std::advance(it, static_cast<long>(round_ % settled_runs_.size()));
      if (!(ReadRun(repo, it->first) == it->second)) Loss("run " + it->first + " changed since");
    }
    repo.Close();
  }

  static RunModel ReadRun(tr::Repo& repo, const std::string& run_id) {
    RunModel got;
    auto info = repo.GetRun(run_id);
    if (!info) return got;
    got.exists = true;
    got.name = info->name.value_or("");
    nlohmann::json params = repo.Params(run_id);
    for (const auto& [key, value] : params.items()) got.params[key] = value.get<double>();
    std::vector<uint64_t> ids;
    for (const auto& metric : Metrics()) {
      ids.push_back(tr::SeriesId(run_id, metric, nlohmann::json::object()));
    }
    auto points = repo.ReadMany(ids);
    auto stats = repo.GetSeriesStats(ids);
    for (size_t m = 0; m < ids.size(); ++m) {
      const tr::MetricData& data = points[ids[m]];
      if (data.steps.empty()) continue;
      auto& series = got.series[Metrics()[m]];
      for (size_t i = 0; i < data.steps.size(); ++i) series[data.steps[i]] = data.values[i];
      // The statistics agree with the points: one count per step, and the
      // last value is the one at the last step.
      auto s = stats.find(ids[m]);
      if (s == stats.end() || s->second.count != series.size() ||
          s->second.last_step != series.rbegin()->first ||
          s->second.last != series.rbegin()->second) {
        series[-1] = -1;  // marks the disagreement, so no candidate matches
      }
    }
    return got;
  }

  static std::string Describe(const RunModel& got, const Candidates<RunModel>& candidates) {
    std::string out = got.exists ? "stored" : "missing";
    for (const auto& [metric, steps] : got.series) {
      out += ", " + metric + ": " + std::to_string(steps.size()) + " steps";
      for (const auto& c : candidates) {
        auto want = c.series.find(metric);
        if (want == c.series.end()) continue;
        for (const auto& [step, value] : want->second) {
          auto have = steps.find(step);
          if (have == steps.end()) {
            out += ", step " + std::to_string(step) + " missing";
            break;
          }
          if (have->second != value) {
            out += ", step " + std::to_string(step) + " holds " + std::to_string(have->second) +
                   " not " + std::to_string(value);
            break;
          }
        }
        break;
      }
    }
    return out;
  }

  const Config c_;
  int64_t round_ = 0;
  std::vector<Candidates<KvModel>> kv_;
  std::map<std::string, Candidates<RunModel>> unsettled_runs_;
  std::map<std::string, RunModel> settled_runs_;
  uint64_t kills_ = 0, acked_ = 0, verified_ = 0, losses_ = 0;
};

}  // namespace

int Stress(int argc, char** argv) {
  Config c;
  c.seed = std::random_device{}();
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(Code::kInvalidArgument, arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--dir") {
      c.dir = value();
    } else if (arg == "--duration") {
      c.duration_s = std::stod(value());
    } else if (arg == "--threads") {
      c.threads = std::stoi(value());
    } else if (arg == "--seed") {
      c.seed = std::stoull(value());
    } else if (arg == "--faults") {
      c.faults = true;
    } else {
      throw Error(Code::kInvalidArgument, "kv0 stress: unknown option " + arg);
    }
  }
  if (c.threads < 2) throw Error(Code::kInvalidArgument, "kv0 stress needs at least 2 threads");
  std::cout << "kv0 stress: seed " << c.seed << ", " << c.threads << " threads, "
            << (c.faults ? "with" : "without") << " injected faults, " << c.duration_s << " s, in "
            << c.dir << std::endl;
  return Stresser(c).Run();
}

int StressChild(int argc, char** argv) {
  if (argc < 7) return 2;
  std::string dir = argv[2];
  uint64_t seed = std::stoull(argv[3]);
  int64_t round = std::stoll(argv[4]);
  int threads = std::stoi(argv[5]);
  bool faults = std::string(argv[6]) == "faults";

  auto db = kv::DB::Open(DbPath(dir), KvOptions(dir));
  tr::Repo repo = tr::Repo::Open(RepoPath(dir), RepoOptions(dir));
  Reporter out;
  out.Line("ready");
  wal::FaultInjectingFiles files(WalDir(dir));
  std::atomic<bool> stop{false};
  std::thread injector;
  if (faults) {
    wal::SetFilesForTesting(&files);
    injector = StartFaults(&files, seed * 7919 + static_cast<uint64_t>(round), &stop);
  }
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      if (IsKvThread(t)) {
        RunKvThread(*db, seed, round, t, out);
      } else {
        RunTrackThread(repo, seed, round, t, out);
      }
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  if (injector.joinable()) injector.join();
  lance::SetCommitHookForTesting(nullptr);
  files.Clear();
  try {
    db->Close();
    repo.Close();
  } catch (const Error&) {
    // Their WALs keep what is not committed; the parent's open replays it.
  }
  out.Line("closed");
  wal::SetFilesForTesting(nullptr);
  return 0;
}

}  // namespace kv0::tools
