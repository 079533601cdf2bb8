"""The two merge operators aimrocks ships, for programs that import them.

kv0 has no merge operators: a database opened with one of these raises
NotSupported, and so do DB.merge and WriteBatch.merge. The classes still
compute their merges when called directly.
"""

import struct as py_struct  # the name aimrocks' module has

from kv0.aimrocks.interfaces import AssociativeMergeOperator

# RocksDB's uint64add keeps the counter as a native-order 64-bit integer.
_UINT64 = py_struct.Struct("Q")


class UintAddOperator(AssociativeMergeOperator):
    """Adds 64-bit unsigned counters."""

    def merge(self, key, existing_value, value):
        if not existing_value:
            return True, value
        total = (_UINT64.unpack(existing_value)[0] + _UINT64.unpack(value)[0]) % (1 << 64)
        return True, _UINT64.pack(total)

    def name(self):
        return b"uint64add"


class StringAppendOperator(AssociativeMergeOperator):
    """Appends values, separated by a comma."""

    def merge(self, key, existing_value, value):
        if not existing_value:
            return True, value
        return True, b",".join((existing_value, value))

    def name(self):
        return b"StringAppendOperator"


__all__ = ["UintAddOperator", "StringAppendOperator"]
