#!/usr/bin/env python3
"""How Lance answers kv0's reads of many series, filter by filter, through pylance.

Builds a repository like the one of `kv0 bench charts` (RUNS runs of one
series of POINTS steps, optimized), opens its metrics.lance with pylance and
times, TRIES times each, the same rows fetched in different ways:

  reserved rows: the statistics rows of every series (series_id 0, the
    series id in `step`; docs/design.md, "Indices"), selected with
    `step IN (...)`, which Lance compares with every zone of the step zone
    map although no zone can narrow these rows, and with `(step + 0) IN
    (...)`, the same condition that no zone map answers (what kv0 uses);

  a narrow window: WINDOW steps in the middle of every series (a chart's
    deepest zoom, read raw), with `series_id IN (...)` and a step range (what
    kv0 uses), with `(series_id + 0) IN (...)` so that only the step zone map
    narrows, and as a take of the rows' addresses, the floor for any read
    that would know where a series' steps lie.

Each way must return the same rows. Prints wall times per try; nothing is
asserted on them.

    .venv/bin/python bench/lance_read_paths.py [--runs 200] [--points 200000]
        [--window 1000] [--tries 3] [--dir DIR] [--json FILE]
"""

import argparse
import json
import math
import os
import platform
import tempfile
import time

import lance

import kv0.tracking

METRIC = "loss"
POINT_COLUMNS = ["series_id", "step", "epoch", "timestamp", "value", "seq"]


def build(root, runs, points):
    """A repository of `runs` runs of one series of `points` steps, optimized."""
    path = os.path.join(root, "repo")
    repo = kv0.tracking.Repo(path, wal_dir=os.path.join(root, "wal"))
    try:
        ids = []
        for r in range(runs):
            run = repo.create_run(name=f"read-paths-run-{r}")
            track = run.track
            for step in range(points):
                track(math.sin(step * 1e-3 + r), METRIC, step=step)
            run.finish()
            ids.append(kv0.tracking.series_id(run.run_id, METRIC, {}))
        repo.optimize()
    finally:
        repo.close()
    return os.path.join(path, "metrics.lance"), ids


def sql_list(ids, signed=False):
    """Series ids as SQL literals: uint64 for series_id, int64 for the step
    column of reserved rows, as kv0's filters write them."""
    return ", ".join(str(i - 2**64 if signed and i >= 2**63 else i) for i in ids)


def timed(read, tries, key):
    """Wall time of each try of read(), and the rows it returned (as key(table))."""
    times, rows = [], None
    for _ in range(tries):
        start = time.perf_counter()
        table = read()
        times.append(time.perf_counter() - start)
        found = key(table)
        if rows is not None and found != rows:
            raise SystemExit("two tries of one read returned different rows")
        rows = found
    return times, rows


def reserved_rows(dataset, ids, tries):
    base = "series_id = 0 AND epoch IS NULL AND "
    key = lambda t: sorted(t.column("step").to_pylist())
    ways = {
        "step IN (...)": base + f"step IN ({sql_list(ids, signed=True)})",
        "(step + 0) IN (...)": base + f"(step + 0) IN ({sql_list(ids, signed=True)})",
    }
    return {
        name: timed(lambda: dataset.to_table(columns=["step", "stats"], filter=where), tries, key)
        for name, where in ways.items()
    }


def narrow_window(dataset, ids, start, stop, tries):
    steps = f" AND step >= {start} AND step < {stop}"
    key = lambda t: sorted(zip(t.column("series_id").to_pylist(), t.column("step").to_pylist()))
    scan = lambda where: lambda: dataset.to_table(columns=POINT_COLUMNS, filter=where)
    out = {
        "series_id IN (...) AND step range": timed(
            scan(f"series_id IN ({sql_list(ids)})" + steps), tries, key),
        "(series_id + 0) IN (...) AND step range": timed(
            scan(f"(series_id + 0) IN ({sql_list(ids)})" + steps), tries, key),
    }
    addresses = dataset.to_table(columns=["series_id"],
                                 filter=f"series_id IN ({sql_list(ids)})" + steps,
                                 with_row_address=True).column("_rowaddr").to_pylist()
    addresses.sort()
    out["take by row address"] = timed(
        lambda: dataset._take_rows(addresses, columns=POINT_COLUMNS), tries, key)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--points", type=int, default=200_000, help="steps per run")
    parser.add_argument("--window", type=int, default=1000, help="steps of the narrow window")
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--dir", help="parent of the temporary directory")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = parser.parse_args()
    if min(args.runs, args.points, args.window, args.tries) < 1:
        parser.error("--runs, --points, --window and --tries must be at least 1")

    with tempfile.TemporaryDirectory(prefix="kv0-read-paths-", dir=args.dir) as root:
        began = time.perf_counter()
        uri, ids = build(root, args.runs, args.points)
        print(f"built and optimized {args.runs} x {args.points:,} points "
              f"in {time.perf_counter() - began:.1f} s")
        dataset = lance.dataset(uri)
        total_rows = dataset.count_rows()
        start = max(0, args.points // 2 - args.window // 2)
        sections = {
            f"statistics rows of {args.runs} series": reserved_rows(dataset, ids, args.tries),
            f"steps [{start}, {start + args.window}) of {args.runs} series": narrow_window(
                dataset, ids, start, start + args.window, args.tries),
        }

    report = {"runs": args.runs, "points_per_run": args.points, "rows": total_rows,
              "lance": lance.__version__, "machine": platform.machine(), "sections": {}}
    for title, ways in sections.items():
        answers = {len(rows) for _, rows in ways.values()}
        if len({tuple(rows) for _, rows in ways.values()}) != 1 or answers == {0}:
            raise SystemExit(f"{title}: the ways returned different rows, or none")
        print(f"\n{title}, among {total_rows:,} rows")
        print("| way | rows | wall ms, each try |")
        print("|---|---:|---|")
        for way, (times, rows) in ways.items():
            print(f"| `{way}` | {len(rows):,} | {', '.join(f'{t * 1000:.1f}' for t in times)} |")
        report["sections"][title] = {
            way: {"seconds": times, "rows": len(rows)} for way, (times, rows) in ways.items()}
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
