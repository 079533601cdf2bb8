"""kv0.DB: the aimrocks-compatible surface, its errors and edge cases."""

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pyarrow as pa
import pytest

import kv0
from kv0 import errors


@pytest.fixture
def db(tmp_path, opts):
    handle = kv0.DB(str(tmp_path / "db"), **opts)
    yield handle
    handle.close()


def test_put_get_delete(db):
    assert db.get(b"a") is None
    db.put(b"a", b"1")
    db.put(b"b", b"2", sync=True)
    assert db.get(b"a") == b"1"
    db.delete(b"a")
    assert db.get(b"a") is None
    assert db.get(b"b") == b"2"


def test_bytes_only(db):
    with pytest.raises(TypeError, match="bytes"):
        db.put("text", b"v")
    with pytest.raises(TypeError, match="bytes"):
        db.put(b"k", "text")
    with pytest.raises(TypeError):
        db.get(1)
    db.put(bytearray(b"ba"), memoryview(b"mv"))
    assert db.get(b"ba") == b"mv"


def test_delete_range_and_write_batch(db):
    for c in b"abcdefgh":
        db.put(bytes([c]), b"v")
    db.delete_range(b"c", b"f")
    assert [k for k in _keys(db)] == [b"a", b"b", b"f", b"g", b"h"]
    db.delete_range((b"g", b"z"))
    batch = kv0.WriteBatch()
    batch.put(b"x", b"1")
    batch.delete(b"a")
    batch.delete_range(b"b", b"c")
    assert batch.count() == 3
    assert list(batch) == [("Put", b"x", b"1"), ("Delete", b"a", None),
                           ("DeleteRange", b"b", b"c")]
    db.write(batch)
    assert list(_keys(db)) == [b"f", b"x"]
    batch.clear()
    assert batch.count() == 0
    with pytest.raises(errors.NotSupported):
        batch.merge(b"k", b"v")
    with pytest.raises(errors.InvalidArgument):
        db.delete_range(b"z", b"a")


def _keys(db):
    it = db.iterkeys()
    it.seek_to_first()
    return list(it)


def test_multi_get_and_key_may_exist(db):
    db.put(b"a", b"1")
    db.put(b"c", b"3")
    assert db.multi_get([b"a", b"b", b"c"]) == {b"a": b"1", b"b": None, b"c": b"3"}
    assert db.key_may_exist(b"a") == (True, None)
    assert db.key_may_exist(b"a", fetch=True) == (True, b"1")
    assert db.key_may_exist(b"b") == (False, None)


def test_iterators(db):
    for i in range(1000):
        db.put(b"k%04d" % i, b"v%d" % i)
    it = db.iteritems()
    with pytest.raises(ValueError):
        it.get()  # unpositioned
    it.seek(b"k0500")
    assert it.get() == (b"k0500", b"v500")
    assert it.next() == (b"k0500", b"v500")
    it.skip()
    assert next(it) == (b"k0502", b"v502")
    it.seek_for_prev(b"k0100x")
    assert it.get()[0] == b"k0100"
    it.seek_to_last()
    assert it.next() == (b"k0999", b"v999")
    assert it.next() is None
    with pytest.raises(ValueError):
        it.get()

    values = db.itervalues()
    values.seek_to_first()
    assert len(list(values)) == 1000

    keys = db.iterkeys()
    keys.seek_to_last()
    backwards = list(reversed(keys))
    assert backwards[0] == b"k0999" and backwards[-1] == b"k0000" and len(backwards) == 1000

    it = db.iterkeys()
    it.seek(b"k0998")
    assert list(it) == [b"k0998", b"k0999"]


def test_column_family_shims(db):
    default = db.get_column_family(b"default")
    assert default is not None and db.column_families == [default]
    db.put((default, b"k"), b"v")
    assert db.get((default, b"k")) == b"v"
    assert db.get_column_family(b"other") is None
    with pytest.raises(errors.NotSupported):
        db.create_column_family(b"other")
    with pytest.raises(errors.NotSupported):
        db.put((kv0.ColumnFamilyHandle(b"other"), b"k"), b"v")
    with pytest.raises(errors.NotSupported):
        db.merge(b"k", b"v")
    with pytest.raises(errors.NotSupported):
        db.snapshot()
    assert db.get_property(b"rocksdb.estimate-num-keys") == b"1"
    assert b"entries" in db.get_property(b"rocksdb.stats")
    assert db.get_property(b"rocksdb.unknown") is None


def test_options_bag(tmp_path, opts):
    o = kv0.Options(create_if_missing=True, max_open_files=300, write_buffer_size=1 << 20)
    o.compression = "snappy"  # RocksDB tuning: accepted, ignored
    with pytest.raises(errors.InvalidArgument):
        o.write_buffer_size = "big"
    with pytest.raises(errors.InvalidArgument):
        kv0.Options(wal_sync="sometimes")
    with kv0.DB(str(tmp_path / "o"), o, **opts) as db:
        db.put(b"k", b"v")
    with pytest.raises(errors.InvalidArgument):
        kv0.DB(str(tmp_path / "p"), not_an_option=1)


def test_read_only_and_versions(tmp_path, opts):
    path = str(tmp_path / "ro")
    with kv0.DB(path, **opts) as db:
        db.put(b"a", b"1", sync=True)
        db.put(b"a", b"2", sync=True)
        versions = db.versions()
        db.create_tag("first", versions[1][0])
        assert db.tags() == {"first": versions[1][0]}
    ro = kv0.DB(path, read_only=True, **opts)
    assert ro.get(b"a") == b"2"
    with pytest.raises(errors.NotSupported):
        ro.put(b"a", b"3")
    ro.close()
    old = kv0.DB(path, version=versions[1][0], **opts)
    assert old.get(b"a") == b"1"
    old.close()
    tagged = kv0.DB(path, tag="first", **opts)
    assert tagged.get(b"a") == b"1"
    tagged.close()
    with pytest.raises(errors.NotFound):
        kv0.DB(str(tmp_path / "missing"), read_only=True, **opts)
    with pytest.raises(FileNotFoundError):
        kv0.DB(str(tmp_path / "missing"), read_only=True, **opts)


def test_closed_handle_raises(tmp_path, opts):
    db = kv0.DB(str(tmp_path / "c"), **opts)
    db.close()
    db.close()
    with pytest.raises(errors.NotSupported):
        db.get(b"a")


def test_threads_write_one_db(db):
    def work(t):
        for i in range(2000):
            db.put(b"t%d-%d" % (t, i), b"x" * 50)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    db.flush()
    assert db.stats()["entries"] == 8000


def test_scan_arrow(db):
    for i in range(10000):
        db.put(b"k%05d" % i, b"v%d" % i)
    table = pa.RecordBatchReader.from_stream(db.scan_arrow()).read_all()
    assert table.num_rows == 10000
    assert table.schema.field("key").type == pa.binary()
    part = pa.RecordBatchReader.from_stream(db.scan_arrow(b"k00100", b"k00200")).read_all()
    assert part["key"].to_pylist() == [b"k%05d" % i for i in range(100, 200)]


def test_compact_refresh_cleanup(tmp_path, opts):
    path = str(tmp_path / "m")
    a = kv0.DB(path, **opts)
    b = kv0.DB(path, **dict(opts, refresh_interval=3600.0))
    a.put(b"x", b"1", sync=True)
    assert b.get(b"x") is None
    b.refresh()
    assert b.get(b"x") == b"1"
    a.compact_range()
    assert a.cleanup_old_versions(0) > 0
    a.flush_wal()
    a.close()
    b.close()


def _files_containing(root, needle):
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                if needle in f.read():
                    found.append(path)
    return found


def test_purge(tmp_path, opts):
    path = str(tmp_path / "p")
    secret = b"SECRET-" + os.urandom(8).hex().encode()
    db = kv0.DB(path, **opts)
    db.put(b"live", b"1")
    db.put(b"gone", secret)
    db.flush()
    db.create_tag("t1")
    db.delete(b"gone")
    db.flush()
    versions = len(db.versions())
    assert _files_containing(path, secret)

    with pytest.raises(errors.Busy, match="t1"):
        db.purge()
    assert db.tags() == {"t1": db.tags()["t1"]}
    assert len(db.versions()) == versions

    stats = db.purge(force=True)
    assert stats["tags_deleted"] == ["t1"]
    assert stats["versions_removed"] > 0 and stats["bytes_removed"] > 0
    assert db.tags() == {}
    assert len(db.versions()) == 1
    assert _files_containing(path, secret) == []
    assert db.get(b"live") == b"1" and db.get(b"gone") is None
    assert db.purge()["tags_deleted"] == []
    assert len(db.versions()) == 1
    db.close()

    with kv0.DB(path, **opts) as again:
        assert again.get(b"live") == b"1" and again.get(b"gone") is None


RUN_CHILD = textwrap.dedent("""
    import sys, kv0
    db = kv0.DB(sys.argv[1], wal_dir=sys.argv[2], flush_interval=3600.0)
    for i in range(int(sys.argv[3])):
        db.put(b"k%d" % i, b"v%d" % i)
        if sys.argv[4] == "ack":
            print(i, flush=True)
    {exit}
""")


def test_atexit_flushes_unclosed_handle(tmp_path):
    path, wal = str(tmp_path / "ax"), str(tmp_path / "wal")
    script = RUN_CHILD.format(exit="")  # never closes the handle
    subprocess.run([sys.executable, "-c", script, path, wal, "100", "quiet"], check=True)
    # A different WAL directory: only what reached Lance counts.
    db = kv0.DB(path, read_only=True)
    assert db.get(b"k99") == b"v99"
    db.close()


def test_sigkill_loses_no_acknowledged_write(tmp_path):
    path, wal = str(tmp_path / "kill"), str(tmp_path / "wal")
    script = RUN_CHILD.format(exit="")
    child = subprocess.Popen([sys.executable, "-c", script, path, wal, "1000000", "ack"],
                             stdout=subprocess.PIPE, text=True)
    acked = -1
    for line in child.stdout:
        acked = int(line)
        if acked >= 2000:
            break
    child.send_signal(signal.SIGKILL)
    child.wait()
    with kv0.DB(path, wal_dir=wal) as db:
        for i in range(acked + 1):
            assert db.get(b"k%d" % i) == b"v%d" % i


WRITER = textwrap.dedent("""
    import sys, kv0
    name, path, wal = sys.argv[1], sys.argv[2], sys.argv[3]
    db = kv0.DB(path, wal_dir=wal, write_buffer_size=4096)
    for i in range(3000):
        db.put(b"%s-%d" % (name.encode(), i), b"x" * 20)
        db.put(b"shared-%d" % (i % 50), name.encode())
    db.close()
""")


def test_two_processes_converge(tmp_path):
    path, wal = str(tmp_path / "two"), str(tmp_path / "wal")
    kv0.DB(path, wal_dir=wal).close()  # create it first
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, name, path, wal])
             for name in ("p1", "p2")]
    for p in procs:
        assert p.wait() == 0
    a = kv0.DB(path, wal_dir=wal)
    b = kv0.DB(path, wal_dir=wal)
    for db in (a, b):
        for name in ("p1", "p2"):
            assert db.get(b"%s-2999" % name.encode()) == b"x" * 20
            assert db.stats()["entries"] == 6050
    shared = [a.get(b"shared-%d" % i) for i in range(50)]
    assert shared == [b.get(b"shared-%d" % i) for i in range(50)]
    assert set(shared) <= {b"p1", b"p2"}
    a.close()
    b.close()


def test_dropped_handle_commits_its_writes(tmp_path, opts):
    import gc

    path = str(tmp_path / "dropped")
    db = kv0.DB(path, **opts)
    db.put(b"k", b"v")
    del db
    gc.collect()
    # Another WAL directory: only what reached Lance is visible.
    reader = kv0.DB(path, read_only=True, wal_dir=str(tmp_path / "other"))
    assert reader.get(b"k") == b"v"
    reader.close()


def test_lance_logs_reach_the_logging_module(tmp_path, opts, caplog):
    import logging

    caplog.set_level(5)
    kv0.set_lance_log_level(5)
    try:
        with kv0.DB(str(tmp_path / "log"), **opts) as db:
            db.put(b"k", b"v", sync=True)
            db.compact_range()
    finally:
        kv0.set_lance_log_level(2)
    assert any(r.name.startswith("lance.") for r in caplog.records)


def test_stubs_describe_the_native_module():
    import importlib.resources

    stub = importlib.resources.files("kv0") / "_kv0.pyi"
    assert stub.is_file()
    text = stub.read_text()
    # The fast calls (kv_calls.cc) appear as method descriptors, nanobind's
    # bindings with their signatures.
    assert "class _DB" in text and "def close(self) -> None" in text
    assert "class WriteBatch" in text and "put: types.MethodDescriptorType" in text


# Commits as fast as it can until the file `stop` appears: every refresh of
# the reader below has another writer's commit to read.
BUSY_WRITER = textwrap.dedent("""
    import os, sys, kv0
    path, wal, stop = sys.argv[1], sys.argv[2], sys.argv[3]
    db = kv0.DB(path, wal_dir=wal, max_fragments=4)
    i = 0
    while not os.path.exists(stop):
        db.put(b"w%06d" % (i % 500), b"%d" % i + b"x" * (i % 200), sync=True)
        i += 1
    db.close()
""")

# Reads with Lance logging at trace level, each read refreshing first.
TRACE_READER = textwrap.dedent("""
    import logging, sys, kv0
    import pyarrow as pa
    path, wal, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    logging.basicConfig(level=5, stream=open("/dev/null", "w"))
    kv0.set_lance_log_level(5)
    db = kv0.DB(path, wal_dir=wal, refresh_interval=0, lazy_value_threshold=64)
    for r in range(rounds):
        db.put(b"r%d" % r, b"y" * (r % 150))
        if r % 3 == 0:
            db.flush()
        it = db.iteritems()
        it.seek_to_first()
        items = list(it)
        assert (b"r%d" % r, b"y" * (r % 150)) in items
        it = db.iterkeys()
        it.seek_to_last()
        assert list(reversed(it))[-1] == items[0][0]
        it = db.itervalues()
        it.seek(b"w")
        next(it, None)
        table = pa.RecordBatchReader.from_stream(db.scan_arrow()).read_all()
        assert table.num_rows >= len(items) - 1
        keys = [k for k, _ in items[:50]]
        assert db.multi_get(keys).keys() == set(keys)
        assert db.get(b"r%d" % r) == b"y" * (r % 150)
        db.refresh()
    db.close()
    print("done", sum(1 for k, _ in items if k.startswith(b"w")), flush=True)
""")


def test_reads_never_hang_with_trace_logging_and_another_writer(tmp_path):
    # Lance's log callback takes the GIL on Lance's threads; a read that
    # waited on Lance while holding the GIL would hang forever.
    path, wal, stop = str(tmp_path / "trace"), str(tmp_path / "wal"), tmp_path / "stop"
    kv0.DB(path, wal_dir=wal).close()
    writer = subprocess.Popen([sys.executable, "-c", BUSY_WRITER, path, wal, str(stop)])
    try:
        reader = subprocess.run([sys.executable, "-c", TRACE_READER, path, wal, "40"],
                                capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("a read hung with Lance logging at trace level")
    finally:
        stop.touch()
        writer.wait(timeout=120)
    assert reader.returncode == 0, reader.stderr[-3000:]
    done, writer_keys = reader.stdout.split()
    assert done == "done" and int(writer_keys) > 0  # the reader saw the writer's commits
    assert writer.returncode == 0
