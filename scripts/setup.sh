#!/usr/bin/env bash
# Takes a fresh machine to a full build of kv0: Debian packages, cbindgen,
# npm test servers, the Python virtual environment with the kv0 package and
# the test tools, and the CMake build in build/. Safe to run again: every
# step skips what is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

log() { printf '\n== %s\n' "$*"; }

# --- Debian packages ---------------------------------------------------------
packages=(
  build-essential cmake ninja-build pkg-config protobuf-compiler clang-format
  libabsl-dev libxxhash-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libbenchmark-dev librocksdb-dev mold ccache
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

# --- Rust ------------------------------------------------------------------------
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust (rustup) first" >&2
  exit 1
fi

# --- The build, in the background ---------------------------------------------
# Cargo's build of Lance is the longest step; it starts first, and the C++
# objects compile beside it (the build's own cargo step then waits on cargo's
# lock). None of it needs npm's or pip's downloads, which go on meanwhile.
# Its output is printed when it ends.
mkdir -p build
build_log=build/setup-build.log
log "building kv0 (build/) in the background"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# In a session of its own, so that a failure of this script stops all of it.
setsid bash -c 'set -e
  cmake -P build/lance_c_cargo.cmake &
  cargo=$!
  cmake --build build -j2
  wait "$cargo"' >"$build_log" 2>&1 &
build_pid=$!
trap 'kill -- -"$build_pid" 2>/dev/null || true' EXIT
wait_for_build() {
  local status=0
  wait "$build_pid" || status=$?
  trap - EXIT
  log "building kv0 (build/): output"
  cat "$build_log"
  if ((status)); then
    kill -- -"$build_pid" 2>/dev/null || true  # cargo, if it is still going
    echo "the build failed (its output is above)" >&2
    exit "$status"
  fi
}

if ! command -v cbindgen >/dev/null; then
  log "installing cbindgen (checks the lance-c header)"
  cargo install --locked cbindgen --version 0.29.4
fi

# --- npm test servers (Azurite) -------------------------------------------------
if ! command -v npm >/dev/null; then
  echo "npm not found: install Node.js first" >&2
  exit 1
fi
if [[ ! -x node_modules/.bin/azurite ]]; then
  log "installing npm test servers"
  npm install --no-audit --no-fund --loglevel=error
fi

# --- Python ------------------------------------------------------------------------
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.kv0-tools
tools=(pip "scikit-build-core>=0.10" "nanobind>=2.4" pytest pyarrow "pylance>=14,<15" duckdb
       "moto[server]" polars "gcp-storage-emulator==2026.7.19")
if [[ ! -f $stamp || "$(cat "$stamp")" != "${tools[*]}" ]]; then
  log "installing Python tools"
  .venv/bin/python -m pip install -q --upgrade "${tools[@]}"
  echo "${tools[*]}" > "$stamp"
fi

wait_for_build

log "installing the kv0 Python package into .venv"
.venv/bin/python -m pip install -q --no-build-isolation .

log "ready: $root"
