"""The Aim workload of test_aim.py, run by the Python of a virtual
environment that has Aim (so not collected by pytest).

    python aim_workload.py write REPO          three runs, three metrics x 500 steps
    python aim_workload.py read REPO OUT.json  everything Aim reads back, as JSON

test_aim.py runs it once on the real aimrocks and once through
``python -m kv0.aimrocks``, and compares the two outputs. Values are chosen
so that every one is an exact binary fraction or a plain float, and the
output leaves out what differs between any two runs of Aim (run hashes are
kept only to compare with ``aim runs ls``; times are dropped).
"""

import json
import math
import sys

RUNS = 3
STEPS = 500
OPTIMIZERS = ("adam", "sgd", "adamw")


def hparams(i: int) -> dict:
    return {
        "lr": 0.001 * (i + 1),
        "batch_size": 32 * (i + 1),
        "optimizer": {"name": OPTIMIZERS[i], "betas": [0.9, 0.999], "nesterov": i == 1},
        "layers": [64, 32, 16][: i + 1],
        "seed": 1000 + i,
    }


def points(i: int, step: int) -> list[tuple[float, str, dict]]:
    return [
        (1.0 / (1 + step) + i / 8, "loss", {"subset": "train"}),
        (step / (STEPS + i), "accuracy", {"subset": "val", "fold": i}),
        (0.1 * 0.5 ** (step // 100), "learning_rate", {"schedule": "step"}),
    ]


def write(repo_path: str) -> None:
    import aim

    for i in range(RUNS):
        # No system metrics or terminal capture: they would differ between runs.
        run = aim.Run(repo=repo_path, experiment=f"exp-{i % 2}", system_tracking_interval=None,
                      log_system_params=False, capture_terminal_logs=False)
        run.name = f"run-{i}"
        run["hparams"] = hparams(i)
        run["dataset"] = {"name": "mnist", "size": 60000 - i}
        for step in range(STEPS):
            for value, name, context in points(i, step):
                run.track(value, name=name, step=step, epoch=step // 100, context=context)
        run.close()


def _plain(x):
    if isinstance(x, float) and math.isnan(x):
        return None  # NaN is not equal to itself; an epoch Aim did not store reads as NaN
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def read(repo_path: str, out_path: str) -> None:
    import aim
    from aim.storage.context import Context
    from aim.sdk.types import QueryReportMode

    quiet = QueryReportMode.DISABLED
    repo = aim.Repo.from_path(repo_path)
    out = {"hashes": sorted(repo.list_all_runs()), "runs": [], "metrics": [], "queries": {}}

    by_hash = {}
    for trace in repo.query_runs("", report_mode=quiet).iter_runs():
        run = trace.run
        by_hash[run.hash] = run.name
        out["runs"].append({
            "name": run.name,
            "experiment": run.experiment,
            "hparams": run["hparams"],
            "dataset": run["dataset"],
            "metrics": sorted([m.name, m.context.to_dict()] for m in run.metrics()),
        })
    out["runs"].sort(key=lambda r: r["name"])

    for metric in repo.query_metrics("", report_mode=quiet).iter():
        steps, (values, epochs, _timestamps) = metric.data.items_list()
        out["metrics"].append({
            "run": metric.run.name,
            "name": metric.name,
            "context": metric.context.to_dict(),
            "steps": list(steps),
            "values": list(values),
            "epochs": _plain(list(epochs)),
        })
    out["metrics"].sort(key=lambda m: (m["run"], m["name"], json.dumps(m["context"])))

    queries = {
        "runs adam or sgd": ("runs", 'run.hparams.optimizer.name in ["adam", "sgd"]'),
        "runs batch > 32": ("runs", "run.hparams.batch_size > 32"),
        "runs exp-0": ("runs", 'run.experiment == "exp-0"'),
        "loss of large batches": (
            "metrics", 'metric.name == "loss" and run.hparams.batch_size > 32'),
        "val fold 1": ("metrics", 'metric.name == "accuracy" and metric.context.fold == 1'),
    }
    for label, (kind, query) in queries.items():
        if kind == "runs":
            found = sorted(t.run.name for t in repo.query_runs(query, report_mode=quiet).iter_runs())
        else:
            found = sorted(
                [m.run.name, m.name, m.values.last()]
                for m in repo.query_metrics(query, report_mode=quiet).iter())
        out["queries"][label] = found

    # One run read by hash, as a script resuming analysis would.
    first = min(by_hash, key=by_hash.get)
    run = aim.Run(first, repo=repo_path, read_only=True)
    loss = run.get_metric("loss", Context({"subset": "train"}))
    out["queries"]["run-0 loss by hash"] = [run.name, loss.values.sparse_list()[1][:5],
                                            loss.values.last()]

    with open(out_path, "w") as f:
        json.dump(_plain(out), f, indent=1, sort_keys=True)


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "write":
        write(sys.argv[2])
    elif command == "read":
        read(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown command {command}")
