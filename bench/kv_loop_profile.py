#!/usr/bin/env python3
"""One of bench/python_peers.py's loops in C++ (kv0._kv0._cxx_loop), to be
profiled: loads 200,000 keys of 16 B with values of 100 B through kv0.DB,
then runs the loop OP (get, multi_get, scan, seek+10, put, batch) REPEAT
times on the same keys and prints its CPU and wall time per operation.

    perf record -F 999 .venv/bin/python bench/kv_loop_profile.py put 5
"""

import os
import random
import sys
import tempfile

import kv0
from kv0 import _kv0

op, repeat = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
keys = [rng.randbytes(16) for _ in range(200_000)]
items = list(zip(keys, [rng.randbytes(100) for _ in keys]))
root = tempfile.mkdtemp(prefix="kv0-loop-")
db = kv0.DB(os.path.join(root, "db"), wal_dir=os.path.join(root, "wal"))
for k, v in items:
    db.put(k, v)
db.flush()
order = keys[:]
rng.shuffle(order)
for _ in range(repeat):
    n, cpu, wall = _kv0._cxx_loop(db, op, items if op in ("put", "batch") else order)
    print(f"{op}: {cpu / n * 1e6:.3f} us CPU, {wall / n * 1e6:.3f} us wall", file=sys.stderr)
db.close()
