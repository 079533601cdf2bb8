"""Where kv0.aimrocks keeps each database, and the kv0 options it opens
them with.

By default a database lives where its program names it: a local directory
becomes a Lance dataset in that directory, a URI (s3://, memory://, ...) is
used as it is.

A program such as Aim names its databases by local paths and also works on
those directories itself: it lists them to find runs, removes them to delete
a run or rebuild its index, and watches them for changes. To keep such data
on an object store, install(root_uri=..., local_root=...) maps every
database under local_root to a dataset under root_uri. The local directory
stays, holding one small file, kv0-location.json, that names the dataset:

    <local_root>/<rel>/kv0-location.json   {"kv0": 1, "uri": "<root_uri>/<rel>/<id>"}

<id> is new for every database created, so a directory the program removes
and creates again gets a new, empty dataset, as it would on local disk; the
removed one's dataset stays in the store (docs/aim.md says how to find
them). A missing kv0-location.json means the database does not exist.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Optional

import kv0

MARKER = "kv0-location.json"


@dataclass(frozen=True)
class Mapping:
    local_root: str
    root_uri: str
    storage_options: Optional[dict]


@dataclass(frozen=True)
class Place:
    uri: Optional[str]  # None: the database does not exist and is not to be created
    storage_options: Optional[dict]
    marker: Optional[str]  # the local file naming the dataset, for mapped databases


_lock = threading.Lock()
_mappings: list[Mapping] = []
_defaults: dict[str, Any] = {}


def configure(root_uri: Optional[str], local_root: Optional[str],
              storage_options: Optional[dict], options: Optional[dict]) -> None:
    from kv0 import db as _kvdb

    if (root_uri is None) != (local_root is None):
        raise kv0.errors.InvalidArgument(
            "install(): root_uri and local_root go together (local_root is the directory "
            "whose databases live under root_uri)")
    checked: dict[str, Any] = {}
    for name, value in (options or {}).items():
        if name not in _kvdb.KV0_OPTIONS or name in ("read_only", "create_if_missing",
                                                     "version", "tag"):
            raise kv0.errors.InvalidArgument(f"install(): {name} is not a kv0 option it can set "
                                             "for every database")
        _kvdb._check_option(name, value)
        checked[name] = value
    with _lock:
        _defaults.clear()
        _defaults.update(checked)
        if root_uri is not None:
            root = _normal(local_root)
            _mappings[:] = [m for m in _mappings if m.local_root != root]
            _mappings.append(Mapping(root, root_uri.rstrip("/"),
                                     dict(storage_options) if storage_options else None))
            # The longest root wins when roots nest.
            _mappings.sort(key=lambda m: len(m.local_root), reverse=True)


def reset() -> None:
    with _lock:
        _mappings.clear()
        _defaults.clear()


def mappings() -> list[Mapping]:
    with _lock:
        return list(_mappings)


def default_options() -> dict[str, Any]:
    with _lock:
        return dict(_defaults)


def _normal(path: str) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _is_uri(name: str) -> bool:
    return "://" in name


def _mapping_for(path: str) -> Optional[Mapping]:
    with _lock:
        for m in _mappings:
            if path == m.local_root or path.startswith(m.local_root + os.sep):
                return m
    return None


def resolve(name: str, *, read_only: bool, create: bool) -> Place:
    """The dataset behind the database the program calls name."""
    if _is_uri(name) or not _mappings:
        return Place(name, None, None)
    path = _normal(name)
    m = _mapping_for(path)
    if m is None:
        return Place(name, None, None)
    marker = os.path.join(path, MARKER)
    uri = _read_marker(marker)
    if uri is None:
        if read_only or not create:
            return Place(None, m.storage_options, marker)
        rel = os.path.relpath(path, m.local_root).replace(os.sep, "/")
        uri = _write_marker(marker, f"{m.root_uri}/{rel}/{uuid.uuid4().hex}")
    return Place(uri, m.storage_options, marker)


def _read_marker(marker: str) -> Optional[str]:
    try:
        with open(marker, encoding="utf-8") as f:
            content = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise kv0.errors.Corruption(f"{marker}: cannot read where this database lives: {e}")
    uri = content.get("uri") if isinstance(content, dict) else None
    if not isinstance(uri, str) or not uri:
        raise kv0.errors.Corruption(f"{marker}: names no dataset (no \"uri\")")
    return uri


def _write_marker(marker: str, uri: str) -> str:
    """Writes the marker unless another process did first; returns the URI
    the marker names either way."""
    directory = os.path.dirname(marker)
    os.makedirs(directory, exist_ok=True)
    tmp = f"{marker}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"kv0": 1, "uri": uri}, f)
        f.flush()
        os.fsync(f.fileno())
    try:
        try:
            os.link(tmp, marker)  # fails if the marker exists: the first writer wins
        except FileExistsError:
            raise
        except OSError:
            # A file system without hard links: exclusive creation decides
            # instead (a reader racing the write may then see it half done).
            with open(marker, "x", encoding="utf-8") as f:
                json.dump({"kv0": 1, "uri": uri}, f)
    except FileExistsError:
        uri = _read_marker(marker) or uri
    finally:
        os.unlink(tmp)
    return uri


def touch(marker: str) -> None:
    try:
        os.utime(marker)
    except OSError:
        pass  # the program removed the directory; nothing watches it any more


def exists(uri: str, storage_options: Optional[dict]) -> bool:
    """Whether a dataset exists at uri, without loading it."""
    try:
        # Opening the dataset is enough; the stream reads nothing until read.
        stream = kv0.lance.scan(uri, storage_options=storage_options or {})
    except kv0.errors.NotFound:
        return False
    del stream
    return True
