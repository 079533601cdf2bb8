"""Runs a program with aimrocks replaced by kv0.aimrocks.

    python -m kv0.aimrocks [OPTIONS] SCRIPT [ARGS...]
    python -m kv0.aimrocks [OPTIONS] -m MODULE [ARGS...]
    python -m kv0.aimrocks [OPTIONS] -c CODE [ARGS...]
    python -m kv0.aimrocks [OPTIONS] CONSOLE_SCRIPT [ARGS...]    e.g. aim runs ls

OPTIONS:
    --root-uri URI --local-root DIR   keep the databases under DIR in datasets under URI
    --storage-option KEY=VALUE        object-store settings for URI (repeatable)
    --option NAME=VALUE               a kv0 option for every database (repeatable);
                                      VALUE is read as JSON when it parses, else as text

Storage options can also come as a JSON object in $KV0_STORAGE_OPTIONS (the
flags override it), which keeps credentials off the command line.

Python processes the program starts (Aim's `aim up` runs its web server as
one) install kv0.aimrocks the same way: the launcher puts
kv0/aimrocks/_children first on PYTHONPATH, whose sitecustomize installs it
from $KV0_AIMROCKS_INSTALL.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from importlib import metadata


def _pairs(values: list[str], flag: str, parse_json: bool) -> dict:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} takes KEY=VALUE, not {item!r}")
        if parse_json:
            try:
                out[key] = json.loads(value)
            except ValueError:
                out[key] = value
        else:
            out[key] = value
    return out


def _children_install(root_uri, local_root, storage_options, options) -> None:
    """Makes the Python processes the program starts install kv0.aimrocks
    too (see _children/sitecustomize.py)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_children")
    # Children of this interpreter find kv0 where this process did: in its
    # site-packages or on the PYTHONPATH they inherit.
    path = [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    os.environ["KV0_AIMROCKS_INSTALL"] = json.dumps(
        {"root_uri": root_uri, "local_root": local_root, "options": options})
    if storage_options:
        os.environ["KV0_STORAGE_OPTIONS"] = json.dumps(storage_options)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m kv0.aimrocks",
        description="Run a program, module or console script with aimrocks replaced by "
                    "kv0.aimrocks.")
    parser.add_argument("--root-uri")
    parser.add_argument("--local-root")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("-m", dest="module", help="run a module as a script")
    what.add_argument("-c", dest="code", help="run this code")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="a script path or a console script name, and its arguments")
    args = parser.parse_args(argv)

    storage_options = json.loads(os.environ.get("KV0_STORAGE_OPTIONS") or "{}")
    storage_options.update(_pairs(args.storage_option, "--storage-option", parse_json=False))

    options = _pairs(args.option, "--option", parse_json=True) or None

    import kv0.aimrocks

    kv0.aimrocks.install(args.root_uri, local_root=args.local_root,
                         storage_options=storage_options or None, options=options)
    _children_install(args.root_uri, args.local_root, storage_options, options)

    rest = list(args.command)
    if args.module is not None:
        sys.argv = [args.module, *rest]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        return
    if args.code is not None:
        sys.argv = ["-c", *rest]
        sys.path.insert(0, "")
        exec(compile(args.code, "<string>", "exec"), {"__name__": "__main__"})
        return
    if not rest:
        parser.error("nothing to run: give a script, -m MODULE, -c CODE or a console script")
    target, *target_args = rest
    if os.path.exists(target):
        sys.argv = [target, *target_args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
        return
    scripts = metadata.entry_points(group="console_scripts", name=target)
    if not scripts:
        parser.error(f"{target!r} is neither a file nor a console script of this environment")
    sys.argv = [target, *target_args]
    sys.exit(next(iter(scripts)).load()())


if __name__ == "__main__":
    main()
