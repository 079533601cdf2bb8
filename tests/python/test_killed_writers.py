"""Eight writer processes on one location through an object-store emulator
(moto's S3 server, Azurite), killed at random and started again.

The guarantee under test (docs/design.md, "What concurrent users see" and
"Durability"): a call that returned is never lost, whichever writer is killed
when, mid-commit included, and whatever the others commit meanwhile (worker 0
also compacts or optimizes; in the tracking case the odd workers share
commits, RepoOptions' shared_commits, beside the even ones' own commits).
Each worker journals what it was acknowledged and its next incarnation
carries on after that, never writing it again (killed_writers_worker.py). At the end every process, and a new handle, must
read every journaled write of every worker, and the same thing.

The kills come from a seeded generator; a failure names the seed, and
KV0_KILL_SEED=N repeats its schedule (not its timing).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

import killed_writers_worker as worker
import kv0
from conftest import make_store
from kv0.tracking import Repo
from many_writers_worker import read_db, read_repo, repo_series, repo_value

WORKER = Path(worker.__file__)
WORKERS = 8
KILLS = 12  # in all, while the workers write
DEADLINE = 420.0  # seconds for the whole run; it takes a fraction of it


class Writers:
    """The worker processes of one test, restartable one by one."""

    def __init__(self, kind: str, store, uri: str, tmp_path: Path) -> None:
        self.kind, self.tmp_path = kind, tmp_path
        self.meet = tmp_path / "meet"
        self.meet.mkdir()
        self.procs: list[subprocess.Popen] = []
        self.configs = []
        for i in range(WORKERS):
            config = {"uri": uri, "storage_options": store.options, "index": i,
                      "workers": WORKERS, "meet": str(self.meet),
                      "wal_dir": str(tmp_path / f"wal{i}"), "shared_commits": i % 2 == 1,
                      "journal": str(tmp_path / f"journal{i}")}
            path = tmp_path / f"config-{i}.json"
            path.write_text(json.dumps(config))
            self.configs.append(path)
            self.procs.append(self.start(i))

    def start(self, i: int) -> subprocess.Popen:
        with open(self.tmp_path / f"worker-{i}.log", "ab") as log:
            return subprocess.Popen([sys.executable, str(WORKER), self.kind, str(self.configs[i])],
                                    stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)

    def kill_and_restart(self, i: int) -> None:
        self.procs[i].kill()
        self.procs[i].wait()
        self.procs[i] = self.start(i)

    def writing(self) -> list[int]:
        """Workers still writing their share (alive, not yet finished)."""
        return [i for i, p in enumerate(self.procs)
                if p.poll() is None and not (self.meet / f"finished-{i}").exists()]

    def failed(self) -> list[str]:
        return [f"worker {i} exited with {p.returncode}:\n"
                + (self.tmp_path / f"worker-{i}.log").read_text(errors="replace")[-4000:]
                for i, p in enumerate(self.procs) if p.poll() not in (None, 0)]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def run_killed_writers(kind: str, store, uri: str, tmp_path: Path) -> tuple[list[dict], str]:
    seed = int(os.environ.get("KV0_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    writers = Writers(kind, store, uri, tmp_path)
    (writers.meet / "go").touch()
    kills = []
    deadline = time.monotonic() + DEADLINE
    try:
        while any(p.poll() is None for p in writers.procs):
            assert time.monotonic() < deadline, f"seed {seed}: workers still running"
            failed = writers.failed()
            assert not failed, f"seed {seed}: " + "\n".join(failed)
            time.sleep(rng.uniform(0.2, 1.2))
            candidates = writers.writing()
            if len(kills) < KILLS and candidates:
                victim = rng.choice(candidates)
                writers.kill_and_restart(victim)
                kills.append(victim)
    finally:
        writers.stop()
    failed = writers.failed()
    assert not failed, f"seed {seed}: " + "\n".join(failed)
    # Kills stop once every worker has finished writing: a fast run may end
    # with fewer than KILLS, but never with none.
    assert kills, f"seed {seed}: no worker was killed"
    results = [json.loads((writers.meet / f"result-{i}.json").read_text())
               for i in range(WORKERS)]
    return results, f"seed {seed}, killed {kills}"


@pytest.fixture(params=["s3", "azure"])
def store(request):
    """S3 and Azure: the two stores whose conditional writes differ most."""
    return make_store(request.param, request)


def test_killed_writers_lose_no_acknowledged_key(store, tmp_path):
    uri = store.uri("killed-db")
    kv0.DB(uri, storage_options=store.options, wal_dir=str(tmp_path / "creator")).close()
    results, schedule = run_killed_writers("kv", store, uri, tmp_path)

    expected = {}
    for i in range(WORKERS):
        expected.update(worker.kv_expected(i))
    for i, result in enumerate(results):
        view = result["view"]
        missing = sorted(set(expected) - set(view))
        assert not missing, f"{schedule}: worker {i} misses {len(missing)}: {missing[:10]}"
        assert view == expected, f"{schedule}: worker {i} sees something else"
    with kv0.DB(uri, storage_options=store.options, wal_dir=str(tmp_path / "fresh"),
                read_only=True) as fresh:
        assert read_db(fresh) == expected, schedule


def test_killed_writers_lose_no_acknowledged_point(store, tmp_path):
    uri = store.uri("killed-repo")
    Repo(uri, storage_options=store.options, wal_dir=str(tmp_path / "creator")).close()
    results, schedule = run_killed_writers("repo", store, uri, tmp_path)

    steps = list(range(worker.REPO_STEPS))
    points, stats = {}, {}
    for i in range(WORKERS):
        for name in repo_series(i):
            key = f"run-{i}/{name}"
            points[key] = [steps, [repo_value(i, name, s) for s in steps]]
            stats[key] = [len(steps), steps[0], steps[-1]]
    expected = {
        "runs": {f"run-{i}": "finished" for i in range(WORKERS)},
        "params": {f"run-{i}": {"worker": i, "optimizer": {"lr": 0.1 * (i + 1)}}
                   for i in range(WORKERS)},
        "points": points,
        "stats": stats,
    }
    for i, result in enumerate(results):
        for key, (got_steps, _) in result["points"].items():
            lost = sorted(set(steps) - set(got_steps))
            assert not lost, f"{schedule}: worker {i} reads {key} without steps {lost[:10]}"
        assert result == expected, f"{schedule}: worker {i} sees something else"
    with Repo(uri, storage_options=store.options, wal_dir=str(tmp_path / "fresh")) as fresh:
        assert read_repo(fresh, WORKERS) == expected, schedule
