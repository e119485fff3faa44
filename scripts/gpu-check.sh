#!/usr/bin/env bash
# On a GPU machine: build with the CUDA backend, run the kernel tests (and the whole GPT against
# PyTorch on the GPU), compare training on the GPU with the CPU, and measure against PyTorch on
# the same GPU. Prints a short table last; full logs go to $OUT (the device runner's output
# folder) or build-gpu/gpu-check/.
#
#   scripts/gpu-check.sh                 # every stage (more than 10 minutes: split it, below)
#   STAGES="build test train ranks long" scripts/gpu-check.sh
#   STAGES="memory dlbench torch kernels" scripts/gpu-check.sh   # reuses build-gpu/
#   SANITIZE=1 ...                       # also run the kernel tests under compute-sanitizer
#
# Stages (issue numbers in brackets):
#   build    configure + build in $BUILD (DL_CUDA=ON, sm_90 unless CMAKE_CUDA_ARCHITECTURES is given)
#   test     tests/cuda: every op against the CPU in f64, the whole GPT against PyTorch on the GPU [4]
#   train    20 steps of configs/text.toml: GPU fp32 vs CPU (1e-4), GPU bf16 and fp16 vs CPU fp32 (2%) [4]
#   ranks    dp=2 with ZeRO 0-3, two ranks on the one GPU, against one rank (1e-5) [4]
#   long     500 steps in bf16 and fp32 on the GPU: final losses within 2% [4]
#   memory   dl-train's device peak (RUN/memory.json) against dl-shard plan, within 10% [6]
#   dlbench  dl-bench gemm bf16 8192^3 and device copy against torch.matmul / copy_, within 5% [5]
#   torch    GPT-2 124M bf16 tokens/s and MFU, dl-train against PyTorch (compile, autocast,
#            fused AdamW, SDPA) in the same call [4]
#   kernels  per-kernel time shares of one 124M bf16 step (Nsight Compute) [4]
#   bench    GPT-2 124M tokens/s in fp32 and bf16 [4]
# Each stage's result is one or more lines of the final table; the script exits non-zero when any
# stage failed. Summaries for docs/PERFORMANCE.md: $LOGS/*.json.
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-gpu}
STAGES=${STAGES:-"build test train ranks long memory dlbench torch kernels bench"}
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
     cmake --build "$BUILD" -j "$JOBS" --target dl-train dl-bench dl-shard test_cuda > "$LOGS/build.log" 2>&1; then
    row build ok "$(( $(date +%s) - start )) s; $(grep -c 'dlkit: .*: /' "$LOGS/configure.log") optional libraries found (configure.log)"
    "$BUILD/bin/dl-train" --version > "$LOGS/version.txt" 2>&1 || true
  else
    row build FAIL "see $LOGS/configure.log and build.log"
    tail -30 "$LOGS/build.log" >&2
  fi
fi

# --- test: every op against the CPU backend in f64 -----------------------------------------------
# The GPU machine's PyTorch (the parity test runs it on the GPU): python3 on the PATH there.
export DL_TORCH_PYTHON=${DL_TORCH_PYTHON:-$(command -v python3)}
if want test && [ -x "$BUILD/bin/test_cuda" ]; then
  note "kernel tests and the GPT against PyTorch on the GPU (tests/cuda; PyTorch: $DL_TORCH_PYTHON)"
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

# The 20-step runs of configs/text.toml (train and ranks stages).
common=(configs/text.toml --steps 20 --json --quiet --set train.eval_every=0 --set train.checkpoint_every=0
        --set log.every=1 --set log.samples=0)
# GPT-2 124M runs: batch 8 x 1024, no accumulation, nothing written but metrics.
gpt2=(configs/gpt2-124m.toml --set train.batch_size=8 --set train.grad_accum=1 --set train.eval_every=0
      --set train.checkpoint_every=0 --set log.every=1)
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
  note "20 training steps of configs/text.toml: cpu fp32, cuda fp32, cuda bf16, cuda fp16"
  rm -rf "$LOGS/run-cpu" "$LOGS/run-cuda" "$LOGS/run-cuda-bf16" "$LOGS/run-cuda-fp16"
  if "$BUILD/bin/dl-train" "${common[@]}" --device cpu --run-dir "$LOGS/run-cpu" > "$LOGS/train-cpu.jsonl" 2> "$LOGS/train-cpu.err" &&
     "$BUILD/bin/dl-train" "${common[@]}" --device cuda --run-dir "$LOGS/run-cuda" > "$LOGS/train-cuda.jsonl" 2> "$LOGS/train-cuda.err"; then
    verdict=$(compare_losses "$LOGS/train-cpu.jsonl" "$LOGS/train-cuda.jsonl" 1e-4)
    row train "${verdict%% *}" "fp32: ${verdict#* }"
  else
    row train FAIL "dl-train failed: $(tail -1 "$LOGS/train-cuda.err" 2>/dev/null)"
  fi
  for prec in bf16 fp16; do
    if [ -s "$LOGS/train-cpu.jsonl" ] &&
       "$BUILD/bin/dl-train" "${common[@]}" --device cuda --set train.precision=$prec --run-dir "$LOGS/run-cuda-$prec" \
         > "$LOGS/train-cuda-$prec.jsonl" 2> "$LOGS/train-cuda-$prec.err"; then
      verdict=$(compare_losses "$LOGS/train-cpu.jsonl" "$LOGS/train-cuda-$prec.jsonl" 0.02)
      row train16 "${verdict%% *}" "$prec vs cpu fp32: ${verdict#* }"
    else
      row train16 FAIL "dl-train $prec failed: $(tail -1 "$LOGS/train-cuda-$prec.err" 2>/dev/null)"
    fi
  done
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

# --- long: 500 steps in bf16 reach the fp32 run's loss within 2% --------------------------------
if want long && [ -x "$BUILD/bin/dl-train" ]; then
  note "500 steps of configs/text.toml on the GPU, fp32 and bf16"
  ok=1
  for prec in fp32 bf16; do
    rm -rf "$LOGS/run-long-$prec"
    "$BUILD/bin/dl-train" configs/text.toml --device cuda --steps 500 --json --quiet --set train.precision=$prec \
      --set train.eval_every=0 --set train.checkpoint_every=0 --set log.every=1 --set log.samples=0 \
      --run-dir "$LOGS/run-long-$prec" > "$LOGS/long-$prec.jsonl" 2> "$LOGS/long-$prec.err" || ok=0
  done
  if [ $ok = 1 ]; then
    verdict=$(python3 - "$LOGS/long-fp32.jsonl" "$LOGS/long-bf16.jsonl" <<'PY'
import json, sys
def tail_loss(path):  # mean training loss over the last 20 steps (one step's loss is noisy)
    l = [r["loss"] for r in map(json.loads, open(path)) if "loss" in r and "tokens_per_sec" in r]
    return sum(l[-20:]) / len(l[-20:]), len(l)
(f, nf), (b, nb) = tail_loss(sys.argv[1]), tail_loss(sys.argv[2])
rel = abs(b - f) / f
print(("ok" if rel < 0.02 and nf == nb == 500 else "FAIL") +
      f" 500 steps: mean loss of the last 20 steps fp32 {f:.5f}, bf16 {b:.5f}, relative difference {rel:.2e} (limit 2e-2)")
PY
)
    row long "${verdict%% *}" "${verdict#* }"
  else
    row long FAIL "dl-train failed: $(tail -1 "$LOGS/long-bf16.err") $(tail -1 "$LOGS/long-fp32.err")"
  fi
fi

# --- memory: the device arena's peak against dl-shard plan (issue 6: within 10%) ---------------
if want memory && [ -x "$BUILD/bin/dl-train" ] && [ -x "$BUILD/bin/dl-shard" ]; then
  note "GPT-2 124M bf16, batch 8: dl-train's device peak against dl-shard plan"
  rm -rf "$LOGS/run-memory"
  if "$BUILD/bin/dl-train" "${gpt2[@]}" --device cuda --steps 2 --json --quiet --set train.precision=bf16 \
       --run-dir "$LOGS/run-memory" > "$LOGS/memory-train.jsonl" 2> "$LOGS/memory-train.err" &&
     "$BUILD/bin/dl-shard" plan configs/gpt2-124m.toml --gpus 1 --gpu-mem 80GB --precision bf16 --micro-batch 8 \
       --zero 0 --attention flash --format json > "$LOGS/memory-plan.json" 2> "$LOGS/memory-plan.err"; then
    verdict=$(python3 - "$LOGS/run-memory/memory.json" "$LOGS/memory-plan.json" <<'PY'
import json, sys
measured = json.load(open(sys.argv[1]))["ranks"][0]
plan = json.load(open(sys.argv[2]))[0]
# The arena holds everything dl-train allocates on the GPU; the plan's overhead allowance
# (CUDA context, library workspaces) is outside it, so compare without it.
planned = plan["total_bytes"] - plan["overhead_bytes"]
peak = measured["device_peak_bytes"]
ratio = peak / planned
print(("ok" if abs(ratio - 1) <= 0.10 else "FAIL") +
      f" device peak {peak / 1e9:.3f} GB vs plan {planned / 1e9:.3f} GB (model state {plan['model_state_bytes'] / 1e9:.3f}, "
      f"activations {plan['activation_bytes'] / 1e9:.3f}): ratio {ratio:.3f} (limit 0.9-1.1)")
PY
)
    row memory "${verdict%% *}" "${verdict#* }"
  else
    row memory FAIL "$(tail -1 "$LOGS/memory-train.err") $(tail -1 "$LOGS/memory-plan.err")"
  fi
fi

# --- dlbench: dl-bench's GEMM and copy against PyTorch, alternating, 3 rounds (issue 5: 5%) -----
if want dlbench && [ -x "$BUILD/bin/dl-bench" ]; then
  note "dl-bench gemm bf16 8192^3 and memory 1 GiB against torch.matmul / copy_, 3 alternating rounds"
  : > "$LOGS/dlbench-gemm.jsonl"; : > "$LOGS/torch-gemm.jsonl"; : > "$LOGS/dlbench-memory.jsonl"; : > "$LOGS/torch-memory.jsonl"
  ok=1
  for round in 1 2 3; do
    "$BUILD/bin/dl-bench" gemm --device cuda --dtype bf16 --sizes 8192 --repeat 20 --warmup 5 --format jsonl -q \
      >> "$LOGS/dlbench-gemm.jsonl" 2>> "$LOGS/dlbench.err" || ok=0
    python3 scripts/bench_torch_ops_cuda.py gemm --dtype bf16 --size 8192 --repeat 20 --warmup 5 \
      >> "$LOGS/torch-gemm.jsonl" 2>> "$LOGS/dlbench.err" || ok=0
    "$BUILD/bin/dl-bench" memory --device cuda --bytes 1GiB --repeat 20 --warmup 5 --format jsonl -q \
      >> "$LOGS/dlbench-memory.jsonl" 2>> "$LOGS/dlbench.err" || ok=0
    python3 scripts/bench_torch_ops_cuda.py memory --bytes 1073741824 --repeat 20 --warmup 5 \
      >> "$LOGS/torch-memory.jsonl" 2>> "$LOGS/dlbench.err" || ok=0
  done
  if [ $ok = 1 ]; then
    verdict=$(python3 - "$LOGS" <<'PY'
import json, statistics, sys, os
d = sys.argv[1]
def rows(name, **match):
    out = []
    for line in open(os.path.join(d, name)):
        if line.startswith("{"):
            r = json.loads(line)
            if all(r.get(k) == v for k, v in match.items()):
                out.append(r)
    return out
g_dl = statistics.median(r["flops"] for r in rows("dlbench-gemm.jsonl"))
g_t = statistics.median(r["flops"] for r in rows("torch-gemm.jsonl"))
m_dl = statistics.median(r["bytes_per_s"] for r in rows("dlbench-memory.jsonl", direction="d2d"))
m_t = statistics.median(r["bytes_per_s"] for r in rows("torch-memory.jsonl"))
gr, mr = g_dl / g_t, m_dl / m_t
summary = {"gemm_bf16_8192": {"dlbench_flops": g_dl, "torch_flops": g_t, "ratio": gr},
           "device_copy_1GiB": {"dlbench_bytes_per_s": m_dl, "torch_bytes_per_s": m_t, "ratio": mr}}
json.dump(summary, open(os.path.join(d, "dlbench-vs-torch.json"), "w"), indent=1)
ok = abs(gr - 1) <= 0.05 and abs(mr - 1) <= 0.05
print(("ok" if ok else "FAIL") + f" gemm bf16 8192^3 {g_dl / 1e12:.0f} vs torch {g_t / 1e12:.0f} TFLOP/s (ratio {gr:.3f}); "
      f"device copy 1 GiB {m_dl / 1e12:.2f} vs torch {m_t / 1e12:.2f} TB/s (ratio {mr:.3f}); limit 0.95-1.05")
PY
)
    row dlbench "${verdict%% *}" "${verdict#* }"
  else
    row dlbench FAIL "$(grep -m1 -i error "$LOGS/dlbench.err")"
  fi
fi

# --- torch: GPT-2 124M bf16 training, dl-train against PyTorch in the same call (issue 4) -------
if want torch && [ -x "$BUILD/bin/dl-bench" ]; then
  note "GPT-2 124M bf16, batch 8 x 1024: dl-bench train (dl-train's step) and PyTorch, 2 alternating rounds"
  : > "$LOGS/dl-124m.jsonl"; : > "$LOGS/torch-124m.jsonl"
  ok=1
  for round in 1 2; do
    "$BUILD/bin/dl-bench" train configs/gpt2-124m.toml --device cuda --steps 20 --warmup 3 --format jsonl -q \
      --set train.precision=bf16 --set train.batch_size=8 --set train.grad_accum=1 \
      >> "$LOGS/dl-124m.jsonl" 2>> "$LOGS/torch-124m.err" || ok=0
    python3 scripts/bench_torch_gpt2_cuda.py --batch 8 --steps 20 --warmup 5 \
      >> "$LOGS/torch-124m.jsonl" 2>> "$LOGS/torch-124m.err" || ok=0
  done
  if [ $ok = 1 ]; then
    verdict=$(python3 - "$LOGS" <<'PY'
import json, statistics, sys, os
d = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(os.path.join(d, name)) if l.startswith("{")]
dl, pt = rows("dl-124m.jsonl"), rows("torch-124m.jsonl")
dl_tps = statistics.median(r["tokens_per_sec"] for r in dl)
pt_tps = statistics.median(r["tokens_per_sec"] for r in pt)
fpt, peak = dl[0]["flops_per_token"], dl[0]["peak_flops"]
mfu_dl, mfu_pt = dl_tps * fpt / peak, pt_tps * fpt / peak
summary = {"dl_tokens_per_sec": dl_tps, "torch_tokens_per_sec": pt_tps, "ratio": dl_tps / pt_tps,
           "flops_per_token": fpt, "flop_formula": dl[0]["flop_formula"], "peak_flops": peak,
           "peak_source": dl[0]["peak_source"], "mfu_dl": mfu_dl, "mfu_torch": mfu_pt,
           "dl_step_split_s": {k: dl[0][k] for k in ("compute_s", "comm_s", "data_s", "optimizer_s")},
           "torch": pt[0]["torch"], "device": pt[0]["device"]}
json.dump(summary, open(os.path.join(d, "gpt2-124m-vs-torch.json"), "w"), indent=1)
goal = dl_tps >= 1.2 * pt_tps and mfu_dl >= 0.45
print(("ok" if goal else "FAIL") + f" dl-train {dl_tps:.0f} tok/s (MFU {100 * mfu_dl:.1f}%) vs PyTorch {pt_tps:.0f} tok/s "
      f"(MFU {100 * mfu_pt:.1f}%): ratio {dl_tps / pt_tps:.2f} (goal >= 1.2 and MFU >= 45%; {dl[0]['flop_formula']})")
PY
)
    row torch "${verdict%% *}" "${verdict#* }"
  else
    row torch FAIL "$(grep -m1 -i error "$LOGS/torch-124m.err")"
  fi
fi

# --- kernels: where one 124M bf16 step spends its GPU time (Nsight Compute, step 4) --------------
if want kernels && [ -x "$BUILD/bin/dl-train" ]; then
  if command -v ncu > /dev/null; then
    note "per-kernel breakdown of step 4 of GPT-2 124M bf16 (ncu --profile-from-start off)"
    rm -rf "$LOGS/run-kernels"
    if DL_CUDA_PROFILE_STEP=4 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
         --csv --page raw "$BUILD/bin/dl-train" "${gpt2[@]}" --device cuda --steps 4 --quiet --set train.precision=bf16 \
         --run-dir "$LOGS/run-kernels" > "$LOGS/kernels.csv" 2> "$LOGS/kernels.err" &&
       python3 scripts/kernel_breakdown.py "$LOGS/kernels.csv" --json "$LOGS/kernels.json" > "$LOGS/kernels.txt"; then
      row kernels ok "$(tail -1 "$LOGS/kernels.txt" | tr -s ' '); top: $(sed -n 2p "$LOGS/kernels.txt" | tr -s ' ') (kernels.txt)"
    else
      row kernels FAIL "$(tail -2 "$LOGS/kernels.err" | tr '\n' ' ')"
    fi
  else
    row kernels skip "ncu is not on the PATH"
  fi
fi

# --- bench: GPT-2 124M fp32 and bf16 tokens/s through dl-train itself ---------------------------
if want bench && [ -x "$BUILD/bin/dl-train" ]; then
  for prec in fp32 bf16; do
    note "GPT-2 124M, $prec, batch 8 x 1024, 8 steps"
    rm -rf "$LOGS/run-bench-$prec"
    if "$BUILD/bin/dl-train" "${gpt2[@]}" --device cuda --steps 8 --json --quiet --run-dir "$LOGS/run-bench-$prec" \
         --set train.precision=$prec > "$LOGS/bench-$prec.jsonl" 2> "$LOGS/bench-$prec.err"; then
      rate=$(python3 -c '
import json, sys
r = [json.loads(l)["tokens_per_sec"] for l in open(sys.argv[1]) if "tokens_per_sec" in l][3:]
r.sort()
print(f"{r[len(r)//2]:.0f}" if r else "nan")' "$LOGS/bench-$prec.jsonl")
      row bench ok "$prec: median $rate tokens/s after 3 warm-up steps (bench-$prec.jsonl)"
    else
      row bench FAIL "$prec: $(tail -1 "$LOGS/bench-$prec.err")"
    fi
  done
fi

echo
printf '%-8s %-6s %s\n' stage result detail
for r in "${table[@]}"; do echo "$r"; done
exit $failed
