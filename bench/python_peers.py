#!/usr/bin/env python3
"""kv0.DB beside the key-value stores a Python program would pick instead.

One process, one loop per operation, the same keys and values for every
engine: N keys of 16 bytes in random order, values of 100 random bytes. Each
engine is loaded through its own batch interface, then measured on

  get        point reads of every key, in a random order
  multi_get  the same keys, 1,000 per call (engines without one loop get)
  scan       a full forward scan of (key, value) items
  seek+10    a seek to a random key, then the next 10 items
  put        overwrites of every key, one call each, default durability
  batch      the same overwrites, 1,000 puts to a batch, then one write

Figures are microseconds per operation (per key, item or put), the best of
--repeat runs, as CPU time of the whole process (its background threads
included) and as wall time. Nothing is asserted on them; the table gives
kv0's ratio to every peer (above 1 means kv0 is faster).

Run by bench/python_peers.sh, which makes the peers' virtual environment
(lmdb, rocksdict, aimrocks, plyvel, slatedb, moto) outside the checkout:

    bench/python_peers.sh [--keys N] [--repeat R] [--engines a,b] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import socket
import sys
import tempfile
import time
from typing import Callable

OPS = ("get", "multi_get", "scan", "seek+10", "put", "batch")
MULTI = 1000
SEEKS = 20000


class Engine:
    """One store under test: open, load, and one method per operation.

    Every method runs the operation over the given keys and returns how many
    operations it performed; `read` reads one key back, so a store that
    silently drops writes cannot post a figure. The defaults below fit a
    store with get and put methods on `self.db`."""

    name = ""
    note = ""

    def open(self, root: str) -> None: ...
    def scan(self) -> int: ...
    def seek10(self, keys: list[bytes]) -> int: ...
    def batch(self, items: list[tuple[bytes, bytes]]) -> int: ...

    def load(self, items: list[tuple[bytes, bytes]]) -> None:
        for part in chunks(items, 10000):
            self.batch(part)

    def get(self, keys: list[bytes]) -> int:
        get = self.db.get
        for k in keys:
            get(k)
        return len(keys)

    def multi_get(self, keys: list[bytes]) -> int:  # for stores without one
        return self.get(keys)

    def put(self, items: list[tuple[bytes, bytes]]) -> int:
        put = self.db.put
        for k, v in items:
            put(k, v)
        return len(items)

    def read(self, key: bytes) -> bytes | None:
        return self.db.get(key)

    def close(self) -> None:
        self.db.close()


def chunks(seq: list, n: int):
    for i in range(0, len(seq), n):
        yield seq[i:i + n]


class Kv0(Engine):
    name = "kv0.DB"
    note = "default options (wal_sync=batch)"

    def open(self, root):
        import kv0
        self.kv0 = kv0
        self.db = kv0.DB(os.path.join(root, "db"), wal_dir=os.path.join(root, "wal"))

    def load(self, items):
        super().load(items)
        self.db.flush()  # reads come from a committed store

    def multi_get(self, keys):
        for part in chunks(keys, MULTI):
            self.db.multi_get(part)
        return len(keys)

    def scan(self):
        it = self.db.iteritems()
        it.seek_to_first()
        n = 0
        for _ in it:
            n += 1
        return n

    def seek10(self, keys):
        it = self.db.iteritems()
        for k in keys:
            it.seek(k)
            for _, _ in zip(range(10), it):
                pass
        return len(keys)

    def batch(self, items):
        for part in chunks(items, MULTI):
            b = self.kv0.WriteBatch()
            for k, v in part:
                b.put(k, v)
            self.db.write(b)
        return len(items)

    def cxx(self, op, arg):
        """The same loop in C++ on this handle: (operations, CPU s, wall s)."""
        from kv0 import _kv0
        return _kv0._cxx_loop(self.db, op, arg)


class Aimrocks(Kv0):
    name = "aimrocks"
    note = "RocksDB through Cython; default options"

    def open(self, root):
        import aimrocks
        self.kv0 = aimrocks  # the same call forms as kv0.DB
        self.db = aimrocks.DB(os.path.join(root, "db"), aimrocks.Options(create_if_missing=True))

    load = Engine.load  # aimrocks has no flush: its memtable serves the reads

    def close(self):
        del self.db


class Rocksdict(Engine):
    name = "rocksdict"
    note = "RocksDB through PyO3; raw mode (bytes, no pickling)"

    def open(self, root):
        import rocksdict
        self.rd = rocksdict
        opts = rocksdict.Options(raw_mode=True)
        self.db = rocksdict.Rdict(os.path.join(root, "db"), options=opts)

    def multi_get(self, keys):
        for part in chunks(keys, MULTI):
            self.db.get(part)  # a list asks for a multi-get
        return len(keys)

    def scan(self):
        n = 0
        for _ in self.db.items():
            n += 1
        return n

    def seek10(self, keys):
        it = self.db.iter()
        for k in keys:
            it.seek(k)
            for _ in range(10):
                if not it.valid():
                    break
                it.key(), it.value()
                it.next()
        del it
        return len(keys)

    def batch(self, items):
        for part in chunks(items, MULTI):
            b = self.rd.WriteBatch(raw_mode=True)
            for k, v in part:
                b.put(k, v)
            self.db.write(b)
        return len(items)


class Lmdb(Engine):
    name = "lmdb"
    note = ("py-lmdb (C), sync=False (a commit survives the process, not a power loss); "
            "reads in one read transaction; each put its own write transaction")

    def open(self, root):
        import lmdb
        # sync=False is the closest to kv0's default: with LMDB's default
        # every commit waits for an fsync.
        self.env = lmdb.open(os.path.join(root, "db"), map_size=8 << 30, sync=False)

    def load(self, items):
        for part in chunks(items, 10000):
            self.batch(part)

    def get(self, keys):
        with self.env.begin(buffers=False) as txn:
            get = txn.get
            for k in keys:
                get(k)
        return len(keys)

    def multi_get(self, keys):
        with self.env.begin() as txn:
            cur = txn.cursor()
            for part in chunks(keys, MULTI):
                cur.getmulti(part)
        return len(keys)

    def scan(self):
        n = 0
        with self.env.begin() as txn:
            for _ in txn.cursor():
                n += 1
        return n

    def seek10(self, keys):
        with self.env.begin() as txn:
            cur = txn.cursor()
            for k in keys:
                cur.set_range(k)
                for _, _ in zip(range(10), cur):
                    pass
        return len(keys)

    def put(self, items):
        # LMDB has no buffered write: a put is acknowledged when its
        # transaction commits, so one transaction per put.
        begin = self.env.begin
        for k, v in items:
            with begin(write=True) as txn:
                txn.put(k, v)
        return len(items)

    def batch(self, items):
        for part in chunks(items, MULTI):
            with self.env.begin(write=True) as txn:
                for k, v in part:
                    txn.put(k, v)
        return len(items)

    def read(self, key):
        with self.env.begin() as txn:
            return txn.get(key)

    def close(self):
        self.env.close()


class Plyvel(Engine):
    name = "plyvel"
    note = "LevelDB through Cython"

    def open(self, root):
        import plyvel
        self.db = plyvel.DB(os.path.join(root, "db"), create_if_missing=True)

    def scan(self):
        n = 0
        for _ in self.db.iterator():
            n += 1
        return n

    def seek10(self, keys):
        it = self.db.iterator()
        for k in keys:
            it.seek(k)
            for _, _ in zip(range(10), it):
                pass
        it.close()
        return len(keys)

    def batch(self, items):
        for part in chunks(items, MULTI):
            with self.db.write_batch() as b:
                for k, v in part:
                    b.put(k, v)
        return len(items)


class Slatedb(Engine):
    """SlateDB's Python binding (UniFFI, asyncio); every call is awaited."""

    name = "slatedb"
    note = "local directory; default write options"
    url = None  # set for S3

    def open(self, root):
        from slatedb import uniffi as s
        self.s = s
        self.loop = asyncio.new_event_loop()
        if self.url is None:
            # A local store is the file system's root; the database's path is
            # given to the builder.
            store = s.ObjectStore.resolve("file:///")
            db_path = os.path.join(root, "db").lstrip("/")
        else:
            store = s.ObjectStore.resolve(self.url)
            db_path = os.path.basename(root)
        self.db = self.run(s.DbBuilder(db_path, store).build())
        self.full = s.KeyRange(start=None, start_inclusive=True, end=None, end_inclusive=False)

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def load(self, items):
        super().load(items)
        self.run(self.db.flush())

    def get(self, keys):
        async def go():
            get = self.db.get
            for k in keys:
                await get(k)
        self.run(go())
        return len(keys)

    def scan(self):
        async def go():
            it = await self.db.scan(self.full)
            n = 0
            while True:
                got = await it.next_batch(1000)
                if not got:
                    return n
                n += len(got)
        return self.run(go())

    def seek10(self, keys):
        async def go():
            # A SlateDB iterator seeks only forward: each seek is a new scan.
            for k in keys:
                it = await self.db.scan(self.s.KeyRange(start=k, start_inclusive=True, end=None,
                                                        end_inclusive=False))
                await it.next_batch(10)
        self.run(go())
        return len(keys)

    def put(self, items):
        async def go():
            put = self.db.put
            for k, v in items:
                await put(k, v)
        self.run(go())
        return len(items)

    def batch(self, items):
        async def go():
            for part in chunks(items, MULTI):
                b = self.s.WriteBatch()
                for k, v in part:
                    b.put(k, v)
                await self.db.write(b)
        self.run(go())
        return len(items)

    def read(self, key):
        return self.run(self.db.get(key))

    def close(self):
        self.run(self.db.shutdown())
        self.loop.close()


class SlatedbS3(Slatedb):
    name = "slatedb (S3)"
    note = "S3 through moto on loopback; default write options"


ENGINES: dict[str, Callable[[], Engine]] = {
    "kv0": Kv0,
    "aimrocks": Aimrocks,
    "rocksdict": Rocksdict,
    "lmdb": Lmdb,
    "plyvel": Plyvel,
    "slatedb": Slatedb,
    "slatedb-s3": SlatedbS3,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[object, str]:
    """A moto S3 server on loopback with one bucket; SlateDB reads its
    endpoint and keys from the environment."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update({
        "AWS_ENDPOINT": endpoint, "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ALLOW_HTTP": "true",
    })
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
        Bucket="peers")
    return server, "s3://peers"


def timed(fn: Callable[[], int], repeat: int) -> tuple[float, float, int]:
    """Best CPU and best wall time per operation over `repeat` runs, in us."""
    best_cpu = best_wall = float("inf")
    n = 0
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        n = fn()
        c1, w1 = time.process_time(), time.perf_counter()
        best_cpu = min(best_cpu, (c1 - c0) / n * 1e6)
        best_wall = min(best_wall, (w1 - w0) / n * 1e6)
    return best_cpu, best_wall, n


def measure(engine: Engine, root: str, items, keys, seeks, updates, repeat, slow: bool):
    os.makedirs(root)
    engine.open(root)
    try:
        engine.load(items)
        if slow:  # a peer at tens of microseconds a call runs fewer operations
            keys, seeks, updates = keys[:20000], seeks[:2000], updates[:20000]
        runs = {
            "get": lambda: engine.get(keys),
            "multi_get": lambda: engine.multi_get(keys),
            "scan": engine.scan,
            "seek+10": lambda: engine.seek10(seeks),
            "put": lambda: engine.put(updates),
            "batch": lambda: engine.batch(updates),
        }
        args = {"get": keys, "multi_get": keys, "scan": [], "seek+10": seeks, "put": updates,
                "batch": updates}
        out = {}
        for op in OPS:
            cpu, wall, n = timed(runs[op], repeat)
            out[op] = {"cpu_us": cpu, "wall_us": wall, "ops": n}
            if type(engine) is Kv0:
                best = min((engine.cxx(op, args[op]) for _ in range(repeat)),
                           key=lambda r: r[1] / r[0])
                out[op]["cxx_cpu_us"] = best[1] / best[0] * 1e6
                out[op]["cxx_wall_us"] = best[2] / best[0] * 1e6
        probe_key, probe_value = updates[len(updates) // 2]
        if engine.read(probe_key) != probe_value:
            raise RuntimeError(f"{engine.name} did not read back its last write")
        if out["scan"]["ops"] != len(items):
            raise RuntimeError(f"{engine.name} scanned {out['scan']['ops']} of {len(items)} keys")
        return out
    finally:
        engine.close()


def table(results: dict, base: str = "kv0") -> str:
    names = list(results)
    head = "| per operation, us (CPU / wall) | " + " | ".join(
        ENGINES[n].name for n in names) + " |"
    lines = [head, "|---|" + "---:|" * len(names)]
    for op in OPS:
        cells = []
        for n in names:
            r = results[n][op]
            cells.append(f"{r['cpu_us']:.2f} / {r['wall_us']:.2f}")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    if base in results:
        lines.append("")
        lines.append(f"| {ENGINES[base].name} faster by (CPU time) | " + " | ".join(
            ENGINES[n].name for n in names if n != base) + " |")
        lines.append("|---|" + "---:|" * (len(names) - 1))
        for op in OPS:
            b = results[base][op]["cpu_us"]
            lines.append(f"| {op} | " + " | ".join(
                f"{results[n][op]['cpu_us'] / b:.2f}x" for n in names if n != base) + " |")
    return "\n".join(lines)


# The binding's own cost, kv0.DB from Python over the same loop in C++ (CPU
# time per operation, us): what the machine cannot change.
GATES = {"get": 0.15, "multi_get": 0.05, "scan": 0.06, "put": 0.3}


def gates(kv0_result: dict) -> str:
    lines = ["| kv0.DB, per operation, us (CPU) | Python | C++ | Python over C++ | gate |",
             "|---|---:|---:|---:|---|"]
    for op in OPS:
        r = kv0_result[op]
        if "cxx_cpu_us" not in r:
            continue
        over = r["cpu_us"] - r["cxx_cpu_us"]
        gate = GATES.get(op)
        verdict = "" if gate is None else f"<= {gate}: {'met' if over <= gate else 'missed'}"
        lines.append(f"| {op} | {r['cpu_us']:.2f} | {r['cxx_cpu_us']:.2f} | {over:.2f} | "
                     f"{verdict} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=200000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--json")
    ap.add_argument("--dir", help="where the stores go (default: a temporary directory)")
    args = ap.parse_args()

    rng = random.Random(7)
    keys = [b"k%015d" % i for i in range(args.keys)]
    rng.shuffle(keys)
    items = [(k, rng.randbytes(100)) for k in keys]
    reads = keys[:]
    rng.shuffle(reads)
    seeks = [rng.choice(keys) for _ in range(min(SEEKS, args.keys))]
    updates = [(k, rng.randbytes(100)) for k in reads]

    names = [n for n in args.engines.split(",") if n]
    for n in names:
        if n not in ENGINES:
            ap.error(f"unknown engine {n}; choose from {', '.join(ENGINES)}")
    moto = None
    base = tempfile.mkdtemp(prefix="kv0-peers-", dir=args.dir)
    results, notes = {}, {}
    try:
        for n in names:
            engine = ENGINES[n]()
            if n == "slatedb-s3":
                moto, engine.url = start_moto()
            slow = n.startswith("slatedb")
            print(f"== {engine.name}", file=sys.stderr, flush=True)
            results[n] = measure(engine, os.path.join(base, n), items, reads, seeks, updates,
                                 args.repeat, slow)
            notes[n] = engine.note + ("; 20,000 keys per operation" if slow else "")
    finally:
        if moto is not None:
            moto.stop()
        shutil.rmtree(base, ignore_errors=True)

    print(f"{args.keys:,} keys of 16 B, values of 100 B, best of {args.repeat}; "
          f"Python {platform.python_version()}, {os.cpu_count()} cores")
    print()
    print(table(results))
    print()
    if "kv0" in results:
        print(gates(results["kv0"]))
        print()
    for n in names:
        print(f"- {ENGINES[n].name}: {notes[n]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"keys": args.keys, "repeat": args.repeat, "results": results,
                       "notes": notes}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
