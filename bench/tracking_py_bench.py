#!/usr/bin/env python3
"""Run.track() and Run.set_params() from Python, beside the same loops in C++.

Each loop runs N times (default 1,000,000 points; a fiftieth as many
set_params calls) into a run of its own, in a fresh repository with its
write-ahead log beside it, once through the Python binding and once in C++
on a Run of the same kind (kv0._kv0._cxx_track_loop, python/src/
bench_loops.cc):

  - minimal:     run.track(value, "loss")                  (default step)
  - step:        run.track(value, "loss", step=i)
  - full:        run.track(value, "loss", step=i, epoch=i // 1000,
                           context={"subset": "train"})    (one dict, reused)
  - full-new:    as full, with a new dict of the same context at every call
  - set_params:  run.set_params(PARAMS), 20 parameters, some nested

The C++ loops pass the same arguments, the context converted once. Each
figure is the loop alone, the median of --repeat runs, with no flush during
it (flush_rows above the loop's points): the gate is the cost the binding
adds to a call, and a commit running beside the loop on the other core
made that difference swing by more than itself. run.finish() after each
loop commits what is buffered and is not timed (`kv0 bench tracking`
measures Track with its flushes). The last column is the same Python loop
calling a C function that does nothing (kv0._kv0._noop): what the
interpreter spends on the loop, its arguments and the call, which the gate
counts against the binding. Nothing is asserted on the timings.

    .venv/bin/python bench/tracking_py_bench.py [--points N] [--repeat R] [--json FILE] [--dir DIR]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import kv0
import kv0.tracking
from kv0 import _kv0

VARIANTS = ("minimal", "step", "full", "full-new", "set_params")
GATE_US = 0.15
PARAMS = {
    "optimizer": {"name": "adam", "lr": 3e-4, "betas": [0.9, 0.999], "weight_decay": 0.01},
    "model": {"layers": 12, "heads": 12, "width": 768, "dropout": 0.1, "activation": "gelu"},
    "data": {"name": "corpus", "shards": 64, "seq_len": 2048},
    "batch_size": 256, "seed": 7, "epochs": 3, "warmup": 2000, "schedule": "cosine",
    "precision": "bf16", "grad_clip": 1.0, "notes": "baseline",
}


def python_loop(run, variant, n, call=None):
    track = call or run.track
    if variant == "minimal":
        for i in range(n):
            track(i * 1e-3, "loss")
    elif variant == "step":
        for i in range(n):
            track(i * 1e-3, "loss", step=i)
    elif variant == "full":
        context = {"subset": "train"}
        for i in range(n):
            track(i * 1e-3, "loss", step=i, epoch=i // 1000, context=context)
    elif variant == "full-new":
        for i in range(n):
            track(i * 1e-3, "loss", step=i, epoch=i // 1000, context={"subset": "train"})
    else:
        set_params = call or run.set_params
        for _ in range(n):
            set_params(PARAMS)


def calls_of(variant, points):
    return max(1, points // 50) if variant == "set_params" else points


def measure(root, variant, n, engine, index):
    path = os.path.join(root, f"{variant}-{engine}-{index}")
    # No flush during the loop (flush_rows above n, a long interval): what
    # is timed is the call, not a commit sharing the two cores with it.
    repo = kv0.tracking.Repo(path, wal_dir=os.path.join(root, "wal"), flush_rows=2 * n + 1,
                             flush_interval=3600.0)
    try:
        run = repo.create_run(name=f"py-bench-{variant}-{engine}")
        if engine in ("python", "noop"):
            call = _kv0._noop if engine == "noop" else None
            cpu, start = time.process_time(), time.perf_counter()
            python_loop(run, variant, n, call)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        else:
            variant_cxx = "full" if variant == "full-new" else variant
            _, cpu, seconds = _kv0._cxx_track_loop(run, variant_cxx, n, PARAMS)
        run.finish()
    finally:
        repo.close()
    return seconds, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000, help="track calls per loop")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each loop (median)")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--dir", help="parent of the temporary directory")
    args = parser.parse_args()
    if args.points < 1 or args.repeat < 1:
        parser.error("--points and --repeat must be at least 1")

    results = {}
    with tempfile.TemporaryDirectory(prefix="kv0-py-bench-", dir=args.dir) as root:
        for variant in VARIANTS:
            n = calls_of(variant, args.points)
            row = {"calls": n}
            for engine in ("python", "cxx", "noop"):
                print(f"  {variant} {engine} ...", end="", file=sys.stderr, flush=True)
                runs = [measure(root, variant, n, engine, i) for i in range(args.repeat)]
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                row[engine] = {"wall_s": [r[0] for r in runs], "cpu_s": [r[1] for r in runs],
                               "us_per_call": wall / n * 1e6, "cpu_us_per_call": cpu / n * 1e6}
                print(f" {wall:.2f} s", file=sys.stderr)
            row["python_over_cxx_us"] = row["python"]["us_per_call"] - row["cxx"]["us_per_call"]
            results[variant] = row

    print(f"\nkv0 {kv0.__version__}, Python {platform.python_version()}, "
          f"{args.points:,} track calls per loop, median of {args.repeat}\n")
    print("| loop | calls | Python us/call (CPU) | C++ us/call (CPU) | Python - C++, us | "
          f"gate <= {GATE_US} us | no-op call from the same loop, us |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for variant in VARIANTS:
        r = results[variant]
        py, cx, over = r["python"], r["cxx"], r["python_over_cxx_us"]
        verdict = "met" if over <= GATE_US else "missed"
        print(f"| {variant} | {r['calls']:,} | {py['us_per_call']:.3f} ({py['cpu_us_per_call']:.3f})"
              f" | {cx['us_per_call']:.3f} ({cx['cpu_us_per_call']:.3f}) | {over:.3f} | {verdict} |"
              f" {r['noop']['us_per_call']:.3f} |")

    if args.json:
        report = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kv0_version": kv0.__version__,
            "python": platform.python_version(),
            "cores": os.cpu_count(),
            "points": args.points,
            "repeat": args.repeat,
            "loops": results,
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
