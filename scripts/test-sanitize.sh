#!/usr/bin/env bash
# make test-sanitize (also part of make test): the test suite under sanitizers, CPU only, built
# with clang at -O1 in separate build folders (docs/RELIABILITY.md):
#   1. ASan + UBSan (+ libFuzzer coverage) in build-asan: every test suite (ctest), then every
#      fuzz target for FUZZ_SECONDS_TEST seconds (default 10) from its seed corpus;
#   2. TSan in build-tsan: the thread pool (test_core) and dist/ (test_dist: Gloo collectives,
#      the launcher, dl-train's ranks).
# Any sanitizer report fails the run. Suppressions (tests/sanitizers/*.supp) cover third-party
# code only. Prints each phase's wall time. --build-only: configure and build build-asan, then stop
# (make fuzz; scripts/test.sh runs it beside the release tests).
# The TSan build compiles at the lowest priority (nice 19) beside the ASan suites and the fuzz
# targets, on the CPU they leave idle (their entries wait on children, pipes and fsyncs; the suites
# keep two cores 98% busy, so a cold run gains about 13 s), and the TSan tests wait for it. A build
# needs no CPU at any moment, so it can take what is left; tests with timeouts are never the ones
# pushed back.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
TSAN_BUILD=${TSAN_BUILD:-build-tsan}
FUZZ_SECONDS_TEST=${FUZZ_SECONDS_TEST:-10}
supp="$PWD/tests/sanitizers"

phase_start=0
phase() { phase_start=$(date +%s); echo "test-sanitize: $*" >&2; }
# phase_end NAME [STATUS]: prints the phase's wall time, and adds it to scripts/test.sh's table.
phase_end() {
  local took=$(( $(date +%s) - phase_start ))
  echo "test-sanitize: $1 took $took s" >&2
  [ -n "${DL_TEST_PHASES:-}" ] &&
    printf '%s\t%s\t%s\n' "$1" "$took" "$([ "${2:-0}" = 0 ] && echo ok || echo "FAIL (exit $2)")" >> "$DL_TEST_PHASES"
  return 0
}

configure() {  # configure BUILD SANITIZERS [extra cmake args]
  local build=$1 sanitize=$2
  shift 2
  [ -f "$build/CMakeCache.txt" ] && return 0
  local generator=()  # Ninja as in the Makefile's configure
  [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja > /dev/null && generator=(-G Ninja)
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_COMPILER=clang++ \
    -DDL_CUDA=OFF -DDL_SANITIZE="$sanitize" "$@" > "$build.configure.log" 2>&1 ||
    { cat "$build.configure.log" >&2; exit 1; }
}

export ASAN_OPTIONS="suppressions=$supp/asan.supp:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1:print_suppressions=0"

# DL_ASAN_BUILD_PHASE: the name of the build's row in the phase table (scripts/test.sh names the
# one it runs beside its tests).
asan_phase=${DL_ASAN_BUILD_PHASE:-ASan + UBSan build}
phase "$asan_phase ($ASAN_BUILD)"
configure "$ASAN_BUILD" address,undefined -DDL_FUZZ=ON
cmake --build "$ASAN_BUILD" -j "$JOBS" > "$ASAN_BUILD.build.log" 2>&1 ||
  { tail -50 "$ASAN_BUILD.build.log" >&2; phase_end "$asan_phase" 1; exit 1; }
phase_end "$asan_phase"
[ "${1:-}" = "--build-only" ] && exit 0

# The TSan build, in the background at nice 19 (above); its row says how long it took beside the
# rest, and its log is $TSAN_BUILD.build.log.
tsan_build() {
  renice -n 19 -p "$BASHPID" > /dev/null  # this subshell and all it starts
  phase_start=$(date +%s)
  configure "$TSAN_BUILD" thread
  local status=0
  cmake --build "$TSAN_BUILD" -j "$JOBS" --target test_core test_dist collectives_worker launcher_worker dl-train \
    > "$TSAN_BUILD.build.log" 2>&1 || status=$?
  phase_end "TSan build, beside tests" $status
  return $status
}
echo "test-sanitize: TSan build ($TSAN_BUILD) beside the ASan tests, at nice 19: test_core, test_dist and what they run" >&2
tsan_build &
tsan_pid=$!
# Stopped with the script (a failing phase, Ctrl-C): the build and every process under it.
kill_tree() { local child; for child in $(pgrep -P "$1"); do kill_tree "$child"; done; kill "$1" 2> /dev/null; }
trap 'kill_tree "$tsan_pid"' EXIT

phase "ASan + UBSan tests"
rc=0 status=0
# Not `docs` (every documented example, run through the tools): the same code the other suites
# run, at several minutes under ASan.
# One entry more than cores: the entries wait on their children, pipes and fsyncs, and at -j2 on
# two cores 15% of the CPU sat idle (the same 100 entries on one build: -j2 215 s, -j3 197 s).
ctest --test-dir "$ASAN_BUILD" --output-on-failure -j "$((JOBS + 1))" -E '^docs(\.examples)?$' || { rc=1 status=1; }
phase_end "ASan + UBSan tests" $status

phase "fuzz targets, ${FUZZ_SECONDS_TEST} s each"
status=0
./scripts/fuzz.sh "$ASAN_BUILD" "$FUZZ_SECONDS_TEST" "$JOBS" || { rc=1 status=1; }
phase_end "fuzz" $status

phase "waiting for the TSan build ($TSAN_BUILD)"
status=0
wait "$tsan_pid" || status=$?
trap - EXIT
phase_end "TSan build, the rest" $status
[ $status = 0 ] || { tail -50 "$TSAN_BUILD.build.log" >&2; exit 1; }

phase "TSan tests"
status=0
ctest --test-dir "$TSAN_BUILD" --output-on-failure -j "$JOBS" -L '^(core|dist)$' || { rc=1 status=1; }
phase_end "TSan tests" $status

[ "$rc" -eq 0 ] && echo "test-sanitize: clean" >&2
exit $rc
