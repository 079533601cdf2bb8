#!/usr/bin/env bash
# Runs kv0's own benchmarks on two builds in turn (A B A B ...), so that a
# build change (a cargo profile, a compiler flag) is judged by what it does
# to speed, on the same machine in the same hour. Then prints every figure
# of both side by side (bench/compare_builds.py).
#
#   bench/compare_builds.sh OUT_DIR BUILD_A PYTHON_A BUILD_B PYTHON_B [ROUNDS]
#
# BUILD_x is a CMake build directory holding the kv0 tool; PYTHON_x an
# interpreter whose kv0 package was built the same way (a second virtual
# environment for B). ROUNDS defaults to 2. Each round runs, for A then B:
# `kv0 bench kv`, `kv0 bench tracking`, bench/python_peers.py with kv0 alone
# and bench/tracking_py_bench.py, each writing OUT_DIR/<round>-<A|B>-<name>.json.
set -euo pipefail
if [[ $# -lt 5 ]]; then
  sed -n '7,13p' "$0" >&2
  exit 2
fi
out="$1"
rounds="${6:-2}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"

run_one() {  # LABEL BUILD PYTHON ROUND
  local label="$1" build="$2" py="$3" r="$4"
  local p="$out/$r-$label"
  echo "== round $r, build $label: kv0 bench kv" >&2
  "$build/kv0" bench kv --json "$p-kv.json" > "$p-kv.txt"
  echo "== round $r, build $label: kv0 bench tracking" >&2
  "$build/kv0" bench tracking --json "$p-tracking.json" > "$p-tracking.txt"
  echo "== round $r, build $label: python_peers.py --engines kv0" >&2
  "$py" "$here/python_peers.py" --engines kv0 --json "$p-python-kv.json" > "$p-python-kv.txt"
  echo "== round $r, build $label: tracking_py_bench.py" >&2
  "$py" "$here/tracking_py_bench.py" --json "$p-python-tracking.json" > "$p-python-tracking.txt"
}

for ((r = 1; r <= rounds; r++)); do
  run_one A "$2" "$3" "$r"
  run_one B "$4" "$5" "$r"
done
"$3" "$here/compare_builds.py" "$out"
