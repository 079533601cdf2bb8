"""kv0: an embedded storage engine on Lance datasets."""

from kv0 import errors
from kv0._kv0 import __version__, lance, lance_version

__all__ = ["__version__", "errors", "lance", "lance_version"]
