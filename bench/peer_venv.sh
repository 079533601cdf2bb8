# Sourced by the peer benchmarks' scripts: run_with_peers NAME SCRIPT ARGS...
# runs SCRIPT with the packages in the array `peers`, installed into a
# virtual environment of their own under ~/.cache/kv0/NAME (never .venv), and
# with kv0: the package scripts/setup.sh installed into .venv, reached
# through a directory that holds only a link to it.
run_with_peers() {
  local name="$1" script="$2"
  shift 2
  local root cache py venv site link
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/kv0"
  py="$("$root/.venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  venv="$cache/$name/py$py"
  if [[ ! -f $venv/.ready || "$(cat "$venv/.ready")" != "${peers[*]}" ]]; then
    rm -rf "$venv"
    # The interpreter kv0's extension was built for.
    "$root/.venv/bin/python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${peers[@]}"
    echo "${peers[*]}" > "$venv/.ready"
  fi
  site="$("$root/.venv/bin/python" -c 'import kv0, os; print(os.path.dirname(os.path.dirname(kv0.__file__)))')"
  link="$(mktemp -d)"
  ln -s "$site/kv0" "$link/kv0"
  local status=0
  PYTHONPATH="$link" "$venv/bin/python" "$root/bench/$script" "$@" || status=$?
  rm -rf "$link"
  return "$status"
}
