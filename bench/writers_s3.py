"""kv0 bench writers: many writer processes on one tracking repository on S3.

Starts an S3 server on loopback behind a WSGI layer in this process that
counts every request by table, kind of object (manifest, transaction, data,
index, deletion, listing), method and status, with the bytes each way: moto's
server inside this process, or with --server minio MinIO's, in a process of
its own (built from the Go module proxy into a cache outside the checkout on
first use; its data on tmpfs), which costs far less CPU per request than moto
and so shows the writers' protocol rather than the server's ceiling.
Then, for each number of writers N, N processes (this script in worker mode)
write one new repository for --seconds each (or, with --runs R, until they
have written R runs between them), all at once, as a team's
training jobs would: each creates a run with 5 parameters, tracks 3 metrics
at about 100 steps a second with a flush every second, finishes the run after
about 2 s (the finish is timed: it commits the run) and starts the next.

A run counts as acknowledged when its finish() returns. Afterwards a new
handle reads the repository and every acknowledged run must be there,
finished, with every point it tracked; a run missing or short is reported and
makes the script exit with 1. Nothing else is checked; timings are reported,
never asserted.

Reported per N: commits per second (manifests written, all tables), points
per second, finish p50 / p95 / max, manifest writes lost to another writer
(a conditional PUT refused) per commit, requests and bytes per commit, and
which tables the commits went to. Then the catalog a tracker's UI loads when
it starts, read from a new process (this script in catalog mode): open, every
run, every run's parameters, every series and each series' statistics; the
median of CATALOG_REPEAT processes, timed from after the imports, with the
requests it made, and for the median process its time and requests step by
step (the process names each step to the counting layer with a request of
its own, not counted).

    .venv/bin/python bench/writers_s3.py [--writers 1,2,4,8,16] [--seconds 30]
        [--runs R] [--shared-commits] [--server moto|minio]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs

METRICS = ("loss", "acc", "lr")
RUN_SECONDS = 2.0
STEP_SLEEP = 0.01
FLUSH_INTERVAL = 1.0
WAIT = 300.0  # seconds a process waits for the others
CATALOG_REPEAT = 3  # new processes that read the catalog, per N


# --- The server ------------------------------------------------------------------------


def classify(path: str) -> tuple[str, str]:
    """(table, kind) of an object path or listing prefix: the table is the
    component ending in .lance (records tables keep their directory)."""
    parts = [p for p in path.split("/") if p]
    if "_pending" in parts:  # announcements of fragments (shared commits)
        i = parts.index("_pending")
        return (parts[i + 1] if i + 1 < len(parts) else "-"), "announcement"
    for i, part in enumerate(parts):
        if part.endswith(".lance"):
            table = part[: -len(".lance")]
            if i > 0 and parts[i - 1] == "records":
                table = "records/" + table
            rest = parts[i + 1] if i + 1 < len(parts) else ""
            kind = {
                "_versions": "manifest",
                "_transactions": "transaction",
                "data": "data",
                "_indices": "index",
                "_deletions": "deletion",
            }.get(rest, "other")
            return table, kind
    return "-", "other"


PHASE_PATH = "/_kv0_bench_phase/"  # a catalog process names its next step here


class CountingApp:
    """Counts requests on their way to moto: (table, kind, method, status)
    -> [requests, bytes received, bytes sent]; and, while a catalog process
    has named a step, (step, table, kind, method) -> requests."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.counts: dict[tuple, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
        self.phase = ""
        self.phases: collections.Counter = collections.Counter()

    def take(self) -> dict[tuple, list[int]]:
        with self.lock:
            counts, self.counts = self.counts, collections.defaultdict(lambda: [0, 0, 0])
        return counts

    def take_phases(self) -> collections.Counter:
        with self.lock:
            phases, self.phases, self.phase = self.phases, collections.Counter(), ""
        return phases

    def __call__(self, environ, start_response):
        method = environ["REQUEST_METHOD"]
        path = environ.get("PATH_INFO", "")
        if path.startswith(PHASE_PATH):
            with self.lock:
                self.phase = path[len(PHASE_PATH):]
            start_response("204 No Content", [])
            return []
        query = parse_qs(environ.get("QUERY_STRING", ""))
        if method == "GET" and ("list-type" in query or "prefix" in query):
            table, _ = classify(query.get("prefix", [""])[0])
            kind = "listing"
        else:
            table, kind = classify(path)
        received = int(environ.get("CONTENT_LENGTH") or 0)
        status = []

        def respond(line, headers, exc_info=None):
            status.append(int(line.split()[0]))
            return start_response(line, headers, exc_info)

        body = self.app(environ, respond)
        try:
            chunks = list(body)
        finally:
            if hasattr(body, "close"):
                body.close()
        with self.lock:
            c = self.counts[(table, kind, method, status[0] if status else 0)]
            c[0] += 1
            if self.phase:
                self.phases[(self.phase, table, kind, method)] += 1
            c[1] += received
            c[2] += sum(len(chunk) for chunk in chunks)
        return chunks


class Server:
    """The S3 server of a benchmark, behind the counting layer: moto inside
    this process, or MinIO in its own process with a forwarding layer here."""

    def __init__(self, kind: str):
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
        self.kind, self.minio = kind, None
        if kind == "moto":
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )

            self.counting = CountingApp(DomainDispatcherApplication(create_backend_app))
            handler = MotoRequestHandler
            self.user, self.secret = "testing", "testing"
            self.name = "moto S3 (loopback)"
        else:
            self.user, self.secret = "kv0bench", "kv0bench-secret"
            # Its data in memory where there is a tmpfs: the server's disk
            # is not what is measured.
            shm = Path("/dev/shm")
            self.data = Path(tempfile.mkdtemp(prefix="kv0-bench-minio-",
                                              dir=shm if shm.is_dir() else None))
            self.minio, minio_port = start_minio(self.data, self.user, self.secret)
            self.counting = CountingApp(ForwardingApp("127.0.0.1", minio_port))
            handler = None
            self.name = "MinIO (loopback, data on " + ("tmpfs" if shm.is_dir() else "disk") + ")"
        port = free_port()
        kwargs = {"request_handler": handler} if handler else {}
        self.http = make_server("127.0.0.1", port, self.counting, True, **kwargs)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{port}"

    def cpu_s(self) -> tuple[float, float]:
        """CPU seconds so far of this process (moto, or the forwarding layer)
        and of MinIO's."""
        minio = 0.0
        if self.minio is not None:
            fields = Path(f"/proc/{self.minio.pid}/stat").read_text().rsplit(")", 1)[1].split()
            minio = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return time.process_time(), minio

    def stop(self) -> None:
        self.http.shutdown()
        if self.minio is not None:
            self.minio.terminate()
            self.minio.wait()
            shutil.rmtree(self.data, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ForwardingApp:
    """Forwards each request unchanged (method, raw path and query, headers,
    body) to the server at host:port, one keep-alive connection per thread,
    so that CountingApp counts MinIO's requests as it counts moto's."""

    HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.local = threading.local()

    def __call__(self, environ, start_response):
        import http.client

        headers = {key[5:].replace("_", "-"): value
                   for key, value in environ.items() if key.startswith("HTTP_")}
        if environ.get("CONTENT_TYPE"):
            headers["CONTENT-TYPE"] = environ["CONTENT_TYPE"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else None
        if length:
            headers["CONTENT-LENGTH"] = str(length)
        for attempt in range(2):
            connection = getattr(self.local, "connection", None)
            if connection is None:
                connection = self.local.connection = http.client.HTTPConnection(
                    self.host, self.port, timeout=120)
            try:
                connection.request(environ["REQUEST_METHOD"], environ["REQUEST_URI"], body=body,
                                   headers=headers)
                response = connection.getresponse()
                data = response.read()
                break
            except (http.client.HTTPException, ConnectionError):
                connection.close()  # a kept-alive connection the server closed: once more
                self.local.connection = None
                if attempt:
                    raise
        start_response(f"{response.status} {response.reason}",
                       [(k, v) for k, v in response.getheaders()
                        if k.lower() not in self.HOP_BY_HOP])
        return [data]


# MinIO's server, built from the Go module proxy by this script (never by the
# project's set-up) into a cache outside the checkout.
MINIO_MODULE = "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"


def minio_binary() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kv0-bench" / "minio"
    binary = cache / "minio"
    if not binary.exists():
        print(f"building {MINIO_MODULE} into {cache} (once; minutes) ...", file=sys.stderr,
              flush=True)
        subprocess.run(["go", "install", MINIO_MODULE], check=True,
                       env={**os.environ, "GOBIN": str(cache), "GOFLAGS": "-mod=mod"})
    return binary


def start_minio(data: Path, user: str, secret: str) -> tuple[subprocess.Popen, int]:
    import urllib.request

    port = free_port()
    env = {**os.environ, "MINIO_ROOT_USER": user, "MINIO_ROOT_PASSWORD": secret,
           "MINIO_BROWSER": "off"}
    proc = subprocess.Popen([str(minio_binary()), "server", str(data), "--quiet",
                             "--address", f"127.0.0.1:{port}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/minio/health/live").close()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("MinIO's server did not start")
            time.sleep(0.1)


# --- A writer --------------------------------------------------------------------------


def wait_for(paths: list[Path]) -> None:
    deadline = time.monotonic() + WAIT
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {[str(p) for p in paths]}")
        time.sleep(0.02)


def value(name: str, step: int) -> float:
    return {"loss": 2.0 / (1 + step / 50), "acc": 1 - 1 / (1 + step / 30), "lr": 1e-3}[name]


def worker(config_path: str) -> None:
    from kv0.tracking import Repo

    config = json.loads(Path(config_path).read_text())
    meet, index = Path(config["meet"]), config["index"]
    repo = Repo(config["uri"], storage_options=config["storage_options"],
                wal_dir=config["wal_dir"], flush_interval=FLUSH_INTERVAL,
                shared_commits=config["shared_commits"])
    (meet / f"ready-{index}").touch()
    wait_for([meet / "go"])
    deadline = time.monotonic() + config["seconds"]
    share = config["runs"]  # None: as many as fit before the deadline
    finishes, acknowledged, errors = [], {}, []
    points = 0
    r = 0
    while (time.monotonic() < deadline) if share is None else r < share:
        run_id = f"w{index:03d}-r{r:04d}"
        r += 1
        try:
            run = repo.create_run(run_id, name=run_id, experiment="writers")
            run.set_params({"lr": 1e-3 * (1 + r % 5), "batch": 32, "seed": r,
                            "optimizer": {"name": "adam", "beta": 0.9}})
            end = time.monotonic() + RUN_SECONDS
            step = 0
            while time.monotonic() < end:
                for name in METRICS:
                    run.track(value(name, step), name, step=step)
                step += 1
                time.sleep(STEP_SLEEP)
            start = time.monotonic()
            run.finish()
            finishes.append(time.monotonic() - start)
            acknowledged[run_id] = step
            points += step * len(METRICS)
        except Exception as e:  # reported; the run is not acknowledged
            errors.append(f"{run_id}: {type(e).__name__}: {e}")
    repo.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result = {"finishes": finishes, "acknowledged": acknowledged, "points": points,
              "errors": errors, "cpu_s": usage.ru_utime + usage.ru_stime}
    out = meet / f"result-{index}.json"
    out.with_suffix(".tmp").write_text(json.dumps(result))
    out.with_suffix(".tmp").rename(out)


def catalog(config_path: str) -> None:
    """Catalog mode: reads the catalog once and prints its time, step by
    step, and its size."""
    import urllib.request

    from kv0.tracking import Repo

    config = json.loads(Path(config_path).read_text())
    endpoint = config["storage_options"]["aws_endpoint"]
    steps: dict[str, float] = {}

    def step(name: str, read):
        # The step's name reaches the counting layer before its requests do.
        urllib.request.urlopen(endpoint + PHASE_PATH + name).close()
        start = time.monotonic()
        out = read()
        steps[name] = time.monotonic() - start
        return out

    repo = step("open", lambda: Repo(config["uri"], storage_options=config["storage_options"],
                                     wal_dir=config["wal_dir"]))
    runs = step("runs", repo.runs)
    params = step("all_params", repo.all_params)
    series = step("all_series", repo.all_series)
    stats = step("series_stats", lambda: repo.series_stats([s["series_id"] for s in series]))
    urllib.request.urlopen(endpoint + PHASE_PATH).close()  # close is not the catalog's
    repo.close()
    print(json.dumps({"seconds": sum(steps.values()), "steps": steps, "runs": len(runs),
                      "params": len(params), "series": len(stats)}))


def catalog_reads(n: int, uri: str, options: dict, counting: CountingApp,
                  scratch: Path) -> dict:
    """The median of CATALOG_REPEAT catalog processes, with their requests,
    and the median process's steps: seconds and requests by table and kind."""
    times, requests, size, steps = [], [], {}, []
    for k in range(CATALOG_REPEAT):
        config = scratch / f"catalog-{n}-{k}.json"
        config.write_text(json.dumps({"uri": uri, "storage_options": options,
                                      "wal_dir": str(scratch / f"wal-catalog-{n}-{k}")}))
        counting.take()
        counting.take_phases()
        out = subprocess.run([sys.executable, __file__, "--catalog", str(config)],
                             check=True, capture_output=True, text=True).stdout
        requests.append(sum(count for count, _, _ in counting.take().values()))
        size = json.loads(out.strip().splitlines()[-1])
        times.append(size.pop("seconds"))
        by_step: dict[str, dict] = {name: {"seconds": seconds, "requests": {}}
                                    for name, seconds in size.pop("steps").items()}
        for (name, table, kind, method), count in counting.take_phases().items():
            by_step[name]["requests"][f"{table} {kind} {method}"] = count
        steps.append(by_step)
    median = sorted(range(len(times)), key=lambda k: times[k])[len(times) // 2]
    return {"catalog_s": statistics.median(times), "catalog_s_all": times,
            "catalog_requests": statistics.median(requests), "catalog_size": size,
            "catalog_steps": steps[median]}


# --- One round: N writers ---------------------------------------------------------------


def check(uri: str, options: dict, wal_dir: str, acknowledged: dict[str, int]) -> list[str]:
    """What a new handle misses of the acknowledged runs."""
    from kv0.tracking import Repo, series_id

    missing = []
    with Repo(uri, storage_options=options, wal_dir=wal_dir) as repo:
        status = {r["run_id"]: r["status"] for r in repo.runs()}
        ids = {(run, name): series_id(run, name, {}) for run in acknowledged for name in METRICS}
        stats = repo.series_stats(list(ids.values())) if ids else {}
        for run, steps in acknowledged.items():
            if status.get(run) != "finished":
                missing.append(f"{run}: status {status.get(run)}")
                continue
            for name in METRICS:
                got = stats.get(ids[(run, name)], {}).get("count", 0)
                if got != steps:
                    missing.append(f"{run}/{name}: {got} points of {steps}")
    return missing


def round_of(n: int, args, server: Server, bucket: str, options: dict, scratch: Path) -> dict:
    endpoint, counting = server.endpoint, server.counting
    uri = f"s3://{bucket}/writers-{n}"
    meet = scratch / f"meet-{n}"
    meet.mkdir()
    procs = []
    for i in range(n):
        config = {"uri": uri, "storage_options": options, "wal_dir": str(scratch / f"wal-{n}-{i}"),
                  "meet": str(meet), "index": i, "seconds": args.seconds,
                  "runs": None if args.runs is None else args.runs // n + (i < args.runs % n),
                  "shared_commits": args.shared_commits}
        path = meet / f"config-{i}.json"
        path.write_text(json.dumps(config))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", str(path)]))
    wait_for([meet / f"ready-{i}" for i in range(n)])
    counting.take()  # opening the repository is not the workload's
    server_cpu = server.cpu_s()
    start = time.monotonic()
    (meet / "go").touch()
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"a writer exited with {p.returncode}")
    wall = time.monotonic() - start
    server_cpu = [after - before for after, before in zip(server.cpu_s(), server_cpu)]
    counts = counting.take()

    results = [json.loads((meet / f"result-{i}.json").read_text()) for i in range(n)]
    finishes = sorted(f for r in results for f in r["finishes"])
    acknowledged = {run: steps for r in results for run, steps in r["acknowledged"].items()}
    errors = [e for r in results for e in r["errors"]]
    missing = check(uri, options, str(scratch / f"wal-check-{n}"), acknowledged)
    reads = catalog_reads(n, uri, options, counting, scratch)

    commits = collections.Counter()
    lost = requests = sent = received = 0
    by_kind = collections.Counter()
    for (table, kind, method, status), (count, got, gave) in counts.items():
        requests += count
        received += got
        sent += gave
        by_kind[f"{kind} {method}"] += count
        if kind == "manifest" and method == "PUT":
            if status == 200:
                commits[table] += count
            else:
                lost += count
    total_commits = sum(commits.values())

    def pct(p: float) -> float:
        return finishes[min(len(finishes) - 1, int(p * len(finishes)))] if finishes else 0.0

    return {
        "writers": n,
        "wall_s": wall,
        "commits": total_commits,
        "commits_per_s": total_commits / wall,
        "commits_by_table": dict(commits),
        "points_per_s": sum(r["points"] for r in results) / wall,
        "finishes": len(finishes),
        "finish_p50_s": statistics.median(finishes) if finishes else 0.0,
        "finish_p95_s": pct(0.95),
        "finish_max_s": finishes[-1] if finishes else 0.0,
        "lost_manifest_writes": lost,
        "lost_per_commit": lost / total_commits if total_commits else 0.0,
        "requests_per_commit": requests / total_commits if total_commits else 0.0,
        "bytes_up_per_commit": received / total_commits if total_commits else 0.0,
        "bytes_down_per_commit": sent / total_commits if total_commits else 0.0,
        "requests_by_kind": dict(by_kind),
        "writers_cpu_s": sum(r["cpu_s"] for r in results),
        "server_cpu_s": sum(server_cpu),
        "minio_cpu_s": server_cpu[1],
        "acknowledged_runs": len(acknowledged),
        "missing": missing,
        "errors": errors,
        **reads,
    }


def server_cpu(r: dict) -> str:
    """The server's CPU seconds; with MinIO, the forwarding layer's and MinIO's."""
    if not r.get("minio_cpu_s"):
        return f"{r['server_cpu_s']:.1f}"
    return f"{r['server_cpu_s'] - r['minio_cpu_s']:.1f} + {r['minio_cpu_s']:.1f}"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--catalog":
        catalog(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", default="1,2,4,8,16")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, help="runs in all, shared by the writers "
                        "(instead of --seconds): the same repository written by 1 or N")
    parser.add_argument("--shared-commits", action="store_true",
                        help="writers share commits (Repo(shared_commits=True))")
    parser.add_argument("--server", choices=("moto", "minio"), default="moto",
                        help="the S3 server: moto in this process, or MinIO's server "
                        "(built with Go on first use; data on tmpfs where there is one)")
    parser.add_argument("--json")
    args = parser.parse_args()
    import boto3

    rounds = []
    with tempfile.TemporaryDirectory(prefix="kv0-bench-writers-") as scratch:
        server = Server(args.server)
        options = {"aws_endpoint": server.endpoint, "aws_region": "us-east-1",
                   "aws_access_key_id": server.user, "aws_secret_access_key": server.secret,
                   "allow_http": "true"}
        bucket = "kv0-writers-" + uuid.uuid4().hex[:8]
        boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                     aws_access_key_id=server.user,
                     aws_secret_access_key=server.secret).create_bucket(Bucket=bucket)
        for n in [int(x) for x in args.writers.split(",")]:
            print(f"  {n} writers ...", file=sys.stderr, flush=True)
            rounds.append(round_of(n, args, server, bucket, options, Path(scratch)))
        server.stop()

    size = f"{args.runs} runs in all" if args.runs else f"{args.seconds:g} s"
    mode = "shared commits" if args.shared_commits else "a commit per flush and table"
    print(f"\nkv0 writers on one repository on {server.name}, {mode}, {size} each; "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    print("| writers | commits/s | points/s | finish p50 / p95 / max s | lost manifest writes "
          "per commit | requests per commit | KB up / down per commit | writers CPU s | server "
          f"CPU s{' (forwarding + MinIO)' if args.server == 'minio' else ''} | runs acknowledged | "
          "missing |")
    print("|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|")
    for r in rounds:
        print(f"| {r['writers']} | {r['commits_per_s']:.1f} | {r['points_per_s']:,.0f} | "
              f"{r['finish_p50_s']:.2f} / {r['finish_p95_s']:.2f} / {r['finish_max_s']:.2f} | "
              f"{r['lost_per_commit']:.2f} | {r['requests_per_commit']:.1f} | "
              f"{r['bytes_up_per_commit'] / 1024:.1f} / {r['bytes_down_per_commit'] / 1024:.1f} | "
              f"{r['writers_cpu_s']:.1f} | {server_cpu(r)} | {r['acknowledged_runs']} | "
              f"{len(r['missing'])} |")
    print("\n| writers | catalog from a new process, s (median of "
          f"{CATALOG_REPEAT}) | requests | runs | series |")
    print("|---:|---:|---:|---:|---:|")
    for r in rounds:
        size = r["catalog_size"]
        print(f"| {r['writers']} | {r['catalog_s']:.3f} | {r['catalog_requests']:.0f} | "
              f"{size['runs']} | {size['series']} |")
    print("\ncatalog steps of the median process: seconds, requests (by table, kind, method)")
    for r in rounds:
        for name, part in r["catalog_steps"].items():
            kinds = sorted(part["requests"].items(), key=lambda kv: -kv[1])
            listed = ", ".join(f"{what} {count}" for what, count in kinds)
            print(f"  {r['writers']} writers, {name}: {part['seconds']:.3f} s, "
                  f"{sum(part['requests'].values())} requests: {listed}")
    print("\ncommits by table (per acknowledged run):")
    for r in rounds:
        runs = max(1, r["acknowledged_runs"])
        tables = ", ".join(f"{t} {c / runs:.2f}" for t, c in sorted(r["commits_by_table"].items()))
        print(f"  {r['writers']} writers: {tables}")
    bad = False
    for r in rounds:
        for line in r["missing"][:10] + r["errors"][:10]:
            print(f"  {r['writers']} writers: {line}", file=sys.stderr)
        bad = bad or bool(r["missing"])
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": args.seconds, "rounds": rounds}, indent=2))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
