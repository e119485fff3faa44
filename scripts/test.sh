#!/usr/bin/env bash
# make test (and .ci/run): every phase of the test run, each timed, and a table of the phases'
# wall times at the end (also when one fails, so a slow or broken phase is visible at once):
#   deps         scripts/install-deps.sh, skipped when its stamp is newer than the script
#   build        the normal build (build/): the tools and the release entries' programs
#   ctest        its `release` entries (a skipped test prints its reason)
#   emulated *   the CUDA backend on the emulated device (make test-emulated)
#   asan/tsan *  the sanitizer builds, their suites and the fuzz targets (scripts/test-sanitize.sh)
# A failing build stops the run; a failing test phase fails it at the end, after the others ran.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
MAKE=${MAKE:-make}
export JOBS

# The tests' scratch folders (TempDir, under TMPDIR) on a tmpfs when there is one with room: the
# suites fsync every checkpoint, metrics line and run file they write (some thousands), ~14 ms
# each on this machine's disk and well under 1 ms on tmpfs. What they check of durability (the
# order of writes, fsyncs and renames; faults at each) is traced and injected (DL_FAULT), not
# left to the disk. DL_TEST_TMPDIR overrides; TMPDIR is kept when no tmpfs has 4 GiB free.
scratch_parent=${DL_TEST_TMPDIR:-}
if [ -z "$scratch_parent" ] && [ -d /dev/shm ] && [ -w /dev/shm ] &&
   [ "$(df --output=avail -k /dev/shm 2> /dev/null | tail -1)" -gt 4194304 ] 2> /dev/null; then
  scratch_parent=/dev/shm
fi
if [ -n "$scratch_parent" ]; then
  TMPDIR=$(mktemp -d "$scratch_parent/dlkit-test.XXXXXX") && export TMPDIR
  echo "test: scratch folders under $TMPDIR" >&2
fi

phase_file=$(mktemp)
export DL_TEST_PHASES="$phase_file"  # scripts/test-sanitize.sh and test-emulated add their rows here
trap 'rm -f "$phase_file"; [ -n "$scratch_parent" ] && rm -rf "$TMPDIR"' EXIT
start_all=$(date +%s)
rc=0

# phase NAME CMD...: runs CMD, appends "NAME seconds result" to the table.
phase() {
  local name=$1 t0 status
  shift
  t0=$(date +%s)
  echo "test: --- $name ---" >&2
  "$@"
  status=$?
  printf '%s\t%s\t%s\n' "$name" "$(($(date +%s) - t0))" "$([ $status = 0 ] && echo ok || echo "FAIL (exit $status)")" >> "$phase_file"
  return $status
}

summary() {
  echo >&2
  echo "test: phase wall times" >&2
  awk -F'\t' '{ printf "test:   %-28s %6d s  %s\n", $1, $2, $3 }' "$phase_file" >&2
  printf 'test:   %-28s %6d s  %s\n' total "$(($(date +%s) - start_all))" "$([ $rc = 0 ] && echo ok || echo FAIL)" >&2
  echo "test: (a build 'beside tests' ran at nice 19 during the test phases; 'the rest' is the wait for it after them)" >&2
}

deps() {
  local stamp=$BUILD/.deps-stamp
  if [ -f "$stamp" ] && [ "$stamp" -nt scripts/install-deps.sh ]; then
    echo "test: dependencies checked before ($stamp is newer than scripts/install-deps.sh)" >&2
    return 0
  fi
  ./scripts/install-deps.sh && mkdir -p "$BUILD" && touch "$stamp"
}

ctest_normal() {
  local status
  # The `release` entries (tests/CMakeLists.txt): what no sanitizer build runs, and what checks the
  # Release build's arithmetic; the rest run under ASan + UBSan. The emulated ones have their phase.
  # One entry more than cores, as for the ASan suites (scripts/test-sanitize.sh): the 19 entries on
  # two cores took 64.0 s at -j2 and 53.5 s at -j3.
  ctest --test-dir "$BUILD" --output-on-failure -j "$((JOBS + 1))" -L '^release$' -LE emulated
  status=$?
  # ctest lists skipped tests without their reason: print the reason each one gave.
  grep -h '^skipped:' "$BUILD/Testing/Temporary/LastTest.log" 2> /dev/null | sort -u | sed 's/^/ctest: /'
  return $status
}

phase deps deps || { rc=1; summary; exit 1; }
# The tools and the programs of the `release` entries (tests/CMakeLists.txt): the other test
# programs run in the sanitizer builds, which compile them. `make` builds everything.
build_release() {
  "$MAKE" --no-print-directory configure BUILD="$BUILD" && cmake --build "$BUILD" -j "$JOBS" --target release-tests
}
phase build build_release || { rc=1; summary; exit 1; }
# The ASan + UBSan build compiles at nice 19 beside the release and emulated tests, on the CPU
# they leave idle (their entries wait on children, pipes and fsyncs: about 14 s of a cold run, and
# the tests beside it ran 2-4 s slower); scripts/test-sanitize.sh then finds it built. Its
# messages are printed once it is done, not among the tests'.
asan_log=$(mktemp)
kill_tree() { local child; for child in $(pgrep -P "$1"); do kill_tree "$child"; done; kill "$1" 2> /dev/null; }
(renice -n 19 -p "$BASHPID" > /dev/null
 DL_ASAN_BUILD_PHASE="ASan build, beside tests" JOBS=$JOBS \
   exec ./scripts/test-sanitize.sh --build-only) > "$asan_log" 2>&1 &
asan_pid=$!
trap 'kill_tree "$asan_pid"; rm -f "$phase_file" "$asan_log"; [ -n "$scratch_parent" ] && rm -rf "$TMPDIR"' EXIT
phase ctest ctest_normal || rc=1
"$MAKE" --no-print-directory test-emulated BUILD="$BUILD" JOBS="$JOBS" || rc=1
t0=$(date +%s)
asan_status=0
wait "$asan_pid" || asan_status=$?
cat "$asan_log" >&2
printf '%s\t%s\t%s\n' "ASan build, the rest" "$(($(date +%s) - t0))" "$([ $asan_status = 0 ] && echo ok || echo "FAIL (exit $asan_status)")" >> "$phase_file"
[ $asan_status = 0 ] || { rc=1; summary; exit 1; }
JOBS=$JOBS ./scripts/test-sanitize.sh || rc=1
summary
exit $rc
