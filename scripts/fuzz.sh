#!/usr/bin/env bash
# Runs every libFuzzer target of a DL_FUZZ build (tests/fuzz) for SECONDS each, JOBS at a time,
# from its committed seed corpus (tests/fuzz/corpus/<target>/, never modified: new inputs go to
# BUILD/fuzz-work/<target>/). Prints one row per target (executions, exec/s, coverage edges,
# features, corpus size, crashes) and a total; exits 1 when any target found a crash, leaving the
# input in BUILD/fuzz-crashes/ (add it to the corpus and fix the parser: docs/RELIABILITY.md).
#   scripts/fuzz.sh BUILD SECONDS [JOBS]     (make test: 15 s each; make fuzz: FUZZ_SECONDS)
#   FUZZ_TARGETS="fuzz_csv fuzz_config" scripts/fuzz.sh ...   (only those)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: scripts/fuzz.sh BUILD SECONDS [JOBS]}
SECONDS_EACH=${2:?usage: scripts/fuzz.sh BUILD SECONDS [JOBS]}
JOBS=${3:-$(nproc)}
targets=${FUZZ_TARGETS:-$(cd "$BUILD/fuzz" && ls fuzz_* 2>/dev/null | sort)}
[ -n "$targets" ] || { echo "fuzz: no targets in $BUILD/fuzz (configure with -DDL_FUZZ=ON)" >&2; exit 2; }
logs="$BUILD/fuzz-logs" crashes="$BUILD/fuzz-crashes"
mkdir -p "$logs" "$crashes"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {
  local t=$1 work="$BUILD/fuzz-work/$1"
  mkdir -p "$work"
  rm -f "$crashes/$t-"*  # this run's findings only
  # -rss_limit_mb: an input that makes a parser allocate gigabytes is a finding, not a slow run.
  "$BUILD/fuzz/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/$t-" "$work" "tests/fuzz/corpus/$t" > "$logs/$t.log" 2>&1 || true
}
export -f run_one
export BUILD SECONDS_EACH crashes logs
printf '%s\n' $targets | xargs -P "$JOBS" -I{} bash -c 'run_one {}'

printf '%-26s %12s %9s %7s %7s %7s %8s\n' target executions exec/s cov ft corpus crashes
total=0 failed=0
for t in $targets; do
  log="$logs/$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  done_line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$done_line")
  found=$(ls "$crashes" | grep -c "^$t-" || true)
  found=${found:-0}
  if grep -qE 'ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|libFuzzer)|runtime error:|fuzz property violated' "$log"; then
    found=$((found > 0 ? found : 1))
  fi
  [ -n "$execs" ] || { execs=0; found=$((found > 0 ? found : 1)); }
  printf '%-26s %12s %9s %7s %7s %7s %8s\n' "$t" "$execs" "$((execs / SECONDS_EACH))" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$found"
  total=$((total + execs))
  if [ "$found" -gt 0 ]; then
    failed=1
    echo "fuzz: $t failed; its log: $log; inputs: $(ls "$crashes" | grep "^$t-" | sed "s|^|$crashes/|" | tr '\n' ' ')" >&2
    grep -m5 -E 'ERROR:|runtime error:|fuzz property violated|terminate called|what\(\)' "$log" >&2 || true
  fi
done
printf '%-26s %12s\n' total "$total"
exit $failed
