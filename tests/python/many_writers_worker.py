"""One writer process of test_many_writers.py.

    python many_writers_worker.py kv|repo CONFIG.json

CONFIG names the location, the storage options, the worker's index and a
directory the processes meet in. The worker waits for the file `go` there,
writes its share, flushes, announces `done-<index>`, waits until every
worker has, then refreshes and writes what it reads to
`result-<index>.json`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow as pa

import kv0
from kv0 import errors
from kv0.tracking import Repo, series_id

WAIT = 240.0  # seconds a worker waits for the others before giving up


def wait_for(paths: list[Path]) -> None:
    deadline = time.monotonic() + WAIT
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {[str(p) for p in paths]}")
        time.sleep(0.05)


def barrier(meet: Path, name: str, index: int, workers: int) -> None:
    (meet / f"{name}-{index}").touch()
    wait_for([meet / f"{name}-{i}" for i in range(workers)])


# --- kv0.DB: distinct keys, a shared hot set, compactions ------------------------------

KV_ROUNDS = 6
KV_KEYS = 30  # distinct keys per worker and round
HOT_KEYS = 10


def kv_expected_own(index: int) -> dict[str, str]:
    """The distinct keys worker `index` leaves, as text."""
    keys = {}
    for r in range(KV_ROUNDS):
        for j in range(KV_KEYS):
            keys[f"w{index}/{r:02d}/{j:02d}"] = f"v{index}-{r}-{j}"
    for r in range(1, KV_ROUNDS, 2):  # the odd rounds delete from the round before
        del keys[f"w{index}/{r - 1:02d}/00"]
        for j in range(10, 15):
            del keys[f"w{index}/{r - 1:02d}/{j:02d}"]
    return keys


def kv_worker(config: dict) -> dict:
    meet, index = Path(config["meet"]), config["index"]
    db = kv0.DB(config["uri"], storage_options=config["storage_options"],
                wal_dir=config["wal_dir"], flush_interval=0.5)
    conflicts = 0
    wait_for([meet / "go"])
    for r in range(KV_ROUNDS):
        for j in range(KV_KEYS):
            db.put(f"w{index}/{r:02d}/{j:02d}".encode(), f"v{index}-{r}-{j}".encode())
        hot = kv0.WriteBatch()
        for h in range(HOT_KEYS):
            hot.put(f"hot/{h:02d}".encode(), f"w{index}-r{r}".encode())
        db.write(hot)
        if r % 2 == 1:
            db.delete(f"w{index}/{r - 1:02d}/00".encode())
            db.delete_range(f"w{index}/{r - 1:02d}/10".encode(),
                            f"w{index}/{r - 1:02d}/15".encode())
        db.flush()
        if r in (2, 4):  # every worker at about the same time
            try:
                db.compact_range()
            except errors.Conflict:
                conflicts += 1  # another handle's compaction won; a later one retries
    db.flush()
    barrier(meet, "done", index, config["workers"])
    view = read_db(db)
    db.close()
    return {"view": view, "conflicts": conflicts}


def read_db(db) -> dict[str, str]:
    """Everything the store holds now, other handles' commits included."""
    db.refresh()
    items = db.iteritems()
    items.seek_to_first()
    return {k.decode(): v.decode() for k, v in items}


# --- kv0.tracking.Repo: different runs, optimize --------------------------------------

REPO_ROUNDS = 5
REPO_STEPS = 40  # steps per round


def repo_value(index: int, name: str, step: int) -> float:
    return (index + 1) * 1000.0 + step / 8 if name == "loss" else -(index + 1) - step / 16


def repo_series(index: int) -> dict[str, tuple[str, dict]]:
    run_id = f"run-{index}"
    return {"loss": (run_id, {}), "acc": (run_id, {"subset": "val"})}


def read_repo(repo, workers: int) -> dict:
    runs = {r["run_id"]: r["status"] for r in repo.runs()}
    params = {f"run-{i}": repo.params(f"run-{i}") for i in range(workers)}
    points, stats = {}, {}
    for i in range(workers):
        for name, (run_id, context) in repo_series(i).items():
            sid = series_id(run_id, name, context)
            table = pa.table(repo.read_many([sid]))
            points[f"{run_id}/{name}"] = [table["step"].to_pylist(), table["value"].to_pylist()]
            s = repo.series_stats([sid])[sid]
            stats[f"{run_id}/{name}"] = [s["count"], s["first_step"], s["last_step"]]
    return {"runs": runs, "params": params, "points": points, "stats": stats}


def repo_worker(config: dict) -> dict:
    meet, index = Path(config["meet"]), config["index"]
    repo = Repo(config["uri"], storage_options=config["storage_options"],
                wal_dir=config["wal_dir"], flush_interval=0.5)
    wait_for([meet / "go"])
    run = repo.create_run(f"run-{index}", name=f"worker {index}", experiment="many-writers")
    run.set_params({"worker": index, "optimizer": {"lr": 0.1 * (index + 1)}})
    conflicts = 0
    for r in range(REPO_ROUNDS):
        for step in range(r * REPO_STEPS, (r + 1) * REPO_STEPS):
            for name, (_, context) in repo_series(index).items():
                run.track(repo_value(index, name, step), name, step=step, context=context)
        repo.flush()
        if r in (1, 3):  # both workers at about the same time
            for _ in range(10):
                try:
                    repo.optimize()
                    break
                except errors.Conflict:
                    conflicts += 1  # the other worker's rewrite won: run it again
    run.finish()
    barrier(meet, "done", index, config["workers"])
    result = read_repo(repo, config["workers"])
    repo.close()
    result["conflicts"] = conflicts
    return result


def main() -> None:
    kind, config_path = sys.argv[1], Path(sys.argv[2])
    config = json.loads(config_path.read_text())
    result = kv_worker(config) if kind == "kv" else repo_worker(config)
    out = Path(config["meet"]) / f"result-{config['index']}.json"
    out.with_suffix(".tmp").write_text(json.dumps(result))
    out.with_suffix(".tmp").rename(out)


if __name__ == "__main__":
    main()
