"""The interfaces an aimrocks program implements to plug code into RocksDB.

kv0.aimrocks accepts objects of these classes wherever aimrocks does (on
Options, in BlockBasedTableFactory), so programs that define them import and
configure unchanged. What kv0 does with them:

- Comparator: only byte-wise order exists; a database opened with any other
  comparator raises NotSupported.
- AssociativeMergeOperator, MergeOperator: kv0 has no merge operators; a
  database opened with one raises NotSupported.
- FilterPolicy: a tuning hint for RocksDB's SST files; kv0 keeps it and
  reads are unaffected.
- SliceTransform (prefix_extractor): kv0 keeps it; iteration stays in total
  order, which is also correct for prefix seeks.

Like aimrocks' classes, these do not refuse instantiation of an incomplete
subclass (aimrocks declares its ABCMeta the Python 2 way, so it has no
effect); calling a method a subclass did not define raises
NotImplementedError.
"""

from abc import ABCMeta, abstractmethod  # noqa: F401  (names aimrocks' module has too)


class Comparator:
    """Orders keys: compare(a, b) returns a negative, zero or positive int."""

    def compare(self, a: bytes, b: bytes) -> int:
        raise NotImplementedError

    def name(self) -> bytes:
        raise NotImplementedError


class AssociativeMergeOperator:
    """merge(key, existing_value, value) returns (ok, new_value)."""

    def merge(self, key: bytes, existing_value, value: bytes):
        raise NotImplementedError

    def name(self) -> bytes:
        raise NotImplementedError


class MergeOperator:
    """full_merge(key, existing_value, operand_list) and
    partial_merge(key, left_operand, right_operand) return (ok, value)."""

    def full_merge(self, key: bytes, existing_value, operand_list):
        raise NotImplementedError

    def partial_merge(self, key: bytes, left_operand: bytes, right_operand: bytes):
        raise NotImplementedError

    def name(self) -> bytes:
        raise NotImplementedError


class FilterPolicy:
    """create_filter(keys) returns bytes; key_may_match(key, filter_) a bool."""

    def name(self) -> bytes:
        raise NotImplementedError

    def create_filter(self, keys):
        raise NotImplementedError

    def key_may_match(self, key: bytes, filter_: bytes) -> bool:
        raise NotImplementedError


class SliceTransform:
    """transform(src) returns (offset, size) of the prefix within src."""

    def name(self) -> bytes:
        raise NotImplementedError

    def transform(self, src: bytes):
        raise NotImplementedError

    def in_domain(self, src: bytes) -> bool:
        raise NotImplementedError

    def in_range(self, dst: bytes) -> bool:
        raise NotImplementedError


__all__ = [
    "Comparator",
    "AssociativeMergeOperator",
    "MergeOperator",
    "FilterPolicy",
    "SliceTransform",
]
