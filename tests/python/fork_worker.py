"""The fork scenarios of test_fork.py, each run in a fresh interpreter.

python fork_worker.py SCENARIO CONFIG_JSON runs one scenario and prints one
line of JSON with what it saw. A scenario that forks waits for its child
with a deadline and reports "hung" instead of waiting forever, so a hang is
a result, not a stalled test. Run as a script (not inside pytest) so that a
forked child never finds itself inside the test runner.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import pyarrow

import kv0
from kv0.tracking import Repo, series_id

CHILD_DEADLINE = 30.0


def wait(pid: int, timeout: float = CHILD_DEADLINE) -> str:
    """'exit N', 'signal N', or 'hung' (the child is killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            if os.WIFEXITED(status):
                return f"exit {os.WEXITSTATUS(status)}"
            return f"signal {os.WTERMSIG(status)}"
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.01)


def fork(body) -> int:
    """Forks; the child runs body() and leaves with os._exit(its result)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = body()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def refused(calls) -> dict[str, str]:
    """Runs each call; returns those that did not raise NotSupported."""
    accepted = {}
    for name, call in calls:
        try:
            call()
            accepted[name] = "accepted"
        except kv0.errors.NotSupported:
            pass
        except Exception as e:  # the wrong error
            accepted[name] = repr(e)
    return accepted


def wal_files(root: str) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}


def changed_files(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    """The parent's WAL files the child removed or changed."""
    return [path for path, data in before.items() if after.get(path) != data]


def key(i: int) -> bytes:
    return b"key/%06d" % i


def db_options(cfg) -> dict:
    """Nothing commits unless asked; the WAL under the test's directory."""
    return {"wal_dir": cfg["wal_dir"], "flush_interval": 3600.0,
            "storage_options": cfg.get("storage_options")}


repo_options = db_options


# --- os.fork --------------------------------------------------------------------


def own_handles(cfg) -> dict:
    """The child opens its own DB and Repo, on its own location and on the
    parent's, and uses them."""
    db = kv0.DB(cfg["db"], **db_options(cfg))
    db.put(b"parent", b"1")
    db.flush()  # the runtime's threads exist in the parent now
    repo = Repo(cfg["repo"], **repo_options(cfg))
    run = repo.create_run(name="parent")
    run.track(1.0, "loss", step=0)
    repo.flush()

    def child() -> int:
        with kv0.DB(cfg["db"] + "-child", **db_options(cfg)) as own:
            own.put(b"child", b"2")
            own.flush()
        with kv0.DB(cfg["db"], **db_options(cfg)) as shared:
            if shared.get(b"parent") != b"1":
                return 2
            shared.put(b"child-wrote", b"3")
        with Repo(cfg["repo"], **repo_options(cfg)) as own_repo:
            child_run = own_repo.create_run(name="child")
            for step in range(100):
                child_run.track(float(step), "loss", step=step)
            child_run.finish()
        return 0

    result = wait(fork(child))
    with kv0.DB(cfg["db"] + "-child", **db_options(cfg)) as own:
        child_db = own.get(b"child")
    db.refresh()
    names = sorted(r["name"] for r in repo.runs())
    db.close()
    repo.close()
    return {"child": result, "child_db": child_db == b"2",
            "shared_db": db_seen(cfg, b"child-wrote"), "runs": names}


def db_seen(cfg, k: bytes) -> bool:
    with kv0.DB(cfg["db"], **db_options(cfg)) as db:
        return db.get(k) is not None


def exit_untouched(cfg) -> dict:
    """The child never touches kv0 and exits normally: atexit runs there."""
    db = kv0.DB(cfg["db"], **db_options(cfg))
    for i in range(300):
        db.put(key(i), b"logged only")
    repo = Repo(cfg["repo"], **repo_options(cfg))
    run = repo.create_run(name="parent")
    for step in range(100):
        run.track(float(step), "loss", step=step)
    before = wal_files(cfg["wal_dir"])
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # SystemExit: atexit handlers and finalization run
    result = wait(pid)
    changed = changed_files(before, wal_files(cfg["wal_dir"]))
    run_id = run.run_id
    db.close()
    repo.close()
    return {"child": result, "changed": changed, **stored(cfg, 300, run_id, 100)}


def stored(cfg, keys: int, run_id: str, points: int) -> dict:
    """What a fresh open finds of the parent's writes."""
    with kv0.DB(cfg["db"], **db_options(cfg)) as db:
        found_keys = sum(db.get(key(i)) is not None for i in range(keys))
    with Repo(cfg["repo"], **repo_options(cfg)) as repo:
        found_points = points_of(repo, run_id)
    return {"keys": found_keys, "points": found_points}


def points_of(repo: Repo, run_id: str, name: str = "loss") -> int:
    table = pyarrow.table(repo.read_many([series_id(run_id, name, {})]))
    return table.num_rows


def use_inherited(cfg) -> dict:
    """Every call on inherited handles raises NotSupported, at once."""
    db = kv0.DB(cfg["db"], **db_options(cfg))
    for i in range(100):
        db.put(key(i), b"v")
    db.flush()
    db.put(b"unflushed", b"v")
    it = db.iteritems()
    it.seek_to_first()
    repo = Repo(cfg["repo"], **repo_options(cfg))
    run = repo.create_run(name="parent")
    run.track(1.0, "loss", step=0)
    before = wal_files(cfg["wal_dir"])
    sid = series_id(run.run_id, "loss", {})

    def child() -> int:
        batch = kv0.WriteBatch()
        batch.put(b"b", b"1")
        accepted = refused([
            ("get", lambda: db.get(key(1))),
            ("put", lambda: db.put(b"child", b"x")),
            ("delete", lambda: db.delete(key(1))),
            ("write", lambda: db.write(batch)),
            ("multi_get", lambda: db.multi_get([key(1)])),
            ("iteritems", lambda: db.iteritems()),
            ("iterator.seek", lambda: it.seek(key(5))),
            ("iterator.next", lambda: next(it)),
            ("flush", lambda: db.flush()),
            ("compact_range", lambda: db.compact_range()),
            ("close", lambda: db.close()),
            ("track", lambda: run.track(2.0, "loss")),
            ("set_params", lambda: run.set_params({"lr": 1})),
            ("finish", lambda: run.finish()),
            ("create_run", lambda: repo.create_run()),
            ("runs", lambda: repo.runs()),
            ("read_many", lambda: repo.read_many([sid])),
            ("series_stats", lambda: repo.series_stats([sid])),
            ("flush repo", lambda: repo.flush()),
            ("optimize", lambda: repo.optimize()),
            ("close repo", lambda: repo.close()),
        ])
        print(json.dumps(accepted), file=sys.stderr)
        return len(accepted)

    result = wait(fork(child))
    changed = changed_files(before, wal_files(cfg["wal_dir"]))
    run_id = run.run_id
    db.close()
    repo.close()
    return {"child": result, "changed": changed, **stored(cfg, 100, run_id, 1)}


def both_write_then_killed(cfg) -> None:
    """Parent and child both put through the parent's DB; the test kills
    both. Prints the child's pid and what the child got accepted, then waits
    to be killed."""
    db = kv0.DB(cfg["db"], **db_options(cfg))
    read, write = os.pipe()

    def child() -> int:
        os.close(read)
        accepted = 0
        for i in range(300):
            try:
                db.put(b"child/%06d" % i, b"x")
                accepted += 1
            except kv0.errors.NotSupported:
                pass
        os.write(write, b"%d\n" % accepted)
        time.sleep(600)  # killed by the test
        return 0

    pid = fork(child)
    os.close(write)
    child_accepted = int(os.read(read, 64).decode().strip())
    for i in range(300):
        db.put(key(i), b"acknowledged")
    print(json.dumps({"child_pid": pid, "child_accepted": child_accepted}), flush=True)
    time.sleep(600)  # killed by the test, with the 300 puts only logged


def repo_inherited(cfg) -> dict:
    """The child tracks through the inherited Repo; the parent tracks 100
    points and closes cleanly."""
    repo = Repo(cfg["repo"], **repo_options(cfg))
    run = repo.create_run(name="parent")

    def child() -> int:
        accepted = 0
        for step in range(100):
            try:
                run.track(-1.0, "loss", step=step)
                accepted += 1
            except kv0.errors.NotSupported:
                pass
        return min(accepted, 100)

    result = wait(fork(child))
    for step in range(100):
        run.track(float(step), "loss", step=step)
    run_id = run.run_id
    repo.close()
    with Repo(cfg["repo"], **repo_options(cfg)) as fresh:
        table = pyarrow.table(fresh.read_many([series_id(run_id, "loss", {})]))
    return {"child": result, "points": table.num_rows,
            "values_ok": table.column("value").to_pylist() == [float(s) for s in range(100)]}


# --- multiprocessing ------------------------------------------------------------------

RUNS_PER_WORKER = 2
STEPS = 200


def log_runs(args) -> list[str]:
    """A pool worker: its own Repo, a few runs, each finished."""
    path, options, worker = args
    ids = []
    with Repo(path, **options) as repo:
        for r in range(RUNS_PER_WORKER):
            run = repo.create_run(name=f"worker-{worker}-{r}")
            run.set_params({"worker": worker, "run": r})
            for step in range(STEPS):
                run.track(float(step), "loss", step=step)
                run.track(float(-step), "acc", step=step)
            run.finish()
            ids.append(run.run_id)
    return ids


def pool(cfg) -> dict:
    """Four workers log runs while the parent logs too."""
    ctx = multiprocessing.get_context(cfg["method"])
    options = repo_options(cfg)
    repo = Repo(cfg["repo"], **options)
    parent_run = repo.create_run(name="parent")
    steps = 0
    with ctx.Pool(4) as workers:
        pending = workers.map_async(log_runs, [(cfg["repo"], options, i) for i in range(4)])
        while not pending.ready() or steps < 1000:
            parent_run.track(float(steps), "loss", step=steps)
            steps += 1
            if steps % 500 == 0:
                repo.flush()
        worker_ids = [i for ids in pending.get(timeout=120) for i in ids]
    parent_run.finish()
    parent_id = parent_run.run_id
    repo.close()
    with Repo(cfg["repo"], **options) as fresh:
        counts = {i: (points_of(fresh, i), points_of(fresh, i, "acc")) for i in worker_ids}
        parent_points = points_of(fresh, parent_id)
        finished = sorted(r["status"] for r in fresh.runs())
    return {"workers": len(worker_ids), "full": all(c == (STEPS, STEPS) for c in counts.values()),
            "parent": parent_points == steps, "finished": finished}


def killed_worker_body(path, options, queue) -> None:
    with Repo(path, **options) as repo:
        run = repo.create_run(name="killed")
        for step in range(500):
            run.track(float(step), "loss", step=step)
        queue.put(run.run_id)  # 500 points acknowledged (logged), none committed
        time.sleep(600)


def killed_worker(cfg) -> dict:
    """A worker killed mid-run: what it acknowledged is replayed."""
    ctx = multiprocessing.get_context(cfg["method"])
    options = repo_options(cfg)
    repo = Repo(cfg["repo"], **options)
    mine = repo.create_run(name="parent")
    queue = ctx.Queue()
    worker = ctx.Process(target=killed_worker_body, args=(cfg["repo"], options, queue))
    worker.start()
    run_id = queue.get(timeout=120)
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(30)
    for step in range(100):
        mine.track(float(step), "loss", step=step)
    mine.finish()
    mine_id = mine.run_id
    repo.close()
    with Repo(cfg["repo"], **options) as fresh:
        return {"exitcode": worker.exitcode, "replayed": points_of(fresh, run_id),
                "parent": points_of(fresh, mine_id)}


SCENARIOS = {f.__name__: f for f in (own_handles, exit_untouched, use_inherited,
                                     both_write_then_killed, repo_inherited, pool,
                                     killed_worker)}

if __name__ == "__main__":
    scenario, config = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(SCENARIOS[scenario](config)), flush=True)
