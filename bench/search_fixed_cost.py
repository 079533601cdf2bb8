#!/usr/bin/env python3
"""What a warm run search costs beside its evaluation: the three queries of
bench/search_peers.py, 1,000 times each on one handle, on a repository of 10
runs (nearly all fixed cost) and of 5,000 (the peers benchmark's size).
Prints p10, p50 and p90 wall time per search. Needs kv0 in the interpreter
(.venv/bin/python bench/search_fixed_cost.py); nothing is asserted.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import search_peers  # noqa: E402  (the same runs and queries)

import kv0.tracking  # noqa: E402

REPEAT = 1000

for runs in (10, 5000):
    work = tempfile.mkdtemp(prefix="kv0-search-fixed-")
    search_peers.build_kv0(work, runs)
    with kv0.tracking.Repo(f"{work}/repo") as repo:
        for label, text in search_peers.QUERIES:
            def search():
                repo.search_runs(text, order_by=search_peers.ORDER, limit=search_peers.LIMIT,
                                 columns=[])
            search()
            times = []
            for _ in range(REPEAT):
                start = time.perf_counter()
                search()
                times.append((time.perf_counter() - start) * 1000)
            times.sort()
            print(f"{runs} runs, {label}: p10 {times[REPEAT // 10]:.3f} ms, "
                  f"p50 {times[REPEAT // 2]:.3f} ms, p90 {times[REPEAT * 9 // 10]:.3f} ms")
