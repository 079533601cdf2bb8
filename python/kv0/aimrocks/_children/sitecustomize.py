"""Installs kv0.aimrocks in every Python process that python -m kv0.aimrocks
starts, directly or not (Aim's `aim up` runs its web server as a child
`python -m uvicorn`, which would otherwise open kv0's data with RocksDB).

The launcher puts this directory first on PYTHONPATH and the install()
arguments in $KV0_AIMROCKS_INSTALL; Python runs this module at startup.
Failing here stops the process: going on would mean RocksDB reading kv0's
data.
"""

import importlib.machinery
import importlib.util
import json
import os
import sys


def _install() -> None:
    config = json.loads(os.environ["KV0_AIMROCKS_INSTALL"])
    storage_options = json.loads(os.environ.get("KV0_STORAGE_OPTIONS") or "{}") or None
    import kv0.aimrocks

    kv0.aimrocks.install(config.get("root_uri"), local_root=config.get("local_root"),
                         storage_options=storage_options, options=config.get("options"))


def _chain() -> None:
    # Run the sitecustomize this one shadows, if the environment has one.
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("KV0_AIMROCKS_INSTALL"):
    try:
        _install()
    except BaseException as e:  # noqa: BLE001 - any failure must stop the process
        sys.stderr.write(f"kv0.aimrocks: cannot install in this process ({sys.argv!r}): "
                         f"{type(e).__name__}: {e}\n")
        sys.stderr.flush()
        os._exit(70)
_chain()
