"""aimrocks' build helpers, which locate RocksDB's headers and library for
extensions compiled against aimrocks.

kv0.aimrocks ships neither: build such extensions against the aimrocks
package itself. At run time they work with kv0.aimrocks through
kv0.aimrocks.install(), which loads the C types they import from the
installed aimrocks (see docs/aim.md).
"""

import ctypes  # noqa: F401  (ctypes, glob, os and platform: names aimrocks' module has)
import os  # noqa: F401
import platform  # noqa: F401
from glob import glob  # noqa: F401

from kv0 import errors


def _no_rocksdb(what: str):
    raise errors.NotSupported(
        f"kv0.aimrocks.lib_utils.{what}: kv0 has no RocksDB headers or library to "
        "build against; build the extension against the aimrocks package")


def get_include_dir():
    _no_rocksdb("get_include_dir")


def get_lib_dir():
    _no_rocksdb("get_lib_dir")


def get_libs():
    _no_rocksdb("get_libs")


def get_lib_filename(name, lib_dir):
    _no_rocksdb("get_lib_filename")


def get_lib_filenames():
    _no_rocksdb("get_lib_filenames")


def load_lib(filename):
    _no_rocksdb("load_lib")


def load_libs():
    _no_rocksdb("load_libs")
