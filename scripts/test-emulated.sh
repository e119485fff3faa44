#!/usr/bin/env bash
# make test-emulated (also part of make test): the CUDA backend on an emulated device
# (docs/CUDA.md): its own build folder ($BUILD-emu), only the targets its tests run, then those
# tests. Needs NVIDIA's headers (no GPU, no CUDA libraries); without them it says so and passes.
# Each phase's wall time goes to $DL_TEST_PHASES when set (scripts/test.sh's table).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
EMU_BUILD=${EMU_BUILD:-$BUILD-emu}
JOBS=${JOBS:-$(nproc)}
TARGETS="dl-train dl-bench dl-shard kernel_fault_worker test_cuda_emulated test_cuda_emulator backend-ops test_cuda test_cuda_host"

record() {  # record NAME SECONDS STATUS
  [ -n "${DL_TEST_PHASES:-}" ] &&
    printf '%s\t%s\t%s\n' "$1" "$2" "$([ "$3" = 0 ] && echo ok || echo "FAIL (exit $3)")" >> "$DL_TEST_PHASES"
  return 0
}

if [ ! -f /usr/local/cuda/include/cuda_runtime.h ] && [ -z "${CUDA_HOME:-}" ]; then
  echo "ctest: emulated CUDA device skipped: NVIDIA's headers (cuda_runtime.h) not found"
  exit 0
fi
t0=$(date +%s)
status=0
if [ ! -f "$EMU_BUILD/CMakeCache.txt" ]; then
  # shellcheck disable=SC2086  # CMAKE_FLAGS is a list of options
  cmake -S . -B "$EMU_BUILD" -DCMAKE_BUILD_TYPE=Release -DDL_CUDA_EMULATION=ON ${CMAKE_FLAGS:-} || status=$?
fi
# shellcheck disable=SC2086  # TARGETS is a list
[ $status = 0 ] && { cmake --build "$EMU_BUILD" -j "$JOBS" --target $TARGETS || status=$?; }
record "emulated build" $(($(date +%s) - t0)) $status
[ $status = 0 ] || exit $status

t0=$(date +%s)
ctest --test-dir "$EMU_BUILD" --output-on-failure -j "$JOBS" -R '^(cuda_emulated.*|cuda_emulator|backend-ops.*|cuda|cuda-host)$'
status=$?
record "emulated ctest" $(($(date +%s) - t0)) $status
exit $status
