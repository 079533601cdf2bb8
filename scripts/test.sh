#!/usr/bin/env bash
# Runs every test: the C++ suites (ctest), the same suites under
# AddressSanitizer and UndefinedBehaviorSanitizer, the concurrent suites under
# ThreadSanitizer, and the Python suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

printf '\n== C++ tests\n'
ctest --test-dir build --output-on-failure -j2

printf '\n== C++ tests under address and undefined-behaviour sanitizers\n'
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKV0_SANITIZE=address,undefined \
  -DKV0_BUILD_TOOLS=OFF >/dev/null
cmake --build build/asan -j2
# Fewer kills in the crash test: every process is slower under ASan.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 KV0_CRASH_ROUNDS=40 \
  ctest --test-dir build/asan --output-on-failure -j2

printf '\n== concurrent C++ tests under the thread sanitizer\n'
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKV0_SANITIZE=thread \
  -DKV0_BUILD_TOOLS=OFF >/dev/null
cmake --build build/tsan -j2 --target kv_test kv_refresh_test lru_cache_test background_test repo_test pipeline_test snapshot_test
tsan_log=build/tsan/tsan.log
: > "$tsan_log"
export TSAN_OPTIONS="exitcode=0 report_signal_unsafe=0 suppressions=$PWD/tests/cpp/tsan.supp"
build/tsan/tests/cpp/lru_cache_test 2>>"$tsan_log"
build/tsan/tests/cpp/background_test --gtest_filter=-*Fork* 2>>"$tsan_log"
build/tsan/tests/cpp/kv_test \
  --gtest_filter='KvTest.ConcurrentWritersAndReaders:*Interval*:*TwoHandles*:*TryGetRacing*' \
  2>>"$tsan_log"
build/tsan/tests/cpp/snapshot_test --gtest_filter=-*Million* 2>>"$tsan_log"
build/tsan/tests/cpp/repo_test \
  --gtest_filter='*Concurrent*' 2>>"$tsan_log"
build/tsan/tests/cpp/pipeline_test --gtest_filter='*Racing*:*DuringItsFlush*' 2>>"$tsan_log"
KV0_RACE_ROUNDS=2 build/tsan/tests/cpp/kv_refresh_test --gtest_filter='*Racing*:*LosesARace*' \
  2>>"$tsan_log"
unset TSAN_OPTIONS
scripts/tsan_report.py "$tsan_log"

printf '\n== kv0 stress: random kills, then injected faults (about 2 minutes)\n'
stress_dir=$(mktemp -d)
build/kv0 stress --dir "$stress_dir/clean" --duration 60
build/kv0 stress --dir "$stress_dir/faults" --duration 60 --faults
rm -rf "$stress_dir"

printf '\n== Python tests\n'
.venv/bin/python -m pytest -q tests/python

printf '\n== the Python peers benchmark, short (its full run: docs/benchmarks.md)\n'
bench/python_peers.sh --keys 3000 --repeat 1 >/dev/null
