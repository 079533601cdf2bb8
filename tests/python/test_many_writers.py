"""Several processes writing one location through an object-store emulator
(moto's S3 server, Azurite): four writers on one key-value database, two on
one tracking repository, compacting and optimizing while the others write.

What the design promises (docs/design.md, "What concurrent users see"):
appends never conflict, so every acknowledged write of every process is
committed; after its flush and a refresh every process sees all of them; and
of two writes to one key the higher sequence number wins. The workers are
many_writers_worker.py, started as separate interpreters.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import lance
import pytest

import kv0
import many_writers_worker as worker
from kv0.tracking import Repo

WORKER = Path(worker.__file__)
DEADLINE = 300.0  # seconds for all workers together; they take a fraction of it


def run_workers(kind: str, store, uri: str, workers: int, tmp_path: Path) -> list[dict]:
    meet = tmp_path / "meet"
    meet.mkdir()
    procs = []
    for i in range(workers):
        config = {"uri": uri, "storage_options": store.options, "index": i,
                  "workers": workers, "meet": str(meet), "wal_dir": str(tmp_path / f"wal{i}")}
        path = tmp_path / f"config-{i}.json"
        path.write_text(json.dumps(config))
        log = open(tmp_path / f"worker-{i}.log", "wb")
        procs.append((subprocess.Popen([sys.executable, str(WORKER), kind, str(path)],
                                       stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL), log))
    (meet / "go").touch()  # all start writing at once
    deadline = time.monotonic() + DEADLINE
    try:
        for proc, _ in procs:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    failures = []
    for i, (proc, _) in enumerate(procs):
        if proc.returncode != 0:
            output = (tmp_path / f"worker-{i}.log").read_text(errors="replace")
            failures.append(f"worker {i} exited with {proc.returncode}:\n{output[-4000:]}")
    assert not failures, "\n".join(failures)
    return [json.loads((meet / f"result-{i}.json").read_text()) for i in range(workers)]


def test_four_processes_write_one_database(store, tmp_path):
    uri = store.uri("shared-db")
    kv0.DB(uri, storage_options=store.options, wal_dir=str(tmp_path / "creator")).close()
    results = run_workers("kv", store, uri, 4, tmp_path)

    # Last writer wins by sequence number: the hot keys' newest stored puts.
    rows = lance.dataset(uri, storage_options=store.options).to_table(
        columns=["seq", "op", "key", "value"]).to_pylist()
    newest: dict[str, tuple[int, str]] = {}
    for row in rows:
        key = row["key"].decode()
        if row["op"] == 0 and key.startswith("hot/"):
            if key not in newest or row["seq"] > newest[key][0]:
                newest[key] = (row["seq"], row["value"].decode())
    assert sorted(newest) == [f"hot/{h:02d}" for h in range(worker.HOT_KEYS)]
    expected = {key: value for key, (_, value) in newest.items()}
    for i in range(4):
        expected.update(worker.kv_expected_own(i))

    for i, result in enumerate(results):
        assert result["view"] == expected, f"worker {i} sees something else"
    with kv0.DB(uri, storage_options=store.options, wal_dir=str(tmp_path / "fresh"),
                read_only=True) as fresh:
        items = fresh.iteritems()
        items.seek_to_first()
        assert {k.decode(): v.decode() for k, v in items} == expected


def test_two_processes_write_one_repository(store, tmp_path):
    uri = store.uri("shared-repo")
    Repo(uri, storage_options=store.options, wal_dir=str(tmp_path / "creator")).close()
    results = run_workers("repo", store, uri, 2, tmp_path)

    steps = list(range(worker.REPO_ROUNDS * worker.REPO_STEPS))
    expected_points, expected_stats = {}, {}
    for i in range(2):
        for name in worker.repo_series(i):
            key = f"run-{i}/{name}"
            expected_points[key] = [steps, [worker.repo_value(i, name, s) for s in steps]]
            expected_stats[key] = [len(steps), steps[0], steps[-1]]
    expected = {
        "runs": {"run-0": "finished", "run-1": "finished"},
        "params": {f"run-{i}": {"worker": i, "optimizer": {"lr": 0.1 * (i + 1)}}
                   for i in range(2)},
        "points": expected_points,
        "stats": expected_stats,
    }
    for i, result in enumerate(results):
        result.pop("conflicts")
        assert result == expected, f"worker {i} sees something else"
    with Repo(uri, storage_options=store.options, wal_dir=str(tmp_path / "fresh")) as fresh:
        assert worker.read_repo(fresh, 2) == expected
