"""kv0.DB and kv0.tracking.Repo on Azure Blob Storage, against an Azurite
server (the Azure emulator, an npm package scripts/setup.sh installs) that
this module starts on loopback."""

import base64
import hashlib
import hmac
import http.client
import math
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from email.utils import formatdate
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import kv0
from kv0 import errors
from kv0.tracking import Repo, series_id

# The well-known development account every Azurite has.
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
ROOT = Path(__file__).resolve().parents[2]
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def azurite_binary():
    local = ROOT / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local)
    return shutil.which("azurite-blob")


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    """An Azurite blob server on 127.0.0.1; yields its URL (no account)."""
    binary = azurite_binary()
    if binary is None:
        reason = "azurite-blob not found: scripts/setup.sh installs it (npm install)"
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI ran setup.sh: a missing server is a failure there
        pytest.skip(reason)
    location = tmp_path_factory.mktemp("azurite")
    port = free_port()
    log = open(location / "azurite.log", "wb")
    # --disableTelemetry: Azurite would otherwise report usage over the network.
    server = subprocess.Popen(
        [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--location", str(location), "--silent", "--skipApiVersionCheck", "--loose",
         "--disableTelemetry"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                log.flush()
                output = (location / "azurite.log").read_text(errors="replace")
                pytest.fail(f"azurite-blob exited with {server.returncode}:\n{output}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"azurite-blob did not listen on port {port} within 60 s")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def create_container(endpoint: str, name: str) -> None:
    """PUT ?restype=container, signed with SharedKey: what an SDK sends."""
    date = formatdate(usegmt=True)
    version = "2021-08-06"
    path = f"/{ACCOUNT}/{name}"  # path-style: the account is the first segment
    string_to_sign = "\n".join(
        ["PUT"] + [""] * 11  # verb, then the standard headers, all empty
        + [f"x-ms-date:{date}", f"x-ms-version:{version}",
           f"/{ACCOUNT}{path}", "restype:container"])
    signature = base64.b64encode(hmac.new(
        base64.b64decode(ACCOUNT_KEY), string_to_sign.encode(), hashlib.sha256).digest())
    host, port = endpoint.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("PUT", path + "?restype=container", headers={
            "x-ms-date": date,
            "x-ms-version": version,
            "Authorization": f"SharedKey {ACCOUNT}:{signature.decode()}",
            "Content-Length": "0",
        })
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 201, (response.status, body)


@pytest.fixture
def container(azurite):
    """A fresh container; yields (name, storage_options)."""
    name = "kv0-" + uuid.uuid4().hex[:12]
    create_container(azurite, name)
    options = {
        "azure_storage_account_name": ACCOUNT,
        "azure_storage_account_key": ACCOUNT_KEY,
        "azure_storage_endpoint": f"{azurite}/{ACCOUNT}",
        "allow_http": "true",
    }
    yield name, options


@pytest.fixture
def wal(tmp_path):
    return str(tmp_path / "wal")


# --- kv0.DB ------------------------------------------------------------------------


def test_db_put_get_delete_iterate_reopen(container, wal, tmp_path):
    name, options = container
    uri = f"az://{name}/db"
    db = kv0.DB(uri, storage_options=options, wal_dir=wal, flush_interval=3600.0)
    assert db.get(b"a") is None
    for i in range(200):
        db.put(b"k%03d" % i, b"v%d" % i)
    db.put(b"a", b"1", sync=True)
    assert db.get(b"a") == b"1"
    db.delete(b"a")
    assert db.get(b"a") is None
    batch = kv0.WriteBatch()
    batch.delete_range(b"k100", b"k150")
    batch.put(b"z", b"last")
    db.write(batch)
    db.compact_range()  # commits to the store, then compacts it

    keys = db.iterkeys()
    keys.seek_to_first()
    expected = [b"k%03d" % i for i in range(200) if not 100 <= i < 150] + [b"z"]
    assert list(keys) == expected
    items = db.iteritems()
    items.seek(b"k149")
    assert items.get() == (b"k150", b"v150")
    db.close()

    # A new handle, with a WAL directory of its own, reads what reached the store.
    again = kv0.DB(uri, storage_options=options, wal_dir=str(tmp_path / "wal2"))
    try:
        assert again.get(b"k000") == b"v0"
        assert again.get(b"k120") is None
        assert again.get(b"a") is None
        assert again.get(b"z") == b"last"
        values = again.itervalues()
        values.seek_to_first()
        assert len(list(values)) == len(expected)
        assert pa.RecordBatchReader.from_stream(again.scan_arrow()).read_all().num_rows == \
            len(expected)
        again.put(b"after", b"reopen")
    finally:
        again.close()

    with kv0.DB(uri, storage_options=options, wal_dir=str(tmp_path / "wal3"),
                read_only=True) as reader:
        assert reader.get(b"after") == b"reopen"


def test_db_unflushed_writes_survive_through_the_wal(container, wal):
    name, options = container
    uri = f"az://{name}/db"
    db = kv0.DB(uri, storage_options=options, wal_dir=wal, flush_interval=3600.0)
    db.put(b"k", b"v")
    db.close()
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as again:
        assert again.get(b"k") == b"v"


def test_db_two_handles_commit_at_once(container, tmp_path):
    """Lance commits on Azure with conditional writes; two handles committing
    at the same time both land."""
    name, options = container
    uri = f"az://{name}/shared"
    kv0.DB(uri, storage_options=options, wal_dir=str(tmp_path / "wal0")).close()
    failures = []

    def write(tag):
        try:
            with kv0.DB(uri, storage_options=options, wal_dir=str(tmp_path / tag)) as db:
                for i in range(15):
                    db.put(b"%s-%02d" % (tag.encode(), i), tag.encode(), sync=True)
        except Exception as e:  # reported below
            failures.append(e)

    threads = [threading.Thread(target=write, args=(tag,)) for tag in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    with kv0.DB(uri, storage_options=options, wal_dir=str(tmp_path / "reader"),
                read_only=True) as db:
        keys = db.iterkeys()
        keys.seek_to_first()
        assert list(keys) == [b"%s-%02d" % (t, i) for t in (b"a", b"b") for i in range(15)]


# --- kv0.tracking.Repo ----------------------------------------------------------------


def test_repo_runs_params_metrics_records(container, wal, tmp_path):
    name, options = container
    uri = f"az://{name}/repo"
    with Repo(uri, storage_options=options, wal_dir=wal, flush_interval=3600.0) as repo:
        run = repo.create_run("r1", name="baseline", experiment="mnist", created_at=T0)
        run.set_params({"optimizer": {"name": "adam", "lr": 1e-3}, "batch": 32})
        for step in range(100):
            run.track(float(step) / 10, "loss", step=step, timestamp=T0 + step)
        run.track(0.5, "acc", step=99, context={"subset": "val"})
        run.finish()

    loss, acc = series_id("r1", "loss"), series_id("r1", "acc", {"subset": "val"})
    with Repo(uri, storage_options=options, wal_dir=str(tmp_path / "wal2")) as repo:
        runs = repo.runs()
        assert [r["run_id"] for r in runs] == ["r1"]
        assert runs[0]["name"] == "baseline" and runs[0]["experiment"] == "mnist"
        assert runs[0]["status"] == "finished"
        assert repo.params("r1") == {"optimizer": {"name": "adam", "lr": 1e-3}, "batch": 32}
        assert sorted(s["name"] for s in repo.series("r1")) == ["acc", "loss"]

        stats = repo.series_stats([loss, acc])
        s = stats[loss]
        assert (s["count"], s["first_step"], s["last_step"]) == (100, 0, 99)
        assert math.isclose(s["last"], 9.9) and s["min"] == 0.0 and s["non_finite"] == 0
        assert stats[acc]["count"] == 1

        table = pa.table(repo.read_many([loss]))
        assert table["step"].to_pylist() == list(range(100))
        assert table["value"].to_pylist() == [step / 10 for step in range(100)]
        window = pa.table(repo.read_many([loss, acc], start=98))
        assert window["series_id"].to_pylist() == [loss, loss, acc]

        before = pa.table(repo.read_many([loss]))
        result = repo.optimize()
        assert "full_rewrite" in result
        assert pa.table(repo.read_many([loss])).equals(before)
        assert repo.series_stats([loss]) == {loss: s}

        version = repo.append_records("evals", [
            {"item_id": "q1", "data": {"score": 0.9}, "run_id": "r1"},
            {"item_id": "q2", "data": [1, 2], "run_id": "r1"},
        ])
        assert version > 0
        repo.append_records("evals", [{"item_id": "q1", "data": {"score": 1.0},
                                       "run_id": "r1"}])
        assert repo.record_tables() == ["evals"]

    with Repo(uri, storage_options=options, wal_dir=str(tmp_path / "wal3")) as repo:
        rows = repo.records("evals", run_id="r1")
        assert [(r["item_id"], r["data"]) for r in rows] == \
            [("q1", {"score": 1.0}), ("q2", [1, 2])]
        assert [r["item_id"] for r in repo.records("evals", item_prefix="q2")] == ["q2"]
        assert repo.run("r1")["status"] == "finished"

    # What kv0 stored on Azure is plain Lance datasets.
    runs = lance.dataset(f"{uri}/runs.lance", storage_options=options).to_table()
    assert "r1" in runs["run_id"].to_pylist()
    assert lance.dataset(f"{uri}/metrics.lance", storage_options=options).count_rows() > 0


# --- storage options --------------------------------------------------------------------


def test_emulator_option(container, wal, azurite, monkeypatch):
    """azure_storage_use_emulator: object_store takes the account, key and
    http from the emulator defaults, and the URL from AZURITE_BLOB_STORAGE_URL."""
    name, _ = container
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite)
    options = {"azure_storage_use_emulator": "true",
               "azure_storage_account_name": ACCOUNT}
    uri = f"az://{name}/emulated"
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as db:
        db.put(b"k", b"v")
    with kv0.DB(uri, storage_options=options, wal_dir=wal + "2") as db:
        assert db.get(b"k") == b"v"


def test_bad_settings_fail_with_kv0_errors(container, wal):
    name, options = container
    uri = f"az://{name}/db"
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as db:
        db.put(b"k", b"v")

    wrong_key = dict(options, azure_storage_account_key=base64.b64encode(b"x" * 64).decode())
    no_http = {k: v for k, v in options.items() if k != "allow_http"}
    nobody_listens = dict(options, azure_storage_endpoint=f"http://127.0.0.1:{free_port()}/x",
                          client_max_retries="0", connect_timeout="5s", timeout="10s")
    for i, bad in enumerate((wrong_key, no_http, nobody_listens)):
        started = time.monotonic()
        with pytest.raises(errors.StoreIOError) as raised:
            kv0.DB(uri, storage_options=bad, wal_dir=f"{wal}-bad{i}")
        assert isinstance(raised.value, OSError)
        assert time.monotonic() - started < 60

    with pytest.raises(errors.StoreIOError, match="403|uthenticat"):
        Repo(f"az://{name}/repo", storage_options=wrong_key, wal_dir=f"{wal}-repo")
    # The right options still work after all that.
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as db:
        assert db.get(b"k") == b"v"
