#!/usr/bin/env bash
# Runs bench/python_peers.py: kv0.DB beside lmdb, rocksdict, aimrocks, plyvel
# and slatedb, all in one process. The peers live in a virtual environment of
# their own under ~/.cache/kv0/peers-venv (never .venv); kv0 is the package
# scripts/setup.sh installed into .venv, reached through a directory that
# holds only a link to it. Arguments go to python_peers.py.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kv0"
py="$("$root/.venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
venv="$cache/peers-venv/py$py"
peers=(lmdb==3.0.0 rocksdict==0.3.29 aimrocks==0.5.2 plyvel==1.5.1 slatedb==0.17.0
       "moto[server]" boto3)
if [[ ! -f $venv/.ready || "$(cat "$venv/.ready")" != "${peers[*]}" ]]; then
  rm -rf "$venv"
  # The interpreter kv0's extension was built for.
  "$root/.venv/bin/python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${peers[@]}"
  echo "${peers[*]}" > "$venv/.ready"
fi
site="$("$root/.venv/bin/python" -c 'import kv0, os; print(os.path.dirname(os.path.dirname(kv0.__file__)))')"
link="$(mktemp -d)"
trap 'rm -rf "$link"' EXIT
ln -s "$site/kv0" "$link/kv0"
PYTHONPATH="$link" "$venv/bin/python" "$root/bench/python_peers.py" "$@"
