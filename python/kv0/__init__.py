"""kv0: an embedded storage engine on Lance datasets.

kv0.DB is an ordered key-value store (call-compatible with aimrocks);
kv0.aimrocks is aimrocks' whole public surface over it, which runs aimrocks
programs and the Aim tracker on kv0 (docs/aim.md);
kv0.tracking stores experiment runs, parameters and metrics;
kv0.lance gives raw access to Lance datasets through libkv0.
"""

import atexit as _atexit

from kv0 import errors, tracking
from kv0._kv0 import __version__, lance, lance_version, set_lance_log_level
from kv0.db import (
    DB,
    ColumnFamilyHandle,
    ItemsIterator,
    KeysIterator,
    Options,
    ValuesIterator,
    WriteBatch,
)

# Lance's warnings and errors reach the logging module; stop before the
# interpreter goes away, so no Lance thread calls into a dying interpreter.
set_lance_log_level(2)
_atexit.register(set_lance_log_level, 0)

__all__ = [
    "DB",
    "ColumnFamilyHandle",
    "ItemsIterator",
    "KeysIterator",
    "Options",
    "ValuesIterator",
    "WriteBatch",
    "__version__",
    "errors",
    "lance",
    "lance_version",
    "set_lance_log_level",
    "tracking",
]
