#!/usr/bin/env bash
# Runs every test: the C++ suites (ctest), the same suites under
# AddressSanitizer and UndefinedBehaviorSanitizer, the concurrent suites under
# ThreadSanitizer, and the Python suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage prints its name; at the end, the wall clock and the CPU time of
# each, so that a slow stage shows in CI's log and so does one that waits
# more than it computes (a candidate to run beside another).
times_file=$(mktemp)
python_pid="" python_log=$(mktemp)
cleanup() {
  rm -f "$times_file" "$python_log"
  if [[ -n $python_pid ]]; then kill "$python_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
# Sets cpu_total to the user + system seconds of this script's finished children.
# `times` runs here, not in a $(...) subshell, which has no children yet.
cpu_seconds() {
  times >"$times_file"
  cpu_total=$(awk 'NR == 2 { s = 0; for (i = 1; i <= NF; i++) { split($i, p, "m"); sub("s", "", p[2]); s += p[1] * 60 + p[2] }
                       printf "%d\n", s }' "$times_file")
}
stage_names=() stage_secs=() stage_cpu=() stage_start=$SECONDS stage_cpu_start=0
stage_end() {
  cpu_seconds
  stage_secs+=($((SECONDS - stage_start))) stage_cpu+=($((cpu_total - stage_cpu_start)))
  stage_start=$SECONDS stage_cpu_start=$cpu_total
}
stage() {
  if ((${#stage_names[@]})); then stage_end; fi
  stage_names+=("$1")
  printf '\n== %s\n' "$1"
}
summary() {
  stage_end
  printf '\n== wall clock and CPU time (user + system) per stage\n'
  for i in "${!stage_names[@]}"; do
    printf '%6d s %6d s cpu  %s\n' "${stage_secs[$i]}" "${stage_cpu[$i]}" "${stage_names[$i]}"
  done
  printf '%6d s %6d s cpu  in all\n' "$SECONDS" "$cpu_total"
}

stage "set-up (scripts/setup.sh)"
scripts/setup.sh

stage "C++ tests"
ctest --test-dir build --output-on-failure -j2

# The Python tests spend most of their time waiting on servers, child
# processes and sockets (about 0.8 of a core on 2026-12-07), so they run
# beside the sanitizer stages and their output is shown where they used to
# run; their stage's time below is what was left to wait for.
.venv/bin/python -m pytest -q --durations=10 tests/python >"$python_log" 2>&1 &
python_pid=$!

stage "C++ tests under address and undefined-behaviour sanitizers (the Python tests running beside)"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKV0_SANITIZE=address,undefined \
  -DKV0_BUILD_TOOLS=OFF >/dev/null
cmake --build build/asan -j2
# Fewer kills in the crash test and fewer steps in the model test: every
# process is slower under ASan. The fork tests run in the plain stage only:
# GCC 12's ASan runtime does not hold its allocator's locks across fork(), so
# a child forked while another thread allocates inherits a held lock and
# hangs (seen: 2 children in 12, stuck in SizeClassAllocator64's
# GetFromAllocator, with Lance linked statically or shared alike).
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$PWD/tests/cpp/lsan.supp \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 KV0_CRASH_ROUNDS=40 \
  KV0_MODEL_STEPS=50000 KV0_SEARCH_QUERIES=300 \
  ctest --test-dir build/asan --output-on-failure -j2 -E '^ForkTest[.]'

stage "concurrent C++ tests under the thread sanitizer"
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKV0_SANITIZE=thread \
  -DKV0_BUILD_TOOLS=OFF >/dev/null
cmake --build build/tsan -j2 --target kv_test kv_refresh_test lru_cache_test background_test repo_test pipeline_test snapshot_test run_search_test \
  auto_cleanup_test
# ignore_noninstrumented_modules: memcpy and the like called from the Rust
# library (not instrumented) are not checked. Without it every hand-over of
# Rust memory between threads was found racy and then suppressed, at a cost
# that grows with the reports: KvTest's automatic-cleanup case took over 20
# minutes instead of 1 s. Races between two accesses of kv0's C++ still show.
export TSAN_OPTIONS="exitcode=0 report_signal_unsafe=0 ignore_noninstrumented_modules=1 suppressions=$PWD/tests/cpp/tsan.supp"
t=build/tsan/tests/cpp
# Two lanes at once, each with its own output and sanitizer log, of about
# equal length (on 2026-12-02, run in two lanes: RepoTest's optimize race
# 428 s, its trackers race 325 s, KvTest's concurrent writers 210 s, the
# racing reloads 86 s, the rest under 40 s each; the optimize race then
# halved its flushes under TSan).
(
  $t/repo_test --gtest_filter='*ConcurrentTrackers*:*FlushCommitsRunsBeside*:*FailedFlushKeeps*'
  $t/lru_cache_test
  $t/background_test --gtest_filter=-*Fork*
  $t/kv_test --gtest_filter='*Interval*:*TwoHandles*:*TryGetRacing*'
  $t/snapshot_test --gtest_filter=-*Million*
  $t/pipeline_test --gtest_filter='*Racing*:*DuringItsFlush*'
  $t/run_search_test --gtest_filter='*Threads*'
) >build/tsan/lane1.out 2>build/tsan/lane1.log &
lane1=$!
(
  $t/repo_test --gtest_filter='*OptimizeKeepsPointsAppendedConcurrently*'
  $t/kv_test --gtest_filter='KvTest.ConcurrentWritersAndReaders'
  KV0_RACE_ROUNDS=2 $t/kv_refresh_test --gtest_filter='*Racing*:*LosesARace*'
  $t/auto_cleanup_test
  $t/kv_test --gtest_filter='*AutomaticCleanup*'
) >build/tsan/lane2.out 2>build/tsan/lane2.log &
lane2=$!
failed=0
wait "$lane1" || failed=1
wait "$lane2" || failed=1
unset TSAN_OPTIONS
cat build/tsan/lane1.out build/tsan/lane2.out
if ((failed)); then
  tail -n 40 build/tsan/lane1.log build/tsan/lane2.log
  echo "a thread-sanitizer suite failed (its output and its log's end are above)" >&2
  exit 1
fi
tsan_log=build/tsan/tsan.log
cat build/tsan/lane1.log build/tsan/lane2.log >"$tsan_log"
scripts/tsan_report.py "$tsan_log"

stage "kv0 stress: random kills, then injected faults (about 2 minutes)"
stress_dir=$(mktemp -d)
build/kv0 stress --dir "$stress_dir/clean" --duration 60
build/kv0 stress --dir "$stress_dir/faults" --duration 60 --faults
rm -rf "$stress_dir"

stage "kv0 bench charts, short: its results are checked (its full run: docs/benchmarks.md)"
build/kv0 bench charts --runs 3 --points 3000 --tail 200 --repeat 1 >/dev/null

stage "kv0 bench search, short: every search must return the brute force's runs (its full run: docs/benchmarks.md)"
build/kv0 bench search --runs 2000 --repeat 2 --slow-repeat 1 >/dev/null

stage "many writers on S3, short: every acknowledged run is checked (its full run: docs/benchmarks.md)"
.venv/bin/python bench/writers_s3.py --writers 2 --seconds 3 >/dev/null

stage "Lance's read paths, short: every way must return the same rows (its full run: docs/benchmarks.md)"
.venv/bin/python bench/lance_read_paths.py --runs 3 --points 3000 --window 100 --tries 1 >/dev/null

stage "Python tests (started before the sanitizer stages)"
python_failed=0
wait "$python_pid" || python_failed=1
python_pid=""
cat "$python_log"
if ((python_failed)); then
  echo "the Python tests failed (their output is above)" >&2
  exit 1
fi

stage "the Python peers benchmark, short (its full run: docs/benchmarks.md)"
bench/python_peers.sh --keys 3000 --repeat 1 >/dev/null
summary
