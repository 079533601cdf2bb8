"""Processes that fork: a child opens and uses its own handles, every call on
a handle it inherited raises NotSupported at once, its exit touches nothing,
and the parent loses nothing. Each scenario runs in a fresh interpreter
(fork_worker.py) under a deadline, so a hang fails instead of stalling.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import kv0
import fork_worker
from kv0.tracking import Repo

WORKER = Path(fork_worker.__file__)
DEADLINE = 180.0


def run_scenario(name: str, cfg: dict) -> dict:
    done = subprocess.run([sys.executable, str(WORKER), name, json.dumps(cfg)],
                          capture_output=True, text=True, timeout=DEADLINE,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def local(tmp_path: Path) -> dict:
    return {"db": str(tmp_path / "db"), "repo": str(tmp_path / "repo"),
            "wal_dir": str(tmp_path / "wal")}


def test_child_opens_and_uses_its_own_handles(tmp_path):
    seen = run_scenario("own_handles", local(tmp_path))
    assert seen == {"child": "exit 0", "child_db": True, "shared_db": True,
                    "runs": ["child", "parent"]}


def test_child_on_s3_opens_its_own_handles(tmp_path, s3_bucket):
    bucket, options = s3_bucket
    cfg = {"db": f"s3://{bucket}/db", "repo": f"s3://{bucket}/repo",
           "wal_dir": str(tmp_path / "wal"), "storage_options": options}
    seen = run_scenario("own_handles", cfg)
    assert seen == {"child": "exit 0", "child_db": True, "shared_db": True,
                    "runs": ["child", "parent"]}


def test_child_that_never_touches_kv0_exits_normally(tmp_path):
    seen = run_scenario("exit_untouched", local(tmp_path))
    assert seen == {"child": "exit 0", "changed": [], "keys": 300, "points": 100}


def test_every_call_on_an_inherited_handle_raises_not_supported(tmp_path):
    seen = run_scenario("use_inherited", local(tmp_path))
    assert seen["child"] == "exit 0", "calls accepted in the child: see its stderr"
    assert seen["changed"] == []
    assert (seen["keys"], seen["points"]) == (100, 1)


def test_parent_keeps_its_puts_when_both_write_and_both_are_killed(tmp_path):
    cfg = local(tmp_path)
    proc = subprocess.Popen([sys.executable, str(WORKER), "both_write_then_killed",
                             json.dumps(cfg)], stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()
        assert line, "the scenario died before writing"
        seen = json.loads(line)
    finally:
        proc.kill()
        proc.wait()
    os.kill(seen["child_pid"], signal.SIGKILL)
    assert seen["child_accepted"] == 0
    with kv0.DB(cfg["db"], wal_dir=cfg["wal_dir"]) as db:
        it = db.iterkeys()
        it.seek_to_first()
        parent = list(it)
    assert parent == [fork_worker.key(i) for i in range(300)]


def test_child_tracking_through_the_inherited_repo_takes_nothing_from_the_parent(tmp_path):
    seen = run_scenario("repo_inherited", local(tmp_path))
    assert seen == {"child": "exit 0", "points": 100, "values_ok": True}


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_pool_of_workers_each_with_its_own_repo(tmp_path, method):
    seen = run_scenario("pool", {**local(tmp_path), "method": method})
    assert seen == {"workers": 4 * fork_worker.RUNS_PER_WORKER, "full": True, "parent": True,
                    "finished": ["finished"] * (4 * fork_worker.RUNS_PER_WORKER + 1)}


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_killed_mid_run_loses_nothing_acknowledged(tmp_path, method):
    seen = run_scenario("killed_worker", {**local(tmp_path), "method": method})
    assert seen == {"exitcode": -signal.SIGKILL, "replayed": 500, "parent": 100}
