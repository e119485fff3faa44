#!/usr/bin/env bash
# On a GPU machine: build with the CUDA backend, run the kernel tests (and the whole GPT against
# PyTorch on the GPU), compare training on the GPU with the CPU, and measure against PyTorch on
# the same GPU. Prints a short table last (one row per result, also printed as it comes); full
# logs stay in build-gpu/gpu-check/, and with $OUT set (the device runner's output folder, which
# returns at most 8 files) the table, the JSON summaries and one logs archive are copied there.
#
#   scripts/gpu-check.sh                              # one device call: every stage, most wanted first
#   STAGES="build ops test" scripts/gpu-check.sh      # some stages, in the order named
#   SANITIZE=1 STAGES="build test" scripts/gpu-check.sh   # a later call: compute-sanitizer
#
# On the device runner (no package registry there): first, here, `scripts/gpu-deps.sh pack`
# (the C++ libraries dlkit links, ~17 MB in build-gpu-deps/), then name `build-gpu-deps` in the
# run's carry; never carry build-gpu (a carried path is replaced there: the build would be lost).
# build-gpu/ survives only while the machine stays warm (about 30 s after a call): start the
# second call at once, or it finds no build and every stage fails with "not built".
# Stages run in the order STAGES names them. Every command runs under a time limit, and the whole
# call stops starting commands at DEADLINE seconds (default 570; the device runner stops a command
# at 600), so the table always prints; each row is also appended to $OUT/gpu-check-rows.txt as it
# comes, so a call stopped from outside still returns what it found.
#
# Stages (issue numbers in brackets):
#   build    configure + build in $BUILD (DL_CUDA=ON, sm_90 unless CMAKE_CUDA_ARCHITECTURES is set)
#   ops      backend-ops test: every Backend op on the GPU (and the CPU) against the CPU in f64, in
#            f32, bf16, f16 (again with DL_CUDA_ATTENTION=simt for attention); then backend-ops perf
#            on the GPU: the per-kernel table (time per call, GFLOP/s or GB/s), backend-ops-perf.tsv [18]
#   test     tests/cuda: determinism, the whole GPT against the CPU in f64 and PyTorch on the GPU [4]
#   train    20 steps of configs/text.toml: GPU fp32 vs CPU (1e-4), GPU bf16 and fp16 vs CPU fp32 (2%) [4]
#   ranks    dp=2 with ZeRO 0-3, two ranks on the one GPU, against one rank (1e-5) [4]
#   long     500 steps in bf16 and fp32 on the GPU: mean loss of the last 20 steps within 2% [4]
#   memory   dl-train's device peak (RUN/memory.json) against dl-shard plan, within 10% [6]
#   dlbench  dl-bench gemm bf16 8192^3 and device copy against torch.matmul / copy_, within 5%;
#            collective allreduce over NCCL, one rank per GPU, #wrong 0 [5]
#   torch    GPT-2 124M bf16 tokens/s and MFU, dl-train against PyTorch (compile, autocast,
#            fused AdamW, SDPA) in the same call; ok only when the goal is met (>= 1.2x, MFU >= 45%) [4]
#   kernels  per-kernel time shares of one 124M bf16 step (Nsight Compute) [4]
#   bench    GPT-2 124M tokens/s in fp32 and bf16 [4]
# The script exits non-zero when any stage failed. Summaries for docs/PERFORMANCE.md: *.json.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

BUILD=${BUILD:-build-gpu}
STAGES=${STAGES:-"build ops test train torch dlbench memory ranks kernels long bench"}
JOBS=${JOBS:-$(nproc)}
DEADLINE=${DEADLINE:-570}
START=$(date +%s)
mkdir -p "$BUILD/gpu-check"
BUILD_ABS=$(cd "$BUILD" && pwd)
LOGS=$BUILD_ABS/gpu-check
declare -a table=()
failed=0 build_failed=0

note() { echo "gpu-check: $*" >&2; }
row() {
  table+=("$(printf '%-8s %-6s %s' "$1" "$2" "$3")")
  note "$1 $2 $3"
  # Streamed: if the device runner stops the call before finish, the rows so far still come back.
  [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && printf '%-8s %-6s %s\n' "$1" "$2" "$3" >> "$OUT/gpu-check-rows.txt"
  [ "$2" = ok ] || [ "$2" = skip ] || failed=1
}
left() { echo $((DEADLINE - ($(date +%s) - START))); }
# run_for SECS CMD...: CMD under a time limit of SECS, less where the call's DEADLINE is nearer;
# exit status 124 when it was stopped (or not started: no time left).
run_for() {
  local limit=$1 remaining
  shift
  remaining=$(left)
  [ "$remaining" -lt "$limit" ] && limit=$remaining
  if [ "$limit" -lt 5 ]; then
    note "no time left for: $*"
    return 124
  fi
  timeout -k 10 "$limit" "$@"
}
# why RC FILE: the reason a command failed, for the table.
why() {
  case $1 in
    124 | 137) echo "stopped by its time limit (or the call's DEADLINE=${DEADLINE}s)" ;;
    *) echo "exit $1: $(grep -v '^\s*$' "$2" 2>/dev/null | tail -1)" ;;
  esac
}
# need STAGE BIN...: true when every $BUILD/bin/BIN was built; otherwise a FAIL row.
need() {
  local stage=$1 b
  shift
  if [ "$build_failed" = 1 ]; then
    row "$stage" FAIL "not run: the build stage failed"
    return 1
  fi
  for b; do
    if [ ! -x "$BUILD/bin/$b" ]; then
      row "$stage" FAIL "$BUILD/bin/$b not built (the build stage runs in this call, or in the previous call on the same, still warm machine)"
      return 1
    fi
  done
}
# An embedded summary's verdict ("ok ..." / "FAIL ..."); a crashed script says so.
verdict_or_crash() { [ -n "$1" ] && echo "$1" || echo "FAIL the summary script failed (its traceback is above)"; }

finish() {
  {
    echo
    printf '%-8s %-6s %s\n' stage result detail
    for r in "${table[@]}"; do echo "$r"; done
  } > "$LOGS/table.txt"
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    # At most 8 files come back from $OUT, each under 16 MiB: the table, the summaries, one archive.
    cp "$LOGS/table.txt" "$OUT/gpu-check-table.txt"
    # (kernels.json and the rest are in the archive.)
    for f in backend-ops-perf.tsv dlbench-vs-torch.json gpt2-124m-vs-torch.json kernels.txt; do
      [ -f "$LOGS/$f" ] && cp "$LOGS/$f" "$OUT/$f"
    done
    tar -C "$LOGS" --exclude=checkpoints --exclude='*.safetensors' --exclude='events.out.tfevents*' \
      -czf "$OUT/gpu-check-logs.tar.gz" . 2> /dev/null
    if [ "$(stat -c %s "$OUT/gpu-check-logs.tar.gz" 2> /dev/null || echo 0)" -gt $((15 << 20)) ]; then
      tar -C "$LOGS" --exclude=checkpoints --exclude='*.safetensors' --exclude='events.out.tfevents*' \
        --exclude='*.csv' --exclude='run-*' -czf "$OUT/gpu-check-logs.tar.gz" . 2> /dev/null
    fi
  fi
  cat "$LOGS/table.txt"
}
# A signal may arrive while a command's output is redirected to a log: the trap writes to the
# script's own stdout and stderr (fds 3 and 4).
exec 3>&1 4>&2
trap '{ note "stopped by a signal"; finish; } >&3 2>&4; exit 143' TERM INT

# CUDA's tools where the toolkit put them, if they are not on the PATH already.
if ! command -v nvcc > /dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    if [ -x "$d/nvcc" ]; then
      PATH=$d:$PATH
      break
    fi
  done
fi
# The C++ libraries carried from the development machine (scripts/gpu-deps.sh), unpacked by the
# build stage: the binaries load some of them at run time.
# shellcheck disable=SC1091
[ -f "$BUILD/deps/env.sh" ] && . "$BUILD/deps/env.sh"

gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
[ "${gpus:-0}" -ge 1 ] 2> /dev/null || gpus=0
note "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null || echo 'nvidia-smi not available'); stages: $STAGES"
nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1 || true

# configs/text.toml and gpt2-124m.toml read Debian's copy of the GPL; where the machine has none,
# the project's own documentation is the corpus (every run of one call reads the same text).
data=()
if [ ! -r /usr/share/common-licenses/GPL-3 ]; then
  cat README.md docs/*.md > "$BUILD_ABS/gpu-check-corpus.txt"
  data=(--set "data.source=text:$BUILD_ABS/gpu-check-corpus.txt")
  note "/usr/share/common-licenses/GPL-3 is missing: training on README.md + docs/*.md instead"
fi

# --- build --------------------------------------------------------------------------------------
stage_build() {
  note "configure + build in $BUILD (DL_CUDA=ON, sm_90 unless CMAKE_CUDA_ARCHITECTURES is set)"
  start=$(date +%s)
  hints=$(scripts/find-cuda-libs.sh)
  deps="" ok=1
  archive=${DL_GPU_DEPS:-build-gpu-deps/deps.tar.xz}
  if [ -f "$archive" ]; then
    if deps=$(DL_GPU_DEPS=$archive scripts/gpu-deps.sh unpack "$BUILD/deps" 2> "$LOGS/deps.log"); then
      # shellcheck disable=SC1091
      . "$BUILD/deps/env.sh"
    else
      ok=0
      row build FAIL "unpacking $archive failed: $(tail -1 "$LOGS/deps.log")"
    fi
  fi
  gen=()
  if [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja > /dev/null; then gen=(-G Ninja); fi
  build_failed=1  # until the build succeeds
  if [ $ok = 1 ]; then
    # shellcheck disable=SC2086  # $hints and $deps are lists of -D options
    run_for 180 cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DDL_CUDA=ON \
      ${CMAKE_CUDA_ARCHITECTURES:+-DCMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES} $hints $deps \
      > "$LOGS/configure.log" 2>&1
    rc=$?
    if [ $rc != 0 ]; then
      missing=$(grep -m3 -oE 'Could not find a package configuration file provided by "[^"]+"|Could NOT find [A-Za-z_]+' "$LOGS/configure.log" | tr '\n' ' ')
      row build FAIL "configure: $(why $rc "$LOGS/configure.log") ${missing:+($missing; carry build-gpu-deps from scripts/gpu-deps.sh pack)}"
      tail -25 "$LOGS/configure.log" >&2
    elif ! grep -q 'dlkit: CUDA backend ON' "$LOGS/configure.log"; then
      row build FAIL "configured without the CUDA backend (no nvcc on the PATH?): $(grep -m1 'dlkit: ' "$LOGS/configure.log")"
    else
      run_for 420 cmake --build "$BUILD" -j "$JOBS" --target dl-train dl-bench dl-shard test_cuda backend-ops > "$LOGS/build.log" 2>&1
      rc=$?
      if [ $rc = 0 ]; then
        build_failed=0
        row build ok "$(($(date +%s) - start)) s; $(grep -c 'dlkit: .*: /' "$LOGS/configure.log") optional libraries found (configure.log)"
        "$BUILD/bin/dl-train" --version > "$LOGS/version.txt" 2>&1 || true
      else
        row build FAIL "$(why $rc "$LOGS/build.log") (build.log; first error: $(grep -m1 -E 'error|Error' "$LOGS/build.log" | cut -c1-200))"
        tail -30 "$LOGS/build.log" >&2
      fi
    fi
  fi
}

# --- ops: backend-ops, every op against the CPU backend in f64, then its per-kernel table ---------
stage_ops() {
  need ops backend-ops || return 0
  note "backend-ops test on every backend this machine has, then backend-ops perf on the GPU"
  run_for 150 "$BUILD/bin/backend-ops" test > "$LOGS/backend-ops-test.txt" 2> "$LOGS/backend-ops-test.err"
  rc=$?
  summary=$(grep -m1 -o '[0-9]* runs.*' "$LOGS/backend-ops-test.err")
  backends=$(grep -m1 -o 'backends .*' "$LOGS/backend-ops-test.err")
  if [ $rc != 0 ]; then
    row ops FAIL "${summary:-$(why $rc "$LOGS/backend-ops-test.err")}; first: $(grep -m1 ' FAIL' "$LOGS/backend-ops-test.txt" | tr -s ' ' | cut -c1-200) (backend-ops-test.txt)"
    if [ $rc != 124 ] && [ $rc != 137 ]; then
      # Kernels run asynchronously: rerun synchronizing after every op so a fault names its op.
      run_for 120 env DL_CUDA_SYNC=1 "$BUILD/bin/backend-ops" test > "$LOGS/backend-ops-test-sync.txt" 2>&1
      note "DL_CUDA_SYNC=1 rerun: backend-ops-test-sync.txt"
    fi
  elif [ "$gpus" -ge 1 ] && [[ $backends != *cuda* ]]; then
    row ops FAIL "a GPU is here but backend-ops did not select it: $backends"
  elif [ "$gpus" -ge 1 ]; then
    row ops ok "$summary; $backends"
  else
    row ops skip "no GPU: $summary; $backends"
  fi
  if [ "$gpus" -ge 1 ]; then
    # The bf16/f16 attention takes the tensor-core kernels at head sizes 32, 64 and 128; the f32
    # (SIMT) kernels must pass those cases too.
    run_for 60 env DL_CUDA_ATTENTION=simt "$BUILD/bin/backend-ops" test -b cuda -o attention_forward,attention_backward \
      > "$LOGS/backend-ops-simt.txt" 2> "$LOGS/backend-ops-simt.err"
    rc=$?
    if [ $rc = 0 ]; then
      row ops ok "DL_CUDA_ATTENTION=simt: $(grep -m1 -o '[0-9]* runs.*' "$LOGS/backend-ops-simt.err")"
    else
      row ops FAIL "DL_CUDA_ATTENTION=simt: $(why $rc "$LOGS/backend-ops-simt.err") (backend-ops-simt.txt)"
    fi
    run_for 120 "$BUILD/bin/backend-ops" perf -b cuda > "$LOGS/backend-ops-perf.tsv" 2> "$LOGS/backend-ops-perf.err"
    rc=$?
    if [ $rc = 0 ]; then
      row perf ok "$(($(wc -l < "$LOGS/backend-ops-perf.tsv") - 1)) op timings (backend-ops-perf.tsv)"
      { column -t -s $'\t' "$LOGS/backend-ops-perf.tsv" 2> /dev/null || cat "$LOGS/backend-ops-perf.tsv"; } >&2
    else
      row perf FAIL "$(why $rc "$LOGS/backend-ops-perf.err") (backend-ops-perf.tsv)"
    fi
  fi
}

# --- test: the CUDA backend's properties beyond single ops, the GPT against PyTorch ----------------
# The GPU machine's PyTorch (the parity test runs it on the GPU): python3 on the PATH there.
DL_TORCH_PYTHON=${DL_TORCH_PYTHON:-$(command -v python3)}
export DL_TORCH_PYTHON
stage_test() {
  need test test_cuda backend-ops || return 0
  note "CUDA backend tests and the GPT against PyTorch on the GPU (tests/cuda; PyTorch: $DL_TORCH_PYTHON)"
  run_for 180 "$BUILD/bin/test_cuda" > "$LOGS/test_cuda.log" 2>&1
  rc=$?
  summary=$(grep -m1 'test cases:' "$LOGS/test_cuda.log")
  if [ $rc = 77 ]; then
    # test_cuda found no usable GPU and ran nothing (exit 77, ctest's "Skipped"): on a machine
    # with a GPU, that is a failure.
    [ "$gpus" -ge 1 ] && status=FAIL || status=skip
    row test "$status" "$(grep -m1 -o 'skipped: no CUDA device.*' "$LOGS/test_cuda.log")"
  elif [ $rc = 0 ]; then
    row test ok "$summary"
  else
    row test FAIL "${summary:-$(why $rc "$LOGS/test_cuda.log")} (test_cuda.log)"
    if [ $rc != 124 ] && [ $rc != 137 ]; then
      # Kernels run asynchronously: rerun synchronizing after every op so the failing op is named.
      run_for 150 env DL_CUDA_SYNC=1 "$BUILD/bin/test_cuda" > "$LOGS/test_cuda_sync.log" 2>&1
      note "DL_CUDA_SYNC=1 rerun: test_cuda_sync.log"
    fi
  fi
  if [ "${SANITIZE:-0}" = 1 ]; then
    if command -v compute-sanitizer > /dev/null; then
      # The arena fenced (DL_CUDA_ARENA_FENCED=1: a cudaMalloc per tensor), so memcheck sees every
      # tensor's ends, not only the arena's. backend-ops runs every kernel in every dtype; the
      # tests that start other processes (PyTorch, dl-bench) would take minutes under the
      # sanitizer and check no kernel of ours.
      note "compute-sanitizer memcheck + racecheck over backend-ops test on the GPU, arena fenced"
      run_for 240 env DL_CUDA_ARENA_FENCED=1 compute-sanitizer --tool memcheck --error-exitcode 1 \
        "$BUILD/bin/backend-ops" test -b cuda > "$LOGS/memcheck.log" 2>&1
      rc=$?
      if [ $rc = 0 ]; then row memcheck ok "no errors"; else row memcheck FAIL "$(why $rc "$LOGS/memcheck.log") (memcheck.log)"; fi
      run_for 240 compute-sanitizer --tool racecheck --error-exitcode 1 "$BUILD/bin/backend-ops" test -b cuda \
        > "$LOGS/racecheck.log" 2>&1
      rc=$?
      if [ $rc = 0 ]; then row racecheck ok "no hazards"; else row racecheck FAIL "$(why $rc "$LOGS/racecheck.log") (racecheck.log)"; fi
    else
      row memcheck FAIL "compute-sanitizer is not on the PATH"
    fi
  fi
}

# The 20-step runs of configs/text.toml (train and ranks stages).
common=(configs/text.toml --steps 20 --json --quiet --set train.eval_every=0 --set train.checkpoint_every=0
        --set log.every=1 --set log.samples=0 "${data[@]}")
# GPT-2 124M runs: batch 8 x 1024, no accumulation, nothing written but metrics (and the final
# checkpoint dl-train always writes, removed after each stage). Its 50257 ids need GPT-2's own
# tokenizer: $DL_GPT2_TOKENIZER, else ../shared/data/gpt2, else .gpu-carry/gpt2 (a copy carried to
# the device runner, which does not send ../shared).
gpt2_tok=${DL_GPT2_TOKENIZER:-}
for d in ../shared/data/gpt2 .gpu-carry/gpt2; do
  [ -z "$gpt2_tok" ] && [ -f "$d/vocab.json" ] && gpt2_tok=$(cd "$d" && pwd)
done
# GPT-2's BPE makes ~4 bytes a token: the GPL alone (8k tokens) leaves too few for a 1024-token
# validation example, so these runs read the GPL (where there is one), the README and docs/.
cat /usr/share/common-licenses/GPL-3 README.md docs/*.md > "$BUILD_ABS/gpu-check-corpus-gpt2.txt" 2> /dev/null
gpt2_data=(--set "data.source=text:$BUILD_ABS/gpu-check-corpus-gpt2.txt")
[ -n "$gpt2_tok" ] && gpt2_data+=(--set "data.tokenizer=gpt2:$gpt2_tok")
gpt2=(configs/gpt2-124m.toml --set train.batch_size=8 --set train.grad_accum=1 --set train.eval_every=0
      --set train.checkpoint_every=0 --set log.every=1 "${gpt2_data[@]}")
# --- train: 20 steps on the GPU against the CPU (fp32 within 1e-4, bf16 within 2%) -------------
# compare_losses REF.jsonl RUN.jsonl LIMIT: prints "ok|FAIL <detail>".
compare_losses() {
  verdict_or_crash "$(python3 - "$1" "$2" "$3" << 'PY'
import json, sys
def losses(path):
    recs = [json.loads(l) for l in open(path) if l.startswith("{")]
    return {r["step"]: r["loss"] for r in recs if "loss" in r and "tokens_per_sec" in r}
ref, run, limit = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
steps = sorted(set(ref) & set(run))
worst = max(abs(run[s] - ref[s]) / abs(ref[s]) for s in steps) if steps else float("inf")
ok = len(steps) == len(ref) == len(run) and worst < limit
last = steps[-1] if steps else 0
print(("ok" if ok else "FAIL") + f" {len(steps)} steps, worst relative loss difference {worst:.2e} (limit {limit:g}); "
      f"step {last} loss {ref.get(last, float('nan')):.6f} vs {run.get(last, float('nan')):.6f}")
PY
)"
}
stage_train() {
  need train dl-train || return 0
  note "20 training steps of configs/text.toml: cpu fp32, cuda fp32, cuda bf16, cuda fp16"
  rm -rf "$LOGS"/run-cpu "$LOGS"/run-cuda "$LOGS"/run-cuda-bf16 "$LOGS"/run-cuda-fp16 "$LOGS"/train-c*.jsonl
  run_for 60 "$BUILD/bin/dl-train" "${common[@]}" --device cpu --run-dir "$LOGS/run-cpu" \
    > "$LOGS/train-cpu.jsonl" 2> "$LOGS/train-cpu.err"
  rc_cpu=$?
  run_for 60 "$BUILD/bin/dl-train" "${common[@]}" --device cuda --run-dir "$LOGS/run-cuda" \
    > "$LOGS/train-cuda.jsonl" 2> "$LOGS/train-cuda.err"
  rc=$?
  train_cuda_rc=$rc
  if [ $rc_cpu != 0 ]; then
    row train FAIL "dl-train --device cpu: $(why $rc_cpu "$LOGS/train-cpu.err")"
  elif [ $rc != 0 ]; then
    row train FAIL "dl-train --device cuda: $(why $rc "$LOGS/train-cuda.err")"
  else
    verdict=$(compare_losses "$LOGS/train-cpu.jsonl" "$LOGS/train-cuda.jsonl" 1e-4)
    row train "${verdict%% *}" "fp32: ${verdict#* }"
  fi
  for prec in bf16 fp16; do
    if [ $rc_cpu != 0 ]; then
      row train16 FAIL "$prec: no CPU reference (dl-train --device cpu failed)"
      continue
    fi
    run_for 60 "$BUILD/bin/dl-train" "${common[@]}" --device cuda --set train.precision=$prec \
      --run-dir "$LOGS/run-cuda-$prec" > "$LOGS/train-cuda-$prec.jsonl" 2> "$LOGS/train-cuda-$prec.err"
    rc=$?
    if [ $rc = 0 ]; then
      verdict=$(compare_losses "$LOGS/train-cpu.jsonl" "$LOGS/train-cuda-$prec.jsonl" 0.02)
      row train16 "${verdict%% *}" "$prec vs cpu fp32: ${verdict#* }"
    else
      row train16 FAIL "dl-train $prec: $(why $rc "$LOGS/train-cuda-$prec.err")"
    fi
  done
}

# --- ranks: dp=2 and ZeRO 1/2/3 with two ranks on the one GPU against the single-rank GPU run -----
stage_ranks() {
  need ranks dl-train || return 0
  if [ "${train_cuda_rc:-0}" != 0 ] || [ ! -s "$LOGS/train-cuda.jsonl" ]; then
    row ranks FAIL "no single-GPU reference: the train stage's fp32 run (train-cuda.jsonl) is missing or failed"
  else
    # configs/text.toml's batch_size is 16: two ranks of 8 are the same global batch.
    note "two ranks on one GPU (collectives staged through Gloo): dp=2, zero 0-3, against one rank"
    for z in 0 1 2 3; do
      rm -rf "$LOGS/run-dp2-z$z"
      if [ "${ranks_stopped:-0}" = 1 ]; then
        row ranks FAIL "dp=2 zero=$z: not run (an earlier two-rank run hit its time limit)"
        continue
      fi
      run_for 60 "$BUILD/bin/dl-train" "${common[@]}" --device cuda --nproc-per-node 2 --set parallel.dp=2 \
        --set parallel.zero=$z --set train.batch_size=8 \
        --run-dir "$LOGS/run-dp2-z$z" > "$LOGS/train-dp2-z$z.jsonl" 2> "$LOGS/train-dp2-z$z.err"
      rc=$?
      if [ $rc = 0 ]; then
        verdict=$(compare_losses "$LOGS/train-cuda.jsonl" "$LOGS/train-dp2-z$z.jsonl" 1e-5)
        row ranks "${verdict%% *}" "dp=2 zero=$z: ${verdict#* }"
      else
        { [ $rc = 124 ] || [ $rc = 137 ]; } && ranks_stopped=1
        row ranks FAIL "dp=2 zero=$z: $(grep -m1 -i error "$LOGS/train-dp2-z$z.err" || why $rc "$LOGS/train-dp2-z$z.err")"
      fi
    done
  fi
}

# --- long: 500 steps in bf16 reach the fp32 run's loss within 2% --------------------------------
stage_long() {
  need long dl-train || return 0
  note "500 steps of configs/text.toml on the GPU, fp32 and bf16"
  ok=1 detail=""
  for prec in fp32 bf16; do
    rm -rf "$LOGS/run-long-$prec"
    run_for 90 "$BUILD/bin/dl-train" configs/text.toml --device cuda --steps 500 --json --quiet \
      --set train.precision=$prec --set train.eval_every=0 --set train.checkpoint_every=0 --set log.every=1 \
      --set log.samples=0 "${data[@]}" --run-dir "$LOGS/run-long-$prec" > "$LOGS/long-$prec.jsonl" 2> "$LOGS/long-$prec.err"
    rc=$?
    [ $rc = 0 ] || { ok=0; detail+="$prec: $(why $rc "$LOGS/long-$prec.err") "; }
  done
  if [ $ok = 1 ]; then
    verdict=$(verdict_or_crash "$(python3 - "$LOGS/long-fp32.jsonl" "$LOGS/long-bf16.jsonl" << 'PY'
import json, sys
def tail_loss(path):  # mean training loss over the last 20 steps (one step's loss is noisy)
    l = [r["loss"] for r in (json.loads(x) for x in open(path) if x.startswith("{")) if "loss" in r and "tokens_per_sec" in r]
    return sum(l[-20:]) / max(1, len(l[-20:])), len(l)
(f, nf), (b, nb) = tail_loss(sys.argv[1]), tail_loss(sys.argv[2])
rel = abs(b - f) / f if f else float("inf")
print(("ok" if rel < 0.02 and nf == nb == 500 else "FAIL") +
      f" {nf}/{nb} steps: mean loss of the last 20 steps fp32 {f:.5f}, bf16 {b:.5f}, relative difference {rel:.2e} (limit 2e-2)")
PY
)")
    row long "${verdict%% *}" "${verdict#* }"
  else
    row long FAIL "dl-train failed: $detail"
  fi
}

# --- memory: the device arena's peak against dl-shard plan (issue 6: within 10%) ---------------
stage_memory() {
  need memory dl-train dl-shard || return 0
  note "GPT-2 124M bf16, batch 8: dl-train's device peak against dl-shard plan"
  rm -rf "$LOGS/run-memory"
  run_for 90 "$BUILD/bin/dl-train" "${gpt2[@]}" --device cuda --steps 2 --json --quiet --set train.precision=bf16 \
    --run-dir "$LOGS/run-memory" > "$LOGS/memory-train.jsonl" 2> "$LOGS/memory-train.err"
  rc=$?
  run_for 60 "$BUILD/bin/dl-shard" plan configs/gpt2-124m.toml "${gpt2_data[@]}" --gpus 1 --gpu-mem 80GB --precision bf16 \
    --micro-batch 8 --zero 0 --attention flash --format json > "$LOGS/memory-plan.json" 2> "$LOGS/memory-plan.err"
  rc_plan=$?
  rm -rf "$LOGS/run-memory/checkpoints"
  if [ $rc = 0 ] && [ $rc_plan = 0 ]; then
    verdict=$(verdict_or_crash "$(python3 - "$LOGS/run-memory/memory.json" "$LOGS/memory-plan.json" << 'PY'
import json, sys
measured = json.load(open(sys.argv[1]))["ranks"][0]
plan = json.load(open(sys.argv[2]))[0]
# The arena holds everything dl-train allocates on the GPU; the plan's overhead allowance
# (CUDA context, library workspaces) is outside it, so compare without it, and without the
# backend's own buffers in the arena (cuBLASLt workspace, reduction scratch), which that
# allowance covers (tests/cuda_emulated/test_emulated_memory.cpp makes the same comparison).
planned = plan["total_bytes"] - plan["overhead_bytes"]
peak = measured["device_peak_bytes"] - measured.get("device_backend_bytes", 0)
ratio = peak / planned
print(("ok" if abs(ratio - 1) <= 0.10 else "FAIL") +
      f" device peak {peak / 1e9:.3f} GB vs plan {planned / 1e9:.3f} GB (model state {plan['model_state_bytes'] / 1e9:.3f}, "
      f"activations {plan['activation_bytes'] / 1e9:.3f}): ratio {ratio:.3f} (limit 0.9-1.1)")
PY
)")
    row memory "${verdict%% *}" "${verdict#* }"
  else
    row memory FAIL "dl-train: $(why $rc "$LOGS/memory-train.err"); dl-shard plan: $(why $rc_plan "$LOGS/memory-plan.err")"
  fi
}

# --- dlbench: dl-bench's GEMM and copy against PyTorch, alternating, 3 rounds (issue 5: 5%) -----
stage_dlbench() {
  need dlbench dl-bench || return 0
  note "dl-bench gemm bf16 8192^3 and memory 1 GiB against torch.matmul / copy_, 3 alternating rounds"
  : > "$LOGS/dlbench-gemm.jsonl"; : > "$LOGS/torch-gemm.jsonl"; : > "$LOGS/dlbench-memory.jsonl"; : > "$LOGS/torch-memory.jsonl"
  : > "$LOGS/dlbench.err"
  ok=1
  for _ in 1 2 3; do
    run_for 90 "$BUILD/bin/dl-bench" gemm --device cuda --dtype bf16 --sizes 8192 --repeat 20 --warmup 5 --format jsonl -q \
      >> "$LOGS/dlbench-gemm.jsonl" 2>> "$LOGS/dlbench.err" || ok=0
    run_for 90 python3 scripts/bench_torch_ops_cuda.py gemm --dtype bf16 --size 8192 --repeat 20 --warmup 5 \
      >> "$LOGS/torch-gemm.jsonl" 2>> "$LOGS/dlbench.err" || ok=0
    run_for 90 "$BUILD/bin/dl-bench" memory --device cuda --bytes 1GiB --repeat 20 --warmup 5 --format jsonl -q \
      >> "$LOGS/dlbench-memory.jsonl" 2>> "$LOGS/dlbench.err" || ok=0
    run_for 90 python3 scripts/bench_torch_ops_cuda.py memory --bytes 1073741824 --repeat 20 --warmup 5 \
      >> "$LOGS/torch-memory.jsonl" 2>> "$LOGS/dlbench.err" || ok=0
    [ $ok = 1 ] || break
  done
  if [ $ok = 1 ]; then
    verdict=$(verdict_or_crash "$(python3 - "$LOGS" << 'PY'
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
)")
    row dlbench "${verdict%% *}" "${verdict#* }"
  else
    row dlbench FAIL "$(grep -m1 -iE 'error|Traceback|wrong' "$LOGS/dlbench.err" || echo 'a command failed or timed out') (dlbench.err)"
  fi
  # NCCL through dl-bench collective: one rank per GPU this machine has, every output verified.
  # With one GPU that is one rank: NCCL's own path and the check, no traffic (busbw 0 by definition).
  ranks=$((gpus > 0 ? gpus : 1))
  run_for 120 "$BUILD/bin/dl-bench" collective allreduce --device cuda --nproc-per-node "$ranks" -b 8 -e 1G -f 4 \
    > "$LOGS/nccl-allreduce.txt" 2> "$LOGS/nccl-allreduce.err"
  rc=$?
  if [ $rc = 0 ]; then
    bw=$(awk -F: '/Avg bus bandwidth/ {gsub(/ /, "", $2); print $2}' "$LOGS/nccl-allreduce.txt")
    row nccl ok "allreduce over $ranks GPU(s), 8 B - 512 MiB: #wrong 0, average busbw ${bw:-?} GB/s (nccl-allreduce.txt)"
  else
    row nccl FAIL "$(why $rc "$LOGS/nccl-allreduce.err") (nccl-allreduce.err)"
  fi
}

# --- torch: GPT-2 124M bf16 training, dl-train against PyTorch in the same call (issue 4) -------
stage_torch() {
  need torch dl-bench || return 0
  note "GPT-2 124M bf16, batch 8 x 1024: dl-bench train (dl-train's step) and PyTorch, 2 alternating rounds"
  : > "$LOGS/dl-124m.jsonl"; : > "$LOGS/torch-124m.jsonl"; : > "$LOGS/torch-124m.err"
  ok=1
  for _ in 1 2; do
    run_for 90 "$BUILD/bin/dl-bench" train configs/gpt2-124m.toml --device cuda --steps 20 --warmup 3 --format jsonl -q \
      --set train.precision=bf16 --set train.batch_size=8 --set train.grad_accum=1 "${gpt2_data[@]}" \
      >> "$LOGS/dl-124m.jsonl" 2>> "$LOGS/torch-124m.err" || ok=0
    # The first round compiles (torch.compile, minutes on a fresh machine); the second reuses the cache.
    run_for 240 python3 scripts/bench_torch_gpt2_cuda.py --batch 8 --steps 20 --warmup 5 \
      >> "$LOGS/torch-124m.jsonl" 2>> "$LOGS/torch-124m.err" || ok=0
    [ $ok = 1 ] || break
  done
  if [ $ok = 1 ]; then
    verdict=$(verdict_or_crash "$(python3 - "$LOGS" << 'PY'
import json, statistics, sys, os
d = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(os.path.join(d, name)) if l.startswith("{")]
dl, pt = rows("dl-124m.jsonl"), rows("torch-124m.jsonl")
dl_tps = statistics.median(r["tokens_per_sec"] for r in dl)
pt_tps = statistics.median(r["tokens_per_sec"] for r in pt)
fpt, peak = dl[0]["flops_per_token"], dl[0]["peak_flops"]
mfu_dl = dl_tps * fpt / peak if peak else None
mfu_pt = pt_tps * fpt / peak if peak else None
summary = {"dl_tokens_per_sec": dl_tps, "torch_tokens_per_sec": pt_tps, "ratio": dl_tps / pt_tps,
           "flops_per_token": fpt, "flop_formula": dl[0]["flop_formula"], "peak_flops": peak,
           "peak_source": dl[0]["peak_source"], "mfu_dl": mfu_dl, "mfu_torch": mfu_pt,
           "dl_step_split_s": {k: dl[0][k] for k in ("step_s", "compute_s", "comm_s", "data_s", "optimizer_s")},
           "torch_step_s": pt[0]["step_s"], "torch_warmup_s": [r["warmup_s"] for r in pt],
           "torch": pt[0]["torch"], "device": pt[0]["device"]}
json.dump(summary, open(os.path.join(d, "gpt2-124m-vs-torch.json"), "w"), indent=1)
pct = lambda m: "unknown" if m is None else f"{100 * m:.1f}%"
goal = dl_tps >= 1.2 * pt_tps and mfu_dl is not None and mfu_dl >= 0.45
print(("ok" if goal else "FAIL") + f" dl-train {dl_tps:.0f} tok/s (MFU {pct(mfu_dl)}) vs PyTorch {pt_tps:.0f} tok/s "
      f"(MFU {pct(mfu_pt)}): ratio {dl_tps / pt_tps:.2f} (goal >= 1.2 and MFU >= 45%; {dl[0]['flop_formula']}, "
      f"peak {dl[0]['peak_source']})")
PY
)")
    row torch "${verdict%% *}" "${verdict#* }"
  else
    row torch FAIL "$(grep -m1 -iE 'error|Traceback' "$LOGS/torch-124m.err" || echo 'a command failed or timed out') (torch-124m.err)"
  fi
}

# --- kernels: where one 124M bf16 step spends its GPU time (Nsight Compute, step 4) --------------
stage_kernels() {
  need kernels dl-train || return 0
  if command -v ncu > /dev/null; then
    note "per-kernel breakdown of step 4 of GPT-2 124M bf16 (ncu --profile-from-start off)"
    rm -rf "$LOGS/run-kernels"
    # --print-units base: every duration in nanoseconds (otherwise ncu may scale units per value);
    # clocks and caches as the step left them (no L2 flush before each kernel), as in a real step.
    run_for 150 env DL_CUDA_PROFILE_STEP=4 ncu --profile-from-start off --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --csv --page raw --print-units base \
      "$BUILD/bin/dl-train" "${gpt2[@]}" --device cuda --steps 4 --quiet --set train.precision=bf16 \
      --run-dir "$LOGS/run-kernels" > "$LOGS/kernels.csv" 2> "$LOGS/kernels.err"
    rc=$?
    rm -rf "$LOGS/run-kernels/checkpoints"
    if [ $rc = 0 ] && python3 scripts/kernel_breakdown.py "$LOGS/kernels.csv" --json "$LOGS/kernels.json" \
         > "$LOGS/kernels.txt" 2>> "$LOGS/kernels.err"; then
      row kernels ok "$(tail -1 "$LOGS/kernels.txt" | tr -s ' '); top: $(sed -n 2p "$LOGS/kernels.txt" | tr -s ' ') (kernels.txt)"
    else
      # ncu's own errors (==ERROR==) go to stdout, with the CSV.
      row kernels FAIL "$(grep -h -m1 '==ERROR==' "$LOGS/kernels.csv" "$LOGS/kernels.err" | head -1 || true) $(why $rc "$LOGS/kernels.err") (kernels.err, kernels.csv)"
    fi
  else
    row kernels skip "ncu is not on the PATH"
  fi
}

# --- bench: GPT-2 124M fp32 and bf16 tokens/s through dl-train itself ---------------------------
stage_bench() {
  need bench dl-train || return 0
  for prec in fp32 bf16; do
    note "GPT-2 124M, $prec, batch 8 x 1024, 8 steps"
    rm -rf "$LOGS/run-bench-$prec"
    run_for 150 "$BUILD/bin/dl-train" "${gpt2[@]}" --device cuda --steps 8 --json --quiet --run-dir "$LOGS/run-bench-$prec" \
      --set train.precision=$prec > "$LOGS/bench-$prec.jsonl" 2> "$LOGS/bench-$prec.err"
    rc=$?
    rm -rf "$LOGS/run-bench-$prec/checkpoints"
    if [ $rc = 0 ]; then
      rate=$(python3 -c '
import json, sys
steps = sorted([json.loads(l)["tokens_per_sec"] for l in open(sys.argv[1]) if l.startswith("{") and "tokens_per_sec" in l][3:])
print(f"{steps[len(steps) // 2]:.0f}" if steps else "nan")' "$LOGS/bench-$prec.jsonl")
      [ "$rate" != nan ] && status=ok || status=FAIL
      row bench "$status" "$prec: median $rate tokens/s after 3 warm-up steps (bench-$prec.jsonl)"
    else
      row bench FAIL "$prec: $(why $rc "$LOGS/bench-$prec.err")"
    fi
  done
}

# The stages in the order STAGES names them (the most wanted first: the call's DEADLINE may stop
# the rest); one that is not known is a FAIL row, not a silent skip.
for stage in $STAGES; do
  if declare -F "stage_$stage" > /dev/null; then
    stage_start=$(date +%s)
    "stage_$stage"
    # How long each stage took, for sizing the next call.
    note "stage $stage took $(($(date +%s) - stage_start)) s ($(left) s left before DEADLINE)"
    [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && echo "# stage $stage: $(($(date +%s) - stage_start)) s" >> "$OUT/gpu-check-rows.txt"
  else
    row "$stage" FAIL "no such stage (known: build ops test train ranks long memory dlbench torch kernels bench)"
  fi
done

trap - TERM INT
finish
exit $failed
