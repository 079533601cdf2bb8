"""One writer process of test_killed_writers.py, which kills it at random and
starts it again.

    python killed_writers_worker.py kv|repo CONFIG.json

Each incarnation opens the location with the worker's own WAL directory (so
it replays what the killed one logged) and appends to a journal, a local file,
what it has been acknowledged: a journal line is written only after the calls
it names returned. The next incarnation carries on after the last journaled
call and never writes an earlier one again, so an acknowledged write that was
lost stays lost and the test sees it. When its share is written the worker
announces `finished-<index>`, waits for `done-<index>` of every worker, reads
everything all workers wrote and leaves it in `result-<index>.json`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import kv0
from kv0 import errors
from kv0.tracking import Repo

from many_writers_worker import barrier, read_db, read_repo, repo_series, repo_value, wait_for

FLUSH_INTERVAL = 0.3  # seconds: each worker commits often, so kills land in commits
KV_OPS = 900  # puts per worker; every 7th op also deletes the key three before
KV_COMPACT_EVERY = 300  # worker 0 compacts while the others write
REPO_STEPS = 600  # steps of each series
REPO_OPTIMIZE_AT = (200, 400)  # worker 0 optimizes while the others write
JOURNAL_EVERY = 10  # calls between journal lines
PAUSE = 0.1  # seconds after each journal line, so a worker writes for seconds, not a blink


class Journal:
    """The worker's acknowledged calls, one line each: `created`, `op N`,
    `finished`. A line cut short by a kill is ignored."""

    def __init__(self, path: Path) -> None:
        text = path.read_text() if path.exists() else ""
        self.lines = text.split("\n")[:-1]  # the last piece has no newline
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if text and not text.endswith("\n"):
            # Ends the torn piece, so the next line stands alone; read back
            # later, a torn `op N` is a prefix, a smaller N than the line
            # before it, which last_op passes over.
            os.write(self.fd, b"\n")

    def has(self, line: str) -> bool:
        return line in self.lines

    def last_op(self) -> int:
        ops = [int(line.split()[1]) for line in self.lines if line.startswith("op ")]
        return max(ops, default=-1)

    def add(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())
        self.lines.append(line)

    def acknowledge(self, op: int, last: int) -> None:
        """Journals op every JOURNAL_EVERY calls and at the last, then pauses."""
        if op % JOURNAL_EVERY == JOURNAL_EVERY - 1 or op == last:
            self.add(f"op {op}")
            time.sleep(PAUSE)


# --- kv0.DB: own keys, deletes, one compacting worker ----------------------------------


def kv_key(index: int, n: int) -> bytes:
    return f"w{index}/{n:05d}".encode()


def kv_value(index: int, n: int) -> bytes:
    return f"v{index}-{n}".encode()


def kv_expected(index: int) -> dict[str, str]:
    keys = {kv_key(index, n).decode(): kv_value(index, n).decode() for n in range(KV_OPS)}
    for n in range(6, KV_OPS, 7):
        del keys[kv_key(index, n - 3).decode()]
    return keys


def kv_worker(config: dict, journal: Journal) -> dict:
    meet, index = Path(config["meet"]), config["index"]
    db = kv0.DB(config["uri"], storage_options=config["storage_options"],
                wal_dir=config["wal_dir"], flush_interval=FLUSH_INTERVAL)
    for n in range(journal.last_op() + 1, KV_OPS):
        db.put(kv_key(index, n), kv_value(index, n))
        if n % 7 == 6:
            db.delete(kv_key(index, n - 3))
        if index == 0 and n % KV_COMPACT_EVERY == KV_COMPACT_EVERY - 1:
            try:
                db.compact_range()
            except errors.Conflict:
                pass  # another handle committed meanwhile; a later compaction retries
        journal.acknowledge(n, KV_OPS - 1)
    db.flush()
    (meet / f"finished-{index}").touch()
    barrier(meet, "done", index, config["workers"])
    view = read_db(db)
    db.close()
    return {"view": view}


# --- kv0.tracking.Repo: one run per worker, one optimizing worker -----------------------


def repo_worker(config: dict, journal: Journal) -> dict:
    meet, index = Path(config["meet"]), config["index"]
    repo = Repo(config["uri"], storage_options=config["storage_options"],
                wal_dir=config["wal_dir"], flush_interval=FLUSH_INTERVAL,
                shared_commits=config["shared_commits"])
    run_id = f"run-{index}"
    if journal.has("created"):
        run = repo.resume_run(run_id)
    else:
        run = repo.create_run(run_id, name=f"worker {index}", experiment="killed-writers")
        run.set_params({"worker": index, "optimizer": {"lr": 0.1 * (index + 1)}})
        journal.add("created")
    for step in range(journal.last_op() + 1, REPO_STEPS):
        for name, (_, context) in repo_series(index).items():
            run.track(repo_value(index, name, step), name, step=step, context=context)
        if index == 0 and step in REPO_OPTIMIZE_AT:
            try:
                repo.optimize()
            except errors.Conflict:
                pass  # another writer committed meanwhile; the next optimize retries
        journal.acknowledge(step, REPO_STEPS - 1)
    if not journal.has("finished"):
        run.finish()
        journal.add("finished")
    (meet / f"finished-{index}").touch()
    barrier(meet, "done", index, config["workers"])
    result = read_repo(repo, config["workers"])
    repo.close()
    return result


def main() -> None:
    kind, config_path = sys.argv[1], Path(sys.argv[2])
    config = json.loads(config_path.read_text())
    journal = Journal(Path(config["journal"]))
    wait_for([Path(config["meet"]) / "go"])
    result = kv_worker(config, journal) if kind == "kv" else repo_worker(config, journal)
    out = Path(config["meet"]) / f"result-{config['index']}.json"
    out.with_suffix(".tmp").write_text(json.dumps(result))
    out.with_suffix(".tmp").rename(out)


if __name__ == "__main__":
    main()
