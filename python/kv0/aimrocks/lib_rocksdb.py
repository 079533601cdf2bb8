"""aimrocks' classes over kv0: the module aimrocks calls lib_rocksdb.

DB is a kv0.DB with aimrocks' signatures and behaviour; Options carries
every option aimrocks 0.5.2 has, with its defaults; the tuning classes
(caches, table and memtable factories, filter policies, compression and
compaction constants) are accepted and kept as inert values, since kv0
stores a Lance dataset and has no SST files, memtables or block cache.

What kv0's design excludes fails at the call that asks for it, with
NotSupported naming the feature, never silently: a database opened with a
custom comparator or a merge operator, DB.merge and WriteBatch.merge,
column families other than the default, snapshots, backups, repair, and
properties and metadata about RocksDB's files and levels.

Options kv0 honours: create_if_missing, error_if_exists, and, when set
explicitly, write_buffer_size (kv0 commits a buffer of that size, as RocksDB
flushes a memtable of that size) and a non-empty wal_dir (the root of kv0's
write-ahead logs). kv0's own options (storage_options, wal_sync,
flush_interval, ...) are keyword arguments of DB or defaults given to
kv0.aimrocks.install(options=...).
"""

from __future__ import annotations

import hashlib
import operator
import os
import struct
import sys
import traceback  # noqa: F401  (aimrocks' namespace holds sys, traceback and weakref)
import weakref
from typing import Any, Callable, Iterable, Optional

import kv0
from kv0 import db as _kvdb
from kv0.aimrocks import _location, errors, interfaces

IComparator = interfaces.Comparator
IAssociativeMergeOperator = interfaces.AssociativeMergeOperator
IMergeOperator = interfaces.MergeOperator
IFilterPolicy = interfaces.FilterPolicy
ISliceTransform = interfaces.SliceTransform


# --- comparators -----------------------------------------------------------------


class PyComparator:
    """Base of what Options.comparator holds."""

    def _user_object(self) -> Any:
        return self


class PyBytewiseComparator(PyComparator):
    """Byte-wise key order: the only order kv0 has, and RocksDB's default."""

    def name(self) -> bytes:
        return b"leveldb.BytewiseComparator"

    def compare(self, a: bytes, b: bytes) -> int:
        a, b = bytes(a), bytes(b)
        return (a > b) - (a < b)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PyBytewiseComparator)

    def __hash__(self) -> int:
        return hash(PyBytewiseComparator)


BytewiseComparator = PyBytewiseComparator


class PyGenericComparator(PyComparator):
    """Wraps a program's interfaces.Comparator."""

    def __init__(self, ob: Any) -> None:
        if not isinstance(ob, IComparator):
            raise TypeError(f"{ob!r} is not of type {IComparator}")
        self._ob = ob

    def _user_object(self) -> Any:
        return self._ob


def _is_bytewise(comparator: Any) -> bool:
    return isinstance(comparator, PyBytewiseComparator)


# --- filter policies -------------------------------------------------------------


class PyFilterPolicy:
    """Base of the filter policies BlockBasedTableFactory takes."""

    def _user_object(self) -> Any:
        return self


class PyGenericFilterPolicy(PyFilterPolicy):
    """Wraps a program's interfaces.FilterPolicy."""

    def __init__(self, ob: Any) -> None:
        if not isinstance(ob, IFilterPolicy):
            raise TypeError(f"{ob!r} is not of type {IFilterPolicy}")
        self._ob = ob

    def _user_object(self) -> Any:
        return self._ob


class PyBloomFilterPolicy(PyFilterPolicy):
    """A Bloom filter with bits_per_key bits per key.

    kv0 keeps no SST files to filter, so a table factory holding one is
    inert; the filter itself works when called (its bytes are kv0's own
    format, not RocksDB's): the last byte holds the number of probes, the
    rest the bit array; probes come from one 64-bit BLAKE2b hash split in
    two (double hashing)."""

    def __init__(self, bits_per_key: int) -> None:
        self.bits_per_key = operator.index(bits_per_key)

    def name(self) -> bytes:
        return b"rocksdb.BuiltinBloomFilter"

    def _probes(self) -> int:
        # k = bits_per_key * ln 2 minimises false positives.
        return max(1, min(30, int(self.bits_per_key * 0.69)))

    @staticmethod
    def _hashes(key: bytes) -> tuple[int, int]:
        h = int.from_bytes(hashlib.blake2b(bytes(key), digest_size=8).digest(), "little")
        return h & 0xFFFFFFFF, (h >> 32) | 1

    def create_filter(self, keys: Iterable[bytes]) -> bytes:
        keys = list(keys)
        nbits = max(64, len(keys) * max(self.bits_per_key, 1))
        nbits = (nbits + 7) // 8 * 8
        bits = bytearray(nbits // 8)
        k = self._probes()
        for key in keys:
            h1, h2 = self._hashes(key)
            for i in range(k):
                bit = (h1 + i * h2) % nbits
                bits[bit // 8] |= 1 << (bit % 8)
        return bytes(bits) + bytes([k])

    def key_may_match(self, key: bytes, filter_: bytes) -> bool:
        filter_ = bytes(filter_)
        if len(filter_) < 2:
            return True  # not a filter this policy made: it cannot rule the key out
        bits, k = filter_[:-1], filter_[-1]
        nbits = len(bits) * 8
        h1, h2 = self._hashes(key)
        for i in range(k):
            bit = (h1 + i * h2) % nbits
            if not bits[bit // 8] & (1 << (bit % 8)):
                return False
        return True


BloomFilterPolicy = PyBloomFilterPolicy


# --- merge operators and slice transforms -------------------------------------


class PyMergeOperator:
    """Wraps a program's merge operator. Options accept it; opening a
    database with it raises NotSupported, kv0 has no merge operators."""

    def __init__(self, ob: Any) -> None:
        if not isinstance(ob, (IAssociativeMergeOperator, IMergeOperator)):
            raise TypeError(
                f"{ob!r} is not of this types {(IAssociativeMergeOperator, IMergeOperator)}")
        self._ob = ob

    def _user_object(self) -> Any:
        return self._ob


class PySliceTransform:
    """Wraps a program's prefix extractor. kv0 keeps it: its iterators run in
    total order, which also gives every prefix seek the right keys."""

    def __init__(self, ob: Any) -> None:
        if not isinstance(ob, ISliceTransform):
            raise TypeError(f"{ob!r} is not of type {ISliceTransform}")
        self._ob = ob

    def _user_object(self) -> Any:
        return self._ob


# --- caches, table and memtable factories: inert tuning values -------------------


class _Inert:
    """A RocksDB tuning value: checked like aimrocks checks it, then kept
    unused (kv0 has no block cache, SST format or memtable to tune)."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class PyCache(_Inert):
    """Base of RocksDB's caches."""


class PyLRUCache(PyCache):
    def __init__(self, capacity: int, shard_bits: Optional[int] = None) -> None:
        self.capacity = operator.index(capacity)
        self.shard_bits = None if shard_bits is None else operator.index(shard_bits)


LRUCache = PyLRUCache


class PyTableFactory(_Inert):
    """Base of RocksDB's SST formats."""


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> Any:
    if value not in allowed:
        raise ValueError(f"Unknown {name}: {value}")
    return value


def _optional_cache(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, PyCache):
        raise TypeError(f"{name} must be a Cache object, not {value!r}")
    return value


class BlockBasedTableFactory(PyTableFactory):
    def __init__(self, index_type: str = "binary_search", hash_index_allow_collision: bool = True,
                 checksum: str = "crc32", block_cache: Any = None,
                 block_cache_compressed: Any = None, filter_policy: Any = None,
                 no_block_cache: bool = False, block_size: Optional[int] = None,
                 block_size_deviation: Optional[int] = None,
                 block_restart_interval: Optional[int] = None,
                 whole_key_filtering: Optional[bool] = None) -> None:
        self.index_type = _choice("index_type", index_type, ("binary_search", "hash_search"))
        self.hash_index_allow_collision = bool(hash_index_allow_collision)
        self.checksum = _choice("checksum", checksum, ("crc32", "xxhash"))
        self.block_cache = _optional_cache("block_cache", block_cache)
        self.block_cache_compressed = _optional_cache("block_cache_compressed",
                                                      block_cache_compressed)
        if filter_policy is not None and not isinstance(filter_policy, PyFilterPolicy):
            filter_policy = PyGenericFilterPolicy(filter_policy)
        self.filter_policy = filter_policy
        self.no_block_cache = bool(no_block_cache)
        self.block_size = None if block_size is None else operator.index(block_size)
        self.block_size_deviation = (None if block_size_deviation is None
                                     else operator.index(block_size_deviation))
        self.block_restart_interval = (None if block_restart_interval is None
                                       else operator.index(block_restart_interval))
        self.whole_key_filtering = None if whole_key_filtering is None else bool(whole_key_filtering)


class PlainTableFactory(PyTableFactory):
    def __init__(self, user_key_len: int = 0, bloom_bits_per_key: int = 10,
                 hash_table_ratio: float = 0.75, index_sparseness: int = 10,
                 huge_page_tlb_size: int = 0, encoding_type: str = "plain",
                 full_scan_mode: bool = False) -> None:
        self.user_key_len = operator.index(user_key_len)
        self.bloom_bits_per_key = operator.index(bloom_bits_per_key)
        self.hash_table_ratio = float(hash_table_ratio)
        self.index_sparseness = operator.index(index_sparseness)
        self.huge_page_tlb_size = operator.index(huge_page_tlb_size)
        self.encoding_type = _choice("encoding_type", encoding_type, ("plain", "prefix"))
        self.full_scan_mode = bool(full_scan_mode)


class PyMemtableFactory(_Inert):
    """Base of RocksDB's memtable representations."""


class SkipListMemtableFactory(PyMemtableFactory):
    def __init__(self) -> None:
        pass


class VectorMemtableFactory(PyMemtableFactory):
    def __init__(self, count: int = 0) -> None:
        self.count = operator.index(count)


class HashSkipListMemtableFactory(PyMemtableFactory):
    def __init__(self, bucket_count: int = 1000000, skiplist_height: int = 4,
                 skiplist_branching_factor: int = 4) -> None:
        self.bucket_count = operator.index(bucket_count)
        self.skiplist_height = operator.index(skiplist_height)
        self.skiplist_branching_factor = operator.index(skiplist_branching_factor)


class HashLinkListMemtableFactory(PyMemtableFactory):
    def __init__(self, bucket_count: int = 50000) -> None:
        self.bucket_count = operator.index(bucket_count)


class CompressionType:
    no_compression = "no_compression"
    snappy_compression = "snappy_compression"
    zlib_compression = "zlib_compression"
    bzip2_compression = "bzip2_compression"
    lz4_compression = "lz4_compression"
    lz4hc_compression = "lz4hc_compression"
    xpress_compression = "xpress_compression"
    zstd_compression = "zstd_compression"
    zstdnotfinal_compression = "zstdnotfinal_compression"
    disable_compression = "disable_compression"


class CompactionPri:
    by_compensated_size = "by_compensated_size"
    oldest_largest_seq_first = "oldest_largest_seq_first"
    oldest_smallest_seq_first = "oldest_smallest_seq_first"
    min_overlapping_ratio = "min_overlapping_ratio"


def _constants(cls: type) -> tuple[str, ...]:
    return tuple(v for k, v in vars(cls).items() if not k.startswith("_"))


# --- options -------------------------------------------------------------------------


def _as_bool(name: str, value: Any) -> bool:
    return bool(value)


def _as_int(name: str, value: Any) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"option {name} takes an integer, not {value!r}") from None


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, (str, bytes)):
        raise TypeError(f"option {name} takes a number, not {value!r}")
    return float(value)


def _as_path(name: str, value: Any) -> str:
    if isinstance(value, bytes):
        return os.fsdecode(value)
    if not isinstance(value, str):
        raise TypeError(f"option {name} takes a path (str), not {value!r}")
    return value


def _as_int_list(name: str, value: Any) -> list[int]:
    return [_as_int(name, v) for v in value]


def _as_dict_update(keys: dict[str, Callable[[str, Any], Any]]):
    def convert(name: str, value: Any, current: dict) -> dict:
        if not isinstance(value, dict):
            raise TypeError(f"option {name} takes a dict, not {value!r}")
        merged = dict(current)
        for key, check in keys.items():
            if key in value:
                merged[key] = check(name, value[key])
        return merged
    return convert


def _stop_style(name: str, value: Any) -> str:
    if value not in ("similar_size", "total_size"):
        raise errors.InvalidArgument(f"Unknown compaction style: {value!r}")
    return value


def _compression(name: str, value: Any) -> str:
    if value not in _constants(CompressionType):
        raise TypeError(f"Unknown compression: {value}")
    return value


def _compaction_pri(name: str, value: Any) -> str:
    if value not in _constants(CompactionPri):
        raise TypeError(f"Unknown compaction pri: {value}")
    return value


def _compaction_style(name: str, value: Any) -> str:
    if value not in ("level", "universal", "fifo", "none"):
        raise errors.InvalidArgument(f"Unknown compaction style: {value!r}")
    return value


def _typed(cls: type, what: str) -> Callable[[str, Any], Any]:
    def convert(name: str, value: Any) -> Any:
        if value is not None and not isinstance(value, cls):
            raise TypeError(f"option {name} takes a {what}, not {value!r}")
        return value
    return convert


def _row_cache(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, PyCache):
        raise TypeError("row_cache must be a Cache object")
    return value


def _wrapped(wrapper: type, base: type) -> Callable[[str, Any], Any]:
    # Stored wrapped, as aimrocks does, so a wrong type fails when it is set;
    # reading the option gives back the program's object.
    def convert(name: str, value: Any) -> Any:
        if value is None or isinstance(value, base):
            return value
        return wrapper(value)
    return convert


# name: (default, converter). The defaults are those aimrocks 0.5.2 reports
# (RocksDB 6.29's); max_mem_compaction_level is an unused RocksDB field that
# aimrocks reads uninitialised, so it reads 0 here.
_COLUMN_FAMILY_OPTIONS: dict[str, tuple[Any, Callable]] = {
    "write_buffer_size": (64 << 20, _as_int),
    "max_write_buffer_number": (2, _as_int),
    "min_write_buffer_number_to_merge": (1, _as_int),
    "compression_opts": ({"window_bits": -14, "level": 32767, "strategy": 0,
                          "max_dict_bytes": 0},
                         _as_dict_update({"window_bits": _as_int, "level": _as_int,
                                          "strategy": _as_int, "max_dict_bytes": _as_int})),
    "compaction_pri": (CompactionPri.min_overlapping_ratio, _compaction_pri),
    "compression": (CompressionType.snappy_compression, _compression),
    "max_compaction_bytes": (0, _as_int),
    "num_levels": (7, _as_int),
    "level0_file_num_compaction_trigger": (4, _as_int),
    "level0_slowdown_writes_trigger": (20, _as_int),
    "level0_stop_writes_trigger": (36, _as_int),
    "max_mem_compaction_level": (0, _as_int),
    "target_file_size_base": (64 << 20, _as_int),
    "target_file_size_multiplier": (1, _as_int),
    "max_bytes_for_level_base": (256 << 20, _as_int),
    "max_bytes_for_level_multiplier": (10.0, _as_float),
    "max_bytes_for_level_multiplier_additional": ([1] * 7, _as_int_list),
    "arena_block_size": (0, _as_int),
    "disable_auto_compactions": (False, _as_bool),
    "compaction_style": ("level", _compaction_style),
    "compaction_options_universal": (
        {"size_ratio": 1, "min_merge_width": 2, "max_merge_width": 4294967295,
         "max_size_amplification_percent": 200, "compression_size_percent": -1,
         "stop_style": "total_size"},
        _as_dict_update({"size_ratio": _as_int, "min_merge_width": _as_int,
                         "max_merge_width": _as_int,
                         "max_size_amplification_percent": _as_int,
                         "compression_size_percent": _as_int, "stop_style": _stop_style})),
    "max_sequential_skip_in_iterations": (8, _as_int),
    "inplace_update_support": (False, _as_bool),
    "table_factory": (None, _typed(PyTableFactory, "table factory")),
    "memtable_factory": (None, _typed(PyMemtableFactory, "memtable factory")),
    "inplace_update_num_locks": (10000, _as_int),
    "comparator": (None, _wrapped(PyGenericComparator, PyComparator)),  # None: byte-wise
    "merge_operator": (None, _wrapped(PyMergeOperator, PyMergeOperator)),
    "prefix_extractor": (None, _wrapped(PySliceTransform, PySliceTransform)),
}

_DB_OPTIONS: dict[str, tuple[Any, Callable]] = {
    "create_if_missing": (False, _as_bool),
    "error_if_exists": (False, _as_bool),
    "paranoid_checks": (True, _as_bool),
    "max_open_files": (-1, _as_int),
    "use_fsync": (False, _as_bool),
    "db_log_dir": ("", _as_path),
    "wal_dir": ("", _as_path),
    "delete_obsolete_files_period_micros": (6 * 3600 * 10**6, _as_int),
    "max_background_compactions": (-1, _as_int),
    "max_background_flushes": (-1, _as_int),
    "max_log_file_size": (0, _as_int),
    "db_write_buffer_size": (0, _as_int),
    "log_file_time_to_roll": (0, _as_int),
    "keep_log_file_num": (1000, _as_int),
    "max_manifest_file_size": (1 << 30, _as_int),
    "table_cache_numshardbits": (6, _as_int),
    "wal_ttl_seconds": (0, _as_int),
    "wal_size_limit_mb": (0, _as_int),
    "manifest_preallocation_size": (4 << 20, _as_int),
    "enable_write_thread_adaptive_yield": (True, _as_bool),
    "allow_concurrent_memtable_write": (True, _as_bool),
    "allow_mmap_reads": (False, _as_bool),
    "allow_mmap_writes": (False, _as_bool),
    "is_fd_close_on_exec": (True, _as_bool),
    "stats_dump_period_sec": (600, _as_int),
    "advise_random_on_open": (True, _as_bool),
    "use_adaptive_mutex": (False, _as_bool),
    "bytes_per_sync": (0, _as_int),
    "row_cache": (None, _row_cache),
    "skip_checking_sst_file_sizes_on_db_open": (False, _as_bool),
    "skip_stats_update_on_db_open": (False, _as_bool),
}


def _option_property(name: str, default: Any, convert: Callable) -> property:
    takes_current = isinstance(default, dict)

    def get(self: "ColumnFamilyOptions") -> Any:
        value = self._values.get(name, default)
        if isinstance(value, (dict, list)):
            return type(value)(value)  # a copy, as aimrocks builds a new one per read
        if name == "comparator" and value is None:
            return self._bytewise
        if isinstance(value, (PyComparator, PyMergeOperator, PySliceTransform)):
            return value._user_object()
        return value

    def set_(self: "ColumnFamilyOptions", value: Any) -> None:
        if takes_current:
            value = convert(name, value, self._values.get(name, default))
        else:
            value = convert(name, value)
        self._values[name] = value
        self._explicit.add(name)

    return property(get, set_, doc=f"RocksDB's {name} (default {default!r}).")


class ColumnFamilyOptions:
    """The options of one column family, with aimrocks' defaults.

    Unknown names raise AttributeError, as in aimrocks; see the module's
    docstring for the options kv0 honours."""

    __slots__ = ("_values", "_explicit", "_in_use", "_bytewise")

    def __init__(self, **kwargs: Any) -> None:
        object.__setattr__(self, "_values", {})
        object.__setattr__(self, "_explicit", set())
        object.__setattr__(self, "_in_use", False)
        object.__setattr__(self, "_bytewise", PyBytewiseComparator())
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        set_ = ", ".join(f"{n}={getattr(self, n)!r}" for n in sorted(self._explicit))
        return f"{type(self).__name__}({set_})"

    def _check_supported(self, what: str) -> None:
        """Refuses, loudly, what kv0 would otherwise have to ignore."""
        comparator = self._values.get("comparator")
        if comparator is not None and not _is_bytewise(comparator):
            ob = comparator._user_object()
            raise errors.NotSupported(
                f"{what}: custom comparators are not supported (kv0 orders keys byte-wise "
                f"only, so the comparator {_name_of(ob)} cannot be honoured)")
        if self._values.get("merge_operator") is not None:
            ob = self._values["merge_operator"]._user_object()
            raise errors.NotSupported(
                f"{what}: merge operators are not supported (kv0 has none, so the merge "
                f"operator {_name_of(ob)} cannot be honoured)")


for _name, (_default, _convert) in _COLUMN_FAMILY_OPTIONS.items():
    setattr(ColumnFamilyOptions, _name, _option_property(_name, _default, _convert))


class Options(ColumnFamilyOptions):
    """The options of a database, with aimrocks' defaults (so
    create_if_missing is False unless set)."""

    __slots__ = ()

    def _kv0_options(self) -> dict[str, Any]:
        """The kv0 options these RocksDB options stand for."""
        out: dict[str, Any] = {}
        if "write_buffer_size" in self._explicit:
            out["write_buffer_size"] = self.write_buffer_size
        if self.wal_dir:
            out["wal_dir"] = self.wal_dir
        return out


for _name, (_default, _convert) in _DB_OPTIONS.items():
    setattr(Options, _name, _option_property(_name, _default, _convert))
del _name, _default, _convert


def _name_of(ob: Any) -> str:
    try:
        name = ob.name()
    except Exception:
        return repr(ob)
    return repr(name.decode(errors="replace") if isinstance(name, bytes) else name)


# --- column families ----------------------------------------------------------------


class ColumnFamilyHandle(_kvdb.ColumnFamilyHandle):
    """The default column family of one open database (kv0 has no other).

    Valid while its database is open, as in aimrocks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("These can not be constructed from Python")

    @classmethod
    def _of(cls, db: "DB") -> "ColumnFamilyHandle":
        handle = cls.__new__(cls)
        handle._db = weakref.ref(db)
        return handle

    @property
    def name(self) -> bytes:
        return b"default"

    @property
    def id(self) -> int:
        return 0

    @property
    def is_valid(self) -> bool:
        db = self._db()
        return db is not None and not db._closed

    def __repr__(self) -> str:
        state = "valid" if self.is_valid else "invalid"
        return f"<ColumnFamilyHandle name: {self.name}, id: {self.id}, state: {state}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _kvdb.ColumnFamilyHandle) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, _kvdb.ColumnFamilyHandle):
            return self.id < other.id
        return NotImplemented


def _family(column_family: Any, call: str) -> None:
    if column_family is None:
        return
    if not isinstance(column_family, _kvdb.ColumnFamilyHandle):
        raise TypeError(f"{call}: column_family must be a ColumnFamilyHandle, "
                        f"not {type(column_family).__name__}")
    if column_family.name != b"default":
        raise errors.NotSupported(
            f"{call}: column families are not supported (kv0 has only the default one, "
            f"not {column_family.name!r})")


# --- write batches ------------------------------------------------------------------

# RocksDB's WriteBatch serialisation (WriteBatch.data()): a fixed64 sequence
# number, a fixed32 count, then one record per operation: a tag byte and
# varint32-length-prefixed slices.
_TAG_DELETE = 0x00
_TAG_PUT = 0x01
_TAG_MERGE = 0x02
_TAG_LOG_DATA = 0x03
_TAG_SINGLE_DELETE = 0x07
_TAG_NOOP = 0x0D
_TAG_DELETE_RANGE = 0x0F
_TAGS_COLUMN_FAMILY = (0x04, 0x05, 0x06, 0x08, 0x0E)
_HEADER = struct.Struct("<QI")


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise errors.Corruption("bad WriteBatch: a length is cut short")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def _read_slice(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = _read_varint(data, pos)
    if pos + n > len(data):
        raise errors.Corruption("bad WriteBatch: a key or value is cut short")
    return data[pos:pos + n], pos + n


def _decode_batch(data: bytes) -> list[tuple[str, bytes, Optional[bytes]]]:
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise errors.Corruption("malformed WriteBatch (too small)")
    _, count = _HEADER.unpack_from(data)
    ops: list[tuple[str, bytes, Optional[bytes]]] = []
    pos = _HEADER.size
    while pos < len(data):
        tag = data[pos]
        pos += 1
        if tag == _TAG_PUT:
            key, pos = _read_slice(data, pos)
            value, pos = _read_slice(data, pos)
            ops.append(("Put", key, value))
        elif tag in (_TAG_DELETE, _TAG_SINGLE_DELETE):
            # A single delete promises the key was written once since its last
            # delete; a delete gives the same result without the promise.
            key, pos = _read_slice(data, pos)
            ops.append(("Delete", key, None))
        elif tag == _TAG_DELETE_RANGE:
            begin, pos = _read_slice(data, pos)
            end, pos = _read_slice(data, pos)
            ops.append(("DeleteRange", begin, end))
        elif tag == _TAG_LOG_DATA:
            _, pos = _read_slice(data, pos)  # a blob for WAL readers, not an operation
        elif tag == _TAG_NOOP:
            pass
        elif tag == _TAG_MERGE:
            raise errors.NotSupported(
                "WriteBatch data: merge operations are not supported (kv0 has no merge operators)")
        elif tag in _TAGS_COLUMN_FAMILY:
            raise errors.NotSupported(
                "WriteBatch data: column families are not supported (kv0 has only the "
                "default one)")
        else:
            raise errors.Corruption(f"unknown WriteBatch tag {tag:#04x}")
    if len(ops) != count:
        raise errors.Corruption(f"WriteBatch has wrong count: {count} in its header, "
                                f"{len(ops)} operations")
    return ops


class WriteBatch(_kvdb.WriteBatch):
    """Writes applied atomically by DB.write, with aimrocks' methods.

    WriteBatch(data) reads RocksDB's serialised form, data() writes it."""

    def __init__(self, data: Optional[bytes] = None) -> None:
        super().__init__()
        if data is not None:
            for op, key, value in _decode_batch(data):
                if op == "Put":
                    super().put(key, value)
                elif op == "Delete":
                    super().delete(key)
                else:
                    super().delete_range(key, value)

    def put(self, key: Any, value: bytes, column_family: Any = None) -> None:
        _family(column_family, "WriteBatch.put")
        super().put(key, value)

    def merge(self, key: Any, value: bytes, column_family: Any = None) -> None:
        raise errors.NotSupported(
            "WriteBatch.merge: merge operators are not supported (kv0 has none)")

    def delete(self, key: Any, column_family: Any = None) -> None:
        _family(column_family, "WriteBatch.delete")
        super().delete(key)

    def delete_single(self, key: Any, column_family: Any = None) -> None:
        # aimrocks' delete_single writes a plain delete, and so does this.
        _family(column_family, "WriteBatch.delete_single")
        super().delete(key)

    def delete_range(self, begin_key: Any, end_key: Any = None, column_family: Any = None) -> None:
        _family(column_family, "WriteBatch.delete_range")
        super().delete_range(begin_key, end_key)

    def data(self) -> bytes:
        tags = {"Put": _TAG_PUT, "Delete": _TAG_DELETE, "DeleteRange": _TAG_DELETE_RANGE}
        ops = list(_kvdb.WriteBatch.__iter__(self))
        out = bytearray(_HEADER.pack(0, len(ops)))
        for op, key, value in ops:
            out.append(tags[op])
            out += _varint(len(key)) + key
            if value is not None:
                out += _varint(len(value)) + value
        return bytes(out)

    def __iter__(self) -> "WriteBatchIterator":
        return WriteBatchIterator(self)


class WriteBatchIterator:
    """Yields (op, key, value) as aimrocks does: ('Put', key, value) and
    ('Delete', key, b''); a range delete, which aimrocks cannot iterate,
    yields ('DeleteRange', begin, end). It iterates the operations the batch
    held when it was made."""

    def __init__(self, batch: WriteBatch) -> None:
        self._items = [("Delete", key, b"") if op == "Delete" else (op, key, value)
                       for op, key, value in _kvdb.WriteBatch.__iter__(batch)]
        self._pos = 0

    def __iter__(self) -> "WriteBatchIterator":
        return self

    def __next__(self) -> tuple[str, bytes, bytes]:
        if self._pos == len(self._items):
            raise StopIteration
        item = self._items[self._pos]
        self._pos += 1
        return item


# --- iterators ------------------------------------------------------------------------


class Iterator:
    """aimrocks' iterator protocol: next() returns the item and moves on,
    None past the end; iteration stops there."""

    _current_value: Any = None

    def __iter__(self) -> "Iterator":
        return self

    def __next__(self) -> Any:
        item = self.next()
        if item is None:
            raise StopIteration
        return item

    def next(self) -> Any:
        return None

    def get(self) -> Any:
        if self._current_value is None:
            self._current_value = self.next()
        return self._current_value

    def skip(self) -> None:
        self._current_value = None


class BaseIterator(Iterator):
    """Walks one database in key order; unpositioned until a seek."""

    def __init__(self, db: "DB", handle: Any = None) -> None:
        if not isinstance(db, kv0.DB):
            raise TypeError(f"{type(self).__name__} iterates a kv0.aimrocks.DB, not {db!r}")
        self._db = db
        self._it = db._iterator()

    def _item(self) -> Any:
        raise NotImplementedError

    def next(self) -> Any:
        it = self._it
        if not it.valid():
            return None
        item = self._item()
        it.next()
        return item

    def get(self) -> Any:
        if not self._it.valid():
            raise ValueError()
        return self._item()

    def skip(self) -> None:
        if not self._it.valid():
            raise ValueError()
        self._it.next()

    def __reversed__(self) -> "ReversedIterator":
        return ReversedIterator(self)

    def seek_to_first(self) -> None:
        self._it.seek_to_first()

    def seek_to_last(self) -> None:
        self._it.seek_to_last()

    def seek(self, key: bytes) -> None:
        self._it.seek(key)

    def seek_for_prev(self, key: bytes) -> None:
        self._it.seek_for_prev(key)


class KeysIterator(BaseIterator):
    def _item(self) -> bytes:
        return self._it.key()


class ValuesIterator(BaseIterator):
    def _item(self) -> bytes:
        return self._it.value()


class ItemsIterator(BaseIterator):
    def _item(self) -> tuple[bytes, bytes]:
        it = self._it
        return it.key(), it.value()


class ReversedIterator(Iterator):
    """The same position, walked backwards."""

    def __init__(self, it: BaseIterator) -> None:
        if not isinstance(it, BaseIterator):
            raise TypeError(f"ReversedIterator takes a BaseIterator, not {it!r}")
        self._base = it

    def seek_to_first(self) -> None:
        self._base.seek_to_first()

    def seek_to_last(self) -> None:
        self._base.seek_to_last()

    def seek(self, key: bytes) -> None:
        self._base.seek(key)

    def seek_for_prev(self, key: bytes) -> None:
        self._base.seek_for_prev(key)

    def get(self) -> Any:
        return self._base.get()

    def __reversed__(self) -> BaseIterator:
        return self._base

    def next(self) -> Any:
        it = self._base._it
        if not it.valid():
            return None
        item = self._base._item()
        it.prev()
        return item

    def __next__(self) -> Any:
        item = self.next()
        if item is None:
            raise StopIteration
        return item


# --- the database -------------------------------------------------------------------

# RocksDB's database properties (include/rocksdb/db.h). kv0.DB answers some
# from its own statistics; the others describe RocksDB's files, levels,
# memtables and caches, which kv0 does not have, and raise NotSupported
# instead of pretending. Any other name is unknown to RocksDB too: None.
_ROCKSDB_PROPERTIES = frozenset("""
actual-delayed-write-rate aggregated-table-properties background-errors base-level
blob-stats block-cache-capacity block-cache-entry-stats block-cache-pinned-usage
block-cache-usage cf-file-histogram cfstats cfstats-no-file-histogram compaction-pending
cur-size-active-mem-table cur-size-all-mem-tables current-super-version-number dbstats
estimate-live-data-size estimate-num-keys estimate-oldest-key-time
estimate-pending-compaction-bytes estimate-table-readers-mem is-file-deletions-enabled
is-write-stopped levelstats live-blob-file-size live-sst-files-size mem-table-flush-pending
min-log-number-to-keep min-obsolete-sst-number-to-keep num-blob-files
num-deletes-active-mem-table num-deletes-imm-mem-tables num-entries-active-mem-table
num-entries-imm-mem-tables num-immutable-mem-table num-immutable-mem-table-flushed
num-live-versions num-running-compactions num-running-flushes num-snapshots
oldest-snapshot-sequence oldest-snapshot-time options-statistics size-all-mem-tables
sstables stats total-blob-file-size total-sst-files-size
""".split())
_ROCKSDB_LEVEL_PROPERTIES = ("num-files-at-level", "compression-ratio-at-level",
                             "aggregated-table-properties-at-level")


class IDB:
    """aimrocks' interface of a database; DB implements it."""

    def put(self, key, value, sync=False, disable_wal=False, column_family=None):
        raise NotImplementedError

    def delete_single(self, key, sync=False, disable_wal=False, column_family=None):
        raise NotImplementedError

    def delete_range(self, begin_key, end_key, sync=False, disable_wal=False,
                     column_family=None):
        raise NotImplementedError

    def flush(self):
        raise NotImplementedError

    def flush_wal(self, sync=False):
        raise NotImplementedError

    def merge(self, key, value, sync=False, disable_wal=False, column_family=None):
        raise NotImplementedError

    def write(self, batch, sync=False, disable_wal=False):
        raise NotImplementedError

    def get(self, key, column_family=None):
        raise NotImplementedError

    def multi_get(self, keys):
        raise NotImplementedError

    def key_may_exist(self, key, fetch=False, column_family=None):
        raise NotImplementedError

    def iterkeys(self, column_family=None):
        raise NotImplementedError

    def itervalues(self, column_family=None):
        raise NotImplementedError

    def iteritems(self, column_family=None):
        raise NotImplementedError


class DB(kv0.DB, IDB):
    """A kv0 database opened the aimrocks way.

    DB(db_name, opts, column_families=None, read_only=False,
    secondary_path=None, **kv0_options): db_name is a local path or a URI;
    under a local root given to kv0.aimrocks.install(root_uri=...), the data
    lives under that URI instead (see docs/aim.md). kv0_options are kv0's
    options (storage_options, wal_sync, flush_interval, ...) and take
    precedence over those install() set.

    A read-only open follows the writer as RocksDB's secondary instances do
    (try_catch_up_with_primary refreshes), so secondary_path is accepted and
    not needed.
    """

    def __init__(self, db_name: Any, opts: Optional[Options] = None,
                 column_families: Optional[dict] = None, read_only: bool = False,
                 secondary_path: Any = None, **kv0_options: Any) -> None:
        if opts is None:
            opts = Options()
        if not isinstance(opts, Options):
            raise TypeError(f"opts must be a kv0.aimrocks.Options, not {type(opts).__name__}")
        if opts._in_use:
            raise errors.InvalidArgument("Options object is already used by another DB")
        if secondary_path is not None and not read_only:
            raise errors.InvalidArgument("a secondary instance (secondary_path) is read-only")
        name = os.fsdecode(db_name) if isinstance(db_name, (bytes, os.PathLike)) else db_name
        if not isinstance(name, str):
            raise TypeError(f"Wrong type for path: {db_name!r}")
        opts._check_supported(f"DB({name!r})")
        _check_column_families(name, column_families)

        options = _location.default_options()
        options.update(opts._kv0_options())
        for key, value in kv0_options.items():
            if key not in _kvdb.KV0_OPTIONS or key in ("read_only", "create_if_missing"):
                raise errors.InvalidArgument(f"unknown kv0 option {key}")
            _kvdb._check_option(key, value)
            options[key] = value

        create = opts.create_if_missing
        place = _location.resolve(name, read_only=read_only, create=create)
        if place.storage_options is not None:
            options["storage_options"] = {**place.storage_options,
                                          **(options.get("storage_options") or {})}
        if place.uri is None:
            raise _missing(name, read_only)
        if opts.error_if_exists and _location.exists(place.uri, options.get("storage_options")):
            raise errors.DatabaseExists(f"{name}: exists (error_if_exists is true)")
        try:
            super().__init__(place.uri, read_only=read_only, create_if_missing=create, **options)
        except kv0.errors.NotFound as e:
            if options.get("version") is not None or options.get("tag") is not None:
                raise
            raise _missing(name, read_only) from e
        self._aim_name = name
        self._marker = place.marker if not read_only else None
        self._opts = opts
        opts._in_use = True
        self._default_family = ColumnFamilyHandle._of(self)

    # --- writes -------------------------------------------------------------------
    def put(self, key: Any, value: bytes, sync: bool = False, disable_wal: bool = False,
            column_family: Any = None) -> None:
        _family(column_family, "DB.put")
        super().put(key, value, sync, disable_wal)

    def delete(self, key: Any, sync: bool = False, disable_wal: bool = False,
               column_family: Any = None) -> None:
        _family(column_family, "DB.delete")
        super().delete(key, sync, disable_wal)

    def delete_single(self, key: Any, sync: bool = False, disable_wal: bool = False,
                      column_family: Any = None) -> None:
        # As in aimrocks: a plain delete (see WriteBatch.delete_single).
        self.delete(key, sync, disable_wal, column_family)

    def delete_range(self, begin_key: Any, end_key: Any = None, sync: bool = False,
                     disable_wal: bool = False, column_family: Any = None) -> None:
        _family(column_family, "DB.delete_range")
        super().delete_range(begin_key, end_key, sync, disable_wal)

    def merge(self, key: Any, value: bytes, sync: bool = False, disable_wal: bool = False,
              column_family: Any = None) -> None:
        raise errors.NotSupported("DB.merge: merge operators are not supported (kv0 has none)")

    def write(self, batch: WriteBatch, sync: bool = False, disable_wal: bool = False) -> None:
        if not isinstance(batch, _kvdb.WriteBatch):
            raise TypeError(f"write takes a kv0.aimrocks.WriteBatch, not {type(batch).__name__}")
        super().write(batch, sync, disable_wal)

    # --- reads --------------------------------------------------------------------
    def get(self, key: Any, column_family: Any = None) -> Optional[bytes]:
        _family(column_family, "DB.get")
        return super().get(key)

    def key_may_exist(self, key: Any, fetch: bool = False,
                      column_family: Any = None) -> tuple[bool, Optional[bytes]]:
        _family(column_family, "DB.key_may_exist")
        return super().key_may_exist(key, fetch)

    def iterkeys(self, column_family: Any = None) -> KeysIterator:
        _family(column_family, "DB.iterkeys")
        return KeysIterator(self)

    def itervalues(self, column_family: Any = None) -> ValuesIterator:
        _family(column_family, "DB.itervalues")
        return ValuesIterator(self)

    def iteritems(self, column_family: Any = None) -> ItemsIterator:
        _family(column_family, "DB.iteritems")
        return ItemsIterator(self)

    def iterskeys(self, column_families: Iterable[Any]) -> list[KeysIterator]:
        return [self.iterkeys(_required_family(cf)) for cf in column_families]

    def itersvalues(self, column_families: Iterable[Any]) -> list[ValuesIterator]:
        return [self.itervalues(_required_family(cf)) for cf in column_families]

    def itersitems(self, column_families: Iterable[Any]) -> list[ItemsIterator]:
        return [self.iteritems(_required_family(cf)) for cf in column_families]

    def snapshot(self) -> None:
        raise errors.NotSupported(
            "DB.snapshot: snapshots are not supported (kv0 has none; open a past version "
            "instead: kv0.DB(path, read_only=True, version=n))")

    # --- properties and maintenance -------------------------------------------
    def get_property(self, prop: Any, column_family: Any = None) -> Optional[bytes]:
        _family(column_family, "DB.get_property")
        answer = super().get_property(prop)
        if answer is not None:
            return answer
        name = prop.decode() if isinstance(prop, bytes) else str(prop)
        short = name[len("rocksdb."):] if name.startswith("rocksdb.") else None
        if short == "num-snapshots":
            return b"0"
        if short is not None and (short in _ROCKSDB_PROPERTIES
                                  or short.startswith(_ROCKSDB_LEVEL_PROPERTIES)):
            raise errors.NotSupported(
                f"DB.get_property({name!r}): this property describes RocksDB's files, levels, "
                "memtables or caches, which kv0 does not have (its data is a Lance dataset; "
                "DB.stats() reports kv0's own)")
        return None

    def get_live_files_metadata(self) -> list:
        raise errors.NotSupported(
            "DB.get_live_files_metadata: kv0 has no SST files (its data is a Lance dataset; "
            "DB.stats() and DB.versions() describe it)")

    def try_catch_up_with_primary(self) -> None:
        """Reads what other handles committed since (DB.refresh)."""
        self.refresh()

    def compact_range(self, begin: Optional[bytes] = None, end: Optional[bytes] = None,
                      change_level: bool = False, target_level: int = -1,
                      bottommost_level_compaction: str = "if_compaction_filter",
                      column_family: Any = None) -> None:
        """Flushes, then rewrites the whole store as its live rows (kv0
        compacts whole stores; the range and level arguments are checked and
        need nothing more)."""
        _family(column_family, "DB.compact_range")
        if bottommost_level_compaction not in ("skip", "if_compaction_filter", "force"):
            raise ValueError("bottommost_level_compaction is not valid")
        super().compact_range()

    @property
    def options(self) -> Options:
        return self._opts

    # --- column families ------------------------------------------------------
    @property
    def column_families(self) -> list[ColumnFamilyHandle]:
        return [self._default_family]

    def get_column_family(self, name: bytes) -> Optional[ColumnFamilyHandle]:
        if not isinstance(name, bytes):
            raise TypeError(f"a column family name is bytes, not {type(name).__name__}")
        return self._default_family if name == b"default" else None

    def create_column_family(self, name: bytes, copts: Any = None) -> ColumnFamilyHandle:
        raise errors.NotSupported(
            f"DB.create_column_family({name!r}): column families are not supported "
            "(kv0 has only the default one)")

    def drop_column_family(self, weak_handle: Any) -> None:
        raise errors.NotSupported(
            "DB.drop_column_family: column families are not supported (kv0 has only the "
            "default one, which cannot be dropped)")

    # --- lifetime -----------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_closed", True):
            return  # closed already, or the open failed
        super().close()
        self._opts._in_use = False
        if self._marker is not None:
            # Tools that watch the local directory (Aim's indexer) see a change.
            _location.touch(self._marker)

    def __repr__(self) -> str:
        return f"<kv0.aimrocks.DB {getattr(self, '_aim_name', self._path)!r}>"


def _required_family(column_family: Any) -> Any:
    if column_family is None:
        raise TypeError("Cannot convert NoneType to kv0.aimrocks.ColumnFamilyHandle")
    return column_family


def _check_column_families(name: str, column_families: Optional[dict]) -> None:
    if not column_families:
        return
    if not isinstance(column_families, dict):
        raise TypeError(f"column_families must be a dict, not {type(column_families).__name__}")
    for cf_name, cf_options in column_families.items():
        if not isinstance(cf_name, bytes):
            raise TypeError(f"column family name {cf_name!r} is not of type {bytes}!")
        if not isinstance(cf_options, ColumnFamilyOptions):
            raise TypeError(f"column family options {cf_options!r} is not of type "
                            f"{ColumnFamilyOptions}!")
        if cf_name != b"default":
            raise errors.NotSupported(
                f"DB({name!r}): column families are not supported (kv0 has only the "
                f"default one, not {cf_name!r})")
        cf_options._check_supported(f"DB({name!r}), column family b'default'")


def _missing(name: str, read_only: bool) -> errors.NotFound:
    if read_only:
        return errors.DatabaseNotFound(f"{name}: no such database (read-only open)")
    return errors.DatabaseNotCreated(f"{name}: does not exist (create_if_missing is false)")


class Snapshot:
    def __init__(self, db: Any = None) -> None:
        raise errors.NotSupported(
            "Snapshot: snapshots are not supported (kv0 has none; open a past version "
            "instead: kv0.DB(path, read_only=True, version=n))")


class BackupEngine:
    def __init__(self, backup_dir: Any = None) -> None:
        raise errors.NotSupported(
            "BackupEngine: backups are not supported (every kv0 commit is a Lance version; "
            "tag one with DB.create_tag to keep it)")


def repair_db(db_name: Any, opts: Any = None) -> None:
    raise errors.NotSupported(
        "repair_db: repair is not supported (kv0 recovers on open from its write-ahead "
        "log; see docs/operations.md, Recovery)")


def list_column_families(db_name: Any, opts: Any = None) -> list[bytes]:
    """[b'default'] for a database that exists (kv0 has no other family)."""
    name = os.fsdecode(db_name) if isinstance(db_name, (bytes, os.PathLike)) else db_name
    place = _location.resolve(name, read_only=True, create=False)
    if place.uri is None or not _location.exists(place.uri, place.storage_options):
        raise errors.DatabaseNotFound(f"{name}: no such database")
    return [b"default"]


__all__ = [
    "BackupEngine", "BaseIterator", "BlockBasedTableFactory", "BloomFilterPolicy",
    "BytewiseComparator", "ColumnFamilyHandle", "ColumnFamilyOptions", "CompactionPri",
    "CompressionType", "DB", "HashLinkListMemtableFactory", "HashSkipListMemtableFactory",
    "IAssociativeMergeOperator", "IComparator", "IDB", "IFilterPolicy", "IMergeOperator",
    "ISliceTransform", "ItemsIterator", "Iterator", "KeysIterator", "LRUCache", "Options",
    "PlainTableFactory", "PyBloomFilterPolicy", "PyBytewiseComparator", "PyCache",
    "PyComparator", "PyFilterPolicy", "PyGenericComparator", "PyGenericFilterPolicy",
    "PyLRUCache", "PyMemtableFactory", "PyMergeOperator", "PySliceTransform", "PyTableFactory",
    "ReversedIterator", "SkipListMemtableFactory", "Snapshot", "ValuesIterator",
    "VectorMemtableFactory", "WriteBatch", "WriteBatchIterator", "errors", "interfaces",
    "list_column_families", "repair_db", "sys", "traceback", "weakref",
]
