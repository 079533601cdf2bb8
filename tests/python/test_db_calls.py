"""kv0.DB's native calls (python/src/kv_calls.cc) and iterators
(python/src/kv_cursor.cc): their argument forms and errors, the paths that
give up the GIL for stored values, and iterators checked against a model."""

import bisect
import random
import threading

import pytest

import kv0
import kv0.db
from kv0 import errors


@pytest.fixture
def db(tmp_path, opts):
    handle = kv0.DB(str(tmp_path / "db"), **opts)
    yield handle
    handle.close()


def stored(tmp_path, opts, items):
    """A DB whose values over 16 bytes stay in Lance: reads of them cannot be
    answered from memory."""
    path = str(tmp_path / "stored")
    with kv0.DB(path, lazy_value_threshold=16, **opts) as w:
        for k, v in items:
            w.put(k, v)
    db = kv0.DB(path, lazy_value_threshold=16, **opts)
    assert db.stats()["lazy_values"] == sum(len(v) > 16 for _, v in items)
    return db


def test_subscript_and_contains(db):
    db.put(b"a", b"1")
    assert db[b"a"] == b"1"
    assert b"a" in db and b"b" not in db
    with pytest.raises(KeyError):
        db[b"b"]
    assert db[bytearray(b"a")] == b"1" and memoryview(b"a") in db
    assert db[(None, b"a")] == b"1"
    assert (kv0.db.DEFAULT_COLUMN_FAMILY, b"a") in db
    with pytest.raises(errors.NotSupported):
        db[(kv0.db.ColumnFamilyHandle(b"other"), b"a")]
    with pytest.raises(TypeError, match="key must be bytes, not str"):
        "a" in db
    db.delete(b"a")
    assert b"a" not in db


def test_call_forms_and_their_errors(db):
    db.put(b"k", b"v", True)  # sync, positional
    db.put(b"k2", value=b"v2", sync=False, disable_wal=False, column_family=None)
    assert db.get(b"k", None, verify_checksums=True, fill_cache=False) == b"v"
    with pytest.raises(errors.NotSupported, match="snapshot"):
        db.get(b"k", snapshot=object())
    with pytest.raises(errors.NotSupported, match="snapshot"):
        db.multi_get([b"k"], snapshot=object())
    with pytest.raises(TypeError, match="missing required argument 'value'"):
        db.put(b"k")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        db.put(b"k", b"v", bogus=1)
    with pytest.raises(TypeError, match="multiple values for argument 'key'"):
        db.delete(b"k", key=b"k")
    with pytest.raises(TypeError, match="at most"):
        db.delete(b"k", False, False, None, 5)
    with pytest.raises(TypeError, match="value must be bytes, not int"):
        db.put(b"k", 5)
    with pytest.raises(TypeError, match="kv0.WriteBatch"):
        db.write([(0, b"k", b"v")])
    with pytest.raises(TypeError, match="a kv0.DB is needed"):
        kv0.KeysIterator("not a database")
    with pytest.raises(TypeError, match="a key tuple"):
        db.get((None, b"k", b"extra"))
    with pytest.raises(errors.NotSupported):
        db.put((kv0.db.ColumnFamilyHandle(b"other"), b"k"), b"v")
    # None of the refused calls changed anything.
    assert db.multi_get([b"k", b"k2"]) == {b"k": b"v", b"k2": b"v2"}


def test_oversized_values_are_refused_and_lose_nothing(db):
    db.put(b"keep", b"1")
    batch = kv0.WriteBatch()
    batch.put(b"ok", b"2")
    big = b"x" * (1 << 30)  # over kMaxValueSize by one byte
    batch.put(b"big", big)
    with pytest.raises(errors.InvalidArgument):
        db.write(batch)
    with pytest.raises(errors.InvalidArgument):
        db.put(b"big", big)
    del batch, big
    assert db.get(b"ok") is None and db.get(b"big") is None  # all or none
    assert db.get(b"keep") == b"1"


def test_stored_values_are_read_through_the_store(tmp_path, opts):
    items = [(b"k%03d" % i, (b"%03d" % i) * (i % 12)) for i in range(200)]
    db = stored(tmp_path, opts, items)
    try:
        keys = [k for k, _ in items] + [b"missing", (None, b"k007")]
        got = db.multi_get(keys)
        assert got[b"missing"] is None
        assert got[(None, b"k007")] == items[7][1]  # keyed by the objects given
        assert all(got[k] == v for k, v in items)
        assert db.get(b"k011") == items[11][1] and db[b"k011"] == items[11][1]
        assert b"k011" in db and b"k0110" not in db
        it = db.itervalues()
        it.seek_to_first()
        assert list(it) == [v for _, v in items]
    finally:
        db.close()


def test_write_batch(db):
    batch = kv0.WriteBatch()
    batch.put(bytearray(b"a"), memoryview(b"1"))
    batch.put(b"b", b"2")
    batch.delete(b"b")
    batch.delete_range((b"c", b"d"))
    assert len(batch) == batch.count() == 4
    assert list(batch) == [("Put", b"a", b"1"), ("Put", b"b", b"2"), ("Delete", b"b", None),
                           ("DeleteRange", b"c", b"d")]
    with pytest.raises(errors.NotSupported):
        batch.merge(b"a", b"x")
    with pytest.raises(errors.NotSupported):
        kv0.WriteBatch(b"\0" * 12)
    with pytest.raises(TypeError):
        batch.put("a", b"1")
    assert len(batch) == 4  # the refused calls added nothing
    db.write(batch)
    assert db.multi_get([b"a", b"b"]) == {b"a": b"1", b"b": None}
    batch.clear()
    assert len(batch) == 0 and list(batch) == []


class Model:
    """Where an iterator stands over sorted keys; None once it has left them
    (it stays there whichever way it moves)."""

    def __init__(self, keys):
        self.keys = keys
        self.pos = None

    def at(self, i):
        self.pos = i if 0 <= i < len(self.keys) else None

    def take(self, step):
        if self.pos is None:
            return None
        key = self.keys[self.pos]
        self.at(self.pos + step)
        return key


@pytest.mark.parametrize("lazy", [False, True])
def test_iterators_follow_a_model(tmp_path, opts, lazy):
    rng = random.Random(11 if lazy else 5)
    items = {b"k%04d" % rng.randrange(10000): bytes([65 + i % 26]) * rng.randrange(40)
             for i in range(700)}
    keys = sorted(items)
    if lazy:
        db = stored(tmp_path, opts, items.items())
    else:
        db = kv0.DB(str(tmp_path / "mem"), **opts)
        for k, v in items.items():
            db.put(k, v)
    shape = {"keys": lambda k: k, "values": lambda k: items[k], "items": lambda k: (k, items[k])}
    try:
        for kind in shape:
            it = getattr(db, "iter" + kind)()
            back = reversed(it)
            model = Model(keys)
            item = shape[kind]
            for _ in range(400):
                action = rng.randrange(9)
                target = b"k%04d" % rng.randrange(10000)
                if action == 0:
                    it.seek(target)
                    model.at(bisect.bisect_left(keys, target))
                elif action == 1:
                    it.seek_for_prev(target)
                    model.at(bisect.bisect_right(keys, target) - 1)
                elif action == 2:
                    if rng.random() < 0.5:
                        it.seek_to_first()
                        model.at(0)
                    else:
                        it.seek_to_last()
                        model.at(len(keys) - 1)
                elif action in (3, 4):
                    for _ in range(rng.randrange(1, 40)):
                        want = model.take(+1)
                        assert next(it, None) == (None if want is None else item(want))
                elif action == 5:
                    for _ in range(rng.randrange(1, 40)):
                        want = model.take(-1)
                        assert next(back, None) == (None if want is None else item(want))
                elif action == 6:
                    if model.pos is None:
                        with pytest.raises(ValueError):
                            it.get()
                    else:
                        assert it.get() == item(keys[model.pos])
                        assert back.get() == item(keys[model.pos])
                elif action == 7:
                    it.skip()
                    model.take(+1)
                else:
                    want = model.take(+1)
                    assert it.next() == (None if want is None else item(want))
    finally:
        db.close()


def test_full_scans_both_ways(db):
    keys = [b"%05d" % i for i in range(3000)]
    for k in keys:
        db.put(k, k[::-1])
    it = db.iteritems()
    it.seek_to_first()
    assert list(it) == [(k, k[::-1]) for k in keys]
    it.seek_to_last()
    assert list(reversed(it)) == [(k, k[::-1]) for k in reversed(keys)]
    assert next(it, None) is None  # past the start, it stays there


def test_iterator_of_a_closed_db_raises(tmp_path, opts):
    db = kv0.DB(str(tmp_path / "c"), **opts)
    for i in range(1000):
        db.put(b"%04d" % i, b"v")
    it = db.iterkeys()
    it.seek_to_first()
    db.close()
    with pytest.raises(errors.NotSupported):
        list(it)  # at the latest when it reads the view again
    with pytest.raises(errors.NotSupported):
        it.seek(b"0500")
    with pytest.raises(errors.NotSupported):
        db.iterkeys()


def test_iterators_made_without_init_raise_instead_of_ending(db):
    # __new__ alone leaves no native iterator behind the object: moving it
    # must say so, not look like an empty database.
    db.put(b"k", b"v")
    forward = type(db.iterkeys())
    backward = type(reversed(db.iterkeys()))
    for cls in (forward, backward):
        it = cls.__new__(cls)
        with pytest.raises(TypeError, match="not initialised"):
            next(it)
    assert db.get(b"k") == b"v"


def test_readers_and_writers_in_threads(tmp_path, opts):
    db = kv0.DB(str(tmp_path / "t"), lazy_value_threshold=32, write_buffer_size=64 << 10,
                **opts)
    failures = []

    def write(t):
        for i in range(3000):
            db.put(b"k%d-%04d" % (t, i % 500), b"%d:" % i + b"x" * (i % 60))

    def read():
        for _ in range(30):
            got = db.multi_get([b"k0-%04d" % i for i in range(0, 500, 7)])
            for v in got.values():
                if v is not None and not v.split(b":")[0].isdigit():
                    failures.append(v)
            it = db.iterkeys()
            it.seek_to_first()
            ks = list(it)
            if ks != sorted(set(ks)):
                failures.append("iterator out of order")

    threads = [threading.Thread(target=write, args=(t,)) for t in range(2)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sum(1 for _ in _all(db)) == 1000
    db.close()


def _all(db):
    it = db.iterkeys()
    it.seek_to_first()
    return it
