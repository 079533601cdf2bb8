"""Exceptions raised by kv0.

Every failure inside kv0 arrives as one of these. Each also derives from the
built-in exception a caller would catch for that kind of failure, so code
written for ``FileNotFoundError`` or ``OSError`` keeps working.
"""


class Error(Exception):
    """Base class of every kv0 error."""


class NotFound(Error, FileNotFoundError):
    """The database, repository, run, version or tag does not exist."""


class NotSupported(Error, NotImplementedError):
    """The call is not available here, such as a write to a read-only handle."""


class InvalidArgument(Error, ValueError):
    """An argument kv0 cannot accept; nothing was changed."""


class Corruption(Error):
    """Stored bytes failed a check (a checksum or the format)."""


class StoreIOError(Error, OSError):
    """Storage failed: a local disk or an object store."""


class Conflict(Error):
    """A concurrent commit changed what this commit replaces."""


class Busy(Error):
    """A resource is held by someone else."""


__all__ = [
    "Error",
    "NotFound",
    "NotSupported",
    "InvalidArgument",
    "Corruption",
    "StoreIOError",
    "Conflict",
    "Busy",
]
