"""kv0.aimrocks: aimrocks' public surface over kv0.

aimrocks is the RocksDB binding the Aim tracker uses (PyPI aimrocks 0.5.2).
This package has every public name it has, so a program written against
aimrocks runs on kv0 once ``aimrocks`` names this package::

    import kv0.aimrocks
    kv0.aimrocks.install()        # before anything imports aimrocks
    import aimrocks               # kv0.aimrocks from here on

``sys.modules["aimrocks"] = kv0.aimrocks`` does the same for pure-Python
programs; install() also loads the C types that extensions compiled against
aimrocks (Aim's) import, and can keep the databases under an object-store
URI. ``python -m kv0.aimrocks [OPTIONS] COMMAND`` runs a program, a module
or a console script (such as ``aim``) that way; see docs/aim.md.

Names differ from aimrocks' behaviour only where kv0 cannot honour a call:
merge operators, column families other than the default, snapshots,
custom comparators, backups and repair raise NotSupported at the call that
asks for them; RocksDB's tuning options and classes are accepted and inert.
lib_rocksdb's docstring has the details.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import traceback  # noqa: F401  (aimrocks' namespace holds sys, traceback and weakref)
import weakref  # noqa: F401
from typing import Any, Optional

from kv0.aimrocks import _location, errors, interfaces, lib_rocksdb, lib_utils, merge_operators
from kv0.aimrocks.lib_rocksdb import (  # noqa: F401
    DB,
    IDB,
    BackupEngine,
    BaseIterator,
    BlockBasedTableFactory,
    BloomFilterPolicy,
    BytewiseComparator,
    ColumnFamilyHandle,
    ColumnFamilyOptions,
    CompactionPri,
    CompressionType,
    HashLinkListMemtableFactory,
    HashSkipListMemtableFactory,
    IAssociativeMergeOperator,
    IComparator,
    IFilterPolicy,
    IMergeOperator,
    ISliceTransform,
    ItemsIterator,
    Iterator,
    KeysIterator,
    LRUCache,
    Options,
    PlainTableFactory,
    PyBloomFilterPolicy,
    PyBytewiseComparator,
    PyCache,
    PyComparator,
    PyFilterPolicy,
    PyGenericComparator,
    PyGenericFilterPolicy,
    PyLRUCache,
    PyMemtableFactory,
    PyMergeOperator,
    PySliceTransform,
    PyTableFactory,
    ReversedIterator,
    SkipListMemtableFactory,
    Snapshot,
    ValuesIterator,
    VectorMemtableFactory,
    WriteBatch,
    WriteBatchIterator,
    list_column_families,
    repair_db,
)

_SUBMODULES = ("errors", "interfaces", "merge_operators", "lib_utils", "lib_rocksdb")


def install(root_uri: Optional[str] = None, *, local_root: Optional[str] = None,
            storage_options: Optional[dict] = None, options: Optional[dict] = None,
            native_types: bool = True):
    """Makes ``import aimrocks`` give kv0.aimrocks in this process; returns it.

    root_uri, local_root: keep every database under the local directory
    local_root in a dataset under root_uri (an object-store prefix such as
    s3://bucket/aim, or any kv0 location), opened with storage_options.
    The local directories stay, each holding the file that names its
    dataset, so programs that list or remove them (Aim does) keep working.

    options: kv0 options (wal_dir, wal_sync, flush_interval, ...) for every
    database opened through kv0.aimrocks; DB's keyword arguments override
    them.

    native_types: when the aimrocks package is installed, load its C types
    for extensions compiled against it (Aim's); see _native.py.

    Call it before anything imports aimrocks: a module that imported the real
    aimrocks would keep using RocksDB, so that raises NotSupported. Calling it
    again replaces the options and adds or replaces the mapping.
    """
    this = sys.modules[__name__]
    current = sys.modules.get("aimrocks")
    if current is not None and current is not this:
        raise errors.NotSupported(
            "kv0.aimrocks.install(): the aimrocks package is imported already, and what "
            "imported it would keep using RocksDB; install before anything imports aimrocks "
            "(python -m kv0.aimrocks runs a program that way)")
    _location.configure(root_uri, local_root, storage_options, options)
    sys.modules["aimrocks"] = this
    for sub in _SUBMODULES[:-1]:
        sys.modules[f"aimrocks.{sub}"] = getattr(this, sub)
    # Unless a shim is there already (install() ran before), or the program
    # imported aimrocks.lib_rocksdb through the alias before calling install().
    if sys.modules.get("aimrocks.lib_rocksdb") in (None, lib_rocksdb):
        from kv0.aimrocks import _native

        shim = _native.load(lib_rocksdb) if native_types else None
        sys.modules["aimrocks.lib_rocksdb"] = shim if shim is not None else lib_rocksdb
    return this


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``import aimrocks.X`` to kv0.aimrocks.X while sys.modules
    names kv0.aimrocks aimrocks, so ``sys.modules["aimrocks"] =
    kv0.aimrocks`` alone is enough: without it, the import system would run
    a second copy of each submodule under the other name."""

    def __init__(self) -> None:
        self._own_specs: dict[str, Any] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if not fullname.startswith("aimrocks.") or sys.modules.get("aimrocks") is not \
                sys.modules.get(__name__):
            return None
        sub = fullname[len("aimrocks."):]
        if sub not in _SUBMODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = sys.modules[f"{__name__}.{spec.name[len('aimrocks.'):]}"]
        self._own_specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system set the module's __spec__ to the alias's; give it
        # back its own. (The module ran when kv0.aimrocks imported it.)
        module.__spec__ = self._own_specs.pop(module.__name__, module.__spec__)


if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.insert(0, _Alias())


__all__ = list(lib_rocksdb.__all__) + ["install", "lib_rocksdb", "lib_utils", "merge_operators"]
