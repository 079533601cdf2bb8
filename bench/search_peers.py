#!/usr/bin/env python3
"""kv0's run search beside MLflow's search_runs, on the same runs.

Both stores get the same N runs (default 5,000): 20 parameters and 10
metrics each (one value per metric, the value search_runs compares), MLflow
in its SQLite store, kv0 in a local repository. Then three queries that
MLflow's language can also say, each ordered by a metric with 100 results:

  1 condition   metrics.val_loss < 0.3
  2 conditions  ... AND params.optimizer = 'adam'
  4 conditions  ... AND metrics.acc > 0.5 AND params.dataset = 'corpus-1'

Figures: a warm handle (in a process of the engine's own, one query to warm
up, then the query repeated --repeat times: median wall and CPU time), and
a new process (open plus the first query, timed in the child from before it
imports the engine's package). Each engine runs in processes of its own, so
that neither pays for the other's threads and imports. The two engines must
return the same runs in the same order; nothing is asserted on the times.

Run by bench/search_peers.sh, which makes MLflow's virtual environment
outside the checkout:

    bench/search_peers.sh [--runs N] [--repeat R] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

QUERIES = [
    ("1 condition", "metrics.val_loss < 0.3"),
    ("2 conditions", "metrics.val_loss < 0.3 AND params.optimizer = 'adam'"),
    ("4 conditions", "metrics.val_loss < 0.3 AND params.optimizer = 'adam' AND "
                     "metrics.acc > 0.5 AND params.dataset = 'corpus-1'"),
]
ORDER = ["metrics.acc DESC"]
LIMIT = 100
METRICS = ["loss", "acc", "val_loss", "val_acc", "grad_norm", "lr", "throughput", "epoch_time",
           "f1", "auc"]


def run_data(n: int):
    """The runs: (name, params, metrics) with parameters as text where MLflow
    would store them as text, so both engines compare the same values."""
    rng = random.Random(20261202)
    for i in range(n):
        params = {
            "optimizer": rng.choice(["adam", "sgd", "adamw"]),
            "dataset": f"corpus-{rng.randrange(5)}",
            "scheduler": rng.choice(["cosine", "linear"]),
            "arch": "transformer",
        }
        for k in range(16):
            params[f"p{k:02d}"] = f"v{rng.randrange(100)}"
        metrics = {m: rng.random() for m in METRICS}
        yield f"run-{i:06d}", params, metrics


def build_mlflow(path: str, n: int) -> None:
    import mlflow
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(f"sqlite:///{path}/mlflow.db")
    client = MlflowClient()
    experiment = client.create_experiment("bench", artifact_location=f"{path}/artifacts")
    now = int(time.time() * 1000)
    for name, params, metrics in run_data(n):
        run = client.create_run(experiment, run_name=name)
        client.log_batch(run.info.run_id,
                         metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
                         params=[Param(k, v) for k, v in params.items()])
        client.set_terminated(run.info.run_id)
    with open(f"{path}/experiment", "w") as f:
        f.write(experiment)


def build_kv0(path: str, n: int) -> None:
    import kv0.tracking

    with kv0.tracking.Repo(f"{path}/repo", flush_rows=200_000) as repo:
        for name, params, metrics in run_data(n):
            run = repo.create_run(name=name)
            run.set_params(params)
            for k, v in metrics.items():
                run.track(v, k, step=0)
        repo.flush()


class Engine:
    def __init__(self, kind: str, path: str):
        self.kind, self.path = kind, path
        if kind == "mlflow":
            import mlflow
            from mlflow.tracking import MlflowClient

            mlflow.set_tracking_uri(f"sqlite:///{path}/mlflow.db")
            self.client = MlflowClient()
            with open(f"{path}/experiment") as f:
                self.experiment = f.read()
        else:
            import kv0.tracking

            self.repo = kv0.tracking.Repo(f"{path}/repo")

    def query(self, text: str) -> list[str]:
        if self.kind == "mlflow":
            runs = self.client.search_runs([self.experiment], text, order_by=ORDER,
                                           max_results=LIMIT)
            return [r.info.run_name for r in runs]
        page = self.repo.search_runs(text, order_by=ORDER, limit=LIMIT, columns=[])
        return page.runs["name"].to_pylist()


def child(kind: str, path: str, query: int, repeat: int) -> None:
    """Prints the first query's time from a new process (open included), then
    with repeat > 0 the wall and CPU times of repeat more on the same handle."""
    start = time.perf_counter()
    engine = Engine(kind, path)
    text = QUERIES[query][1]
    names = engine.query(text)
    first = (time.perf_counter() - start) * 1000
    walls, cpus = [], []
    if repeat:
        engine.query(text)  # the first query above may have filled caches
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        if engine.query(text) != names:
            sys.exit(f"{kind} answered one query two ways")
        walls.append((time.perf_counter() - w0) * 1000)
        cpus.append((time.process_time() - c0) * 1000)
    print(json.dumps({"ms": first, "names": names, "walls": walls, "cpus": cpus}))


def run_child(kind: str, work: str, query: int, repeat: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, work, str(query), str(repeat)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], int(args.child[2]), int(args.child[3]))

    import mlflow

    work = tempfile.mkdtemp(prefix="kv0-search-peers-")
    try:
        build = {}
        for kind, fn in (("kv0", build_kv0), ("mlflow", build_mlflow)):
            start = time.perf_counter()
            fn(work, args.runs)
            build[kind] = time.perf_counter() - start
            print(f"built {args.runs} runs in {kind}: {build[kind]:.1f} s", file=sys.stderr)
        rows = []
        for q, (label, text) in enumerate(QUERIES):
            row = {"query": label, "filter": text}
            results = {}
            for kind in ("kv0", "mlflow"):
                warm = run_child(kind, work, q, args.repeat)
                results[kind] = warm["names"]
                fresh = [run_child(kind, work, q, 0)["ms"] for _ in range(3)]
                row[kind] = {"warm_wall_ms": statistics.median(warm["walls"]),
                             "warm_cpu_ms": statistics.median(warm["cpus"]),
                             "new_process_ms": statistics.median(fresh),
                             "results": len(results[kind])}
            row["same_results"] = results["kv0"] == results["mlflow"]
            rows.append(row)
            print(f"{label}: done", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"kv0 run search beside MLflow {mlflow.__version__} search_runs (SQLite store), "
          f"{args.runs} runs, limit {LIMIT}, median of {args.repeat}")
    print(f"{'query':14} {'kv0 warm':>10} {'(cpu)':>8} {'mlflow warm':>12} {'(cpu)':>8} "
          f"{'ratio':>7} {'kv0 new proc':>13} {'mlflow new proc':>16} {'ratio':>7} same")
    for r in rows:
        k, m = r["kv0"], r["mlflow"]
        print(f"{r['query']:14} {k['warm_wall_ms']:8.1f}ms {k['warm_cpu_ms']:6.1f}ms "
              f"{m['warm_wall_ms']:10.1f}ms {m['warm_cpu_ms']:6.1f}ms "
              f"{m['warm_wall_ms'] / k['warm_wall_ms']:6.1f}x {k['new_process_ms']:11.1f}ms "
              f"{m['new_process_ms']:14.1f}ms {m['new_process_ms'] / k['new_process_ms']:6.1f}x "
              f"{r['same_results']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": args.runs, "repeat": args.repeat, "build_s": build,
                       "mlflow": mlflow.__version__, "queries": rows}, f, indent=2)
    if not all(r["same_results"] for r in rows):
        sys.exit("kv0 and MLflow returned different runs")


if __name__ == "__main__":
    main()
