// Commits that a repository's writers share (docs/design.md, "Commits that
// writers share").
//
// Each table's commits queue on its manifest, so writers that each commit
// their own flushes wait on one another. With shared commits a flush writes
// its rows as an uncommitted fragment and announces it: an object named
// after the fragment's data file in <repository>/_pending/<table>/, holding
// the fragment's Lance metadata. Any writer's commit then takes every
// fragment announced, its own and others', so one commit carries the flushes
// of all writers that were waiting, however many.
//
// A flush runs rounds until its fragment is in a committed version. A round:
//
//   1. moves the table's handle to the latest version V;
//   2. lists the announcements (after step 1, for the invariant below);
//   3. deletes each announcement whose fragment V holds: it is committed,
//      and whoever committed it did not get to delete it (it died, or is
//      about to);
//   4. commits the fragments of the others in one shared commit read at V
//      (lance::Dataset::CommitShared), then deletes their announcements. A
//      shared commit fails with Conflict when another (or any append) was
//      committed after V; the round then starts again.
//
// One writer commits a batch while the others wait. Step 4 is taken only by
// the writer of the oldest announcement still waiting (the store's write
// time, then the name); the others, having announced, list the directory
// after short pauses until their announcement is gone (committed) or the
// oldest, and take step 4 themselves once the same announcement has been
// the oldest for `takeover` (its writer may be dead or stuck). So
// announcements are read once, by the committer, and writers seldom race for
// the manifest. Waiting is only an economy: any writer may take step 4 at
// any time, and the argument below does not depend on who does.
//
// Why no fragment is committed twice (its rows would not show twice, since
// reads keep one point per step, but its statistics deltas would count
// twice): of two shared commits that each read a version older than the
// other's commit, the later fails (Lance's check, see CommitShared). So a
// second commit of a fragment would have to read a version V2 that already
// holds it, and then step 3 finds it there, provided that a fragment stays
// in every version after its commit while its announcement exists. Every
// commit that removes fragments keeps that: it first retires the
// announcements of fragments its version holds (Retire, after loading the
// version it rewrites), and Lance's compaction, which plans on the latest
// version itself, leaves alone every fragment announced when it looked
// (lance::CompactOptions::protected_dir). Deletes of rows never remove a
// fragment whose announcement can still exist: a freshly committed fragment
// holds its writer's newest mark row, which no delete takes.
//
// A fragment announced and never committed (its writer died between the
// two) is committed by the next round of any writer, and before a WAL
// replay compares marks (CommitAnnounced): the marks in its rows then say
// that its records are in storage. A round that fails leaves its
// announcement; the flush's retry writes a new fragment for the same rows,
// and both may be committed, as after any commit whose outcome is unknown
// (the metrics commit marks its statistics deltas dirty for that,
// RepoImpl::Commit).
//
// Tested in tests/cpp/shared_commits_test.cc: a fragment committed by
// another writer, two writers racing for the same announcements, a writer
// that waits for the oldest announcement's, a writer that dies after
// announcing, compaction beside an announcement left behind, and the cache
// of announcements read staying bounded while others carry one's flushes.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lance/dataset.h"

namespace kv0::tracking {

class SharedCommits {
 public:
  // How long a flush waits while the same older announcement stays the
  // oldest before committing the batch itself.
  static constexpr std::chrono::milliseconds kTakeover{2000};

  // For the repository at repo_uri; `timeout` bounds the rounds of one
  // commit (they fail with Conflict past it).
  SharedCommits(std::string repo_uri, lance::StorageOptions options,
                std::chrono::milliseconds timeout, std::chrono::milliseconds takeover = kTakeover);

  // Where `table`'s announcements are.
  std::string Dir(const std::string& table) const;

  // What a flush's shared commit did.
  struct Committed {
    lance::CommitResult result;   // a version holding the fragment; its id
    bool by_this_writer = false;  // false: another writer's commit carried it
  };

  // Writes rows as a fragment of `dataset` (the table `table`), announces it
  // and returns once a committed version holds it. The handle is then at
  // that version or a later one.
  Committed Commit(lance::Dataset& dataset, const std::string& table, arrow::OwnedStream rows);

  // Commits every fragment announced for `table` and not committed yet.
  void CommitAnnounced(lance::Dataset& dataset, const std::string& table);

  // Deletes the announcements of fragments that `dataset`, at its version,
  // holds: call it after loading the version whose fragments a commit will
  // remove, before that commit. Throws if one cannot be deleted.
  void Retire(const lance::Dataset& dataset, const std::string& table);

  // How many announcements' contents this handle keeps: those its last
  // round listed, and its own until a round finds it gone (tests).
  size_t CachedForTesting();

 private:
  struct Round {
    bool own_committed = false;
    Committed committed;  // when own_committed
    bool waits = false;   // another writer's announcement is older than own
    std::string oldest;   // when it waits: that announcement
  };
  // One round for `own` (a data file; empty: none). With `may_wait`, it
  // stops before committing when own is not the oldest announcement waiting.
  // Conflict propagates.
  Round RunRound(lance::Dataset& dataset, const std::string& table, const std::string& own,
                 bool may_wait);
  // The announcements in `dir`, oldest first.
  std::vector<lance::ListedObject> List(const std::string& dir);
  // What the announcements `names` in `dir` describe, read in parallel;
  // nullopt for one that is gone.
  std::vector<std::optional<std::string>> Read(const std::string& dir,
                                               const std::vector<std::string>& names);
  // Forgets what was read of announcements in `dir` that are not `listed`
  // any more (another writer committed and deleted them).
  void Prune(const std::string& dir, const std::vector<lance::ListedObject>& listed);
  // Deletes announcements of committed fragments; throws if it cannot.
  void Delete(const std::string& dir, const std::vector<std::string>& names);

  const std::string repo_uri_;
  const lance::StorageOptions options_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds takeover_;

  // Announcements read or written, by URI: they never change.
  std::mutex mu_;
  std::map<std::string, std::string> read_;
};

}  // namespace kv0::tracking
