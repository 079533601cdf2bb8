#!/usr/bin/env python3
"""kv0.tracking beside MLflow, Aim and trackio, through each one's Python API.

Every engine runs the same workload, each step in a new process of its own
started with that engine's interpreter (the peers live in virtual
environments of their own; the parent only starts the children and collects
their JSON):

  log      N runs (default 100) one after another, each: create, 20
           parameters (nested dicts, strings, floats, ints), 10 metrics x
           1,000 steps, finish. Timed from after the imports to the last
           run finished and the store closed. Figures: points/s, wall and
           CPU seconds.
  series   one run with one metric of --series-steps steps (default
           100,000), points/s.
  catalog  from a new process, on the store of `log`: every run with its
           parameters and the last value of each of its metrics.
  read     from a new process, the whole series of `series` (every step and
           value), in the form the engine's read call returns it (Arrow for
           kv0, NumPy for Aim, Python objects for MLflow and trackio).
  disk     bytes of the store's directory after `log`, per point.

catalog and read give two times, the median of --repeat new processes: open
+ read (from after the imports, the figure to compare) and the whole child
(from before it imports the engine's package; the interpreter's own start
is not in either). CPU time is the process's, its threads included.

kv0-nowait is kv0 opened with finish_waits=False: run.finish() returns once
the final status is in the write-ahead log and leaves the commit to the
background flush it starts (docs/operations.md). It appears as a column of
its own (the ratio column then compares kv0 with it), and a line below the
table gives its logging rate against each peer's.

Each engine's usual idiom:

  kv0            repo.create_run(name=, experiment=), run.set_params(params),
                 run.track(value, name, step=s, context={"subset": "train"})
                 per point (one dict object reused), run.finish(),
                 repo.close(); catalog: runs() + all_params() + all_series()
                 + series_stats(all ids); read: read_many([id]).
  mlflow-file    mlflow.start_run(run_name=), mlflow.log_params (nested keys
  mlflow-sqlite  flattened with dots), mlflow.log_metrics({10 metrics},
                 step=s) per step (log_metric per step for the series);
                 catalog: MlflowClient.search_runs (its latest metric
                 values); read: get_metric_history. The file store runs
                 with MLFLOW_ALLOW_FILE_STORE=true: MLflow 3.17 refuses it
                 otherwise ("in maintenance mode").
  aim            Run(repo=, experiment=), run.name, run["hparams"] = params,
                 run.track(value, name=, step=s, context={"subset": "train"})
                 per point, run.close(); catalog: Repo.iter_runs() with
                 run["hparams"] and collect_sequence_info("metric") (its
                 last values); read: get_metric(...).data.view("val"). Aim
                 3.29's SDK reads only runs its index holds, and only
                 `aim up`'s background indexer or `aim storage reindex`
                 index them: each store is reindexed with the latter after
                 it is written, timed as a row of its own.
  trackio        trackio.init(project=, name=, config=params),
                 trackio.log({10 metrics}, step=s), trackio.finish(), the
                 clock stopped only once its background writer thread has
                 ended; TRACKIO_DIR points into the benchmark's directory.
                 trackio's public read API (trackio.Api) gives runs and
                 their config, not metrics: the catalog's last values and
                 the read come from trackio.sqlite_storage.SQLiteStorage
                 (get_logs, get_metric_values), what its `trackio get` CLI
                 calls.

The trackers' own system-metric and terminal logging is off (Aim
system_tracking_interval=None, capture_terminal_logs=False; trackio
auto_log_cpu/auto_log_gpu=False; MLflow logs none by default), and so is
telemetry (DO_NOT_TRACK, MLFLOW_DISABLE_TELEMETRY): each store holds what
the benchmark logs.

kv0's write-ahead log is a directory of its own beside the repository, not
counted in the disk figure (its size after `log` is printed below the
table). kv0 also runs optimize() in a further child on the store of `log`,
then purge() (every version but the latest removed): two more disk figures.

A peer too slow for the full size may log fewer runs (--peer-runs 20, or
--peer-runs mlflow-sqlite=20); kv0 then runs at that size as well, the
column heads say how many runs each engine logged, and the ratios compare
equal sizes. --peer-series-steps K has a slow peer log only the first K
steps of the series through its idiom (the rate), and the rest untimed
through its batch call (MLflow's log_batch), so the read still reads every
step.

Every child checks what it read: every run, its 20 parameters and its 10
last values in the catalog, every step and value of the series; a wrong
answer fails the benchmark. Nothing is asserted on the times; the ratio
columns are kv0's (peer time / kv0 time, kv0 rate / peer rate, peer bytes /
kv0 bytes: above 1 means kv0 is faster or smaller).

Run by bench/tracking_peers.sh, which makes each peer's virtual
environment outside the checkout and passes their interpreters:

    bench/tracking_peers.sh [--runs N] [--peer-runs M|ENGINE=M,...]
        [--series-steps S] [--peer-series-steps K|ENGINE=K,...]
        [--engines kv0,kv0-nowait,mlflow-file,mlflow-sqlite,aim,trackio]
        [--repeat R] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ENGINES = ("kv0", "kv0-nowait", "mlflow-file", "mlflow-sqlite", "aim", "trackio")
PACKAGES = {"kv0": "kv0", "kv0-nowait": "kv0", "mlflow-file": "mlflow", "mlflow-sqlite": "mlflow", "aim": "aim",
            "trackio": "trackio"}
METRICS = ("loss", "acc", "val_loss", "val_acc", "grad_norm", "lr", "throughput", "epoch_time",
           "f1", "auc")
STEPS = 1000
EXPERIMENT = "bench"
SERIES_RUN = "series"
SERIES_METRIC = "loss"
CONTEXT = {"subset": "train"}


# The workload ---------------------------------------------------------------

def run_name(i: int) -> str:
    return f"run-{i:04d}"


def run_params(i: int) -> dict:
    """20 parameters once flattened: nested dicts, strings, floats, ints."""
    return {
        "optimizer": {"name": "adamw", "lr": 1e-4 * (1 + i % 7), "weight_decay": 0.01,
                      "betas": {"b1": 0.9, "b2": 0.999}},
        "model": {"arch": "transformer", "layers": 12 + i % 3, "hidden": 768, "dropout": 0.1},
        "data": {"name": f"corpus-{i % 5}", "batch_size": 32, "seq_len": 512},
        "seed": i,
        "epochs": 10,
        "warmup_steps": 500,
        "scheduler": "cosine",
        "precision": "bf16",
        "grad_clip": 1.0,
        "label_smoothing": 0.1,
        "tag": f"sweep-{i // 10}",
    }


def flatten(params: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in params.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def step_rows() -> list[tuple[float, ...]]:
    """The 10 metrics' values at each step, before a run adds its index."""
    return [tuple(((s * 7919 + k * 104729) % 10007) / 10007.0 for k in range(len(METRICS)))
            for s in range(STEPS)]


def series_values(n: int) -> list[float]:
    return [((s * 7919) % 10007) / 10007.0 + s * 1e-6 for s in range(n)]


# The engines ----------------------------------------------------------------
#
# Each is made in a child after its clock has started, so its constructor
# imports the package. log_open/log_run/log_close write the runs;
# series_open/series_log/series_close the long series (series_fill, where
# there is one, the untimed batch rest); catalog returns {run name:
# (params, {metric: last value})}; read returns the series in the engine's
# own form and points() turns that into (steps, values) after the clock.


class Kv0:
    def __init__(self, step: str, finish_waits: bool = True):
        import kv0.tracking

        self.tracking = kv0.tracking
        self.finish_waits = finish_waits
        if step == "read":
            import pyarrow

            self.pyarrow = pyarrow

    def _open(self, store: str):
        return self.tracking.Repo(os.path.join(store, "repo"), wal_dir=os.path.join(store, "wal"),
                                  finish_waits=self.finish_waits)

    def log_open(self, store: str) -> None:
        self.repo = self._open(store)

    def log_run(self, i: int, params: dict, rows) -> None:
        run = self.repo.create_run(name=run_name(i), experiment=EXPERIMENT)
        run.set_params(params)
        track, context, off = run.track, CONTEXT, float(i)
        for s, row in enumerate(rows):
            for name, v in zip(METRICS, row):
                track(v + off, name, step=s, context=context)
        run.finish()

    def log_close(self) -> None:
        self.repo.close()

    def series_open(self, store: str) -> None:
        self.repo = self._open(store)
        self.run = self.repo.create_run(name=SERIES_RUN, experiment=EXPERIMENT)

    def series_log(self, values, lo: int, hi: int) -> None:
        track, context = self.run.track, CONTEXT
        for s in range(lo, hi):
            track(values[s], SERIES_METRIC, step=s, context=context)

    def series_close(self) -> None:
        self.run.finish()
        self.repo.close()

    def catalog(self, store: str) -> dict:
        repo = self._open(store)
        runs = repo.runs()
        params = repo.all_params()
        series = repo.all_series()
        stats = repo.series_stats([s["series_id"] for s in series])
        names = {r["run_id"]: r["name"] for r in runs}
        out = {r["name"]: (params.get(r["run_id"], {}), {}) for r in runs}
        for s in series:
            st = stats.get(s["series_id"])
            if st is not None:
                out[names[s["run_id"]]][1][s["name"]] = st["last"]
        repo.close()
        return out

    def read(self, store: str):
        repo = self._open(store)
        run = next(r for r in repo.runs() if r["name"] == SERIES_RUN)
        sid = self.tracking.series_id(run["run_id"], SERIES_METRIC, CONTEXT)
        table = self.pyarrow.table(repo.read_many([sid]))
        repo.close()
        return table

    @staticmethod
    def points(table):
        return table["step"].to_pylist(), table["value"].to_pylist()

    def optimize(self, store: str) -> dict:
        with self._open(store) as repo:
            return repo.optimize()

    def purge(self, store: str) -> dict:
        with self._open(store) as repo:
            return repo.purge()


class MLflow:
    def __init__(self, step: str, backend: str):
        import mlflow
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        self.mlflow, self.Metric, self.MlflowClient = mlflow, Metric, MlflowClient
        self.backend = backend

    def _uri(self, store: str) -> str:
        if self.backend == "file":
            return "file:" + os.path.join(store, "mlruns")
        return "sqlite:///" + os.path.join(store, "mlflow.db")

    def _experiment(self, store: str) -> None:
        mlflow = self.mlflow
        mlflow.set_tracking_uri(self._uri(store))
        experiment = mlflow.create_experiment(EXPERIMENT,
                                              artifact_location=os.path.join(store, "artifacts"))
        mlflow.set_experiment(experiment_id=experiment)

    def log_open(self, store: str) -> None:
        self._experiment(store)

    def log_run(self, i: int, params: dict, rows) -> None:
        mlflow, off = self.mlflow, float(i)
        with mlflow.start_run(run_name=run_name(i)):
            mlflow.log_params(flatten(params))
            for s, row in enumerate(rows):
                mlflow.log_metrics({name: v + off for name, v in zip(METRICS, row)}, step=s)

    def log_close(self) -> None:
        pass

    def series_open(self, store: str) -> None:
        self._experiment(store)
        self.run = self.mlflow.start_run(run_name=SERIES_RUN)

    def series_log(self, values, lo: int, hi: int) -> None:
        log_metric = self.mlflow.log_metric
        for s in range(lo, hi):
            log_metric(SERIES_METRIC, values[s], step=s)

    def series_fill(self, values, lo: int, hi: int) -> None:
        client, run_id = self.MlflowClient(), self.run.info.run_id
        now = int(time.time() * 1000)
        for start in range(lo, hi, 1000):
            client.log_batch(run_id, metrics=[self.Metric(SERIES_METRIC, values[s], now, s)
                                              for s in range(start, min(hi, start + 1000))])

    def series_close(self) -> None:
        self.mlflow.end_run()

    def _client(self, store: str):
        client = self.MlflowClient(tracking_uri=self._uri(store))
        return client, client.get_experiment_by_name(EXPERIMENT).experiment_id

    def catalog(self, store: str) -> dict:
        client, experiment = self._client(store)
        runs, token = [], None
        while True:
            page = client.search_runs([experiment], max_results=1000, page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                break
        return {r.info.run_name: (r.data.params, r.data.metrics) for r in runs}

    def read(self, store: str):
        client, experiment = self._client(store)
        run = client.search_runs([experiment], f"attributes.run_name = '{SERIES_RUN}'")[0]
        return client.get_metric_history(run.info.run_id, SERIES_METRIC)

    @staticmethod
    def points(history):
        return [m.step for m in history], [m.value for m in history]


class Aim:
    def __init__(self, step: str):
        from aim import Repo, Run
        from aim.storage.context import Context

        self.Repo, self.Run, self.Context = Repo, Run, Context

    def _run(self, store: str):
        return self.Run(repo=store, experiment=EXPERIMENT, system_tracking_interval=None,
                        capture_terminal_logs=False)

    def log_open(self, store: str) -> None:
        self.store = store

    def log_run(self, i: int, params: dict, rows) -> None:
        run = self._run(self.store)
        run.name = run_name(i)
        run["hparams"] = params
        track, context, off = run.track, CONTEXT, float(i)
        for s, row in enumerate(rows):
            for name, v in zip(METRICS, row):
                track(v + off, name=name, step=s, context=context)
        run.close()

    def log_close(self) -> None:
        pass

    def series_open(self, store: str) -> None:
        self.run = self._run(store)
        self.run.name = SERIES_RUN

    def series_log(self, values, lo: int, hi: int) -> None:
        track, context = self.run.track, CONTEXT
        for s in range(lo, hi):
            track(values[s], name=SERIES_METRIC, step=s, context=context)

    def series_close(self) -> None:
        self.run.close()

    def catalog(self, store: str) -> dict:
        repo = self.Repo.from_path(store)
        out = {}
        for run in repo.iter_runs():
            traces = run.collect_sequence_info("metric")["metric"]
            out[run.name] = (run["hparams"], {t["name"]: t["values"]["last"] for t in traces})
        return out

    def read(self, store: str):
        repo = self.Repo.from_path(store)
        run = next(r for r in repo.iter_runs() if r.name == SERIES_RUN)
        metric = run.get_metric(SERIES_METRIC, self.Context(CONTEXT))
        return metric.data.view("val").numpy()

    @staticmethod
    def points(data):
        steps, (values,) = data
        return steps.tolist(), values.tolist()


class Trackio:
    """TRACKIO_DIR (the store) is set by the parent: trackio reads it when
    imported."""

    def __init__(self, step: str):
        import trackio
        from trackio.sqlite_storage import SQLiteStorage

        self.trackio, self.storage = trackio, SQLiteStorage

    def _init(self, name: str, config: dict | None):
        return self.trackio.init(project=EXPERIMENT, name=name, config=config,
                                 auto_log_cpu=False, auto_log_gpu=False)

    def _finish(self, run) -> None:
        self.trackio.finish()
        # finish() waits up to 30 s for the writer thread, then warns and
        # returns: the clock stops only once the thread has written all.
        thread = getattr(run, "_local_sender_thread", None)
        if thread is not None:
            thread.join()

    def log_open(self, store: str) -> None:
        pass

    def log_run(self, i: int, params: dict, rows) -> None:
        run = self._init(run_name(i), params)
        log, off = self.trackio.log, float(i)
        for s, row in enumerate(rows):
            log({name: v + off for name, v in zip(METRICS, row)}, step=s)
        self._finish(run)

    def log_close(self) -> None:
        pass

    def series_open(self, store: str) -> None:
        self.run = self._init(SERIES_RUN, None)

    def series_log(self, values, lo: int, hi: int) -> None:
        log = self.trackio.log
        for s in range(lo, hi):
            log({SERIES_METRIC: values[s]}, step=s)

    def series_close(self) -> None:
        self._finish(self.run)

    def catalog(self, store: str) -> dict:
        out = {}
        for run in self.trackio.Api().runs(EXPERIMENT):
            config = {k: v for k, v in (run.config or {}).items() if not k.startswith("_")}
            last, at = {}, {}
            for row in self.storage.get_logs(EXPERIMENT, run.name, run_id=run.id):
                step = row["step"]
                for key, value in row.items():
                    if key not in ("step", "timestamp") and step >= at.get(key, -1):
                        at[key], last[key] = step, value
            out[run.name] = (config, last)
        return out

    def read(self, store: str):
        return self.storage.get_metric_values(EXPERIMENT, SERIES_RUN, SERIES_METRIC)

    @staticmethod
    def points(rows):
        rows = sorted(rows, key=lambda r: r["step"])
        return [r["step"] for r in rows], [r["value"] for r in rows]


def make_engine(engine: str, step: str):
    if engine == "kv0":
        return Kv0(step)
    if engine == "kv0-nowait":
        return Kv0(step, finish_waits=False)
    if engine.startswith("mlflow-"):
        return MLflow(step, engine.split("-", 1)[1])
    if engine == "aim":
        return Aim(step)
    return Trackio(step)


# The checks -----------------------------------------------------------------

def same_value(expected, got) -> bool:
    # MLflow keeps parameters as text.
    return got == expected or (isinstance(got, str) and got == str(expected))


def check_catalog(engine: str, catalog: dict, runs: int) -> None:
    rows = step_rows()
    want = {run_name(i) for i in range(runs)}
    if set(catalog) != want:
        sys.exit(f"{engine}: the catalog has {len(catalog)} runs "
                 f"({len(set(catalog) & want)} of the {runs} logged)")
    for i in range(runs):
        params, metrics = catalog[run_name(i)]
        flat, expected = flatten(params), flatten(run_params(i))
        wrong = sorted(k for k in set(flat) | set(expected)
                       if k not in flat or k not in expected or not same_value(expected[k], flat[k]))
        if wrong:
            sys.exit(f"{engine}: {run_name(i)} has wrong parameters: "
                     + ", ".join(f"{k}={flat.get(k)!r} (logged {expected.get(k)!r})" for k in wrong))
        last = {name: rows[-1][k] + float(i) for k, name in enumerate(METRICS)}
        if metrics != last:
            wrong = sorted(k for k in set(metrics) | set(last) if metrics.get(k) != last.get(k))
            sys.exit(f"{engine}: {run_name(i)} has wrong last values: "
                     + ", ".join(f"{k}={metrics.get(k)!r} (logged {last.get(k)!r})"
                                 for k in wrong))


def check_series(engine: str, steps: list, values: list, n: int) -> None:
    if len(steps) != n or steps != list(range(n)):
        sys.exit(f"{engine}: the series read back has {len(steps)} points, not steps 0..{n - 1}")
    if values != series_values(n):
        bad = next(s for s, (a, b) in enumerate(zip(values, series_values(n))) if a != b)
        sys.exit(f"{engine}: the series read back differs at step {bad}")


# The children ---------------------------------------------------------------

def cpu_now() -> float:
    """CPU seconds of this process (every thread) and of its waited-for
    children."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def child(spec: dict) -> None:
    step, engine_name, store = spec["step"], spec["engine"], spec["store"]
    w0, c0 = time.perf_counter(), cpu_now()
    engine = make_engine(engine_name, step)
    w1, c1 = time.perf_counter(), cpu_now()
    out = {"import_s": w1 - w0}

    if step == "log":
        runs = spec["runs"]
        rows = step_rows()
        params = [run_params(i) for i in range(runs)]
        w1, c1 = time.perf_counter(), cpu_now()
        engine.log_open(store)
        for i in range(runs):
            engine.log_run(i, params[i], rows)
        engine.log_close()
        w2, c2 = time.perf_counter(), cpu_now()
        out.update(points=runs * len(METRICS) * STEPS, wall_s=w2 - w1, cpu_s=c2 - c1)
    elif step == "series":
        n, timed = spec["steps"], spec["timed_steps"]
        values = series_values(n)
        w1, c1 = time.perf_counter(), cpu_now()
        engine.series_open(store)
        engine.series_log(values, 0, timed)
        if timed < n:
            w2, c2 = time.perf_counter(), cpu_now()
            engine.series_fill(values, timed, n)
            engine.series_close()
        else:
            engine.series_close()
            w2, c2 = time.perf_counter(), cpu_now()
        out.update(points=timed, wall_s=w2 - w1, cpu_s=c2 - c1)
    elif step in ("catalog", "read"):
        answer = getattr(engine, step)(store)
        w2, c2 = time.perf_counter(), cpu_now()
        out.update(wall_s=w2 - w1, cpu_s=c2 - c1, whole_wall_s=w2 - w0, whole_cpu_s=c2 - c0)
        if step == "catalog":
            check_catalog(engine_name, answer, spec["runs"])
            out["runs"] = len(answer)
        else:
            steps, values = engine.points(answer)
            check_series(engine_name, steps, values, spec["steps"])
            out["points"] = len(steps)
    elif step in ("optimize", "purge"):
        stats = getattr(engine, step)(store)
        w2, c2 = time.perf_counter(), cpu_now()
        out.update(wall_s=w2 - w1, cpu_s=c2 - c1, stats=stats)
    else:
        sys.exit(f"unknown step {step}")
    out["version"] = importlib.metadata.version(PACKAGES[engine_name])
    with open(spec["out"], "w") as f:
        json.dump(out, f)


# The parent -----------------------------------------------------------------

def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


class Driver:
    def __init__(self, args, work: str):
        self.args, self.work = args, work
        self.pythons = {"kv0": sys.executable}
        for item in args.python:
            name, _, path = item.partition("=")
            self.pythons[name] = path

    def python(self, engine: str) -> str:
        package = PACKAGES[engine]
        if package not in self.pythons:
            sys.exit(f"no interpreter for {engine}: pass --python {package}=PATH")
        return self.pythons[package]

    def env(self, engine: str, store: str) -> dict:
        env = dict(os.environ, DO_NOT_TRACK="true", MLFLOW_DISABLE_TELEMETRY="true")
        if engine == "mlflow-file":
            env["MLFLOW_ALLOW_FILE_STORE"] = "true"
        if engine == "trackio":
            env["TRACKIO_DIR"] = store
        return env

    def child(self, engine: str, step: str, store: str, **spec) -> dict:
        out = os.path.join(self.work, "child.json")
        spec.update(step=step, engine=engine, store=store, out=out)
        proc = subprocess.run([self.python(engine), os.path.abspath(__file__), "--child",
                               json.dumps(spec)], cwd=self.work, env=self.env(engine, store),
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            sys.exit(f"{engine} {step}: the child failed (exit {proc.returncode})")
        with open(out) as f:
            result = json.load(f)
        os.remove(out)
        return result

    def timed_command(self, engine: str, argv: list[str], store: str) -> dict:
        """A peer's own command, timed from here (its interpreter's start
        included)."""
        before = os.times()
        w0 = time.perf_counter()
        proc = subprocess.run(argv, cwd=self.work, env=self.env(engine, store),
                              capture_output=True, text=True)
        wall = time.perf_counter() - w0
        after = os.times()
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            sys.exit(f"{engine}: {' '.join(argv[:3])} failed (exit {proc.returncode})")
        cpu = (after.children_user + after.children_system
               - before.children_user - before.children_system)
        return {"wall_s": wall, "cpu_s": cpu}

    def aim_reindex(self, store: str) -> dict:
        aim = os.path.join(os.path.dirname(self.python("aim")), "aim")
        return self.timed_command("aim", [aim, "storage", "--repo", store, "reindex", "--yes"],
                                  store)

    def fresh(self, engine: str, step: str, store: str, **spec) -> dict:
        """The median of --repeat new processes."""
        results = [self.child(engine, step, store, **spec) for _ in range(self.args.repeat)]
        return {key: statistics.median(r[key] for r in results)
                for key in ("wall_s", "cpu_s", "whole_wall_s", "whole_cpu_s")}

    def measure(self, engine: str, runs: int, series_steps: int, timed_steps: int) -> dict:
        """Every step of one engine at one size."""
        res = {"engine": engine, "runs": runs}
        log_store = os.path.join(self.work, "log", f"{engine}-{runs}")
        series_store = os.path.join(self.work, "series", engine)
        os.makedirs(log_store)
        say = lambda text: print(f"{engine} ({runs} runs): {text}", file=sys.stderr, flush=True)

        res["log"] = self.child(engine, "log", log_store, runs=runs)
        res["version"] = res["log"]["version"]
        say(f"log {res['log']['wall_s']:.1f} s")
        if engine.startswith("kv0"):
            res["disk_bytes"] = dir_bytes(os.path.join(log_store, "repo"))
            res["wal_bytes"] = dir_bytes(os.path.join(log_store, "wal"))
        else:
            res["disk_bytes"] = dir_bytes(log_store)
        if engine == "aim":
            res["index_log"] = self.aim_reindex(log_store)
            res["disk_bytes_indexed"] = dir_bytes(log_store)
        res["catalog"] = self.fresh(engine, "catalog", log_store, runs=runs)
        say(f"catalog {res['catalog']['wall_s'] * 1000:.0f} ms")
        if engine == "kv0":
            res["optimize"] = self.child(engine, "optimize", log_store)
            res["disk_bytes_optimized"] = dir_bytes(os.path.join(log_store, "repo"))
            res["purge"] = self.child(engine, "purge", log_store)
            res["disk_bytes_purged"] = dir_bytes(os.path.join(log_store, "repo"))
            # The optimized store still answers the catalog.
            self.child(engine, "catalog", log_store, runs=runs)
        shutil.rmtree(log_store)

        if series_steps:
            os.makedirs(series_store)
            res["series"] = self.child(engine, "series", series_store, steps=series_steps,
                                       timed_steps=timed_steps)
            say(f"series {res['series']['wall_s']:.1f} s")
            if engine == "aim":
                res["index_series"] = self.aim_reindex(series_store)
            res["read"] = self.fresh(engine, "read", series_store, steps=series_steps)
            say(f"read {res['read']['wall_s'] * 1000:.0f} ms")
            shutil.rmtree(series_store)
        return res


def per_engine(text: str | None, engines: list[str], default: int) -> dict:
    """"M" for every peer, or "ENGINE=M,...": each engine's value."""
    out = {e: default for e in engines}
    if not text:
        return out
    for item in text.split(","):
        name, sep, value = item.rpartition("=")
        targets = [name] if sep else [e for e in engines if e != "kv0"]
        for t in targets:
            if t not in ENGINES or t == "kv0":
                sys.exit(f"not a peer: {t}")
            if t in out:
                out[t] = int(value)
    return out


# The table ------------------------------------------------------------------

def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.{max(digits, 2)}f} M"
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def table(results: list[dict], engines: list[str], args, sizes: dict, timed: dict) -> str:
    """One row per figure, one column per engine (and per size of kv0), then
    kv0's ratio to each peer at the peer's size."""
    by = {(r["engine"], r["runs"]): r for r in results}
    columns = []  # (head, result)
    for e in engines:
        if e == "kv0":
            for runs in sorted({sizes[x] for x in engines}, reverse=True):
                columns.append(("kv0" if runs == args.runs else f"kv0 ({runs} runs)",
                                by[("kv0", runs)]))
        else:
            notes = [f"{sizes[e]} runs"] if sizes[e] != args.runs else []
            if args.series_steps and timed[e] < args.series_steps:
                notes.append(f"series: first {timed[e]:,} steps timed")
            columns.append((f"{e} ({'; '.join(notes)})" if notes else e, by[(e, sizes[e])]))
    peers = [(e, by[(e, sizes[e])]) for e in engines if e != "kv0"]

    def g(step, key, scale=1.0):
        return lambda r: r[step][key] * scale

    def per_point(key):
        return lambda r: r[key] / r["log"]["points"]

    # (label, value of a result, higher is better, digits, compared with kv0 at
    # the peer's size (log, catalog, disk) or at the full size (series, read))
    same, full = "same", "full"
    rows = [
        ("log: points/s", lambda r: r["log"]["points"] / r["log"]["wall_s"], True, 0, same),
        ("log: wall s", g("log", "wall_s"), False, 2, same),
        ("log: CPU s", g("log", "cpu_s"), False, 2, same),
    ]
    if args.series_steps:
        rows += [
            ("series: points/s", lambda r: r["series"]["points"] / r["series"]["wall_s"], True, 0,
             full),
            ("series: wall s per 100k points",
             lambda r: r["series"]["wall_s"] * 1e5 / r["series"]["points"], False, 2, full),
            ("series: CPU s per 100k points",
             lambda r: r["series"]["cpu_s"] * 1e5 / r["series"]["points"], False, 2, full),
        ]
    rows += [
        ("catalog: open + read, wall ms", g("catalog", "wall_s", 1000), False, 1, same),
        ("catalog: open + read, CPU ms", g("catalog", "cpu_s", 1000), False, 1, same),
        ("catalog: whole child, wall ms", g("catalog", "whole_wall_s", 1000), False, 1, same),
        ("catalog: whole child, CPU ms", g("catalog", "whole_cpu_s", 1000), False, 1, same),
    ]
    if args.series_steps:
        n = f"{args.series_steps:,}"
        rows += [
            (f"read {n} points: open + read, wall ms", g("read", "wall_s", 1000), False, 1, full),
            (f"read {n} points: open + read, CPU ms", g("read", "cpu_s", 1000), False, 1, full),
            (f"read {n} points: whole child, wall ms", g("read", "whole_wall_s", 1000), False, 1,
             full),
            (f"read {n} points: whole child, CPU ms", g("read", "whole_cpu_s", 1000), False, 1,
             full),
        ]
    rows += [
        ("disk: bytes/point after log", per_point("disk_bytes"), False, 1, same),
        ("disk: bytes/point, kv0 after optimize()", per_point("disk_bytes_optimized"), False, 1,
         None),
        ("disk: bytes/point, kv0 after optimize() + purge()", per_point("disk_bytes_purged"),
         False, 1, None),
        ("aim storage reindex of the log store, wall s", g("index_log", "wall_s"), False, 2,
         None),
        ("aim: disk bytes/point after reindex", per_point("disk_bytes_indexed"), False, 1, None),
    ]
    if args.series_steps:
        rows.append(("aim storage reindex of the series store, wall s",
                     g("index_series", "wall_s"), False, 2, None))

    heads = ["figure"] + [h for h, _ in columns] + [f"kv0 vs {e}" for e, _ in peers]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for label, get, higher, digits, base in rows:
        values = [_safe(get, r) for _, r in columns]
        if all(v is None for v in values):
            continue
        ratios = []
        for e, r in peers:
            v = _safe(get, r)
            kv0 = by.get(("kv0", r["runs"] if base == same else args.runs))
            k = _safe(get, kv0) if base and kv0 else None
            if not v or not k:
                ratios.append("–")
            else:
                ratios.append(f"{(k / v) if higher else (v / k):.1f}×")
        lines.append("| " + " | ".join([label] + [fmt(v, digits) for v in values] + ratios)
                     + " |")
    return "\n".join(lines)


def _safe(get, r):
    try:
        return get(r)
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--peer-runs", help="M, or ENGINE=M,...: runs a slow peer logs")
    parser.add_argument("--series-steps", type=int, default=100_000,
                        help="steps of the long series (0: no series and no read)")
    parser.add_argument("--peer-series-steps",
                        help="K, or ENGINE=K,...: series steps a slow peer logs by its idiom")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--repeat", type=int, default=3, help="new processes per read figure")
    parser.add_argument("--python", action="append", default=[], metavar="PACKAGE=PATH",
                        help="the interpreter of mlflow, aim or trackio")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--dir", help="parent of the temporary directory")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for e in engines:
        if e not in ENGINES:
            parser.error(f"unknown engine {e} (known: {', '.join(ENGINES)})")
    if args.runs < 1 or args.repeat < 1 or args.series_steps < 0:
        parser.error("--runs and --repeat must be at least 1, --series-steps at least 0")
    sizes = per_engine(args.peer_runs, engines, args.runs)
    timed = {e: min(k, args.series_steps) for e, k in
             per_engine(args.peer_series_steps, engines, args.series_steps).items()}
    for e in engines:
        if timed[e] < args.series_steps and not e.startswith("mlflow"):
            parser.error(f"--peer-series-steps: {e} has no batch call for the untimed rest")
        if sizes[e] > args.runs:
            parser.error("--peer-runs must not exceed --runs")

    work = tempfile.mkdtemp(prefix="kv0-tracking-peers-", dir=args.dir)
    results = []
    try:
        driver = Driver(args, work)
        for e in engines:
            if e == "kv0":
                # At every size a peer logs, the series once (at the full size).
                for runs in sorted({sizes[x] for x in engines}, reverse=True):
                    steps = args.series_steps if runs == args.runs else 0
                    results.append(driver.measure("kv0", runs, steps, steps))
            else:
                results.append(driver.measure(e, sizes[e], args.series_steps, timed[e]))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    versions = {}
    for r in results:
        versions.setdefault(r["engine"], r["version"])
    print(f"kv0.tracking beside MLflow, Aim and trackio: {args.runs} runs x {len(METRICS)} "
          f"metrics x {STEPS:,} steps ({args.runs * len(METRICS) * STEPS:,} points), one series "
          f"of {args.series_steps:,} steps; reads the median of {args.repeat} new processes; "
          f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print("versions: " + ", ".join(f"{e} {v}" for e, v in versions.items()))
    print()
    print(table(results, engines, args, sizes, timed))
    for r in results:
        if r["engine"] != "kv0-nowait":
            continue
        rate = r["log"]["points"] / r["log"]["wall_s"]
        versus = [f"{p['engine']} ({p['runs']} runs) "
                  f"{rate / (p['log']['points'] / p['log']['wall_s']):.1f}×"
                  for p in results if not p["engine"].startswith("kv0")]
        print(f"\nkv0-nowait, log points/s {rate:,.0f}, against each peer's rate: "
              + ", ".join(versus))
    kv0_full = [r for r in results if r["engine"] == "kv0"]
    if kv0_full:
        r = kv0_full[0]
        print(f"\nkv0's write-ahead log, a directory of its own beside the repository, is not "
              f"counted in the disk figures: {r['wal_bytes']:,} bytes once log has closed the "
              "repository.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": args.runs, "series_steps": args.series_steps,
                       "repeat": args.repeat, "sizes": sizes, "timed_series_steps": timed,
                       "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
