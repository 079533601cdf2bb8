"""Aim 3.29.1 on kv0, through kv0.aimrocks, compared value for value with
Aim on the real aimrocks; then with Aim's repository on S3 (a moto server
on loopback), which Aim cannot do on its own storage.

Aim runs in its own virtual environment, made once with the Python running
these tests and kept under ~/.cache/kv0/aim-venv/ (keyed by the Aim and
Python versions; $KV0_AIM_VENV names another place), so later runs only
reuse it. kv0 reaches that environment through PYTHONPATH: a directory
holding one link, to the kv0 package these tests import. Aim's own
dependency, the real aimrocks, stays installed there: Aim's compiled modules
import its C types (kv0/aimrocks/_native.py says how they are kept away from
RocksDB).

Every step is a process of its own, as a user would run it: aim init, the
workload's writes (tests/python/aim_workload.py), a read without Aim's index
(the read-only open of the missing index raises aimrocks.errors.RocksIOError,
and Aim falls back to reading every run), aim runs ls, aim storage reindex,
a read through the rebuilt index, and locally what `aim up`'s web server
answers.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import kv0

pytestmark = pytest.mark.slow

AIM_VERSION = "3.29.1"
WORKLOAD = str(Path(__file__).with_name("aim_workload.py"))
ROCKSDB_FILES = ("CURRENT", "IDENTITY", "LOCK", "LOG")
ROCKSDB_PREFIXES = ("MANIFEST-", "OPTIONS-", "LOG.old")
ROCKSDB_SUFFIXES = (".sst", ".log")


def aim_venv() -> Path:
    """The virtual environment with Aim, made on first use."""
    if os.environ.get("KV0_AIM_VENV"):
        root = Path(os.environ["KV0_AIM_VENV"])
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        py = f"{sys.version_info.major}.{sys.version_info.minor}"
        root = cache / "kv0" / "aim-venv" / f"aim-{AIM_VERSION}-py{py}"
    ready = root / ".kv0-ready"
    # A venv breaks when the interpreter it was made from changes: rebuild then.
    stamp = f"aim=={AIM_VERSION}\n{sys.version}\n{getattr(sys, '_base_executable', '')}\n"
    if ready.exists() and ready.read_text() == stamp:
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be making it
        if ready.exists() and ready.read_text() == stamp:
            return root
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=600)
        pip = subprocess.run(
            [str(root / "bin" / "python"), "-m", "pip", "install", "--quiet",
             "--disable-pip-version-check", f"aim=={AIM_VERSION}"],
            capture_output=True, text=True, timeout=1800)
        assert pip.returncode == 0, f"installing aim=={AIM_VERSION} failed:\n{pip.stderr[-4000:]}"
        ready.write_text(stamp)
    return root


class Aim:
    """Runs Aim's steps, on the real aimrocks or through kv0.aimrocks."""

    def __init__(self, venv: Path, tmp: Path, launcher: list[str] | None,
                 env: dict[str, str] | None = None) -> None:
        self.python = str(venv / "bin" / "python")
        self.aim = str(venv / "bin" / "aim")
        self.launcher = launcher  # None: the real aimrocks
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        self.env.update({"KV0_WAL_DIR": str(tmp / "wal"), "TQDM_DISABLE": "1",
                         "PYTHONUNBUFFERED": "1", **(env or {})})
        if launcher is not None:
            link_dir = tmp / "kv0-path"
            link_dir.mkdir(exist_ok=True)
            link = link_dir / "kv0"
            if not link.exists():
                link.symlink_to(Path(kv0.__file__).parent, target_is_directory=True)
            self.env["PYTHONPATH"] = str(link_dir)

    def _command(self, program: list[str]) -> list[str]:
        if self.launcher is None:
            return [self.aim, *program[1:]] if program[0] == "aim" else [self.python, *program]
        return [self.python, "-m", "kv0.aimrocks", *self.launcher, *program]

    def run(self, *program: str) -> str:
        proc = subprocess.run(self._command(list(program)), capture_output=True, text=True,
                              env=self.env, timeout=900)
        assert proc.returncode == 0, (
            f"{' '.join(program)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
            f"{proc.stderr[-6000:]}")
        return proc.stdout

    def workload(self, repo: Path) -> dict:
        """The whole workload on a new repository; what it read back."""
        repo.mkdir(parents=True)
        self.run("aim", "init", "--repo", str(repo))
        self.run(WORKLOAD, "write", str(repo))
        index = repo / ".aim" / "meta" / "index"
        result = {"index_before": sorted(os.listdir(index))}
        marker = index / "kv0-location.json"
        if marker.exists():
            result["index_uri_before"] = json.loads(marker.read_text())["uri"]
        # A repository without its index, as after Aim found it corrupted.
        shutil.rmtree(index)
        self.run(WORKLOAD, "read", str(repo), str(repo / "without-index.json"))
        result["ls"] = self.run("aim", "runs", "--repo", str(repo), "ls")
        self.run("aim", "storage", "--repo", str(repo), "reindex", "-y")
        self.run(WORKLOAD, "read", str(repo), str(repo / "with-index.json"))
        for name in ("without-index", "with-index"):
            result[name] = json.loads((repo / f"{name}.json").read_text())
        return result


    def ui_reads(self, repo: Path) -> dict:
        """What Aim's UI server answers about the repository. `aim up` runs
        the server as a child Python process, which must use kv0 too."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        command = self._command(["aim", "up", "--repo", str(repo), "--host", "127.0.0.1",
                                 "--port", str(port)])
        server = subprocess.Popen(command, env=self.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        base = f"http://127.0.0.1:{port}/api/projects"
        try:
            # Wait for the server to answer; the deadline only bounds a hang.
            deadline = time.monotonic() + 180
            while True:
                assert server.poll() is None, f"aim up exited:\n{server.stdout.read()[-4000:]}"
                try:
                    with urllib.request.urlopen(f"{base}/", timeout=5) as r:
                        json.load(r)
                    break
                except OSError:
                    assert time.monotonic() < deadline, "aim up never answered"
                    time.sleep(0.5)
            reads = {}
            for name, url in (("params", f"{base}/params/?sequence=metric"),
                              ("activity", f"{base}/activity/")):
                with urllib.request.urlopen(url, timeout=60) as r:
                    reads[name] = json.load(r)
            return reads
        finally:
            os.killpg(server.pid, signal.SIGTERM)  # the server and its uvicorn child
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def without_hashes(read: dict) -> dict:
    return {k: v for k, v in read.items() if k != "hashes"}


def rocksdb_files(root: Path) -> list[str]:
    found = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            if (name in ROCKSDB_FILES or name.startswith(ROCKSDB_PREFIXES)
                    or name.endswith(ROCKSDB_SUFFIXES)):
                found.append(os.path.join(directory, name))
    return found


def database_dirs(repo: Path) -> list[Path]:
    aim = repo / ".aim"
    dirs = [aim / "meta" / "index"]
    for kind in ("meta", "seqs"):
        dirs += sorted((aim / kind / "chunks").iterdir())
    return dirs


def check_consistent(result: dict) -> None:
    """What one backend read is complete and the same with and without the index."""
    without, with_ = result["without-index"], result["with-index"]
    assert without == with_
    assert [r["name"] for r in without["runs"]] == ["run-0", "run-1", "run-2"]
    assert len(without["metrics"]) == 9
    assert all(m["steps"] == list(range(500)) for m in without["metrics"])
    listed = result["ls"].split()
    assert listed[-3:] == ["Total", "3", "runs."]
    assert sorted(listed[:-3]) == without["hashes"]


@pytest.fixture(scope="module")
def venv() -> Path:
    return aim_venv()


@pytest.fixture(scope="module")
def reference(venv, tmp_path_factory) -> dict:
    """The workload on the real aimrocks."""
    tmp = tmp_path_factory.mktemp("aimrocks")
    aim = Aim(venv, tmp, launcher=None)
    result = aim.workload(tmp / "repo")
    # It really ran on RocksDB.
    assert any(p.endswith("/CURRENT") for p in rocksdb_files(tmp / "repo"))
    check_consistent(result)
    result["ui"] = aim.ui_reads(tmp / "repo")
    return result


def ui_summary(ui: dict) -> dict:
    # The contexts of a metric come in the order of the runs' random hashes.
    metrics = {name: sorted(json.dumps(c, sort_keys=True) for c in contexts)
               for name, contexts in ui["params"]["metric"].items()}
    activity = ui["activity"]
    return {"params": ui["params"]["params"], "metrics": metrics,
            "runs": activity["num_runs"], "experiments": activity["num_experiments"]}


def test_aim_on_kv0_reads_what_aimrocks_reads(venv, reference, tmp_path):
    import lance

    aim = Aim(venv, tmp_path, launcher=[])
    result = aim.workload(tmp_path / "repo")
    check_consistent(result)
    for name in ("without-index", "with-index"):
        assert without_hashes(result[name]) == without_hashes(reference[name])
    # Aim's web server, a child process of `aim up`, reads through kv0 too.
    ui = ui_summary(aim.ui_reads(tmp_path / "repo"))
    assert ui == ui_summary(reference["ui"])
    assert ui["runs"] == 3 and set(ui["metrics"]) == {"loss", "accuracy", "learning_rate"}
    assert len(ui["metrics"]["accuracy"]) == 3 and "hparams" in ui["params"]

    repo = tmp_path / "repo"
    assert rocksdb_files(repo) == []
    dirs = database_dirs(repo)
    assert len(dirs) == 7  # the index, and meta and seqs of three runs
    for directory in dirs:
        dataset = lance.dataset(str(directory))
        assert {"seq", "op", "key", "value"} <= set(dataset.schema.names)
        assert dataset.count_rows() > 0


def test_aim_repository_on_s3(venv, reference, tmp_path, s3_bucket):
    import boto3
    import lance

    bucket, options = s3_bucket
    repo = tmp_path / "repo"
    launcher = ["--root-uri", f"s3://{bucket}/aim", "--local-root", str(repo / ".aim")]
    aim = Aim(venv, tmp_path, launcher=launcher,
              env={"KV0_STORAGE_OPTIONS": json.dumps(options)})
    result = aim.workload(repo)
    check_consistent(result)
    for name in ("without-index", "with-index"):
        assert without_hashes(result[name]) == without_hashes(reference[name])

    # Locally only Aim's own files and one small file per database.
    assert rocksdb_files(repo) == []
    assert result["index_before"] == ["kv0-location.json"]
    uris = []
    for directory in database_dirs(repo):
        assert os.listdir(directory) == ["kv0-location.json"]
        uri = json.loads((directory / "kv0-location.json").read_text())["uri"]
        rel = directory.relative_to(repo / ".aim").as_posix()
        assert uri.startswith(f"s3://{bucket}/aim/{rel}/")
        dataset = lance.dataset(uri, storage_options=options)
        assert {"seq", "op", "key", "value"} <= set(dataset.schema.names)
        assert dataset.count_rows() > 0
        uris.append(uri)
    # The rebuilt index is a new dataset; the removed one stays in the bucket.
    assert result["index_uri_before"] != uris[0]

    client = boto3.client("s3", endpoint_url=options["aws_endpoint"], region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]
    for uri in uris + [result["index_uri_before"]]:
        prefix = uri[len(f"s3://{bucket}/"):] + "/_versions/"
        assert any(k.startswith(prefix) for k in keys), prefix
