#include "tracking/shared_commits.h"

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

// A short wait before a round that lost a race runs again, so that writers
// that lost together do not all try again at once.
void Pause(int attempt) {
  thread_local std::minstd_rand random{std::random_device{}()};
  int cap_ms = std::min(50, 2 << std::min(attempt, 5));
  std::this_thread::sleep_for(std::chrono::milliseconds(random() % (cap_ms + 1)));
}

}  // namespace

SharedCommits::SharedCommits(std::string repo_uri, lance::StorageOptions options,
                             std::chrono::milliseconds timeout)
    : repo_uri_(std::move(repo_uri)), options_(std::move(options)), timeout_(timeout) {}

std::string SharedCommits::Dir(const std::string& table) const {
  return repo_uri_ + "/_pending/" + table;
}

std::optional<std::string> SharedCommits::Read(const std::string& uri) {
  {
    std::lock_guard lock(mu_);
    if (auto it = read_.find(uri); it != read_.end()) return it->second;
  }
  std::optional<std::string> json = lance::GetObject(uri, options_);
  if (json) {
    std::lock_guard lock(mu_);
    read_.emplace(uri, *json);
  }
  return json;
}

void SharedCommits::Forget(const std::string& uri) {
  try {
    lance::DeleteObject(uri, options_);
  } catch (const Error&) {
    // Left for a later round, which finds the fragment committed.
  }
  std::lock_guard lock(mu_);
  read_.erase(uri);
}

SharedCommits::Round SharedCommits::RunRound(lance::Dataset& dataset, const std::string& table,
                                             const std::string& own) {
  // The version first, then the listing: an announcement listed after V was
  // loaded whose fragment V does not hold is not committed in V, nor in any
  // version before it.
  dataset.CheckoutLatest();
  std::set<std::string> held;
  for (const auto& f : dataset.Fragments()) held.insert(f.data_file);
  const std::string dir = Dir(table);
  std::vector<std::string> waiting;
  bool own_listed = false;
  for (const std::string& name : lance::ListDir(dir, options_)) {
    if (!IsAnnouncement(name)) continue;
    own_listed = own_listed || name == own;
    if (held.count(name)) {
      Forget(dir + "/" + name);
    } else {
      waiting.push_back(name);
    }
  }
  Round round;
  if (!own.empty() && (held.count(own) || !own_listed)) {
    // Committed: V holds it, or its announcement is gone, which only a
    // writer that saw it committed deletes. Then a later version holds it.
    if (!held.count(own)) dataset.CheckoutLatest();
    round.own_committed = true;
    round.result = {dataset.version(), IdsOf(dataset, own)};
    return round;
  }
  lance::UncommittedFragments fragments;
  std::vector<std::string> taken;
  for (const std::string& name : waiting) {
    std::optional<std::string> json = Read(dir + "/" + name);
    if (!json) continue;  // committed and deleted since the listing
    try {
      fragments.Extend(lance::UncommittedFragments::FromJson(*json));
    } catch (const Error& e) {
      // One damaged announcement must not stop every writer's commits. Its
      // rows are not lost: its writer's WAL still holds them (replayed when
      // that writer is gone, since its marks do not cover them).
      if (e.code() != Code::kCorruption) throw;
      continue;
    }
    taken.push_back(name);
  }
  if (taken.empty()) return round;
  lance::CommitResult committed = dataset.CommitShared(std::move(fragments));
  for (const std::string& name : taken) Forget(dir + "/" + name);
  if (!own.empty()) {
    round.own_committed = true;
    round.result = {committed.version, IdsOf(dataset, own)};
  }
  return round;
}

lance::CommitResult SharedCommits::Commit(lance::Dataset& dataset, const std::string& table,
                                          arrow::OwnedStream rows) {
  lance::UncommittedFragments written = dataset.WriteFragments(std::move(rows));
  std::vector<std::string> files = written.DataFiles();
  if (files.empty()) return {dataset.version(), {}};
  if (files.size() != 1) {
    throw Error(Code::kIOError, "a flush of " + table + " wrote " + std::to_string(files.size()) +
                                    " fragments, not one");
  }
  const std::string own = files.front();
  lance::PutObject(Dir(table) + "/" + own, options_, written.ToJson());
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (int attempt = 1;; ++attempt) {
    std::string lost;
    try {
      Round round = RunRound(dataset, table, own);
      if (round.own_committed) return round.result;
    } catch (const Error& e) {
      if (e.code() != Code::kConflict) throw;
      lost = e.what();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(Code::kConflict, "shared commit to " + table + ": not committed after " +
                                       std::to_string(attempt) + " rounds" +
                                       (lost.empty() ? "" : "; the last lost to another: " + lost));
    }
    Pause(attempt);
  }
}

void SharedCommits::CommitAnnounced(lance::Dataset& dataset, const std::string& table) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (int attempt = 1;; ++attempt) {
    try {
      RunRound(dataset, table, "");
      return;
    } catch (const Error& e) {
      if (e.code() != Code::kConflict || std::chrono::steady_clock::now() >= deadline) throw;
    }
    Pause(attempt);
  }
}

void SharedCommits::Retire(const lance::Dataset& dataset, const std::string& table) {
  std::set<std::string> held;
  for (const auto& f : dataset.Fragments()) held.insert(f.data_file);
  const std::string dir = Dir(table);
  for (const std::string& name : lance::ListDir(dir, options_)) {
    if (!IsAnnouncement(name) || !held.count(name)) continue;
    lance::DeleteObject(dir + "/" + name, options_);
    std::lock_guard lock(mu_);
    read_.erase(dir + "/" + name);
  }
}

}  // namespace kv0::tracking
