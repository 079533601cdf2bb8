"""aimrocks' exception names, mapped onto kv0's errors.

aimrocks turns each RocksDB status into one of seven classes. Here each name
is the kv0 error raised in the same situation, so ``except
aimrocks.errors.X`` catches what aimrocks would have raised, and ``except
kv0.errors.Y`` keeps working too:

=================  ==========================================================
aimrocks           kv0
=================  ==========================================================
NotFound           kv0.errors.NotFound
Corruption         kv0.errors.Corruption
NotSupported       kv0.errors.NotSupported
InvalidArgument    kv0.errors.InvalidArgument
RocksIOError       kv0.errors.StoreIOError (a failing disk or object store)
MergeInProgress    its own class; never raised, kv0 has no merge operators
Incomplete         its own class; never raised, kv0 reads never stop early
=================  ==========================================================

Where RocksDB and kv0 classify one situation differently, kv0.aimrocks
raises a class derived from both: a read-only open of a missing database is
an I/O error to RocksDB (its CURRENT file cannot be read) and NotFound to
kv0, so it raises DatabaseNotFound.
"""

from kv0 import errors as _kv0

NotFound = _kv0.NotFound
Corruption = _kv0.Corruption
NotSupported = _kv0.NotSupported
InvalidArgument = _kv0.InvalidArgument
RocksIOError = _kv0.StoreIOError


class MergeInProgress(_kv0.Error):
    """RocksDB's MergeInProgress; kv0 has no merge operators, so it never
    occurs."""


class Incomplete(_kv0.Error):
    """RocksDB's Incomplete (a read limited to the block cache); kv0 reads
    always complete, so it never occurs."""


class DatabaseNotFound(NotFound, RocksIOError):
    """A read-only open of a database that does not exist.

    RocksDB reports an I/O error (aimrocks.errors.RocksIOError), kv0 reports
    NotFound; this is both."""


class DatabaseNotCreated(NotFound, InvalidArgument):
    """A writable open of a database that does not exist, without
    create_if_missing.

    RocksDB reports InvalidArgument ("does not exist (create_if_missing is
    false)"), kv0 reports NotFound; this is both."""


class DatabaseExists(InvalidArgument):
    """An open with error_if_exists of a database that exists (RocksDB's
    InvalidArgument)."""


__all__ = [
    "NotFound",
    "Corruption",
    "NotSupported",
    "InvalidArgument",
    "RocksIOError",
    "MergeInProgress",
    "Incomplete",
    "DatabaseNotFound",
    "DatabaseNotCreated",
    "DatabaseExists",
]
