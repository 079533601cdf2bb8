"""kv0 on object stores: kv0.lance, kv0.DB and kv0.tracking.Repo on every
backend the suite runs on loopback (moto's S3 server, Azurite, a GCS
emulator), through the `store` fixture of conftest.py, with the storage
options docs/operations.md shows. Backend-specific settings are tested at
the end."""

import ast
import base64
import http.client
import json
import math
import re
import threading
import time

import lance
import pyarrow as pa
import pytest

import kv0
from conftest import AZURITE_ACCOUNT, ROOT, free_port
from kv0 import errors
from kv0.tracking import Repo, series_id

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds


def table(first: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(first, first + n), pa.uint64()),
            "v": pa.array([f"v{i}" for i in range(first, first + n)], pa.utf8()),
        }
    )


def read(stream) -> pa.Table:
    return pa.RecordBatchReader.from_stream(stream).read_all()


@pytest.fixture
def wal(tmp_path):
    return str(tmp_path / "wal")


# --- kv0.lance -------------------------------------------------------------------------


def test_create_append_scan_take(store):
    options = store.options
    uri = store.uri("db/data.lance")
    kv0.lance.write(uri, table(0, 10), storage_options=options)

    # Two writers append at once; Lance rebases the later commit, so both land.
    errors_seen = []

    def append(first):
        try:
            kv0.lance.write(uri, table(first, 10), storage_options=options, mode="append")
        except Exception as e:  # reported below
            errors_seen.append(e)

    threads = [threading.Thread(target=append, args=(f,)) for f in (100, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors_seen == []

    ids = sorted(read(kv0.lance.scan(uri, storage_options=options))["id"].to_pylist())
    assert ids == list(range(10)) + list(range(100, 110)) + list(range(200, 210))

    with_addr = read(kv0.lance.scan(uri, with_row_address=True, storage_options=options))
    by_id = dict(zip(with_addr["id"].to_pylist(), with_addr["_rowaddr"].to_pylist()))
    taken = read(kv0.lance.take(uri, [by_id[205], by_id[3]], ["v"], storage_options=options))
    assert taken["v"].to_pylist() == ["v205", "v3"]

    # What kv0 stored is a plain Lance dataset.
    pylance = lance.dataset(uri, storage_options=options)
    assert pylance.count_rows() == 30


# --- kv0.DB ------------------------------------------------------------------------


def test_db_put_get_delete_iterate_reopen(store, wal, tmp_path):
    options = store.options
    uri = store.uri("db")
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


def test_db_unflushed_writes_survive_through_the_wal(store, wal):
    uri = store.uri("db")
    db = kv0.DB(uri, storage_options=store.options, wal_dir=wal, flush_interval=3600.0)
    db.put(b"k", b"v")
    db.close()
    with kv0.DB(uri, storage_options=store.options, wal_dir=wal) as again:
        assert again.get(b"k") == b"v"


def test_db_two_handles_commit_at_once(store, tmp_path):
    """Lance commits with conditional writes; two handles committing at the
    same time both land."""
    options = store.options
    uri = store.uri("shared")
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


def test_repo_runs_params_metrics_records(store, wal, tmp_path):
    options = store.options
    uri = store.uri("repo")
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

        points = pa.table(repo.read_many([loss]))
        assert points["step"].to_pylist() == list(range(100))
        assert points["value"].to_pylist() == [step / 10 for step in range(100)]
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

    # What kv0 stored is plain Lance datasets.
    runs = lance.dataset(f"{uri}/runs.lance", storage_options=options).to_table()
    assert "r1" in runs["run_id"].to_pylist()
    assert lance.dataset(f"{uri}/metrics.lance", storage_options=options).count_rows() > 0


# --- Storage options -------------------------------------------------------------------


def test_bad_settings_fail_with_kv0_errors(store, wal):
    options = store.options
    uri = store.uri("db")
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as db:
        db.put(b"k", b"v")

    no_http = {k: v for k, v in options.items() if k != "allow_http"}
    nobody_listens = store.options_via(f"http://127.0.0.1:{free_port()}",
                                       client_max_retries="0", connect_timeout="5s",
                                       timeout="10s")
    for i, bad in enumerate((no_http, nobody_listens)):
        started = time.monotonic()
        with pytest.raises(errors.StoreIOError) as raised:
            kv0.DB(uri, storage_options=bad, wal_dir=f"{wal}-bad{i}")
        assert isinstance(raised.value, OSError)
        assert time.monotonic() - started < 60
    # The right options still work after all that.
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as db:
        assert db.get(b"k") == b"v"


def test_s3_storage_options_are_passed_through(s3_bucket):
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/opts.lance"
    kv0.lance.write(uri, table(0, 1), storage_options=options)
    wrong_keys = dict(options, aws_access_key_id="nobody", aws_secret_access_key="wrong")
    # moto accepts any key, so a wrong endpoint is what must fail.
    wrong_endpoint = dict(options, aws_endpoint="http://127.0.0.1:1")
    with pytest.raises(kv0.errors.Error):
        read(kv0.lance.scan(uri, storage_options=wrong_endpoint))
    no_http = {k: v for k, v in options.items() if k != "allow_http"}
    with pytest.raises(kv0.errors.Error):
        read(kv0.lance.scan(uri, storage_options=no_http))
    assert read(kv0.lance.scan(uri, storage_options=wrong_keys)).num_rows == 1


def test_azure_emulator_option(container, wal, azurite, monkeypatch):
    """azure_storage_use_emulator: object_store takes the account, key and
    http from the emulator defaults, and the URL from AZURITE_BLOB_STORAGE_URL."""
    name, _ = container
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite)
    options = {"azure_storage_use_emulator": "true",
               "azure_storage_account_name": AZURITE_ACCOUNT}
    uri = f"az://{name}/emulated"
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as db:
        db.put(b"k", b"v")
    with kv0.DB(uri, storage_options=options, wal_dir=wal + "2") as db:
        assert db.get(b"k") == b"v"


def test_azure_wrong_key_fails_with_kv0_errors(container, wal):
    name, options = container
    uri = f"az://{name}/db"
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as db:
        db.put(b"k", b"v")
    wrong_key = dict(options, azure_storage_account_key=base64.b64encode(b"x" * 64).decode())
    started = time.monotonic()
    with pytest.raises(errors.StoreIOError) as raised:
        kv0.DB(uri, storage_options=wrong_key, wal_dir=f"{wal}-bad")
    assert isinstance(raised.value, OSError)
    assert time.monotonic() - started < 60
    with pytest.raises(errors.StoreIOError, match="403|uthenticat"):
        Repo(f"az://{name}/repo", storage_options=wrong_key, wal_dir=f"{wal}-repo")
    # The right options still work after all that.
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as db:
        assert db.get(b"k") == b"v"


def test_gcs_service_account_key_option(gcs_bucket, gcs_server, wal):
    """A service account key with disable_oauth: object_store sends no token
    request and takes the URL from the key's gcs_base_url."""
    name, _ = gcs_bucket
    key = {"private_key": "unused", "private_key_id": "unused",
           "client_email": "kv0-tests@example.invalid", "disable_oauth": True,
           "gcs_base_url": gcs_server.url}
    options = {"google_service_account_key": json.dumps(key), "allow_http": "true"}
    uri = f"gs://{name}/keyed"
    with kv0.DB(uri, storage_options=options, wal_dir=wal) as db:
        db.put(b"k", b"v")
    with kv0.DB(uri, storage_options=options, wal_dir=wal + "2") as db:
        assert db.get(b"k") == b"v"


def test_gcs_emulator_refuses_a_second_conditional_create(gcs_bucket, gcs_server):
    """Lance commits a version by creating its manifest only if it does not
    exist; the emulator must refuse the second create, or the concurrent
    tests above would pass while losing commits."""
    name, _ = gcs_bucket
    statuses = []
    for body in (b"first", b"second"):
        conn = http.client.HTTPConnection("127.0.0.1", gcs_server.port, timeout=30)
        try:
            conn.request("PUT", f"/{name}/manifest", body=body,
                         headers={"x-goog-if-generation-match": "0"})
            response = conn.getresponse()
            response.read()
            statuses.append(response.status)
        finally:
            conn.close()
    assert statuses == [200, 412]
    conn = http.client.HTTPConnection("127.0.0.1", gcs_server.port, timeout=30)
    try:
        conn.request("GET", f"/{name}/manifest")
        assert conn.getresponse().read() == b"first"
    finally:
        conn.close()


def documented_options() -> dict:
    """The storage options docs/operations.md shows for each backend."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Object stores", 1)[1].split("\n## ", 1)[0]
    shown = {}
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        options = ast.literal_eval(block.split("=", 1)[1].strip())
        kind = {"aws": "s3", "google": "gcs", "azure": "azure"}[
            next(iter(options)).split("_", 1)[0]]
        shown[kind] = options
    return shown


def test_operations_doc_shows_the_options_the_tests_use(store):
    assert set(documented_options()[store.kind]) == set(store.options)
