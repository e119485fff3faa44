#!/usr/bin/env bash
# make test-emulated (also part of make test): the CUDA backend on the emulated device
# (docs/CUDA.md) in the normal build folder: the `emulated` target builds the emulated device
# library and the programs linked to it (bin-emu/), sharing every other library with the normal
# build, then ctest runs the entries labelled `emulated`. Needs the CUDA toolkit (nvcc and its
# headers; no GPU): without it, says so and passes. Each phase's wall time goes to
# $DL_TEST_PHASES when set (scripts/test.sh's table).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}

record() {  # record NAME SECONDS STATUS
  [ -n "${DL_TEST_PHASES:-}" ] &&
    printf '%s\t%s\t%s\n' "$1" "$2" "$([ "$3" = 0 ] && echo ok || echo "FAIL (exit $3)")" >> "$DL_TEST_PHASES"
  return 0
}

if ! grep -q '^DL_CUDA_EMULATION:BOOL=ON' "$BUILD/CMakeCache.txt" 2> /dev/null ||
   ! grep -q '^DL_HAVE_CUDA_FOUND:INTERNAL=ON' "$BUILD/CMakeCache.txt" 2> /dev/null; then
  echo "ctest: emulated CUDA device skipped: $BUILD has no CUDA backend (no nvcc found, or DL_CUDA=OFF, or DL_CUDA_EMULATION=OFF)"
  exit 0
fi
t0=$(date +%s)
cmake --build "$BUILD" -j "$JOBS" --target emulated
status=$?
record "emulated build" $(($(date +%s) - t0)) $status
[ $status = 0 ] || exit $status

t0=$(date +%s)
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" -L emulated
status=$?
record "emulated ctest" $(($(date +%s) - t0)) $status
exit $status
