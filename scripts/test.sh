#!/usr/bin/env bash
# Runs every test: the C++ suites (ctest), the same suites under
# AddressSanitizer and UndefinedBehaviorSanitizer, and the Python suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

printf '\n== C++ tests\n'
ctest --test-dir build --output-on-failure -j2

printf '\n== C++ tests under address and undefined-behaviour sanitizers\n'
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKV0_SANITIZE=address,undefined \
  -DKV0_BUILD_TOOLS=OFF >/dev/null
cmake --build build/asan -j2
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j2

printf '\n== Python tests\n'
.venv/bin/python -m pytest -q tests/python
