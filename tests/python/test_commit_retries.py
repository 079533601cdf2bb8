"""Commits that lose races to other writers retry for as long as the
handle's commit_timeout allows, however short Lance's own retry budget is.

Lance gives up on a contended commit after its own budget (30 seconds by
default, LANCE_COMMIT_RETRY_TIMEOUT_SECS in the environment). kv0 replaces it
with commit_timeout (docs/design.md, "Slow and failing object stores"). Each test
runs writers in a child process whose Lance budget is a microsecond, so any
commit that depended on it fails at its first lost race.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa

import kv0
from kv0.tracking import Repo, series_id

THREADS = 6
FLUSHES = 20

CHILD = textwrap.dedent(
    """
    import json, sys, threading, kv0
    from kv0.tracking import Repo
    kind, root, threads, flushes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    errors = []

    def kv_writer(i):
        db = kv0.DB(root + "/db", wal_dir=f"{root}/wal{i}")
        for n in range(flushes):
            db.put(b"k%d-%d" % (i, n), b"v")
            try:
                db.flush()
            except Exception as e:
                errors.append(repr(e))
        db.close()

    def repo_writer(i):
        repo = Repo(root + "/repo", wal_dir=f"{root}/wal{i}", shared_commits=i % 2 == 1)
        run = repo.create_run(f"run-{i}")
        for n in range(flushes):
            run.track(float(n), "loss", step=n)
            try:
                repo.flush()
            except Exception as e:
                errors.append(repr(e))
        repo.close()

    writer = kv_writer if kind == "kv" else repo_writer
    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps(errors))
    """
)


def run_child(kind: str, root: str) -> list[str]:
    env = dict(os.environ, LANCE_COMMIT_RETRY_TIMEOUT_SECS="0.000001")
    out = subprocess.run([sys.executable, "-c", CHILD, kind, root, str(THREADS), str(FLUSHES)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_contended_kv_commits_retry_past_lances_budget(tmp_path):
    errors = run_child("kv", str(tmp_path))
    assert errors == []
    db = kv0.DB(str(tmp_path / "db"), wal_dir=str(tmp_path / "reader"))
    it = db.iterkeys()
    it.seek_to_first()
    keys = set(it)
    assert keys == {b"k%d-%d" % (i, n) for i in range(THREADS) for n in range(FLUSHES)}
    db.close()


def test_contended_tracking_commits_retry_past_lances_budget(tmp_path):
    errors = run_child("repo", str(tmp_path))
    assert errors == []
    repo = Repo(str(tmp_path / "repo"), wal_dir=str(tmp_path / "reader"))
    assert sorted(r["run_id"] for r in repo.runs()) == [f"run-{i}" for i in range(THREADS)]
    for i in range(THREADS):
        points = pa.table(repo.read_many([series_id(f"run-{i}", "loss")]))
        assert points["step"].to_pylist() == list(range(FLUSHES))
    repo.close()
