#!/usr/bin/env python3
"""Run.track() calls per second from Python, through kv0.tracking.

Each variant logs N points (default 1,000,000) into a run of its own, in a
fresh repository with its write-ahead log beside it:

  - minimal:  run.track(value, "loss")                  (default step)
  - step:     run.track(value, "loss", step=i)
  - full:     run.track(value, "loss", step=i, epoch=i // 1000,
                        context={"subset": "train"})

The rate without the final flush times the loop of track() calls alone
(background flushes, and the waits for them when the writer gets too far
ahead, included); the rate with it adds run.finish(), which commits what is
still buffered. Nothing is asserted on the timings.

    .venv/bin/python bench/tracking_py_bench.py [--points N] [--json FILE] [--dir DIR]
"""

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time

import kv0
import kv0.tracking

VARIANTS = ("minimal", "step", "full")


def track_loop(run, variant, n):
    track = run.track
    if variant == "minimal":
        for i in range(n):
            track(math.sin(i * 1e-3), "loss")
    elif variant == "step":
        for i in range(n):
            track(math.sin(i * 1e-3), "loss", step=i)
    else:
        context = {"subset": "train"}
        for i in range(n):
            track(math.sin(i * 1e-3), "loss", step=i, epoch=i // 1000, context=context)


def measure(root, variant, n):
    repo = kv0.tracking.Repo(os.path.join(root, variant), wal_dir=os.path.join(root, "wal"))
    try:
        run = repo.create_run(name=f"py-bench-{variant}")
        start = time.perf_counter()
        track_loop(run, variant, n)
        tracked = time.perf_counter()
        run.finish()
        finished = time.perf_counter()
    finally:
        close = getattr(repo, "close", None)
        if close is not None:
            close()
    return {
        "points": n,
        "seconds_without_final_flush": tracked - start,
        "seconds_with_final_flush": finished - start,
        "points_per_second_without_final_flush": n / (tracked - start),
        "points_per_second_with_final_flush": n / (finished - start),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000, help="points per variant")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--dir", help="parent of the temporary directory")
    args = parser.parse_args()
    if args.points < 1:
        parser.error("--points must be at least 1")

    results = {}
    with tempfile.TemporaryDirectory(prefix="kv0-py-bench-", dir=args.dir) as root:
        for variant in VARIANTS:
            print(f"  {variant} ...", end="", file=sys.stderr, flush=True)
            results[variant] = measure(root, variant, args.points)
            print(f" {results[variant]['seconds_with_final_flush']:.2f} s", file=sys.stderr)

    print(f"\nkv0 {kv0.__version__} Run.track() from Python {platform.python_version()}, "
          f"{args.points:,} points per variant\n")
    print(f"{'variant':<10} {'points/s, no final flush':>26} {'points/s, with it':>20}")
    for variant in VARIANTS:
        r = results[variant]
        print(f"{variant:<10} {r['points_per_second_without_final_flush']:>26,.0f} "
              f"{r['points_per_second_with_final_flush']:>20,.0f}")

    if args.json:
        report = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kv0_version": kv0.__version__,
            "python": platform.python_version(),
            "cores": os.cpu_count(),
            "points_per_variant": args.points,
            "variants": results,
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
