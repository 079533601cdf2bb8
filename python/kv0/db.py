"""kv0.DB: the ordered key-value store, call-compatible with aimrocks.

kv0.DB takes the calls of aimrocks (the RocksDB binding the Aim tracker
uses); kv0.aimrocks builds aimrocks' whole public surface on it (its options
and defaults, errors, iteration protocols), so that aimrocks programs run
unchanged. Merge operators, column families other than the default,
snapshots and custom comparators are not part of kv0: their calls exist, and
anything beyond what kv0 can honour raises NotSupported instead of doing
something silently different.
"""

from __future__ import annotations

import atexit
import weakref
from typing import Any, Iterable, Iterator, Optional

from kv0 import errors
from kv0._kv0 import _DB, WriteBatch, _Cursor, _Options, parse_wal_sync

# kv0's own options and their types; everything else an Options bag holds is
# an engine-tuning option of another store and is ignored.
KV0_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "create_if_missing": bool,
    "read_only": bool,
    "version": (int, type(None)),
    "tag": (str, type(None)),
    "storage_options": (dict, type(None)),
    "write_buffer_size": int,
    "flush_interval": (int, float),
    "max_fragments": int,
    "lazy_value_threshold": int,
    "value_cache_size": int,
    "snapshot_min_entries": int,
    "tombstone_grace": (int, float),
    "refresh_interval": (int, float),
    "version_retention": (int, float),
    "wal_dir": (str, type(None)),
    "wal_sync": str,
    "mark_ttl": (int, float),
    "replay_stale_wal": bool,
    "request_timeout": (int, float),
    "request_retries": int,
    "commit_timeout": (int, float),
}


def _check_option(name: str, value: Any) -> None:
    expected = KV0_OPTIONS[name]
    if isinstance(value, bool) and expected in (int, (int, float)):
        raise errors.InvalidArgument(f"option {name} takes a number, not {value!r}")
    if not isinstance(value, expected):
        raise errors.InvalidArgument(f"option {name} has the wrong type: {value!r}")
    if name == "wal_sync":
        parse_wal_sync(value)  # the check every kv0 handle makes


class Options:
    """A permissive bag of options, like aimrocks.Options.

    kv0's own options (see KV0_OPTIONS) are type-checked and honoured; any
    other option (RocksDB's max_open_files, compression, ...) is accepted
    and ignored, except two that would change results: a comparator other
    than byte-wise, or a merge operator, makes DB() raise NotSupported.
    """

    def __init__(self, **kwargs: Any) -> None:
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in KV0_OPTIONS:
            _check_option(name, value)
        object.__setattr__(self, name, value)

    def kv0_options(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k in KV0_OPTIONS}


class ColumnFamilyHandle:
    """The default column family, the only one kv0 has."""

    def __init__(self, name: bytes = b"default") -> None:
        self.name = name
        self.id = 0
        self.is_valid = True

    def __repr__(self) -> str:
        return f"<ColumnFamilyHandle name={self.name!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ColumnFamilyHandle) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


DEFAULT_COLUMN_FAMILY = ColumnFamilyHandle()


def _bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, not {type(value).__name__}")


def _key(key: Any) -> bytes:
    # aimrocks accepts (column_family, key); only the default family exists.
    if isinstance(key, tuple):
        if len(key) != 2:
            raise TypeError("a key tuple is (column_family, key)")
        _check_family(key[0])
        key = key[1]
    return _bytes(key, "key")


def _check_family(family: Any) -> None:
    if family is None or family == DEFAULT_COLUMN_FAMILY:
        return
    raise errors.NotSupported(f"kv0 has only the default column family, not {family!r}")


def _refuse_unhonoured(opts: Options) -> None:
    # Ignoring these would silently change what reads return.
    comparator = vars(opts).get("comparator")
    if comparator is not None:
        try:
            name = comparator.name()
        except Exception:
            name = None
        if name != b"leveldb.BytewiseComparator":
            raise errors.NotSupported(
                f"custom comparators are not supported (kv0 orders keys byte-wise only, "
                f"so the comparator {name or comparator!r} cannot be honoured)")
    if vars(opts).get("merge_operator") is not None:
        raise errors.NotSupported("merge operators are not supported (kv0 has none)")


_open_handles: "weakref.WeakSet[DB]" = weakref.WeakSet()


@atexit.register
def _flush_open_handles() -> None:
    # A script that never closes its DB keeps its writes.
    for db in list(_open_handles):
        try:
            db.close()
        except Exception:  # the WAL keeps them; the next open replays
            pass


class DB(_DB):
    """An ordered key-value store on a Lance dataset.

    DB(path, opts=None, column_families=None, read_only=False, **kwargs):
    path is a directory or a URI (s3://, gs://, az://, memory://); kwargs
    are kv0 options (storage_options, version, wal_dir, wal_sync, ...),
    which take precedence over the same options in opts.

    Besides aimrocks' calls, db[key] reads a value (KeyError when absent)
    and `key in db` tests for one. Reads answered from memory keep the GIL;
    every call that may wait (on storage, a lock, a flush) releases it.

    A DB belongs to the process that opened it: in a forked child (a
    multiprocessing worker, say) every call on it raises NotSupported and
    dropping it does nothing; the child opens a DB of its own.
    """

    def __init__(
        self,
        path: str,
        opts: Optional[Options] = None,
        column_families: Optional[dict] = None,
        read_only: bool = False,
        **kwargs: Any,
    ) -> None:
        options: dict[str, Any] = {}
        if opts is not None:
            _refuse_unhonoured(opts)
            options.update(opts.kv0_options())
        for name, value in kwargs.items():
            if name not in KV0_OPTIONS:
                raise errors.InvalidArgument(f"unknown kv0 option {name}")
            _check_option(name, value)
            options[name] = value
        if read_only:
            options["read_only"] = True
        if column_families:
            for name in column_families:
                if name not in (b"default", "default"):
                    raise errors.NotSupported("kv0 has only the default column family")
        path = str(path)
        super().__init__(path, _Options(options))
        self._path = path
        self._closed = False
        _open_handles.add(self)

    # put, delete, write, get, multi_get, db[key] and key in db are _DB's
    # own (python/src/kv_calls.cc): fast calls, with no Python frame between
    # the caller and the store. They take aimrocks' forms: put(key, value,
    # sync=False, disable_wal=False, column_family=None), delete(key, sync,
    # disable_wal, column_family), write(batch, sync, disable_wal), and
    # get(key, *args, **kwargs) and multi_get(keys, *args, **kwargs), whose
    # read options are ignored but for a snapshot (NotSupported). Keys are
    # bytes (bytearray and memoryview are copied) or (column_family, key).

    # --- writes -----------------------------------------------------------
    def delete_range(self, begin: Any, end: Any = None, sync: bool = False,
                     disable_wal: bool = False, column_family: Any = None) -> None:
        """Deletes every key in [begin, end); also takes one (begin, end) tuple."""
        _check_family(column_family)
        if end is None and isinstance(begin, tuple) and len(begin) == 2:
            begin, end = begin
        super().delete_range(_key(begin), _key(end), sync, disable_wal)

    def merge(self, key: Any, value: bytes, sync: bool = False, disable_wal: bool = False,
              column_family: Any = None) -> None:
        raise errors.NotSupported("kv0 has no merge operators")

    # --- reads ----------------------------------------------------------------
    def key_may_exist(self, key: Any, fetch: bool = False, *args: Any,
                      **kwargs: Any) -> tuple[bool, Optional[bytes]]:
        _reject_snapshot(kwargs)
        k = _key(key)
        if fetch:
            value = super().get(k)
            return value is not None, value
        return super().key_may_exist(k), None

    def iterkeys(self, *args: Any, **kwargs: Any) -> "KeysIterator":
        _reject_snapshot(kwargs)
        return KeysIterator(self)

    def itervalues(self, *args: Any, **kwargs: Any) -> "ValuesIterator":
        _reject_snapshot(kwargs)
        return ValuesIterator(self)

    def iteritems(self, *args: Any, **kwargs: Any) -> "ItemsIterator":
        _reject_snapshot(kwargs)
        return ItemsIterator(self)

    def scan_arrow(self, start: Optional[bytes] = None, end: Optional[bytes] = None):
        """Keys in [start, end) with their values as an Arrow stream of
        (key binary, value binary) batches (__arrow_c_stream__)."""
        return self._scan_arrow(None if start is None else _key(start),
                                None if end is None else _key(end))

    # --- maintenance ------------------------------------------------------------
    def compact_range(self, begin: Any = None, end: Any = None, **kwargs: Any) -> None:
        """Flushes, then rewrites the whole store as its live rows (kv0
        compacts whole stores; begin and end are accepted and ignored)."""
        super().compact_range()

    def purge(self, force: bool = False) -> dict:
        """Makes deleted data unrecoverable from the dataset: rewrites the
        store as its live rows and removes every untagged version but the
        latest. A tag on a version that holds a value of a key deleted since
        makes it raise kv0.errors.Busy naming the tag, unless force, which
        deletes such tags. Returns {versions_removed, bytes_removed,
        tags_deleted}."""
        return super().purge(force)

    def flush_wal(self, sync: bool = True) -> None:
        """Commits buffered writes to Lance, which makes the WAL's content
        redundant (kv0's WAL is only a crash buffer in front of Lance)."""
        self.flush()

    def snapshot(self) -> None:
        raise errors.NotSupported(
            "kv0 has no snapshots; open a version instead: kv0.DB(path, version=n)")

    # --- column families and properties ---------------------------------------
    @property
    def column_families(self) -> list[ColumnFamilyHandle]:
        return [DEFAULT_COLUMN_FAMILY]

    def get_column_family(self, name: Any) -> Optional[ColumnFamilyHandle]:
        if name in (b"default", "default"):
            return DEFAULT_COLUMN_FAMILY
        return None

    def create_column_family(self, name: Any, opts: Any = None) -> ColumnFamilyHandle:
        raise errors.NotSupported("kv0 has only the default column family")

    def drop_column_family(self, handle: Any) -> None:
        raise errors.NotSupported("kv0 has only the default column family")

    def get_property(self, prop: Any, column_family: Any = None) -> Optional[bytes]:
        """Answers the common RocksDB properties from kv0's statistics;
        None for the others."""
        _check_family(column_family)
        name = prop.decode() if isinstance(prop, bytes) else str(prop)
        stats = self.stats()
        answers = {
            "rocksdb.estimate-num-keys": stats["entries"],
            "rocksdb.num-entries-active-mem-table": stats["buffered_ops"],
            "rocksdb.cur-size-all-mem-tables": stats["buffered_bytes"],
            "rocksdb.cur-size-active-mem-table": stats["buffered_bytes"],
            "rocksdb.num-immutable-mem-table": 0,
            "rocksdb.mem-table-flush-pending": 0,
            "rocksdb.compaction-pending": 0,
            "rocksdb.background-errors": 0,
            "rocksdb.num-live-versions": len(self.versions()),
            "rocksdb.estimate-live-data-size": stats["stored_rows"],
        }
        if name == "rocksdb.stats":
            return "\n".join(f"{k}: {v}" for k, v in stats.items()).encode()
        if name in answers:
            return str(answers[name]).encode()
        return None

    # --- lifetime ----------------------------------------------------------------
    def close(self) -> None:
        """Commits buffered writes and releases the WAL; later calls raise."""
        if not self._closed:
            super().close()
            self._closed = True
            _open_handles.discard(self)

    def __enter__(self) -> "DB":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # A handle dropped without close() still commits its writes.
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<kv0.DB {self._path!r}>"


def _reject_snapshot(kwargs: dict) -> None:
    if kwargs.get("snapshot") is not None:
        raise errors.NotSupported("kv0 has no snapshots; open a version instead")


# The iterators are _Cursor's (python/src/kv_cursor.cc): seek_to_first,
# seek_to_last, seek, seek_for_prev; iteration from the current position on
# (reversed() walks backwards); get() the current item without moving (ValueError past
# the end), next() the current item then forward (None past the end), skip().
# Unpositioned until a seek.


class KeysIterator(_Cursor):
    """Yields keys."""

    def __init__(self, db: DB) -> None:
        super().__init__(db, 0)


class ValuesIterator(_Cursor):
    """Yields values."""

    def __init__(self, db: DB) -> None:
        super().__init__(db, 1)


class ItemsIterator(_Cursor):
    """Yields (key, value) pairs."""

    def __init__(self, db: DB) -> None:
        super().__init__(db, 2)
