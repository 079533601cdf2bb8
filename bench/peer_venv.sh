# Sourced by the peer benchmarks' scripts.
#
# peer_venv NAME PACKAGE...: makes (once, and again when the packages change)
# a virtual environment under ~/.cache/kv0/NAME (never .venv) holding the
# given packages, for the interpreter kv0's extension was built for, and
# prints its directory.
#
# run_with_peers NAME SCRIPT ARGS...: runs bench/SCRIPT with the packages in
# the array `peers` (from the environment peer_venv NAME makes) and with kv0:
# the package scripts/setup.sh installed into .venv, reached through a
# directory that holds only a link to it.

peer_root() {
  (cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
}

peer_venv() {
  local name="$1"
  shift
  local root cache py venv
  root="$(peer_root)" || return 1
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/kv0"
  py="$("$root/.venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" ||
    return 1
  venv="$cache/$name/py$py"
  if [[ ! -f $venv/.ready || "$(cat "$venv/.ready")" != "$*" ]]; then
    rm -rf "$venv"
    # The interpreter kv0's extension was built for.
    "$root/.venv/bin/python" -m venv "$venv" >&2 || return 1
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" >&2 || return 1
    echo "$*" > "$venv/.ready"
  fi
  printf '%s\n' "$venv"
}

run_with_peers() {
  local name="$1" script="$2"
  shift 2
  local root venv site link
  root="$(peer_root)"
  venv="$(peer_venv "$name" "${peers[@]}")" || return 1
  site="$("$root/.venv/bin/python" -c 'import kv0, os; print(os.path.dirname(os.path.dirname(kv0.__file__)))')"
  link="$(mktemp -d)"
  ln -s "$site/kv0" "$link/kv0"
  local status=0
  PYTHONPATH="$link" "$venv/bin/python" "$root/bench/$script" "$@" || status=$?
  rm -rf "$link"
  return "$status"
}
