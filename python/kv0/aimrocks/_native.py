"""aimrocks.lib_rocksdb as extensions compiled against aimrocks need it.

A Cython extension that cimports aimrocks.lib_rocksdb (Aim's storage
modules do) looks up, when it loads, every extension type of aimrocks'
native module by name in sys.modules["aimrocks.lib_rocksdb"], and checks
each one's C layout: its size and, for types with cpdef methods, its method
table. No Python class passes those checks, so for such programs install()
loads aimrocks' native module from the installed aimrocks package (its
module code imports aimrocks.errors and aimrocks.interfaces, which are then
kv0.aimrocks') and registers under that name a module holding:

- Iterator: aimrocks' native base type itself. Aim derives its iterators
  from it; they wrap the iterators of kv0.aimrocks.DB.
- every other native type as a shell: a subclass of the same layout whose
  construction returns the kv0.aimrocks object of the same name, so code
  that takes a class from aimrocks.lib_rocksdb still gets kv0, never RocksDB.
- the rest of kv0.aimrocks.lib_rocksdb, unchanged.

Loading the native module loads RocksDB's library into the process; nothing
calls into it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, Optional

from kv0 import errors

NAME = "aimrocks.lib_rocksdb"


def find_native() -> Optional[importlib.machinery.ModuleSpec]:
    """The spec of the installed aimrocks' native module, or None."""
    # PathFinder searches sys.path directly: sys.modules["aimrocks"] is
    # kv0.aimrocks by now, which a normal find would return.
    package = importlib.machinery.PathFinder.find_spec("aimrocks", sys.path)
    if package is None or not package.submodule_search_locations:
        return None
    spec = importlib.machinery.PathFinder.find_spec(NAME, list(package.submodule_search_locations))
    if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        return None
    return spec


def load(surface: types.ModuleType) -> Optional[types.ModuleType]:
    """The module to register as aimrocks.lib_rocksdb, or None when aimrocks
    is not installed."""
    spec = find_native()
    if spec is None:
        return None
    native = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(NAME)
    sys.modules[NAME] = native  # as the import system does while a module runs
    try:
        spec.loader.exec_module(native)
    finally:
        if previous is None:
            sys.modules.pop(NAME, None)
        else:
            sys.modules[NAME] = previous

    shim = types.ModuleType(NAME, f"aimrocks' native types for compiled extensions; "
                                  f"everything else is {surface.__name__}.")
    for name, value in vars(surface).items():
        if not name.startswith("__"):
            setattr(shim, name, value)
    for name, value in vars(native).items():
        if isinstance(value, type) and getattr(value, "__module__", None) == NAME:
            setattr(shim, name, value if name == "Iterator"
                    else _shell(name, value, getattr(surface, name, None)))
    return shim


def _shell(name: str, native: type, target: Any) -> type:
    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if target is None:
            raise errors.NotSupported(
                f"aimrocks.lib_rocksdb.{name} is an aimrocks internal that kv0.aimrocks "
                "does not have")
        return target(*args, **kwargs)

    namespace: dict[str, Any] = {
        "__slots__": (),  # the native layout, unchanged
        "__module__": NAME,
        "__qualname__": name,
        "__doc__": f"Has the layout of aimrocks' native {name}; makes kv0.aimrocks.{name}.",
        "__new__": __new__,
    }
    # Cython finds a type's method table in the type's own dictionary.
    if "__pyx_vtable__" in native.__dict__:
        namespace["__pyx_vtable__"] = native.__dict__["__pyx_vtable__"]
    try:
        return type(name, (native,), namespace)
    except TypeError as e:
        raise errors.NotSupported(
            f"cannot stand in for aimrocks' native {name} ({e}); this aimrocks version "
            "is not one kv0.aimrocks knows") from e
