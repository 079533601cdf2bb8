// `kv0 bench kv`: kv0's key-value layer against RocksDB, db_bench style.
//
// Both engines run in this process, one after the other, on the same machine,
// with the same 16-byte keys (16 decimal digits, so byte order is numeric
// order), the same 100-byte values and the same pseudo-random key sequences
// (a fixed seed). Each engine gets fresh directories under one temporary
// directory, removed at the end.
//
// What each figure includes:
//
//  - fillseq, fillrandom, overwrite: from the first Put to the end of the
//    phase, one Put per key. kv0 runs with its WAL in the default mode
//    (WalSync::kBatch: every write handed to the OS, fsync about every 100 ms
//    in the background), and the phase ends with DB::Flush(), so everything
//    written is committed to Lance before the clock stops; the flushes and
//    compactions kv0 starts during the phase are included too. RocksDB writes
//    with its WAL on and sync=false, so each write is in the OS's WAL file and
//    the memtable when Put returns; memtable flushes and compactions still
//    running in the background when the phase ends are not included (as in
//    db_bench).
//  - readrandom: N Gets of uniformly random existing keys; both engines copy
//    the value into a std::string.
//  - seekrandom: N/10 Seeks to uniformly random existing keys, each followed
//    by up to 10 Next; key and value are read at every position. One
//    iterator serves every seek.
//  - reopen: the time DB::Open takes on the N-key database left by fillrandom
//    and overwrite, after a clean close. kv0: with view.snap, and with
//    view.snap deleted (a full scan of the dataset), median of three each.
//    RocksDB as it is: the first reopen replays the WAL the workload left
//    (RocksDB does not flush its memtable on close) and opens every table
//    file; the later ones (median of two) have no WAL to replay.
//  - resident bytes per entry: growth of the process's resident set
//    (/proc/self/statm) across a kv0 reopen (freed heap is returned to the
//    OS with malloc_trim before it), minus N * (16 + 100), divided by N. It
//    counts the view and whatever else the open holds (Lance metadata,
//    caches, and heap the open freed but malloc kept); a second figure is
//    taken after another malloc_trim, which leaves what the handle keeps.
//  - WAL put rate: a fillrandom-like load of fewer keys into a fresh
//    database, in each kv0 wal_sync mode and with disable_wal, ending with
//    kv0's Flush() as above; RocksDB with sync=false, sync=true for "always",
//    and disableWAL=true for "disable_wal". The "always" rows, bound by the
//    disk's fsync latency (which drifts a lot on shared or virtual disks),
//    run in kAlwaysRounds rounds alternating the engines, each round a fresh
//    database stopped after kAlwaysBudget / kAlwaysRounds; the figure is the
//    keys of all rounds over their total time.

#include "kv_bench.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/version.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench/bench_util.h"
#include "kv0/error.h"
#include "kv0/kv.h"

namespace kv0::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr size_t kKeySize = 16;
constexpr size_t kValueSize = 100;
constexpr uint64_t kSeed = 0x6b76305f62656e63;  // "kv0_benc"
constexpr int kNextsPerSeek = 10;
constexpr int kReopenRuns = 3;
constexpr uint64_t kSpotChecks = 1000;
constexpr auto kAlwaysBudget = std::chrono::seconds(12);
constexpr int kAlwaysRounds = 4;
constexpr int kBloomBitsPerKey = 10;

// splitmix64: a small generator whose sequence is fixed by the seed on every
// platform and standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); the modulo bias is below 2^-32 for any n we use.
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

// Key i: i as 16 decimal digits.
class KeyBuf {
 public:
  std::string_view Of(uint64_t i) {
    for (int p = static_cast<int>(kKeySize) - 1; p >= 0; --p) {
      buf_[p] = static_cast<char>('0' + i % 10);
      i /= 10;
    }
    return {buf_, kKeySize};
  }

 private:
  char buf_[kKeySize];
};

// Everything both engines are given: key sequences and value bytes.
struct Inputs {
  uint64_t n = 0;
  std::vector<uint32_t> fill_order;  // fillrandom: a permutation of [0, n)
  std::vector<uint32_t> overwrite;   // n uniform keys in [0, n)
  std::vector<uint32_t> reads;       // n uniform keys in [0, n)
  std::vector<uint32_t> seeks;       // n / 10 uniform keys in [0, n)
  std::vector<uint32_t> wal_order;   // a permutation of [0, wal_keys)
  std::string value_pool;            // random (incompressible) bytes

  // The value written by the j-th put of a phase (phases use distinct j).
  std::string_view Value(uint64_t j) const {
    size_t offset = (j * 4099) % (value_pool.size() - kValueSize);
    return std::string_view(value_pool).substr(offset, kValueSize);
  }
};

std::vector<uint32_t> Permutation(uint64_t n, Rng& rng) {
  std::vector<uint32_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>(i);
  for (uint64_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng.Below(i)]);
  return v;
}

std::vector<uint32_t> Uniform(uint64_t count, uint64_t n, Rng& rng) {
  std::vector<uint32_t> v(count);
  for (auto& x : v) x = static_cast<uint32_t>(rng.Below(n));
  return v;
}

Inputs MakeInputs(uint64_t n, uint64_t wal_keys) {
  Inputs in;
  in.n = n;
  Rng rng(kSeed);
  in.fill_order = Permutation(n, rng);
  in.overwrite = Uniform(n, n, rng);
  in.reads = Uniform(n, n, rng);
  in.seeks = Uniform(std::max<uint64_t>(1, n / 10), n, rng);
  in.wal_order = Permutation(wal_keys, rng);
  in.value_pool.resize(1 << 20);
  for (size_t i = 0; i + 8 <= in.value_pool.size(); i += 8) {
    uint64_t r = rng.Next();
    std::memcpy(&in.value_pool[i], &r, 8);
  }
  return in;
}

// How writes are logged. kv0 takes wal_sync and disable_wal; RocksDB takes
// sync and disable_wal.
struct WriteMode {
  std::string name;
  kv::WalSync wal_sync = kv::WalSync::kBatch;
  bool disable_wal = false;
  bool rocks_sync = false;
  std::string rocks_setting = "sync=false";
};

const WriteMode kDefaultMode{};

// Resident set size of this process in bytes.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  if (!statm) throw std::runtime_error("cannot read /proc/self/statm");
  return resident * sysconf(_SC_PAGESIZE);
}

// Hands freed heap back to the OS, so that a reopen's growth in resident
// memory is not hidden by pages freed earlier and reused.
void TrimHeap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

// ---------------------------------------------------------------------------
// The engines, with one interface the workloads are written against.

class Kv0Engine {
 public:
  static constexpr const char* kName = "kv0";

  explicit Kv0Engine(uint64_t n) : n_(n) {}

  // dir/db is the dataset, dir/wal the WAL root (view.snap lives there).
  void Open(const fs::path& dir, const WriteMode& mode) {
    db_.reset();
    db_ = kv::DB::Open((dir / "db").string(), Options(dir, mode));
    write_options_ = kv::WriteOptions{.sync = false, .disable_wal = mode.disable_wal};
  }

  // The options every kv0 handle here uses: the defaults, with the WAL
  // inside the benchmark directory, and a snapshot on close also for runs
  // with fewer keys than the default snapshot_min_entries.
  kv::Options Options(const fs::path& dir, const WriteMode& mode) const {
    kv::Options options;
    options.wal_dir = (dir / "wal").string();
    options.wal_sync = mode.wal_sync;
    options.snapshot_min_entries =
        std::max<uint64_t>(1, std::min<uint64_t>(options.snapshot_min_entries, n_));
    return options;
  }

  void Put(std::string_view key, std::string_view value) { db_->Put(key, value, write_options_); }
  void EndWrites() { db_->Flush(); }
  bool Get(std::string_view key, std::string* value) {
    auto found = db_->Get(key);
    if (!found) return false;
    *value = std::move(*found);
    return true;
  }
  kv::Stats Stats() { return db_->GetStats(); }
  void Close() {
    if (!db_) return;
    db_->Close();
    db_.reset();
  }
  // After a failure: drop the handle without reporting errors.
  void Abandon() { db_.reset(); }

  class Cursor {
   public:
    explicit Cursor(std::unique_ptr<kv::Iterator> it) : it_(std::move(it)) {}
    void Seek(std::string_view key) { it_->Seek(key); }
    bool Valid() const { return it_->Valid(); }
    void Next() { it_->Next(); }
    std::string_view key() const { return it_->key(); }
    std::string_view value() { return it_->value(); }
    void Check() const {}

   private:
    std::unique_ptr<kv::Iterator> it_;
  };
  Cursor NewCursor() { return Cursor(db_->NewIterator()); }

 private:
  uint64_t n_;
  std::unique_ptr<kv::DB> db_;
  kv::WriteOptions write_options_;
};

void CheckStatus(const rocksdb::Status& status, const char* what) {
  if (!status.ok())
    throw std::runtime_error(std::string("RocksDB ") + what + ": " + status.ToString());
}

class RocksEngine {
 public:
  static constexpr const char* kName = "RocksDB";

  explicit RocksEngine(uint64_t n) : cache_bytes_(CacheBytes(n)) {}

  // A block cache large enough for the whole data set, so that reads are
  // served from memory as kv0's are from its view; 64 MiB at least.
  static size_t CacheBytes(uint64_t n) { return std::max<uint64_t>(64 << 20, n * 256); }

  // RocksDB's defaults (level compaction, 64 MiB memtable, Snappy
  // compression when built in, two background jobs), plus the block cache
  // above and a 10-bit Bloom filter, as a tuned deployment would have.
  // Each open gets a new, cold block cache.
  void Open(const fs::path& dir, const WriteMode& mode) {
    Close();
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::BlockBasedTableOptions table;
    table.block_cache = rocksdb::NewLRUCache(cache_bytes_);
    table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(kBloomBitsPerKey));
    options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
    fs::create_directories(dir);
    rocksdb::DB* db = nullptr;
    CheckStatus(rocksdb::DB::Open(options, (dir / "db").string(), &db), "open");
    db_.reset(db);
    write_options_ = rocksdb::WriteOptions();
    write_options_.sync = mode.rocks_sync;
    write_options_.disableWAL = mode.disable_wal;
  }

  void Put(std::string_view key, std::string_view value) {
    CheckStatus(db_->Put(write_options_, key, value), "put");
  }
  void EndWrites() {}
  bool Get(std::string_view key, std::string* value) {
    auto status = db_->Get(rocksdb::ReadOptions(), key, value);
    if (status.IsNotFound()) return false;
    CheckStatus(status, "get");
    return true;
  }
  void Close() {
    if (!db_) return;
    auto status = db_->Close();
    db_.reset();
    CheckStatus(status, "close");
  }
  void Abandon() { db_.reset(); }

  class Cursor {
   public:
    explicit Cursor(rocksdb::Iterator* it) : it_(it) {}
    void Seek(std::string_view key) { it_->Seek(key); }
    bool Valid() const { return it_->Valid(); }
    void Next() { it_->Next(); }
    std::string_view key() const { return it_->key().ToStringView(); }
    std::string_view value() { return it_->value().ToStringView(); }
    void Check() const { CheckStatus(it_->status(), "iterator"); }

   private:
    std::unique_ptr<rocksdb::Iterator> it_;
  };
  Cursor NewCursor() { return Cursor(db_->NewIterator(rocksdb::ReadOptions())); }

 private:
  size_t cache_bytes_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::WriteOptions write_options_;
};

// ---------------------------------------------------------------------------
// Figures.

struct Measured {
  uint64_t ops = 0;
  double seconds = 0;
  bool done = false;
  double Rate() const { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
};

struct EngineFigures {
  std::map<std::string, Measured> workloads;  // fillseq, fillrandom, ...
  std::map<std::string, Measured> wal;        // by WriteMode name
  // RocksDB: reopen as is. kv0: from view.snap, and by full scan.
  std::vector<double> reopen_seconds;
  std::vector<double> reopen_snapshot_seconds;
  std::vector<double> reopen_scan_seconds;
  // kv0: resident-set growth across each reopen, in bytes, right after the
  // open and again once freed heap is handed back to the OS (what the
  // handle keeps, without the open's transient garbage).
  std::vector<int64_t> rss_snapshot_bytes, rss_snapshot_kept_bytes;
  std::vector<int64_t> rss_scan_bytes, rss_scan_kept_bytes;
  json stats = json::object();  // kv0's GetStats at points of interest
};

struct Report {
  uint64_t n = 0;
  uint64_t wal_keys = 0;
  EngineFigures kv0, rocksdb;
  std::vector<std::string> errors;  // failures and wrong results

  void Error(const std::string& message) {
    errors.push_back(message);
    std::cerr << "  ERROR: " << message << "\n";
  }
};

double MedianOf(const std::vector<int64_t>& v) {
  return Median(std::vector<double>(v.begin(), v.end()));
}

json StatsJson(const kv::Stats& s) {
  return json{{"version", s.version},
              {"entries", s.entries},
              {"tombstones", s.tombstones},
              {"range_tombstones", s.range_tombstones},
              {"lazy_values", s.lazy_values},
              {"buffered_ops", s.buffered_ops},
              {"buffered_bytes", s.buffered_bytes},
              {"fragments", s.fragments},
              {"stored_rows", s.stored_rows},
              {"flushes", s.flushes},
              {"compactions", s.compactions},
              {"opened_from_snapshot", s.opened_from_snapshot}};
}

// Runs one phase, reporting progress; an exception becomes an error in the
// report and a false return.
bool Phase(Report& report, const std::string& what, const std::function<void()>& fn) {
  std::cerr << "  " << what << " ..." << std::flush;
  // Let the disk settle first: writes and deletions (the file system may
  // discard freed blocks) left by the previous phase would otherwise slow
  // this one's fsyncs.
  ::sync();
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
// Workloads, the same code for both engines.

// Puts count keys, key_at(i) for the i-th, with values value_base + i, then
// ends the write phase. With a budget, stops early once it has passed.
template <class Engine, class KeyAt>
Measured TimedPuts(Engine& engine, const Inputs& in, uint64_t count, KeyAt key_at,
                   uint64_t value_base, std::optional<Clock::duration> budget = std::nullopt) {
  KeyBuf key;
  Measured m;
  auto start = Clock::now();
  uint64_t i = 0;
  for (; i < count; ++i) {
    engine.Put(key.Of(key_at(i)), in.Value(value_base + i));
    if (budget && Clock::now() - start >= *budget) {
      ++i;
      break;
    }
  }
  engine.EndWrites();
  m.seconds = Seconds(Clock::now() - start);
  m.ops = i;
  m.done = true;
  return m;
}

// Gets keys; every key exists, so a miss or a value of another size is a
// wrong result.
template <class Engine>
Measured TimedGets(Engine& engine, const std::vector<uint32_t>& keys, Report& report,
                   const std::string& what) {
  KeyBuf key;
  std::string value;
  uint64_t missing = 0, wrong_size = 0;
  auto start = Clock::now();
  for (uint32_t k : keys) {
    if (!engine.Get(key.Of(k), &value)) {
      ++missing;
    } else if (value.size() != kValueSize) {
      ++wrong_size;
    }
  }
  Measured m{.ops = keys.size(), .seconds = Seconds(Clock::now() - start), .done = true};
  if (missing || wrong_size) {
    report.Error(what + ": " + std::to_string(missing) + " of " + std::to_string(keys.size()) +
                 " existing keys not found, " + std::to_string(wrong_size) +
                 " values of the wrong size");
  }
  return m;
}

// Seek to each key, then up to kNextsPerSeek Next. Keys 0..n-1 all exist,
// so the seek must land on the key itself and each Next on the one after.
template <class Engine>
Measured TimedSeeks(Engine& engine, const Inputs& in, Report& report, const std::string& what) {
  KeyBuf key, expected;
  uint64_t wrong = 0, bytes = 0;
  auto cursor = engine.NewCursor();
  auto start = Clock::now();
  for (uint32_t k : in.seeks) {
    cursor.Seek(key.Of(k));
    for (int step = 0;; ++step) {
      uint64_t want = k + static_cast<uint64_t>(step);
      if (want >= in.n) {
        if (cursor.Valid()) ++wrong;
        break;
      }
      if (!cursor.Valid() || cursor.key() != expected.Of(want)) {
        ++wrong;
        break;
      }
      bytes += cursor.key().size() + cursor.value().size();
      if (step == kNextsPerSeek) break;
      cursor.Next();
    }
  }
  Measured m{.ops = in.seeks.size(), .seconds = Seconds(Clock::now() - start), .done = true};
  cursor.Check();
  if (wrong) {
    report.Error(what + ": " + std::to_string(wrong) + " of " + std::to_string(in.seeks.size()) +
                 " seeks went to a wrong key or ended early");
  }
  if (bytes == 0 && !in.seeks.empty()) report.Error(what + ": read nothing");
  return m;
}

// A few untimed Gets after a reopen: every key must still be there.
template <class Engine>
void SpotCheck(Engine& engine, const Inputs& in, Report& report, const std::string& what) {
  std::vector<uint32_t> keys(in.reads.begin(),
                             in.reads.begin() + std::min<uint64_t>(kSpotChecks, in.reads.size()));
  TimedGets(engine, keys, report, what + " (spot check)");
}

// fillseq, fillrandom, overwrite, readrandom, seekrandom; leaves the N-key
// database closed in root/<engine>-db. Returns whether it is there.
template <class Engine>
bool RunWorkloads(Engine& engine, const Inputs& in, const fs::path& root, EngineFigures& fig,
                  Report& report) {
  const std::string name = Engine::kName;
  const uint64_t n = in.n;

  fs::path seq_dir = root / (name + "-fillseq");
  Phase(report, name + " fillseq", [&] {
    try {
      engine.Open(seq_dir, kDefaultMode);
      fig.workloads["fillseq"] = TimedPuts(
          engine, in, n, [](uint64_t i) { return i; }, 0);
      engine.Close();
    } catch (...) {
      engine.Abandon();
      throw;
    }
  });
  std::error_code ignored;
  fs::remove_all(seq_dir, ignored);

  fs::path dir = root / (name + "-db");
  bool ok = true;
  auto step = [&](const std::string& workload, const std::function<void()>& fn) {
    if (!ok) return;
    ok = Phase(report, name + " " + workload, fn);
  };
  step("fillrandom", [&] {
    engine.Open(dir, kDefaultMode);
    fig.workloads["fillrandom"] = TimedPuts(
        engine, in, n, [&](uint64_t i) { return in.fill_order[i]; }, 0);
  });
  step("overwrite", [&] {
    fig.workloads["overwrite"] = TimedPuts(
        engine, in, n, [&](uint64_t i) { return in.overwrite[i]; }, n);
    if constexpr (std::is_same_v<Engine, Kv0Engine>) {
      fig.stats["after_overwrite"] = StatsJson(engine.Stats());
    }
  });
  step("readrandom", [&] {
    fig.workloads["readrandom"] = TimedGets(engine, in.reads, report, name + " readrandom");
  });
  step("seekrandom",
       [&] { fig.workloads["seekrandom"] = TimedSeeks(engine, in, report, name + " seekrandom"); });
  step("close", [&] { engine.Close(); });
  if (!ok) engine.Abandon();
  return ok;
}

// Every view.snap under the WAL root.
std::vector<fs::path> FindSnapshots(const fs::path& wal_root) {
  std::vector<fs::path> found;
  if (!fs::exists(wal_root)) return found;
  for (const auto& entry : fs::recursive_directory_iterator(wal_root)) {
    if (entry.is_regular_file() && entry.path().filename() == "view.snap") {
      found.push_back(entry.path());
    }
  }
  return found;
}

// Reopens kv0's N-key database kReopenRuns times with view.snap and as many
// times without, alternating, measuring time and resident-set growth.
void RunKv0Reopen(Kv0Engine& engine, const Inputs& in, const fs::path& root, EngineFigures& fig,
                  Report& report) {
  fs::path dir = root / "kv0-db";
  for (int run = 0; run < kReopenRuns; ++run) {
    for (bool with_snapshot : {true, false}) {
      std::string what = std::string("kv0 reopen ") +
                         (with_snapshot ? "from view.snap" : "by full scan") + " #" +
                         std::to_string(run + 1);
      bool ok = Phase(report, what, [&] {
        auto snapshots = FindSnapshots(dir / "wal");
        if (with_snapshot && snapshots.empty()) {
          throw std::runtime_error("no view.snap was saved when the database was closed");
        }
        if (!with_snapshot) {
          for (const auto& path : snapshots) fs::remove(path);
        }
        TrimHeap();
        int64_t before = ResidentBytes();
        auto start = Clock::now();
        engine.Open(dir, kDefaultMode);
        double seconds = Seconds(Clock::now() - start);
        int64_t grown = ResidentBytes() - before;
        TrimHeap();
        int64_t kept = ResidentBytes() - before;
        kv::Stats stats = engine.Stats();
        (with_snapshot ? fig.reopen_snapshot_seconds : fig.reopen_scan_seconds).push_back(seconds);
        (with_snapshot ? fig.rss_snapshot_bytes : fig.rss_scan_bytes).push_back(grown);
        (with_snapshot ? fig.rss_snapshot_kept_bytes : fig.rss_scan_kept_bytes).push_back(kept);
        if (run == 0) {
          fig.stats[with_snapshot ? "after_reopen_from_snapshot" : "after_reopen_by_scan"] =
              StatsJson(stats);
        }
        if (stats.opened_from_snapshot != with_snapshot) {
          report.Error(what + ": opened_from_snapshot is " +
                       (stats.opened_from_snapshot ? "true" : "false"));
        }
        if (stats.entries != in.n) {
          report.Error(what + ": " + std::to_string(stats.entries) + " entries, expected " +
                       std::to_string(in.n));
        }
        SpotCheck(engine, in, report, what);
        engine.Close();
      });
      if (!ok) {
        engine.Abandon();
        return;
      }
    }
  }
}

void RunRocksReopen(RocksEngine& engine, const Inputs& in, const fs::path& root, EngineFigures& fig,
                    Report& report) {
  fs::path dir = root / "RocksDB-db";
  for (int run = 0; run < kReopenRuns; ++run) {
    std::string what = "RocksDB reopen #" + std::to_string(run + 1);
    bool ok = Phase(report, what, [&] {
      auto start = Clock::now();
      engine.Open(dir, kDefaultMode);
      fig.reopen_seconds.push_back(Seconds(Clock::now() - start));
      SpotCheck(engine, in, report, what);
      engine.Close();
    });
    if (!ok) {
      engine.Abandon();
      return;
    }
  }
}

std::vector<WriteMode> WalModes() {
  return {
      {.name = "none", .wal_sync = kv::WalSync::kNone},
      {.name = "batch", .wal_sync = kv::WalSync::kBatch},
      {.name = "always",
       .wal_sync = kv::WalSync::kAlways,
       .rocks_sync = true,
       .rocks_setting = "sync=true"},
      {.name = "disable_wal",
       .wal_sync = kv::WalSync::kBatch,
       .disable_wal = true,
       .rocks_setting = "disableWAL=true"},
  };
}

// One round of a WAL row: puts into a fresh database, added to the row's
// figure.
template <class Engine>
void RunWalRound(Engine& engine, const WriteMode& mode, std::optional<Clock::duration> budget,
                 const Inputs& in, const fs::path& root, EngineFigures& fig, Report& report) {
  const std::string name = Engine::kName;
  fs::path dir = root / (name + "-wal-" + mode.name);
  Phase(report, name + " puts, WAL " + mode.name, [&] {
    try {
      engine.Open(dir, mode);
      Measured m = TimedPuts(
          engine, in, in.wal_order.size(), [&](uint64_t i) { return in.wal_order[i]; }, 0, budget);
      engine.Close();
      Measured& total = fig.wal[mode.name];
      total.ops += m.ops;
      total.seconds += m.seconds;
      total.done = true;
    } catch (...) {
      engine.Abandon();
      throw;
    }
  });
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

// ---------------------------------------------------------------------------
// Output.

std::string Ratio(double kv0, double rocks) {
  return rocks > 0 && kv0 > 0 ? Fixed(kv0 / rocks, 2) : "-";
}

std::string Rate(const Measured* m) { return m && m->done ? WithCommas(m->Rate()) : "failed"; }

const Measured* Find(const std::map<std::string, Measured>& map, const std::string& key) {
  auto it = map.find(key);
  return it == map.end() || !it->second.done ? nullptr : &it->second;
}

double RocksFirstReopen(const Report& r) {
  return r.rocksdb.reopen_seconds.empty() ? 0 : r.rocksdb.reopen_seconds.front();
}

double RocksLaterReopen(const Report& r) {
  const auto& all = r.rocksdb.reopen_seconds;
  return all.size() < 2 ? 0 : Median(std::vector<double>(all.begin() + 1, all.end()));
}

void PrintTables(const Report& r) {
  std::printf(
      "\nkv0 %s vs RocksDB %d.%d.%d: %s keys of %zu bytes, values of %zu bytes, %u cores\n\n",
      KV0_VERSION, ROCKSDB_MAJOR, ROCKSDB_MINOR, ROCKSDB_PATCH, WithCommas(r.n).c_str(), kKeySize,
      kValueSize, std::thread::hardware_concurrency());
  std::printf("%-26s %14s %14s %12s\n", "workload", "kv0 ops/s", "RocksDB ops/s", "kv0/RocksDB");
  for (const char* w : {"fillseq", "fillrandom", "overwrite", "readrandom", "seekrandom"}) {
    const Measured* a = Find(r.kv0.workloads, w);
    const Measured* b = Find(r.rocksdb.workloads, w);
    std::string label = w;
    if (label == "seekrandom") label += " (+10 next)";
    std::printf("%-26s %14s %14s %12s\n", label.c_str(), Rate(a).c_str(), Rate(b).c_str(),
                Ratio(a ? a->Rate() : 0, b ? b->Rate() : 0).c_str());
  }

  // RocksDB's first reopen replays the WAL the workload left (RocksDB does
  // not flush its memtable on close) into a table file; later ones do not.
  double rocks_first = RocksFirstReopen(r);
  double rocks_later = RocksLaterReopen(r);
  auto seconds = [](double s) { return s > 0 ? Fixed(s, 3) : std::string("failed"); };
  std::printf("\n%-26s %10s %14s %10s %16s %10s\n",
              ("reopen, " + WithCommas(r.n) + " keys").c_str(), "kv0 s", "RocksDB 1st s", "kv0/1st",
              "RocksDB later s", "kv0/later");
  auto reopen_row = [&](const char* label, const std::vector<double>& kv0) {
    double k = Median(kv0);
    std::printf("%-26s %10s %14s %10s %16s %10s\n", label, seconds(k).c_str(),
                seconds(rocks_first).c_str(), Ratio(k, rocks_first).c_str(),
                seconds(rocks_later).c_str(), Ratio(k, rocks_later).c_str());
  };
  reopen_row("from view.snap", r.kv0.reopen_snapshot_seconds);
  reopen_row("without view.snap", r.kv0.reopen_scan_seconds);
  std::printf(
      "(kv0: median of %d opens. RocksDB as is: its first reopen replays the WAL the workload\n"
      " left into a table file, later ones (median of %d) have nothing to replay. Time ratios:\n"
      " lower is better for kv0.)\n",
      kReopenRuns, kReopenRuns - 1);

  std::printf("\n%-26s %14s %14s\n", "kv0 resident B/entry", "after open", "after trim");
  auto memory_row = [&](const char* label, const std::vector<int64_t>& grown,
                        const std::vector<int64_t>& kept) {
    if (grown.empty()) {
      std::printf("%-26s %14s %14s\n", label, "failed", "failed");
      return;
    }
    double n = static_cast<double>(r.n);
    std::printf("%-26s %14s %14s\n", label,
                Fixed((MedianOf(grown) - n * (kKeySize + kValueSize)) / n, 1).c_str(),
                Fixed((MedianOf(kept) - n * (kKeySize + kValueSize)) / n, 1).c_str());
  };
  memory_row("reopen from view.snap", r.kv0.rss_snapshot_bytes, r.kv0.rss_snapshot_kept_bytes);
  memory_row("reopen by full scan", r.kv0.rss_scan_bytes, r.kv0.rss_scan_kept_bytes);
  std::printf(
      "(resident-set growth across the open, minus %zu + %zu bytes per key, per key;\n"
      " \"after trim\": once malloc_trim has returned the open's freed heap to the OS)\n",
      kKeySize, kValueSize);
  if (r.kv0.stats.contains("after_overwrite")) {
    const json& s = r.kv0.stats["after_overwrite"];
    std::printf(
        "\nkv0 GetStats after overwrite: entries %s, stored_rows %s, fragments %s, flushes %s, "
        "compactions %s\n",
        WithCommas(s["entries"].get<double>()).c_str(),
        WithCommas(s["stored_rows"].get<double>()).c_str(),
        WithCommas(s["fragments"].get<double>()).c_str(),
        WithCommas(s["flushes"].get<double>()).c_str(),
        WithCommas(s["compactions"].get<double>()).c_str());
  }

  std::printf("\n%-26s %14s %14s %12s  %s\n", ("puts, " + WithCommas(r.wal_keys) + " keys").c_str(),
              "kv0 ops/s", "RocksDB ops/s", "kv0/RocksDB", "RocksDB setting");
  for (const auto& mode : WalModes()) {
    const Measured* a = Find(r.kv0.wal, mode.name);
    const Measured* b = Find(r.rocksdb.wal, mode.name);
    std::string label = mode.name == "disable_wal" ? "disable_wal" : "wal_sync=" + mode.name;
    std::printf("%-26s %14s %14s %12s  %s\n", label.c_str(), Rate(a).c_str(), Rate(b).c_str(),
                Ratio(a ? a->Rate() : 0, b ? b->Rate() : 0).c_str(), mode.rocks_setting.c_str());
  }
  std::printf(
      "(\"always\": %d alternating rounds of at most %lld s each; kv0 wrote %s keys, RocksDB %s)\n",
      kAlwaysRounds, static_cast<long long>(kAlwaysBudget.count() / kAlwaysRounds),
      Find(r.kv0.wal, "always") ? WithCommas(Find(r.kv0.wal, "always")->ops).c_str() : "-",
      Find(r.rocksdb.wal, "always") ? WithCommas(Find(r.rocksdb.wal, "always")->ops).c_str() : "-");

  if (!r.errors.empty()) {
    std::printf("\nERRORS:\n");
    for (const auto& e : r.errors) std::printf("  %s\n", e.c_str());
  }
  std::fflush(stdout);
}

json MeasuredJson(const Measured* m) {
  if (!m) return nullptr;
  return json{{"ops", m->ops}, {"seconds", m->seconds}, {"ops_per_sec", m->Rate()}};
}

json ReportJson(const Report& r) {
  json j;
  j["timestamp"] = Timestamp();
  j["cores"] = std::thread::hardware_concurrency();
  j["keys"] = r.n;
  j["wal_keys"] = r.wal_keys;
  j["key_bytes"] = kKeySize;
  j["value_bytes"] = kValueSize;
  j["seed"] = kSeed;
  j["kv0_version"] = KV0_VERSION;
  j["rocksdb_version"] = std::to_string(ROCKSDB_MAJOR) + "." + std::to_string(ROCKSDB_MINOR) + "." +
                         std::to_string(ROCKSDB_PATCH);
  kv::Options kv_defaults;
  j["config"] = {
      {"kv0",
       {{"wal_sync", "batch"},
        {"write_buffer_size", kv_defaults.write_buffer_size},
        {"flush_interval_ms", kv_defaults.flush_interval.count()},
        {"max_fragments", kv_defaults.max_fragments},
        {"snapshot_min_entries",
         std::max<uint64_t>(1, std::min<uint64_t>(kv_defaults.snapshot_min_entries, r.n))},
        {"write_phases_end_with_flush", true}}},
      {"rocksdb",
       {{"wal", true},
        {"sync", false},
        {"block_cache_bytes", RocksEngine::CacheBytes(r.n)},
        {"bloom_bits_per_key", kBloomBitsPerKey},
        {"other_options", "defaults"}}},
      {"seeks", std::max<uint64_t>(1, r.n / 10)},
      {"nexts_per_seek", kNextsPerSeek},
      {"reopen_runs", kReopenRuns},
      {"always_budget_seconds", kAlwaysBudget.count()},
      {"always_rounds", kAlwaysRounds},
  };

  json workloads = json::array();
  for (const char* w : {"fillseq", "fillrandom", "overwrite", "readrandom", "seekrandom"}) {
    const Measured* a = Find(r.kv0.workloads, w);
    const Measured* b = Find(r.rocksdb.workloads, w);
    json row{{"name", w}, {"kv0", MeasuredJson(a)}, {"rocksdb", MeasuredJson(b)}};
    row["ratio"] = a && b && b->Rate() > 0 ? json(a->Rate() / b->Rate()) : json(nullptr);
    workloads.push_back(row);
  }
  j["workloads"] = workloads;

  auto median_or_null = [](const std::vector<double>& v) {
    return v.empty() ? json(nullptr) : json(Median(v));
  };
  j["reopen"] = {
      {"kv0_snapshot_seconds", r.kv0.reopen_snapshot_seconds},
      {"kv0_snapshot_median_seconds", median_or_null(r.kv0.reopen_snapshot_seconds)},
      {"kv0_full_scan_seconds", r.kv0.reopen_scan_seconds},
      {"kv0_full_scan_median_seconds", median_or_null(r.kv0.reopen_scan_seconds)},
      {"rocksdb_seconds", r.rocksdb.reopen_seconds},
      {"rocksdb_median_seconds", median_or_null(r.rocksdb.reopen_seconds)},
      {"rocksdb_first_seconds",
       r.rocksdb.reopen_seconds.empty() ? json(nullptr) : json(RocksFirstReopen(r))},
      {"rocksdb_later_median_seconds",
       r.rocksdb.reopen_seconds.size() < 2 ? json(nullptr) : json(RocksLaterReopen(r))},
      {"note",
       "RocksDB's first reopen replays the WAL the workload left; later reopens have "
       "nothing to replay"},
  };

  auto per_entry = [&](const std::vector<int64_t>& grown) {
    if (grown.empty()) return json(nullptr);
    double n = static_cast<double>(r.n);
    return json((MedianOf(grown) - n * (kKeySize + kValueSize)) / n);
  };
  j["memory"] = {
      {"kv0_rss_growth_bytes_snapshot_reopen", r.kv0.rss_snapshot_bytes},
      {"kv0_rss_growth_bytes_full_scan_reopen", r.kv0.rss_scan_bytes},
      {"kv0_rss_growth_after_trim_bytes_snapshot_reopen", r.kv0.rss_snapshot_kept_bytes},
      {"kv0_rss_growth_after_trim_bytes_full_scan_reopen", r.kv0.rss_scan_kept_bytes},
      {"kv0_bytes_per_entry_beyond_kv_snapshot_reopen", per_entry(r.kv0.rss_snapshot_bytes)},
      {"kv0_bytes_per_entry_beyond_kv_full_scan_reopen", per_entry(r.kv0.rss_scan_bytes)},
      {"kv0_bytes_per_entry_beyond_kv_after_trim_snapshot_reopen",
       per_entry(r.kv0.rss_snapshot_kept_bytes)},
      {"kv0_bytes_per_entry_beyond_kv_after_trim_full_scan_reopen",
       per_entry(r.kv0.rss_scan_kept_bytes)},
  };
  j["kv0_stats"] = r.kv0.stats;

  json wal = json::array();
  for (const auto& mode : WalModes()) {
    const Measured* a = Find(r.kv0.wal, mode.name);
    const Measured* b = Find(r.rocksdb.wal, mode.name);
    json row{{"mode", mode.name},
             {"rocksdb_setting", mode.rocks_setting},
             {"kv0", MeasuredJson(a)},
             {"rocksdb", MeasuredJson(b)}};
    row["ratio"] = a && b && b->Rate() > 0 ? json(a->Rate() / b->Rate()) : json(nullptr);
    wal.push_back(row);
  }
  j["wal"] = wal;
  j["errors"] = r.errors;
  return j;
}

}  // namespace

int RunKvBench(const KvBenchArgs& args) {
  if (args.keys == 0 || args.keys > UINT32_MAX) {
    throw Error(Code::kInvalidArgument, "--keys must be between 1 and 2^32 - 1");
  }
  uint64_t wal_keys = args.wal_keys ? args.wal_keys : std::max<uint64_t>(1, args.keys / 10);
  if (wal_keys > UINT32_MAX) throw Error(Code::kInvalidArgument, "--wal-keys is too large");

  Report report;
  report.n = args.keys;
  report.wal_keys = wal_keys;
  ScratchDir temp(args.dir, "kv0-bench");
  std::cerr << "kv0 bench kv: " << args.keys << " keys, " << wal_keys << " WAL keys, in "
            << temp.path().string() << "\n";
  Inputs in = MakeInputs(args.keys, wal_keys);

  {
    Kv0Engine kv0(args.keys);
    if (RunWorkloads(kv0, in, temp.path(), report.kv0, report)) {
      RunKv0Reopen(kv0, in, temp.path(), report.kv0, report);
    }
  }
  std::error_code ignored;
  fs::remove_all(temp.path() / "kv0-db", ignored);
  {
    RocksEngine rocks(args.keys);
    if (RunWorkloads(rocks, in, temp.path(), report.rocksdb, report)) {
      RunRocksReopen(rocks, in, temp.path(), report.rocksdb, report);
    }
  }
  fs::remove_all(temp.path() / "RocksDB-db", ignored);

  for (const auto& mode : WalModes()) {
    bool always = mode.name == "always";
    int rounds = always ? kAlwaysRounds : 1;
    std::optional<Clock::duration> budget;
    if (always) budget = kAlwaysBudget / rounds;
    for (int round = 0; round < rounds; ++round) {
      Kv0Engine kv0(args.keys);
      RunWalRound(kv0, mode, budget, in, temp.path(), report.kv0, report);
      RocksEngine rocks(args.keys);
      RunWalRound(rocks, mode, budget, in, temp.path(), report.rocksdb, report);
    }
  }

  PrintTables(report);
  if (!args.json_path.empty()) {
    std::ofstream out(args.json_path);
    out << ReportJson(report).dump(2) << "\n";
    out.close();
    if (!out) throw Error(Code::kIOError, "cannot write " + args.json_path);
    std::cerr << "wrote " << args.json_path << "\n";
  }
  return report.errors.empty() ? 0 : 1;
}

}  // namespace kv0::bench
