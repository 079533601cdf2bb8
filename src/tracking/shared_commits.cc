#include "tracking/shared_commits.h"

#include <algorithm>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "kv0/error.h"

namespace kv0::tracking {
namespace {

// The fragment ids `dataset` gives to the fragment whose data file is
// `file`: none when it is not there (compaction merged it since).
std::vector<uint64_t> IdsOf(const lance::Dataset& dataset, const std::string& file) {
  for (const auto& f : dataset.Fragments()) {
    if (f.data_file == file) return {f.id};
  }
  return {};
}

// Announcements are named after data files; anything else in the directory
// (a local store's temporary file mid-write) is not one.
bool IsAnnouncement(const std::string& name) {
  return name.size() > 6 && name.compare(name.size() - 6, 6, ".lance") == 0 && name[0] != '.';
}

// The data files of the fragments `dataset` holds at its version.
std::set<std::string> HeldFiles(const lance::Dataset& dataset) {
  std::set<std::string> held;
  for (const auto& f : dataset.Fragments()) held.insert(f.data_file);
  return held;
}

// A random wait between first_ms and cap_ms, doubling with the attempt:
// before a round runs again after losing a race (so that writers that lost
// together do not all try again at once), and, longer, between the listings
// of a writer waiting for another's commit (every waiting writer lists).
void Pause(int attempt, int first_ms, int cap_ms) {
  thread_local std::minstd_rand random{std::random_device{}()};
  int high_ms = std::min(cap_ms, first_ms << std::min(attempt, 4));
  std::this_thread::sleep_for(
      std::chrono::milliseconds(high_ms / 2 + random() % (high_ms / 2 + 1)));
}

}  // namespace

SharedCommits::SharedCommits(std::string repo_uri, lance::StorageOptions options,
                             std::chrono::milliseconds timeout, std::chrono::milliseconds takeover)
    : repo_uri_(std::move(repo_uri)),
      options_(std::move(options)),
      timeout_(timeout),
      takeover_(takeover) {}

std::string SharedCommits::Dir(const std::string& table) const {
  return repo_uri_ + "/_pending/" + table;
}

std::vector<lance::ListedObject> SharedCommits::List(const std::string& dir) {
  std::vector<lance::ListedObject> listed = lance::ListObjects(dir, options_);
  std::erase_if(listed, [](const lance::ListedObject& o) { return !IsAnnouncement(o.name); });
  std::stable_sort(listed.begin(), listed.end(), [](const auto& a, const auto& b) {
    return a.modified_ms < b.modified_ms;  // ties stay in name order
  });
  return listed;
}

std::vector<std::optional<std::string>> SharedCommits::Read(const std::string& dir,
                                                            const std::vector<std::string>& names) {
  std::vector<std::optional<std::string>> out(names.size());
  std::vector<std::future<std::optional<std::string>>> reads(names.size());
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < names.size(); ++i) {
      if (auto it = read_.find(dir + "/" + names[i]); it != read_.end()) out[i] = it->second;
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (out[i]) continue;
    reads[i] = std::async(std::launch::async, [this, uri = dir + "/" + names[i]] {
      return lance::GetObject(uri, options_);
    });
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (!reads[i].valid()) continue;
    out[i] = reads[i].get();
    if (out[i]) {
      std::lock_guard lock(mu_);
      read_.emplace(dir + "/" + names[i], *out[i]);
    }
  }
  return out;
}

void SharedCommits::Prune(const std::string& dir, const std::vector<lance::ListedObject>& listed) {
  std::set<std::string> names;
  for (const lance::ListedObject& o : listed) names.insert(dir + "/" + o.name);
  std::lock_guard lock(mu_);
  // The URIs in `dir` sort between dir + "/" and dir + "0" ('0' follows '/').
  auto it = read_.lower_bound(dir + "/");
  while (it != read_.end() && it->first < dir + "0") {
    it = names.count(it->first) ? std::next(it) : read_.erase(it);
  }
}

size_t SharedCommits::CachedForTesting() {
  std::lock_guard lock(mu_);
  return read_.size();
}

void SharedCommits::Delete(const std::string& dir, const std::vector<std::string>& names) {
  lance::DeleteObjects(dir, options_, names);
  std::lock_guard lock(mu_);
  for (const std::string& name : names) read_.erase(dir + "/" + name);
}

SharedCommits::Round SharedCommits::RunRound(lance::Dataset& dataset, const std::string& table,
                                             const std::string& own, bool may_wait) {
  // The version first, then the listing: an announcement listed after V was
  // loaded whose fragment V does not hold is not committed in V, nor in any
  // version before it.
  dataset.CheckoutLatest();
  const std::set<std::string> held = HeldFiles(dataset);
  const std::string dir = Dir(table);
  std::vector<std::string> committed, waiting;  // waiting: oldest first
  bool own_listed = false;
  std::vector<lance::ListedObject> listed = List(dir);
  for (const lance::ListedObject& o : listed) {
    own_listed = own_listed || o.name == own;
    (held.count(o.name) ? committed : waiting).push_back(o.name);
  }
  Prune(dir, listed);
  try {
    Delete(dir, committed);
  } catch (const Error&) {
    // Left for a later round, which finds them committed again.
  }
  Round round;
  if (!own.empty() && (held.count(own) || !own_listed)) {
    // Committed: V holds it, or its announcement is gone, which only a
    // writer that saw it committed deletes. Then a later version holds it.
    if (!held.count(own)) dataset.CheckoutLatest();
    round.own_committed = true;
    round.committed = {{dataset.version(), IdsOf(dataset, own)}, false};
    return round;
  }
  if (waiting.empty()) return round;
  if (may_wait && !own.empty() && waiting.front() != own) {
    round.waits = true;
    round.oldest = waiting.front();
    return round;
  }
  lance::UncommittedFragments fragments;
  std::vector<std::string> taken;
  std::vector<std::optional<std::string>> described = Read(dir, waiting);
  for (size_t i = 0; i < waiting.size(); ++i) {
    if (!described[i]) continue;  // committed and deleted since the listing
    try {
      fragments.Extend(lance::UncommittedFragments::FromJson(*described[i]));
    } catch (const Error& e) {
      // One damaged announcement must not stop every writer's commits. Its
      // rows are not lost: its writer's WAL still holds them (replayed when
      // that writer is gone, since its marks do not cover them).
      if (e.code() != Code::kCorruption) throw;
      continue;
    }
    taken.push_back(waiting[i]);
  }
  if (taken.empty()) return round;
  lance::CommitResult result = dataset.CommitShared(std::move(fragments));
  try {
    Delete(dir, taken);
  } catch (const Error&) {
    // As above: a later round finds them committed.
  }
  if (!own.empty()) {
    round.own_committed = true;
    round.committed = {{result.version, IdsOf(dataset, own)}, true};
  }
  return round;
}

SharedCommits::Committed SharedCommits::Commit(lance::Dataset& dataset, const std::string& table,
                                               arrow::OwnedStream rows) {
  lance::UncommittedFragments written = dataset.WriteFragments(std::move(rows));
  std::vector<std::string> files = written.DataFiles();
  if (files.empty()) return {{dataset.version(), {}}, false};
  if (files.size() != 1) {
    throw Error(Code::kIOError, "a flush of " + table + " wrote " + std::to_string(files.size()) +
                                    " fragments, not one");
  }
  const std::string own = files.front();
  const std::string dir = Dir(table);
  const std::string description = written.ToJson();
  lance::PutObject(dir + "/" + own, options_, description);
  {
    std::lock_guard lock(mu_);
    read_.emplace(dir + "/" + own, description);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  // While another writer's announcement is the oldest, this writer waits for
  // it to go, and commits the batch itself once the same one has been the
  // oldest for takeover_: its writer is dead or stuck. A slow committer that
  // keeps committing keeps the oldest changing.
  bool waiting = false, lead = false;
  std::string oldest;
  auto oldest_since = std::chrono::steady_clock::now();
  auto stalled = [&](const std::string& front) {
    const auto now = std::chrono::steady_clock::now();
    if (front != oldest) {
      oldest = front;
      oldest_since = now;
    }
    return now - oldest_since >= takeover_;
  };
  for (int attempt = 1;; ++attempt) {
    std::string lost;
    try {
      if (waiting) {
        // One listing: own gone means committed; own the oldest means the
        // writers before it are done, and this one commits what waits.
        std::vector<lance::ListedObject> listed = List(dir);
        auto it = std::find_if(listed.begin(), listed.end(),
                               [&](const lance::ListedObject& o) { return o.name == own; });
        if (it == listed.end()) {
          dataset.CheckoutLatest();
          return {{dataset.version(), IdsOf(dataset, own)}, false};
        }
        lead = it != listed.begin() && stalled(listed.front().name);
        waiting = it != listed.begin() && !lead;
      }
      if (!waiting) {
        Round round = RunRound(dataset, table, own, !lead);
        if (round.own_committed) return round.committed;
        waiting = round.waits && !stalled(round.oldest);
        lead = round.waits && !waiting;
      }
    } catch (const Error& e) {
      if (e.code() != Code::kConflict) throw;
      lost = e.what();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(Code::kConflict, "shared commit to " + table + ": not committed after " +
                                       std::to_string(attempt) + " rounds" +
                                       (lost.empty() ? "" : "; the last lost to another: " + lost));
    }
    waiting ? Pause(attempt, 25, 200) : Pause(attempt, 4, 64);
  }
}

void SharedCommits::CommitAnnounced(lance::Dataset& dataset, const std::string& table) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (int attempt = 1;; ++attempt) {
    try {
      RunRound(dataset, table, "", false);
      return;
    } catch (const Error& e) {
      if (e.code() != Code::kConflict || std::chrono::steady_clock::now() >= deadline) throw;
    }
    Pause(attempt, 4, 64);
  }
}

void SharedCommits::Retire(const lance::Dataset& dataset, const std::string& table) {
  const std::set<std::string> held = HeldFiles(dataset);
  const std::string dir = Dir(table);
  std::vector<std::string> committed;
  for (const lance::ListedObject& o : List(dir)) {
    if (held.count(o.name)) committed.push_back(o.name);
  }
  Delete(dir, committed);
}

}  // namespace kv0::tracking
