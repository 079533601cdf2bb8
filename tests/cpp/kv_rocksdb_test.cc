// A differential test against RocksDB: random puts, deletes, range deletes,
// batches, gets, multi-gets and iterator walks through two kv0 handles on one
// database, with flushes, refreshes, compactions by either handle, and closes
// and reopens (with and without view.snap) in between, under changing options
// (values in Lance or in memory, tombstone grace 0 or 1 s). Every read of a
// handle is compared with RocksDB's answer for the writes that handle must
// see.
//
// What a handle must see: its own writes at once; the other handle's once
// they are committed (that handle flushed) and this handle has read storage
// since (Refresh(), a compaction of its own, which leaves it at the version
// it made, or an open). Writes are ordered by when they were made: their
// sequence numbers come from one process's wall clock, so the later write to
// a key wins whichever handle committed first. The model is a log of writes
// in that order, each marked with the commit that stored it; the RocksDB of
// a handle is a base (the oldest writes, which both handles see) plus the
// writes of the log it sees, applied in order.
//
// One case is kept out on purpose: a handle holding an unflushed put of a key
// that the other handle then deletes. If a compaction drops that tombstone
// (tombstone_grace) before the put is committed, the put reappears, as
// design.md says it may; so before such a delete the put's handle flushes.
//
// KV0_DIFF_SEEDS (default 3), KV0_DIFF_OPS (operations per seed, default
// 4000) and KV0_DIFF_FIRST_SEED (default 1) size the run; a run prints its
// counts.

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kv0/kv.h"
#include "test_util.h"

namespace kv0::kv {
namespace {

using testing::EnvNumber;

// Keys that sort next to each other, prefix each other, and hold 0x00 and
// 0xFF bytes; the empty key too.
const std::vector<std::string>& Alphabet() {
  static const std::vector<std::string> keys = {
      "",
      std::string("\0", 1),
      std::string("\0\0", 2),
      std::string("\0\xff", 2),
      "a",
      std::string("a\0", 2),
      "aa",
      "aab",
      "ab",
      "b",
      "ba",
      "k",
      "kk",
      "kkk",
      "z",
      "\x7f",
      "\x80",
      "\xfe",
      "\xff",
      std::string("\xff\0", 2),
      "\xff\xff",
      "\xff\xff\xff",
  };
  return keys;
}
// Past every key, for range ends.
const std::string kPastAll = "\xff\xff\xff\xff";

std::string Printable(std::string_view s) {
  std::ostringstream out;
  out << '"';
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out << c;
    } else {
      static const char* hex = "0123456789abcdef";
      out << "\\x" << hex[c >> 4] << hex[c & 15];
    }
  }
  out << '"';
  return out.str();
}

std::string PrintableOr(const std::optional<std::string>& s) {
  return s ? Printable(std::string_view(*s)) : "(absent)";
}

// One RocksDB, in memory: the answers for one handle, or the base.
class Rocks {
 public:
  Rocks(rocksdb::Env* env, std::string path) : env_(env), path_(std::move(path)) { Reset(); }

  void Reset() {
    db_.reset();
    rocksdb::Options options;
    options.env = env_;
    options.create_if_missing = true;
    EXPECT_TRUE(rocksdb::DestroyDB(path_, options).ok());
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(options, path_, &raw);
    if (!s.ok()) throw std::runtime_error("cannot open RocksDB: " + s.ToString());
    db_.reset(raw);
  }

  void Apply(const std::vector<WriteBatch::Op>& ops) {
    rocksdb::WriteBatch batch;
    for (const auto& op : ops) {
      switch (op.kind) {
        case WriteBatch::Kind::kPut:
          batch.Put(op.key, op.value);
          break;
        case WriteBatch::Kind::kDelete:
          batch.Delete(op.key);
          break;
        case WriteBatch::Kind::kDeleteRange:
          if (op.key < op.value) batch.DeleteRange(op.key, op.value);
          break;
      }
    }
    Check(db_->Write(rocksdb::WriteOptions(), &batch));
  }

  void CopyFrom(Rocks& other) {
    rocksdb::WriteBatch batch;
    std::unique_ptr<rocksdb::Iterator> it(other.db_->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) batch.Put(it->key(), it->value());
    Check(it->status());
    Check(db_->Write(rocksdb::WriteOptions(), &batch));
  }

  std::optional<std::string> Get(const std::string& key) {
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
    if (s.IsNotFound()) return std::nullopt;
    Check(s);
    return value;
  }

  std::vector<std::optional<std::string>> MultiGet(const std::vector<std::string>& keys) {
    std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
    std::vector<std::string> values;
    std::vector<rocksdb::Status> statuses = db_->MultiGet(rocksdb::ReadOptions(), slices, &values);
    std::vector<std::optional<std::string>> out;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (statuses[i].IsNotFound()) {
        out.emplace_back();
      } else {
        Check(statuses[i]);
        out.emplace_back(values[i]);
      }
    }
    return out;
  }

  std::unique_ptr<rocksdb::Iterator> NewIterator() {
    return std::unique_ptr<rocksdb::Iterator>(db_->NewIterator(rocksdb::ReadOptions()));
  }

 private:
  static void Check(const rocksdb::Status& s) {
    if (!s.ok()) throw std::runtime_error("RocksDB: " + s.ToString());
  }

  rocksdb::Env* env_;
  std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
};

// A write (one call: a single operation or a batch) in the order writes
// were made.
struct Logged {
  int handle;
  std::vector<WriteBatch::Op> ops;
  uint64_t committed = std::numeric_limits<uint64_t>::max();  // the commit that stored it
  std::string what;                                           // for messages
};

struct Counts {
  uint64_t ops = 0, reads = 0, writes = 0, flushes = 0, refreshes = 0, compact_ranges = 0,
           reopens = 0, walks = 0, walk_steps = 0, segments = 0;
  // From the handles' Stats, summed over every handle opened.
  uint64_t compactions = 0, view_reloads = 0, snapshot_opens = 0;
};

class Harness {
 public:
  Harness(uint64_t seed, const std::filesystem::path& dir, rocksdb::Env* env, Counts* counts)
      : rng_(seed), seed_(seed), dir_(dir), counts_(counts), base_(env, "/base") {
    views_.emplace_back(env, "/view0");
    views_.emplace_back(env, "/view1");
  }

  // Runs `ops` operations; stops at the first divergence (a gtest failure).
  void Run(uint64_t ops, uint64_t segment_ops) {
    NewSegment();
    for (step_ = 0; step_ < ops; ++step_) {
      if (step_ > 0 && step_ % segment_ops == 0) NewSegment();
      Step();
      counts_->ops++;
      if (::testing::Test::HasFailure()) return;
    }
    CloseAll();
  }

 private:
  struct Handle {
    std::unique_ptr<DB> db;
    Options options;
    uint64_t seen = 0;                // the last commit this handle has read storage at
    std::vector<uint64_t> pending;    // its writes not committed (log positions)
    uint64_t compactions_before = 0;  // Stats().compactions at the last look
  };

  // --- Randomness ---------------------------------------------------------
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool Chance(int percent) { return Pick(100) < percent; }
  const std::string& Key() { return Alphabet()[Pick(static_cast<int>(Alphabet().size()))]; }
  std::string Value() {
    // Unique (the write's number leads), sometimes empty, sometimes longer
    // than a small lazy_value_threshold.
    if (Chance(8)) return "";
    std::string v = std::to_string(written_);
    int extra = Chance(20) ? 17 + Pick(64) : Pick(12);
    for (int i = 0; i < extra; ++i) v.push_back(static_cast<char>(Pick(256)));
    return v;
  }
  std::pair<std::string, std::string> Range() {
    std::string a = Key();
    std::string b = Chance(15) ? kPastAll : Key();
    if (b < a) std::swap(a, b);
    return {a, b};
  }

  Options RandomOptions() {
    Options o;
    o.wal_dir = (dir_ / "wal").string();
    o.wal_sync = WalSync::kNone;
    o.flush_interval = std::chrono::hours(1);    // commits happen where the test says
    o.refresh_interval = std::chrono::hours(1);  // and so do refreshes
    o.write_buffer_size = size_t{1} << 30;
    o.max_fragments = std::vector<size_t>{2, 3, 5}[Pick(3)];
    o.lazy_value_threshold = Chance(50) ? 16 : size_t{1} << 20;
    o.value_cache_size = Chance(50) ? 64 : size_t{1} << 20;
    o.snapshot_min_entries = Chance(60) ? 1 : size_t{1} << 30;
    o.tombstone_grace = std::chrono::seconds(Chance(50) ? 0 : 1);
    return o;
  }

  // --- The model ------------------------------------------------------------
  bool Sees(int h, const Logged& w) const {
    return w.handle == h || w.committed <= handles_[h].seen;
  }
  Logged& At(uint64_t position) { return log_[position - log_start_]; }

  // Handle h has read storage as of the latest commit.
  void Saw(int h) {
    handles_[h].seen = commits_;
    views_[h].Reset();
    views_[h].CopyFrom(base_);
    for (const Logged& w : log_) {
      if (Sees(h, w)) views_[h].Apply(w.ops);
    }
    // Writes both handles see move into the base.
    while (!log_.empty() && Sees(0, log_.front()) && Sees(1, log_.front())) {
      base_.Apply(log_.front().ops);
      log_.pop_front();
      log_start_++;
    }
  }

  // Handle h's flush (or close) commits its pending writes.
  void Committed(int h) {
    if (handles_[h].pending.empty()) return;
    commits_++;
    for (uint64_t p : handles_[h].pending) At(p).committed = commits_;
    handles_[h].pending.clear();
  }

  // After anything that may compact through h: a compaction leaves the
  // handle at the version it made.
  void MaybeCompacted(int h) {
    uint64_t now = handles_[h].db->GetStats().compactions;
    if (now != handles_[h].compactions_before) {
      handles_[h].compactions_before = now;
      Saw(h);
    }
  }

  // --- Handles ----------------------------------------------------------------
  void Open(int h) {
    Handle& handle = handles_[h];
    handle.options = RandomOptions();
    handle.db = DB::Open(path_, handle.options);
    Stats s = handle.db->GetStats();
    handle.compactions_before = s.compactions;
    if (s.opened_from_snapshot) counts_->snapshot_opens++;
    Saw(h);
  }

  void Close(int h) {
    Handle& handle = handles_[h];
    Stats s = handle.db->GetStats();
    handle.db->Close();
    Committed(h);
    counts_->compactions += s.compactions;
    counts_->view_reloads += s.view_reloads;
    handle.db.reset();
  }

  void CloseAll() {
    for (int h = 0; h < 2; ++h) {
      if (handles_[h].db) Close(h);
    }
  }

  void NewSegment() {
    CloseAll();
    counts_->segments++;
    path_ = (dir_ / ("db" + std::to_string(counts_->segments))).string();
    log_.clear();
    log_start_ = 0;
    commits_ = 0;
    base_.Reset();
    for (int h = 0; h < 2; ++h) handles_[h] = Handle{};
    Open(0);
    Open(1);
  }

  // --- Operations -------------------------------------------------------------
  void Note(std::string what) {
    history_.push_back("step " + std::to_string(step_) + ": " + std::move(what));
    if (history_.size() > 40) history_.pop_front();
  }

  std::string Context(int h) const {
    std::string out = "seed " + std::to_string(seed_) + ", step " + std::to_string(step_) +
                      ", handle " + std::to_string(h) + " (lazy threshold " +
                      std::to_string(handles_[h].options.lazy_value_threshold) + ", grace " +
                      std::to_string(handles_[h].options.tombstone_grace.count()) +
                      " s); recent operations:\n";
    for (const auto& line : history_) out += "  " + line + "\n";
    return out;
  }

  // Whether `ops`, written through h, delete a key that the other handle
  // has an unflushed put of.
  bool DeletesPendingPut(int h, const std::vector<WriteBatch::Op>& ops) {
    for (uint64_t p : handles_[1 - h].pending) {
      for (const auto& put : At(p).ops) {
        if (put.kind != WriteBatch::Kind::kPut) continue;
        for (const auto& op : ops) {
          if ((op.kind == WriteBatch::Kind::kDelete && op.key == put.key) ||
              (op.kind == WriteBatch::Kind::kDeleteRange && op.key <= put.key &&
               put.key < op.value)) {
            return true;
          }
        }
      }
    }
    return false;
  }

  // Writes `ops` through handle h, as one call.
  void Write(int h, std::vector<WriteBatch::Op> ops, const WriteOptions& options,
             const std::string& what) {
    // The excluded case: the other handle's unflushed put of a key this
    // write deletes is committed first.
    if (DeletesPendingPut(h, ops)) Flush(1 - h, "before a delete of its key");

    Note("handle " + std::to_string(h) + " " + what);
    WriteBatch batch;
    for (const auto& op : ops) {
      if (op.kind == WriteBatch::Kind::kPut) batch.Put(op.key, op.value);
      if (op.kind == WriteBatch::Kind::kDelete) batch.Delete(op.key);
      if (op.kind == WriteBatch::Kind::kDeleteRange) batch.DeleteRange(op.key, op.value);
    }
    handles_[h].db->Write(batch, options);
    views_[h].Apply(ops);
    log_.push_back({h, std::move(ops), std::numeric_limits<uint64_t>::max(), what});
    handles_[h].pending.push_back(log_start_ + log_.size() - 1);
    written_++;
    counts_->writes++;
    if (options.sync) {
      Committed(h);
      MaybeCompacted(h);
    }
  }

  void Flush(int h, const std::string& why = "") {
    Note("handle " + std::to_string(h) + " flush" + (why.empty() ? "" : " " + why));
    handles_[h].db->Flush();
    Committed(h);
    counts_->flushes++;
    MaybeCompacted(h);
  }

  void Step() {
    int h = Pick(2);
    int what = Pick(1000);
    if (what < 250) {
      std::string k = Key(), v = Value();
      Write(h, {{WriteBatch::Kind::kPut, k, v}}, {}, "put " + Printable(k) + " " + Printable(v));
    } else if (what < 260) {
      std::string k = Key(), v = Value();
      Write(h, {{WriteBatch::Kind::kPut, k, v}}, {.sync = true},
            "sync put " + Printable(k) + " " + Printable(v));
    } else if (what < 270) {
      std::string k = Key(), v = Value();
      Write(h, {{WriteBatch::Kind::kPut, k, v}}, {.disable_wal = true},
            "unlogged put " + Printable(k) + " " + Printable(v));
    } else if (what < 480) {
      // Deletes, ranges and batches. Most of those that would delete a key
      // the other handle has an unflushed put of are drawn again, so that
      // the other handle's flush before them stays one case among others.
      std::vector<WriteBatch::Op> ops;
      std::string desc;
      for (int attempt = 0; attempt < 4; ++attempt) {
        ops.clear();
        if (what < 360) {
          std::string k = Key();
          ops.push_back({WriteBatch::Kind::kDelete, k, ""});
          desc = "delete " + Printable(k);
        } else if (what < 400) {
          auto [a, b] = Range();
          ops.push_back({WriteBatch::Kind::kDeleteRange, a, b});
          desc = "delete_range " + Printable(a) + " " + Printable(b);
        } else {
          desc = "batch";
          for (int i = Pick(6) + 1; i > 0; --i) {
            int kind = Pick(10);
            if (kind < 6) {
              std::string k = Key(), v = Value();
              ops.push_back({WriteBatch::Kind::kPut, k, v});
              desc += " put " + Printable(k) + " " + Printable(v);
            } else if (kind < 9) {
              std::string k = Key();
              ops.push_back({WriteBatch::Kind::kDelete, k, ""});
              desc += " delete " + Printable(k);
            } else {
              auto [a, b] = Range();
              ops.push_back({WriteBatch::Kind::kDeleteRange, a, b});
              desc += " delete_range " + Printable(a) + " " + Printable(b);
            }
          }
        }
        if (!DeletesPendingPut(h, ops)) break;
      }
      Write(h, std::move(ops), {}, desc);
    } else if (what < 670) {
      ExpectGet(h, Key());
    } else if (what < 740) {
      std::vector<std::string> keys;
      for (int i = Pick(8) + 1; i > 0; --i) keys.push_back(Key());
      ExpectMultiGet(h, keys);
    } else if (what < 770) {
      ExpectKeyMayExist(h, Key());
    } else if (what < 920) {
      ExpectWalk(h);
    } else if (what < 955) {
      Flush(h);
      ExpectAll(h);
    } else if (what < 985) {
      Note("handle " + std::to_string(h) + " refresh");
      handles_[h].db->Refresh();
      counts_->refreshes++;
      Saw(h);
      ExpectAll(h);
    } else if (what < 991) {
      Note("handle " + std::to_string(h) + " compact_range");
      handles_[h].db->CompactRange();
      Committed(h);  // it flushes first
      counts_->compact_ranges++;
      handles_[h].compactions_before = handles_[h].db->GetStats().compactions;
      Saw(h);
      ExpectAll(0);
      ExpectAll(1);
    } else if (what < 998) {
      Reopen(h);
    } else {
      Reopen(0);
      Reopen(1);
    }
  }

  void Reopen(int h) {
    bool drop_snapshot = Chance(30);
    Note("handle " + std::to_string(h) + " reopen" + (drop_snapshot ? " without view.snap" : ""));
    Close(h);
    if (drop_snapshot) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "wal")) {
        if (e.path().filename() == "view.snap") std::filesystem::remove(e.path());
      }
    }
    counts_->reopens++;
    Open(h);
    ExpectAll(h);
  }

  // --- Reads, compared ---------------------------------------------------------
  void ExpectGet(int h, const std::string& key) {
    counts_->reads++;
    auto want = views_[h].Get(key);
    auto got = handles_[h].db->Get(key);
    ASSERT_EQ(PrintableOr(got), PrintableOr(want)) << "get " << Printable(key) << "\n"
                                                   << Context(h);
  }

  void ExpectMultiGet(int h, const std::vector<std::string>& keys) {
    counts_->reads++;
    auto want = views_[h].MultiGet(keys);
    std::vector<std::string_view> views(keys.begin(), keys.end());
    auto got = handles_[h].db->MultiGet(views);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(PrintableOr(got[i]), PrintableOr(want[i]))
          << "multi_get key " << i << " " << Printable(keys[i]) << "\n"
          << Context(h);
    }
  }

  void ExpectKeyMayExist(int h, const std::string& key) {
    counts_->reads++;
    bool present = views_[h].Get(key).has_value();
    // The view answers exactly: a stale entry would be a divergence.
    ASSERT_EQ(handles_[h].db->KeyMayExist(key), present)
        << "key_may_exist " << Printable(key) << "\n"
        << Context(h);
  }

  // A walk from a seek, a seek_for_prev, the first or the last key, then
  // steps either way, every position compared.
  void ExpectWalk(int h) {
    counts_->walks++;
    auto want = views_[h].NewIterator();
    auto got = handles_[h].db->NewIterator();
    std::string start;
    switch (Pick(4)) {
      case 0:
        start = "seek_to_first";
        want->SeekToFirst();
        got->SeekToFirst();
        break;
      case 1:
        start = "seek_to_last";
        want->SeekToLast();
        got->SeekToLast();
        break;
      case 2: {
        std::string k = Key();
        start = "seek " + Printable(k);
        want->Seek(k);
        got->Seek(k);
        break;
      }
      default: {
        std::string k = Key();
        start = "seek_for_prev " + Printable(k);
        want->SeekForPrev(k);
        got->SeekForPrev(k);
        break;
      }
    }
    bool forward = Chance(50);
    std::string path = start;
    for (int steps = 0;; ++steps) {
      counts_->walk_steps++;
      ASSERT_EQ(got->Valid(), want->Valid()) << "walk " << path << "\n" << Context(h);
      if (!want->Valid()) break;
      ASSERT_EQ(Printable(got->key()), Printable(want->key().ToStringView()))
          << "walk " << path << "\n"
          << Context(h);
      ASSERT_EQ(Printable(got->value()), Printable(want->value().ToStringView()))
          << "walk " << path << " at " << Printable(got->key()) << "\n"
          << Context(h);
      if (steps >= 40) break;
      if (Chance(15)) forward = !forward;
      if (forward) {
        want->Next();
        got->Next();
        path += " next";
      } else {
        want->Prev();
        got->Prev();
        path += " prev";
      }
    }
  }

  // Every key and a whole forward walk.
  void ExpectAll(int h) {
    for (const auto& k : Alphabet()) {
      ExpectGet(h, k);
      if (::testing::Test::HasFatalFailure()) return;
    }
    counts_->reads++;
    auto want = views_[h].NewIterator();
    auto got = handles_[h].db->NewIterator();
    want->SeekToFirst();
    got->SeekToFirst();
    for (; want->Valid(); want->Next(), got->Next()) {
      ASSERT_TRUE(got->Valid()) << "missing " << Printable(want->key().ToStringView()) << "\n"
                                << Context(h);
      ASSERT_EQ(Printable(got->key()), Printable(want->key().ToStringView())) << Context(h);
      ASSERT_EQ(Printable(got->value()), Printable(want->value().ToStringView())) << Context(h);
    }
    ASSERT_FALSE(got->Valid()) << "extra " << Printable(got->key()) << "\n" << Context(h);
  }

  std::mt19937_64 rng_;
  const uint64_t seed_;
  const std::filesystem::path dir_;
  Counts* counts_;
  Rocks base_;
  std::vector<Rocks> views_;
  Handle handles_[2];
  std::string path_;
  std::deque<Logged> log_;
  uint64_t log_start_ = 0;  // log position of log_.front()
  uint64_t commits_ = 0;
  uint64_t written_ = 0;
  uint64_t step_ = 0;
  std::deque<std::string> history_;
};

TEST(KvRocksDbTest, TwoHandlesReadWhatRocksDbReadsForTheWritesTheySee) {
  const uint64_t seeds = EnvNumber("KV0_DIFF_SEEDS", 3);
  const uint64_t ops = EnvNumber("KV0_DIFF_OPS", 4000);
  const uint64_t first = EnvNumber("KV0_DIFF_FIRST_SEED", 1);
  // A fresh database every so often keeps the version count, and so each
  // commit's cost, bounded.
  const uint64_t segment = EnvNumber("KV0_DIFF_SEGMENT_OPS", 2500);
  std::unique_ptr<rocksdb::Env> env(rocksdb::NewMemEnv(rocksdb::Env::Default()));
  Counts counts;
  for (uint64_t seed = first; seed < first + seeds; ++seed) {
    testing::TempDir dir;
    Harness harness(seed, dir.path(), env.get(), &counts);
    harness.Run(ops, segment);
    if (HasFailure()) break;
  }
  std::printf(
      "kv_rocksdb_test: seeds %llu..%llu, %llu operations (%llu writes, %llu reads compared, "
      "%llu walks of %llu steps, %llu flushes, %llu refreshes, %llu compact_range, %llu reopens, "
      "%llu databases); handles compacted %llu times, reloaded their view %llu times, opened "
      "from view.snap %llu times; %s\n",
      static_cast<unsigned long long>(first), static_cast<unsigned long long>(first + seeds - 1),
      static_cast<unsigned long long>(counts.ops), static_cast<unsigned long long>(counts.writes),
      static_cast<unsigned long long>(counts.reads), static_cast<unsigned long long>(counts.walks),
      static_cast<unsigned long long>(counts.walk_steps),
      static_cast<unsigned long long>(counts.flushes),
      static_cast<unsigned long long>(counts.refreshes),
      static_cast<unsigned long long>(counts.compact_ranges),
      static_cast<unsigned long long>(counts.reopens),
      static_cast<unsigned long long>(counts.segments),
      static_cast<unsigned long long>(counts.compactions),
      static_cast<unsigned long long>(counts.view_reloads),
      static_cast<unsigned long long>(counts.snapshot_opens),
      HasFailure() ? "DIVERGED" : "0 divergences");
  EXPECT_GT(counts.compactions, 0u);
  EXPECT_GT(counts.view_reloads, 0u);
}

}  // namespace
}  // namespace kv0::kv
