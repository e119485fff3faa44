#!/usr/bin/env bash
# One call on a GPU machine: build with the CUDA backend, run the kernel tests, compare 20 training
# steps on the GPU with the CPU (fp32 and bf16), and time a GPT-2 124M step (fp32 and bf16). Prints a short table last; full logs
# go to $OUT (the device runner's output folder) or build-gpu/gpu-check/.
#
#   scripts/gpu-check.sh                # everything
#   STAGES="build test" scripts/gpu-check.sh
#   SANITIZE=1 ...                      # also run the kernel tests under compute-sanitizer
#
# Stages: build test train ranks bench. Each stage's result is one line of the final table; the script
# exits non-zero when any stage failed. Not written yet: the PyTorch comparisons (whole-model
# fwd/bwd against torch on the GPU, tokens/s and MFU against autocast + torch.compile + fused
# AdamW + SDPA).
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-gpu}
STAGES=${STAGES:-"build test train ranks bench"}
LOGS=${OUT:-$BUILD/gpu-check}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$LOGS"
declare -a table=()
failed=0

note() { echo "gpu-check: $*" >&2; }
row() { table+=("$(printf '%-8s %-6s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || [ "$2" = skip ] || failed=1; }
want() { [[ " $STAGES " == *" $1 "* ]]; }

note "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not available')"
nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1 || true

# --- build --------------------------------------------------------------------------------------
if want build; then
  note "configure + build in $BUILD (DL_CUDA=ON, sm_90 unless CMAKE_CUDA_ARCHITECTURES is given)"
  hints=$(scripts/find-cuda-libs.sh)
  start=$(date +%s)
  # shellcheck disable=SC2086
  if cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDL_CUDA=ON $hints > "$LOGS/configure.log" 2>&1 &&
     cmake --build "$BUILD" -j "$JOBS" --target dl-train test_cuda > "$LOGS/build.log" 2>&1; then
    row build ok "$(( $(date +%s) - start )) s; $(grep -c 'dlkit: .*: /' "$LOGS/configure.log") optional libraries found (configure.log)"
    "$BUILD/bin/dl-train" --version > "$LOGS/version.txt" 2>&1 || true
  else
    row build FAIL "see $LOGS/configure.log and build.log"
    tail -30 "$LOGS/build.log" >&2
  fi
fi

# --- test: every op against the CPU backend in f64 -----------------------------------------------
if want test && [ -x "$BUILD/bin/test_cuda" ]; then
  note "kernel tests (tests/cuda)"
  if "$BUILD/bin/test_cuda" > "$LOGS/test_cuda.log" 2>&1; then
    if grep -q "skipped: no CUDA device" "$LOGS/test_cuda.log"; then
      row test skip "$(grep -m1 -o 'skipped: no CUDA device.*' "$LOGS/test_cuda.log")"
    else
      row test ok "$(grep -m1 'test cases:' "$LOGS/test_cuda.log")"
    fi
  else
    # Kernels run asynchronously: rerun synchronizing after every op so the failing op is named.
    DL_CUDA_SYNC=1 "$BUILD/bin/test_cuda" > "$LOGS/test_cuda_sync.log" 2>&1 || true
    row test FAIL "$(grep -m1 'test cases:' "$LOGS/test_cuda.log") (test_cuda.log; DL_CUDA_SYNC=1 rerun: test_cuda_sync.log)"
  fi
  if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer > /dev/null; then
    note "compute-sanitizer memcheck + racecheck over the kernel tests"
    compute-sanitizer --tool memcheck "$BUILD/bin/test_cuda" > "$LOGS/memcheck.log" 2>&1 &&
      row memcheck ok "no errors" || row memcheck FAIL "see memcheck.log"
    compute-sanitizer --tool racecheck "$BUILD/bin/test_cuda" > "$LOGS/racecheck.log" 2>&1 &&
      row racecheck ok "no hazards" || row racecheck FAIL "see racecheck.log"
  fi
fi

# --- train: 20 steps on the GPU against the CPU (fp32 within 1e-4, bf16 within 2%) -------------
# compare_losses REF.jsonl RUN.jsonl LIMIT: prints "ok|FAIL <detail>".
compare_losses() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r and "tokens_per_sec" in r}
ref, run, limit = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
steps = sorted(set(ref) & set(run))
worst = max(abs(run[s] - ref[s]) / abs(ref[s]) for s in steps) if steps else float("inf")
ok = len(steps) == len(ref) and worst < limit
last = steps[-1] if steps else 0
print(("ok" if ok else "FAIL") + f" {len(steps)} steps, worst relative loss difference {worst:.2e} (limit {limit:g}); "
      f"step {last} loss {ref.get(last, float('nan')):.6f} vs {run.get(last, float('nan')):.6f}")
PY
}
if want train && [ -x "$BUILD/bin/dl-train" ]; then
  note "20 training steps of configs/text.toml: cpu fp32, cuda fp32, cuda bf16"
  common=(configs/text.toml --steps 20 --json --quiet --set train.eval_every=0 --set train.checkpoint_every=0
          --set log.every=1 --set log.samples=0)
  rm -rf "$LOGS/run-cpu" "$LOGS/run-cuda" "$LOGS/run-cuda-bf16"
  if "$BUILD/bin/dl-train" "${common[@]}" --device cpu --run-dir "$LOGS/run-cpu" > "$LOGS/train-cpu.jsonl" 2> "$LOGS/train-cpu.err" &&
     "$BUILD/bin/dl-train" "${common[@]}" --device cuda --run-dir "$LOGS/run-cuda" > "$LOGS/train-cuda.jsonl" 2> "$LOGS/train-cuda.err"; then
    verdict=$(compare_losses "$LOGS/train-cpu.jsonl" "$LOGS/train-cuda.jsonl" 1e-4)
    row train "${verdict%% *}" "fp32: ${verdict#* }"
  else
    row train FAIL "dl-train failed: $(tail -1 "$LOGS/train-cuda.err" 2>/dev/null)"
  fi
  if [ -s "$LOGS/train-cpu.jsonl" ] &&
     "$BUILD/bin/dl-train" "${common[@]}" --device cuda --set train.precision=bf16 --run-dir "$LOGS/run-cuda-bf16" \
       > "$LOGS/train-cuda-bf16.jsonl" 2> "$LOGS/train-cuda-bf16.err"; then
    verdict=$(compare_losses "$LOGS/train-cpu.jsonl" "$LOGS/train-cuda-bf16.jsonl" 0.02)
    row train16 "${verdict%% *}" "bf16 vs cpu fp32: ${verdict#* }"
  else
    row train16 FAIL "dl-train bf16 failed: $(tail -1 "$LOGS/train-cuda-bf16.err" 2>/dev/null)"
  fi
fi

# --- ranks: dp=2 and ZeRO 1/2/3 with two ranks on the one GPU against the single-rank GPU run -----
if want ranks && [ -s "${LOGS}/train-cuda.jsonl" ]; then
  # configs/text.toml's batch_size is 16: two ranks of 8 are the same global batch.
  note "two ranks on one GPU (collectives staged through Gloo): dp=2, zero 0-3, against one rank"
  for z in 0 1 2 3; do
    rm -rf "$LOGS/run-dp2-z$z"
    if "$BUILD/bin/dl-train" "${common[@]}" --device cuda --nproc-per-node 2 --set parallel.dp=2 \
         --set parallel.zero=$z --set train.batch_size=8 \
         --run-dir "$LOGS/run-dp2-z$z" > "$LOGS/train-dp2-z$z.jsonl" 2> "$LOGS/train-dp2-z$z.err"; then
      verdict=$(compare_losses "$LOGS/train-cuda.jsonl" "$LOGS/train-dp2-z$z.jsonl" 1e-5)
      row ranks "${verdict%% *}" "dp=2 zero=$z: ${verdict#* }"
    else
      row ranks FAIL "dp=2 zero=$z: $(grep -m1 -i error "$LOGS/train-dp2-z$z.err")"
    fi
  done
fi

# --- bench: GPT-2 124M fp32 and bf16 tokens/s (the correctness-first kernels; no PyTorch comparison yet) ---
if want bench && [ -x "$BUILD/bin/dl-train" ]; then
  for prec in fp32 bf16; do
    note "GPT-2 124M, $prec, batch 8 x 1024, 6 steps"
    rm -rf "$LOGS/run-bench-$prec"
    if "$BUILD/bin/dl-train" configs/gpt2-124m.toml --device cuda --steps 6 --json --quiet --run-dir "$LOGS/run-bench-$prec" \
         --set train.precision=$prec --set train.batch_size=8 --set train.grad_accum=1 --set train.eval_every=0 \
         --set train.checkpoint_every=0 --set log.every=1 > "$LOGS/bench-$prec.jsonl" 2> "$LOGS/bench-$prec.err"; then
      rate=$(python3 -c '
import json, sys
r = [json.loads(l)["tokens_per_sec"] for l in open(sys.argv[1]) if "tokens_per_sec" in l][2:]
r.sort()
print(f"{r[len(r)//2]:.0f}" if r else "nan")' "$LOGS/bench-$prec.jsonl")
      row bench ok "$prec: median $rate tokens/s after 2 warm-up steps (naive attention; bench-$prec.jsonl)"
    else
      row bench FAIL "$prec: $(tail -1 "$LOGS/bench-$prec.err")"
    fi
  done
fi

echo
printf '%-8s %-6s %s\n' stage result detail
for r in "${table[@]}"; do echo "$r"; done
exit $failed
