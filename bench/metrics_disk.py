"""Disk bytes per point of a tracking repository, before and after optimize.

Logs 10 runs x 10 metrics x 20,000 steps through kv0.tracking into a new
local repository, closes it, measures the directory, optimizes and measures
again. Lance's encoder reads LANCE_ENCODING_* variables from the environment,
so the same command compares encodings (docs/benchmarks.md, issue 20):

    .venv/bin/python bench/metrics_disk.py
    LANCE_ENCODING_DICT_DIVISOR=1000000000 .venv/bin/python bench/metrics_disk.py
"""

import os
import tempfile
import time
from pathlib import Path

from kv0.tracking import Repo

RUNS, METRICS, STEPS = 10, 10, 20_000


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kv0-metrics-disk-") as scratch:
        repo_dir, wal_dir = Path(scratch) / "repo", os.path.join(scratch, "wal")
        repo = Repo(str(repo_dir), wal_dir=wal_dir)
        for r in range(RUNS):
            run = repo.create_run(name=f"r{r}")
            for step in range(STEPS):
                for m in range(METRICS):
                    run.track(1.0 / (step + 1) + m, f"m{m}", step=step)
            run.finish()
        repo.close()
        points = RUNS * METRICS * STEPS
        before = size(repo_dir)
        repo = Repo(str(repo_dir), wal_dir=wal_dir)
        start = time.monotonic()
        repo.optimize()
        seconds = time.monotonic() - start
        repo.close()
        print(f"{points:,} points: {before / points:.1f} B/point before optimize, "
              f"{size(repo_dir) / points:.1f} after (optimize {seconds:.2f} s)")


if __name__ == "__main__":
    main()
