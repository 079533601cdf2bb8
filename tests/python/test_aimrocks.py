"""kv0.aimrocks: aimrocks 0.5.2's public surface over kv0.

The names, defaults and byte strings below were read from the real aimrocks
0.5.2 package (its wheel, introspected); the tests check kv0.aimrocks against
them. install() changes sys.modules, so the tests of it run in a child
interpreter.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import kv0
import kv0.aimrocks as aimrocks
from kv0.aimrocks import errors

# dir(aimrocks) of aimrocks 0.5.2, without the underscored names.
AIMROCKS_NAMES = """
BackupEngine BaseIterator BlockBasedTableFactory BloomFilterPolicy BytewiseComparator
ColumnFamilyHandle ColumnFamilyOptions CompactionPri CompressionType DB
HashLinkListMemtableFactory HashSkipListMemtableFactory IAssociativeMergeOperator IComparator
IDB IFilterPolicy IMergeOperator ISliceTransform ItemsIterator Iterator KeysIterator LRUCache
Options PlainTableFactory PyBloomFilterPolicy PyBytewiseComparator PyCache PyComparator
PyFilterPolicy PyGenericComparator PyGenericFilterPolicy PyLRUCache PyMemtableFactory
PyMergeOperator PySliceTransform PyTableFactory ReversedIterator SkipListMemtableFactory
Snapshot ValuesIterator VectorMemtableFactory WriteBatch WriteBatchIterator errors interfaces
lib_rocksdb list_column_families repair_db sys traceback weakref
""".split()

SUBMODULE_NAMES = {
    "errors": "Corruption Incomplete InvalidArgument MergeInProgress NotFound NotSupported "
              "RocksIOError",
    "interfaces": "ABCMeta AssociativeMergeOperator Comparator FilterPolicy MergeOperator "
                  "SliceTransform abstractmethod",
    "merge_operators": "AssociativeMergeOperator StringAppendOperator UintAddOperator py_struct",
    "lib_utils": "ctypes get_include_dir get_lib_dir get_lib_filename get_lib_filenames "
                 "get_libs glob load_lib load_libs os platform",
}

METHODS = {
    "DB": "close column_families compact_range create_column_family delete delete_range "
          "delete_single drop_column_family flush flush_wal get get_column_family "
          "get_live_files_metadata get_property iteritems iterkeys itersitems iterskeys "
          "itersvalues itervalues key_may_exist merge multi_get options put snapshot "
          "try_catch_up_with_primary write",
    "WriteBatch": "clear count data delete delete_range delete_single merge put",
    "ItemsIterator": "get next seek seek_for_prev seek_to_first seek_to_last skip",
    "ColumnFamilyHandle": "id is_valid name",
}

# Options() of aimrocks 0.5.2: every attribute and its default.
OPTION_DEFAULTS = {
    "write_buffer_size": 67108864, "max_write_buffer_number": 2,
    "min_write_buffer_number_to_merge": 1,
    "compression_opts": {"window_bits": -14, "level": 32767, "strategy": 0, "max_dict_bytes": 0},
    "compaction_pri": "min_overlapping_ratio", "compression": "snappy_compression",
    "max_compaction_bytes": 0, "num_levels": 7, "level0_file_num_compaction_trigger": 4,
    "level0_slowdown_writes_trigger": 20, "level0_stop_writes_trigger": 36,
    "target_file_size_base": 67108864, "target_file_size_multiplier": 1,
    "max_bytes_for_level_base": 268435456, "max_bytes_for_level_multiplier": 10.0,
    "max_bytes_for_level_multiplier_additional": [1, 1, 1, 1, 1, 1, 1],
    "arena_block_size": 0, "disable_auto_compactions": False, "compaction_style": "level",
    "compaction_options_universal": {"size_ratio": 1, "min_merge_width": 2,
                                     "max_merge_width": 4294967295,
                                     "max_size_amplification_percent": 200,
                                     "compression_size_percent": -1, "stop_style": "total_size"},
    "max_sequential_skip_in_iterations": 8, "inplace_update_support": False,
    "table_factory": None, "memtable_factory": None, "inplace_update_num_locks": 10000,
    "merge_operator": None, "prefix_extractor": None,
    "create_if_missing": False, "error_if_exists": False, "paranoid_checks": True,
    "max_open_files": -1, "use_fsync": False, "db_log_dir": "", "wal_dir": "",
    "delete_obsolete_files_period_micros": 21600000000, "max_background_compactions": -1,
    "max_background_flushes": -1, "max_log_file_size": 0, "db_write_buffer_size": 0,
    "log_file_time_to_roll": 0, "keep_log_file_num": 1000, "max_manifest_file_size": 1073741824,
    "table_cache_numshardbits": 6, "wal_ttl_seconds": 0, "wal_size_limit_mb": 0,
    "manifest_preallocation_size": 4194304, "enable_write_thread_adaptive_yield": True,
    "allow_concurrent_memtable_write": True, "allow_mmap_reads": False,
    "allow_mmap_writes": False, "is_fd_close_on_exec": True, "stats_dump_period_sec": 600,
    "advise_random_on_open": True, "use_adaptive_mutex": False, "bytes_per_sync": 0,
    "row_cache": None, "skip_checking_sst_file_sizes_on_db_open": False,
    "skip_stats_update_on_db_open": False,
}

# WriteBatch.data() of aimrocks 0.5.2 after put(b"k", b"v"), delete(b"d"),
# delete_single(b"s"), then also delete_range(b"a", b"c").
ROCKSDB_BATCH = bytes.fromhex("00000000000000000300000001016b0176000164000173")
ROCKSDB_BATCH_WITH_RANGE = bytes.fromhex(
    "00000000000000000400000001016b01760001640001730f01610163")


@pytest.fixture
def wal(tmp_path):
    return {"wal_dir": str(tmp_path / "wal")}


@pytest.fixture
def db(tmp_path, wal):
    handle = aimrocks.DB(str(tmp_path / "db"), aimrocks.Options(create_if_missing=True), **wal)
    yield handle
    handle.close()


def child(code: str, **env: str) -> str:
    """Runs code in a fresh interpreter (install() changes sys.modules);
    returns its stdout."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# --- the surface -------------------------------------------------------------------


def test_every_public_name_of_aimrocks_exists():
    missing = [n for n in AIMROCKS_NAMES if not hasattr(aimrocks, n)]
    assert missing == []
    for module, names in SUBMODULE_NAMES.items():
        sub = getattr(aimrocks, module)
        assert [n for n in names.split() if not hasattr(sub, n)] == [], module
    for cls, names in METHODS.items():
        assert [n for n in names.split() if not hasattr(getattr(aimrocks, cls), n)] == [], cls
    # The same classes, reached the ways aimrocks programs reach them.
    assert aimrocks.lib_rocksdb.DB is aimrocks.DB
    assert aimrocks.BytewiseComparator is aimrocks.PyBytewiseComparator
    assert aimrocks.LRUCache is aimrocks.PyLRUCache
    assert aimrocks.BloomFilterPolicy is aimrocks.PyBloomFilterPolicy
    assert aimrocks.IMergeOperator is aimrocks.interfaces.MergeOperator
    assert issubclass(aimrocks.DB, kv0.DB) and issubclass(aimrocks.DB, aimrocks.IDB)
    assert issubclass(aimrocks.ItemsIterator, aimrocks.BaseIterator)
    assert issubclass(aimrocks.BaseIterator, aimrocks.Iterator)
    assert issubclass(aimrocks.Options, aimrocks.ColumnFamilyOptions)


def test_errors_map_onto_kv0():
    assert errors.NotFound is kv0.errors.NotFound
    assert errors.Corruption is kv0.errors.Corruption
    assert errors.NotSupported is kv0.errors.NotSupported
    assert errors.InvalidArgument is kv0.errors.InvalidArgument
    assert errors.RocksIOError is kv0.errors.StoreIOError
    for name in ("MergeInProgress", "Incomplete"):
        assert issubclass(getattr(errors, name), kv0.errors.Error)
    assert issubclass(errors.DatabaseNotFound, errors.RocksIOError)
    assert issubclass(errors.DatabaseNotFound, kv0.errors.NotFound)
    assert issubclass(errors.DatabaseNotCreated, errors.InvalidArgument)


def test_read_only_open_of_a_missing_database_is_a_rocks_io_error(tmp_path, wal):
    missing = str(tmp_path / "missing")
    # What Aim does for a repository without its index.
    with pytest.raises(aimrocks.errors.RocksIOError, match="no such database"):
        aimrocks.DB(missing, aimrocks.Options(create_if_missing=True), read_only=True, **wal)
    with pytest.raises(kv0.errors.NotFound):
        aimrocks.DB(missing, aimrocks.Options(), read_only=True, **wal)
    # Writable, without create_if_missing (the default): RocksDB's InvalidArgument.
    with pytest.raises(aimrocks.errors.InvalidArgument, match="create_if_missing is false"):
        aimrocks.DB(missing, aimrocks.Options(), **wal)
    with pytest.raises(aimrocks.errors.RocksIOError):
        aimrocks.list_column_families(missing, aimrocks.Options())
    assert not os.path.exists(missing)


def test_error_if_exists(tmp_path, wal):
    path = str(tmp_path / "db")
    aimrocks.DB(path, aimrocks.Options(create_if_missing=True), **wal).close()
    with pytest.raises(aimrocks.errors.InvalidArgument, match="error_if_exists"):
        aimrocks.DB(path, aimrocks.Options(error_if_exists=True), **wal)
    assert aimrocks.list_column_families(path, aimrocks.Options()) == [b"default"]


def test_options_have_aimrocks_defaults():
    opts = aimrocks.Options()
    assert {name: getattr(opts, name) for name in OPTION_DEFAULTS} == OPTION_DEFAULTS
    assert isinstance(opts.comparator, aimrocks.BytewiseComparator)
    cf = aimrocks.ColumnFamilyOptions()
    assert cf.num_levels == 7 and not hasattr(cf, "create_if_missing")


def test_options_check_values_as_aimrocks_does():
    opts = aimrocks.Options(create_if_missing=True, max_open_files=100)
    assert opts.create_if_missing is True and opts.max_open_files == 100
    with pytest.raises(AttributeError):
        opts.no_such_option = 1
    with pytest.raises(AttributeError):
        aimrocks.Options(no_such_option=1)
    with pytest.raises(TypeError):
        opts.max_open_files = "many"
    with pytest.raises(TypeError):
        opts.compression = "brotli"
    opts.compression = aimrocks.CompressionType.zstd_compression
    assert opts.compression == "zstd_compression"
    with pytest.raises(Exception, match="Unknown compaction style"):
        opts.compaction_style = "foo"
    opts.compaction_style = "universal"
    opts.compression_opts = {"level": 3}
    assert opts.compression_opts == {"window_bits": -14, "level": 3, "strategy": 0,
                                     "max_dict_bytes": 0}
    with pytest.raises(TypeError):
        opts.compression_opts = [1, 2]
    opts.compaction_options_universal = {"stop_style": "similar_size", "max_merge_width": 30}
    assert opts.compaction_options_universal["stop_style"] == "similar_size"
    assert opts.compaction_options_universal["size_ratio"] == 1
    with pytest.raises(Exception, match="row_cache must be a Cache"):
        opts.row_cache = object()
    opts.row_cache = cache = aimrocks.LRUCache(2 << 20)
    assert opts.row_cache is cache
    name = b"/tmp/M\xc3\xbcnchen".decode()
    opts.db_log_dir = name
    assert opts.db_log_dir == name


def test_tuning_classes_are_accepted_and_inert(tmp_path, wal):
    opts = aimrocks.Options(create_if_missing=True)
    opts.table_factory = aimrocks.BlockBasedTableFactory(
        block_size=4096, filter_policy=aimrocks.BloomFilterPolicy(10),
        block_cache=aimrocks.LRUCache(100))
    opts.table_factory = aimrocks.PlainTableFactory()
    opts.memtable_factory = aimrocks.VectorMemtableFactory()
    opts.memtable_factory = aimrocks.SkipListMemtableFactory()
    opts.compaction_pri = aimrocks.CompactionPri.by_compensated_size
    opts.paranoid_checks = False
    with pytest.raises(ValueError):
        aimrocks.BlockBasedTableFactory(index_type="btree")
    with pytest.raises(TypeError):
        opts.table_factory = aimrocks.LRUCache(1)
    with aimrocks.DB(str(tmp_path / "db"), opts, **wal) as db:
        db.put(b"a", b"1")
        assert db.get(b"a") == b"1"
        assert db.options is opts

    bloom = aimrocks.BloomFilterPolicy(10)
    keys = [str(i).encode() for i in range(200)]
    filter_ = bloom.create_filter(keys)
    assert all(bloom.key_may_match(k, filter_) for k in keys)
    assert sum(bloom.key_may_match(str(i).encode(), filter_) for i in range(1000, 2000)) < 100


def test_options_object_serves_one_database_at_a_time(db, tmp_path, wal):
    with pytest.raises(Exception, match="Options object is already used by another DB"):
        aimrocks.DB(str(tmp_path / "other"), db.options, **wal)
    opts = db.options
    db.close()
    aimrocks.DB(str(tmp_path / "other"), opts, **wal).close()


# --- the database -------------------------------------------------------------------


def test_reads_and_writes(db):
    assert db.get(b"x") is None
    db.put(b"a", b"1")
    db.put(b"b", b"2", sync=True)
    db.put(b"c", b"3", column_family=db.get_column_family(b"default"))
    assert db.get(key=b"a") == b"1"
    assert db.multi_get([b"a", b"x", b"c"]) == {b"a": b"1", b"x": None, b"c": b"3"}
    assert db.key_may_exist(b"x") == (False, None)
    assert db.key_may_exist(b"x", True) == (False, None)
    assert db.key_may_exist(b"a", True) == (True, b"1")
    db.delete_single(b"a")
    db.delete_range(b"b", b"c")
    assert db.multi_get([b"a", b"b", b"c"]) == {b"a": None, b"b": None, b"c": b"3"}
    db.flush()
    db.flush_wal()
    db.compact_range()
    assert db.get(b"c") == b"3"
    with pytest.raises(TypeError):
        db.put("text", b"v")


def test_iterators_follow_aimrocks_protocol(db):
    for i in range(300):
        db.put(str(i).encode(), str(i * 1000).encode())
    it = db.iterkeys()
    assert isinstance(it, aimrocks.KeysIterator)
    assert list(it) == []  # unpositioned until a seek
    with pytest.raises(ValueError):
        it.get()
    assert it.next() is None
    it.seek_to_last()
    assert list(it) == [b"99"]
    it.seek(b"90")
    assert list(it) == [str(i).encode() for i in range(90, 100)]
    it.seek_for_prev(b"c3")
    assert it.get() == b"99"

    items = db.iteritems()
    items.seek(b"10")
    assert items.get() == (b"10", b"10000")
    assert items.next() == (b"10", b"10000")
    items.skip()
    assert items.get() == (b"101", b"101000")
    items.seek_to_last()
    backwards = list(reversed(items))
    assert backwards[:2] == [(b"99", b"99000"), (b"98", b"98000")]
    assert len(backwards) == 300
    values = db.itervalues()
    values.seek_to_first()
    assert next(values) == b"0"
    [keys] = db.iterskeys([db.column_families[0]])
    keys.seek_to_first()
    assert len(list(keys)) == 300


def test_properties(db):
    for i in range(10):
        db.put(str(i).encode(), b"v")
    assert db.get_property(b"rocksdb.estimate-num-keys") == b"10"
    assert db.get_property(b"rocksdb.stats") is not None
    assert db.get_property(b"rocksdb.num-snapshots") == b"0"
    assert db.get_property(b"does not exist") is None
    # RocksDB's files and levels: kv0 has none, and says so.
    for prop in (b"rocksdb.sstables", b"rocksdb.num-files-at-level0"):
        with pytest.raises(errors.NotSupported, match="RocksDB's files, levels"):
            db.get_property(prop)
    with pytest.raises(errors.NotSupported, match="SST files"):
        db.get_live_files_metadata()


def test_column_family_handles(db):
    [default] = db.column_families
    assert (default.name, default.id, default.is_valid) == (b"default", 0, True)
    assert db.get_column_family(b"default") == default
    assert db.get_column_family(b"A") is None
    with pytest.raises(TypeError):
        aimrocks.ColumnFamilyHandle()
    db.close()
    assert not default.is_valid


def test_secondary_instance_follows_the_writer(db, tmp_path, wal):
    db.put(b"k", b"1", sync=True)
    reader = aimrocks.DB(str(tmp_path / "db"), aimrocks.Options(), read_only=True,
                         secondary_path=str(tmp_path / "secondary"), **wal)
    assert reader.get(b"k") == b"1"
    db.put(b"k", b"2", sync=True)
    reader.try_catch_up_with_primary()
    assert reader.get(b"k") == b"2"
    reader.close()


# --- write batches -------------------------------------------------------------------


def test_write_batch_iterates_as_aimrocks_does(db):
    batch = aimrocks.WriteBatch()
    assert list(batch) == []
    batch.put(b"key1", b"v1")
    batch.put(b"key2", b"v2")
    batch.delete(b"a")
    batch.delete_single(b"key1")
    it = iter(batch)
    batch.delete_range(b"x", b"z")
    assert list(it) == [("Put", b"key1", b"v1"), ("Put", b"key2", b"v2"),
                        ("Delete", b"a", b""), ("Delete", b"key1", b"")]
    assert list(batch)[-1] == ("DeleteRange", b"x", b"z")
    assert batch.count() == 5
    db.write(batch)
    assert db.multi_get([b"key1", b"key2"]) == {b"key1": None, b"key2": b"v2"}


def test_write_batch_data_is_rocksdb_serialisation(db):
    batch = aimrocks.WriteBatch()
    batch.put(b"k", b"v")
    batch.delete(b"d")
    batch.delete_single(b"s")
    assert batch.data() == ROCKSDB_BATCH
    batch.delete_range(b"a", b"c")
    assert batch.data() == ROCKSDB_BATCH_WITH_RANGE
    copy = aimrocks.WriteBatch(ROCKSDB_BATCH_WITH_RANGE)
    assert copy.count() == 4 and copy.data() == ROCKSDB_BATCH_WITH_RANGE
    db.put(b"b", b"old")
    db.write(copy)
    assert db.multi_get([b"k", b"b"]) == {b"k": b"v", b"b": None}
    with pytest.raises(errors.Corruption):
        aimrocks.WriteBatch(b"xx")
    with pytest.raises(errors.Corruption, match="unknown WriteBatch tag"):
        aimrocks.WriteBatch(b"\0" * 8 + b"\1\0\0\0" + b"\x42")
    merged = bytes.fromhex("000000000000000001000000" "02016d0178")  # merge(b"m", b"x")
    with pytest.raises(errors.NotSupported, match="merge"):
        aimrocks.WriteBatch(merged)


# --- what kv0 excludes fails loudly ------------------------------------------------------


class Counter(aimrocks.interfaces.AssociativeMergeOperator):
    def merge(self, key, existing_value, value):
        return True, value

    def name(self):
        return b"counter"


class NumericOrder(aimrocks.interfaces.Comparator):
    def compare(self, a, b):
        return int(a) - int(b)

    def name(self):
        return b"numeric"


def test_merge_operators_are_not_supported(db, tmp_path, wal):
    opts = aimrocks.Options(create_if_missing=True)
    opts.merge_operator = op = aimrocks.merge_operators.UintAddOperator()
    assert opts.merge_operator is op  # an options bag may hold one
    with pytest.raises(errors.NotSupported, match="merge operators.*uint64add"):
        aimrocks.DB(str(tmp_path / "merge"), opts, **wal)
    opts.merge_operator = Counter()
    with pytest.raises(errors.NotSupported, match="merge operator"):
        aimrocks.DB(str(tmp_path / "merge"), opts, **wal)
    with pytest.raises(errors.NotSupported, match="merge operators"):
        db.merge(b"a", b"1")
    with pytest.raises(errors.NotSupported, match="merge operators"):
        aimrocks.WriteBatch().merge(b"a", b"1")
    with pytest.raises(TypeError):
        opts.merge_operator = "uint64add"
    assert not os.path.exists(tmp_path / "merge")
    # The operators themselves still compute, for programs that call them.
    assert aimrocks.merge_operators.StringAppendOperator().merge(b"k", b"a", b"b") == (True, b"a,b")


def test_custom_comparators_are_not_supported(tmp_path, wal):
    opts = aimrocks.Options(create_if_missing=True)
    opts.comparator = NumericOrder()
    assert isinstance(opts.comparator, NumericOrder)
    with pytest.raises(errors.NotSupported, match="custom comparators.*numeric"):
        aimrocks.DB(str(tmp_path / "cmp"), opts, **wal)
    opts.comparator = aimrocks.BytewiseComparator()
    aimrocks.DB(str(tmp_path / "cmp"), opts, **wal).close()
    # kv0.DB refuses them too, instead of ignoring them.
    with pytest.raises(kv0.errors.NotSupported, match="custom comparators"):
        kv0.DB(str(tmp_path / "kv0"), kv0.Options(comparator=NumericOrder()), **wal)
    with pytest.raises(kv0.errors.NotSupported, match="merge operators"):
        kv0.DB(str(tmp_path / "kv0"), kv0.Options(merge_operator=Counter()), **wal)
    kv0.DB(str(tmp_path / "kv0"), kv0.Options(comparator=aimrocks.BytewiseComparator()),
           **wal).close()


def test_column_families_are_not_supported(db, tmp_path, wal):
    with pytest.raises(errors.NotSupported, match="column families"):
        db.create_column_family(b"A", aimrocks.ColumnFamilyOptions())
    with pytest.raises(errors.NotSupported, match="column families"):
        db.drop_column_family(db.column_families[0])
    with pytest.raises(errors.NotSupported, match="column families.*b'A'"):
        aimrocks.DB(str(tmp_path / "cf"), aimrocks.Options(create_if_missing=True),
                    column_families={b"A": aimrocks.ColumnFamilyOptions()}, **wal)
    with pytest.raises(TypeError):
        aimrocks.DB(str(tmp_path / "cf"), aimrocks.Options(create_if_missing=True),
                    column_families={"A": aimrocks.ColumnFamilyOptions()}, **wal)
    # The default family, named explicitly, is fine.
    aimrocks.DB(str(tmp_path / "cf"), aimrocks.Options(create_if_missing=True),
                column_families={b"default": aimrocks.ColumnFamilyOptions()}, **wal).close()
    with pytest.raises(TypeError):
        db.get(b"k", column_family="A")


def test_snapshots_backups_and_repair_are_not_supported(db, tmp_path):
    with pytest.raises(errors.NotSupported, match="snapshots"):
        db.snapshot()
    with pytest.raises(errors.NotSupported, match="snapshots"):
        aimrocks.Snapshot(db)
    with pytest.raises(errors.NotSupported, match="backups"):
        aimrocks.BackupEngine(str(tmp_path / "backup"))
    with pytest.raises(errors.NotSupported, match="repair"):
        aimrocks.repair_db(str(tmp_path / "db"), aimrocks.Options())
    with pytest.raises(errors.NotSupported, match="RocksDB headers"):
        aimrocks.lib_utils.get_include_dir()


# --- install() and the launcher ------------------------------------------------------------


def test_install_makes_aimrocks_kv0(tmp_path):
    out = child("""
        import sys
        import kv0.aimrocks
        assert kv0.aimrocks.install() is kv0.aimrocks
        import aimrocks, aimrocks.errors, aimrocks.interfaces
        from aimrocks.merge_operators import UintAddOperator
        assert aimrocks is kv0.aimrocks
        assert aimrocks.errors is kv0.aimrocks.errors
        assert UintAddOperator is kv0.aimrocks.merge_operators.UintAddOperator
        print(sys.modules["aimrocks.lib_rocksdb"].__name__)
    """)
    # This environment has no aimrocks package, so no native types to load.
    assert out.strip() == "kv0.aimrocks.lib_rocksdb"


def test_sys_modules_alone_is_enough_for_python_programs(tmp_path):
    child("""
        import sys
        import kv0.aimrocks
        sys.modules["aimrocks"] = kv0.aimrocks
        import aimrocks.errors
        from aimrocks.interfaces import Comparator
        import aimrocks.lib_rocksdb as lib
        assert aimrocks.errors is kv0.aimrocks.errors        # not a second copy
        assert aimrocks.errors.__spec__.name == "kv0.aimrocks.errors"
        assert Comparator is kv0.aimrocks.interfaces.Comparator
        assert lib is kv0.aimrocks.lib_rocksdb
    """)


def test_install_refuses_when_aimrocks_is_imported_already():
    child("""
        import sys, types
        sys.modules["aimrocks"] = types.ModuleType("aimrocks")   # the real one, say
        import kv0.aimrocks
        try:
            kv0.aimrocks.install()
        except kv0.errors.NotSupported as e:
            assert "imported already" in str(e)
        else:
            raise AssertionError("install() accepted a foreign aimrocks")
    """)


def test_databases_under_a_root_uri(tmp_path):
    local, store = tmp_path / "local", tmp_path / "store"
    out = child(f"""
        import json, os, shutil
        import kv0.aimrocks
        aimrocks = kv0.aimrocks.install({str(store)!r}, local_root={str(local)!r},
                                        options={{"wal_dir": {str(tmp_path / "wal")!r}}})
        path = {str(local / "meta" / "chunks" / "run1")!r}
        db = aimrocks.DB(path, aimrocks.Options(create_if_missing=True))
        db.put(b"k", b"v")
        db.close()
        assert os.listdir(path) == ["kv0-location.json"]
        uri = json.load(open(os.path.join(path, "kv0-location.json")))["uri"]
        reader = aimrocks.DB(path, aimrocks.Options(), read_only=True)
        assert reader.get(b"k") == b"v"
        reader.close()
        # Removing the directory removes the database, as on local disk.
        shutil.rmtree(path)
        try:
            aimrocks.DB(path, aimrocks.Options(), read_only=True)
        except aimrocks.errors.RocksIOError:
            pass
        else:
            raise AssertionError("opened a removed database")
        db = aimrocks.DB(path, aimrocks.Options(create_if_missing=True))
        assert db.get(b"k") is None
        db.close()
        again = json.load(open(os.path.join(path, "kv0-location.json")))["uri"]
        # Outside the local root, paths are used as they are.
        aimrocks.DB({str(tmp_path / "plain")!r}, aimrocks.Options(create_if_missing=True)).close()
        print(json.dumps([uri, again]))
    """)
    first, second = json.loads(out)
    prefix = f"{store}/meta/chunks/run1/"
    assert first.startswith(prefix) and second.startswith(prefix) and first != second
    assert os.path.isdir(first) and os.path.isdir(second)  # both datasets, in the store
    assert os.path.isdir(tmp_path / "plain")


def test_launcher_runs_scripts_modules_and_code(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import sys
        import aimrocks
        db = aimrocks.DB(sys.argv[1], aimrocks.Options(create_if_missing=True))
        db.put(b"k", b"v")
        db.close()
        print(type(db).__module__)
    """))
    env = {**os.environ, "KV0_WAL_DIR": str(tmp_path / "wal")}
    launcher = [sys.executable, "-m", "kv0.aimrocks"]
    proc = subprocess.run([*launcher, str(script), str(tmp_path / "db")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "kv0.aimrocks.lib_rocksdb"
    proc = subprocess.run(
        [*launcher, "--option", "flush_interval=1", "-c",
         "import aimrocks, sys; d = aimrocks.DB(sys.argv[1], aimrocks.Options(), read_only=True);"
         " print(d.get(b'k').decode())", str(tmp_path / "db")],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "v"
    proc = subprocess.run([*launcher, "no-such-program"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode != 0 and "neither a file nor a console script" in proc.stderr
    shutil.rmtree(tmp_path / "db")
