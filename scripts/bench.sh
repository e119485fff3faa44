#!/usr/bin/env bash
# make bench: dl-train's CPU training throughput against PyTorch on the same GPT shape
# (configs/bench-cpu.toml) and Llama shape (configs/bench-llama-cpu.toml), measured in one run,
# each at its best thread count: Debian's PyTorch
# 1.13 and the current PyTorch 2.x from PyPI (eager with fused AdamW, and torch.compile), plus the
# machine's OpenBLAS sgemm peak, and dl-bench gemm's own rate against a plain timed cblas_sgemm
# (1024^3, 1 thread; fails outside 0.8-1.2). Prints a table and writes BUILD/bench/cpu-train.json.
#   REPEATS=3 (runs per implementation and thread count; the median counts)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${REPEATS:-3}
PY=/usr/bin/python3
out="$BUILD/bench"
mkdir -p "$out"
# PyTorch as users run it today: the current release from PyPI in a venv under BUILD/bench (pip's
# cache makes the second install quick), beside Debian's python3-torch 1.13 above.
venv="$out/venv-torch"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, numpy" 2> /dev/null; then
  echo "bench: installing PyTorch from PyPI into $venv (minutes the first time)" >&2
  $PY -m venv "$venv"
  "$venv/bin/pip" install -q torch numpy
fi
PY2="$venv/bin/python"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
threads=$(seq 1 "$(nproc)")
raw="$out/cpu-train-raw.jsonl"
: > "$raw"

echo "bench: OpenBLAS sgemm peak" >&2
for t in $threads; do
  "$BUILD/bin/bench_sgemm_peak" "$t" | sed 's/^{/{"impl": "sgemm", /' >> "$raw"
done

# dl-bench gemm's overhead: its 1024^3 rate against a plain cblas_sgemm of the same size on one
# thread, in alternating rounds so that a change in the machine's load affects both alike.
echo "bench: dl-bench gemm against a plain cblas_sgemm, 1024^3, 1 thread" >&2
for r in $(seq 1 7); do
  "$BUILD/bin/dl-bench" gemm --sizes 1024 --threads 1 --repeat 3 --warmup 1 --format jsonl --quiet \
    | sed 's/^{/{"impl": "dl-bench-gemm", /' >> "$raw"
  "$BUILD/bin/bench_sgemm_peak" 1 1024 | sed 's/^{/{"impl": "plain-sgemm", /' >> "$raw"
done

# Each model (GPT: configs/bench-cpu.toml; Llama: configs/bench-llama-cpu.toml) by dl-train, Debian's
# PyTorch 1.13 and PyTorch 2.x (eager with scaled_dot_product_attention and fused AdamW, and under
# torch.compile), at every thread count, in alternating order.
for r in $(seq 1 "$REPEATS"); do
  for model in gpt llama; do
    config=configs/bench-cpu.toml torch_flag=""
    [ "$model" = llama ] && config=configs/bench-llama-cpu.toml torch_flag="--llama"
    for t in $threads; do
      echo "bench: run $r/$REPEATS, $model, $t thread(s): dl-train" >&2
      "$BUILD/bin/dl-train" "$config" --run-dir "$tmp/run-$model-$r-$t" --set "train.threads=$t" --json --quiet \
        | $PY -c '
import json, sys
rates = [json.loads(l)["tokens_per_sec"] for l in sys.stdin if "\"loss\"" in l]
rates = sorted(rates[5:])  # the first steps warm caches and the allocator
print(json.dumps({"impl": "dl-train", "model": sys.argv[2], "threads": int(sys.argv[1]), "tokens_per_sec": rates[len(rates) // 2]}))
' "$t" "$model" >> "$raw"
      echo "bench: run $r/$REPEATS, $model, $t thread(s): pytorch 1.13 (Debian)" >&2
      # shellcheck disable=SC2086
      $PY scripts/bench_torch_cpu.py "$t" 20 $torch_flag >> "$raw"
      for mode in "--fused" "--compile --fused"; do
        echo "bench: run $r/$REPEATS, $model, $t thread(s): pytorch 2.x $mode" >&2
        # shellcheck disable=SC2086
        $PY2 scripts/bench_torch_cpu.py "$t" 20 $torch_flag $mode 2> "$tmp/torch2.err" |
          sed 's/"impl": "pytorch"/"impl": "pytorch2"/' >> "$raw" || { cat "$tmp/torch2.err" >&2; exit 1; }
      done
    done
  done
done

$PY - "$raw" "$out/cpu-train.json" <<'PYEOF'
import json, statistics, sys, platform
rows = [json.loads(l) for l in open(sys.argv[1])]
sgemm = max(r["sgemm_gflops"] for r in rows if r["impl"] == "sgemm")
gemm_t = {impl: statistics.median(r["time_s"] for r in rows if r["impl"] == impl) for impl in ("dl-bench-gemm", "plain-sgemm")}
gemm_ratio = gemm_t["plain-sgemm"] / gemm_t["dl-bench-gemm"]  # dl-bench FLOP/s over plain FLOP/s
L, D, H, T, V = 4, 128, 4, 128, 256
N = V * D + T * D + L * (12 * D * D + 13 * D) + 2 * D    # GPT-2 parameter count, tied head
flops_palm = 6 * N + 12 * L * D * T                        # PaLM appendix B (H * Q = D)
def best_of(model):
    best = {}
    for impl in ("dl-train", "pytorch", "pytorch2"):
        by_t = {}  # (threads, mode) -> tokens/s of each run
        for r in rows:
            if r["impl"] == impl and r.get("model", "gpt") == model:
                by_t.setdefault((r["threads"], r.get("mode", "")), []).append(r["tokens_per_sec"])
        med = {k: statistics.median(v) for k, v in by_t.items()}
        k = max(med, key=med.get)
        version = next((r.get("version") for r in rows if r["impl"] == impl), None)
        best[impl] = {"threads": k[0], "mode": k[1], "version": version, "tokens_per_sec": med[k],
                      "medians": [{"threads": t, "mode": m, "tokens_per_sec": v} for (t, m), v in sorted(med.items())],
                      "runs": by_t[k]}
    return best
best, llama = best_of("gpt"), best_of("llama")
ratio = best["dl-train"]["tokens_per_sec"] / best["pytorch"]["tokens_per_sec"]
ratio2 = best["dl-train"]["tokens_per_sec"] / best["pytorch2"]["tokens_per_sec"]
llama_ratio2 = llama["dl-train"]["tokens_per_sec"] / llama["pytorch2"]["tokens_per_sec"]
gflops = best["dl-train"]["tokens_per_sec"] * flops_palm / 1e9
result = {"machine": platform.processor() or platform.machine(), "params": N, "flops_per_token": flops_palm,
          "flop_formula": "6N+12LHQT (PaLM)", "sgemm_peak_gflops": sgemm, "dl_train": best["dl-train"],
          "pytorch": best["pytorch"], "pytorch2": best["pytorch2"], "ratio": ratio, "ratio_pytorch2": ratio2,
          "llama": {"config": "configs/bench-llama-cpu.toml", **llama, "ratio_pytorch2": llama_ratio2,
                    "ratio": llama["dl-train"]["tokens_per_sec"] / llama["pytorch"]["tokens_per_sec"]},
          "dl_train_gflops": gflops,
          "pct_of_sgemm_peak": 100 * gflops / sgemm,
          "gemm_1024_1thread": {"dl_bench_time_s": gemm_t["dl-bench-gemm"], "plain_sgemm_time_s": gemm_t["plain-sgemm"],
                                "ratio": gemm_ratio}}
json.dump(result, open(sys.argv[2], "w"), indent=2)
print(f"GPT L={L} D={D} H={H} T={T} batch 16 V={V}, fp32 AdamW, {N} params, {flops_palm/1e6:.2f} MFLOP/token (PaLM)")
print(f"OpenBLAS sgemm peak            {sgemm:8.1f} GFLOP/s")
names = {"dl-train": "dl-train", "pytorch": f"pytorch {best['pytorch']['version']}",
         "pytorch2": f"pytorch {best['pytorch2']['version']}"}
def show(title, b):
    print(title)
    for impl in ("dl-train", "pytorch", "pytorch2"):
        per = ", ".join(f"{m['threads']} thr{' ' + m['mode'] if m['mode'] else ''} {m['tokens_per_sec']:.0f}"
                        for m in b[impl]["medians"])
        print(f"  {names[impl]:22s} best {b[impl]['tokens_per_sec']:9.0f} tokens/s  (medians: {per})")
    for impl in ("pytorch", "pytorch2"):
        print(f"  ratio dl-train / {names[impl]:22s} {b['dl-train']['tokens_per_sec'] / b[impl]['tokens_per_sec']:6.2f}x")
show("GPT (configs/bench-cpu.toml):", best)
show("Llama, 9.6M parameters (configs/bench-llama-cpu.toml):", llama)
print("(pytorch 2.x: the best of eager with fused AdamW and torch.compile, over thread counts)")
print(f"dl-train achieved               {gflops:8.1f} GFLOP/s = {100 * gflops / sgemm:.0f}% of the sgemm peak")
gf = {k: 2 * 1024**3 / v / 1e9 for k, v in gemm_t.items()}
ok = 0.8 < gemm_ratio < 1.2
print(f"dl-bench gemm 1024^3, 1 thread  {gf['dl-bench-gemm']:8.1f} GFLOP/s vs plain cblas_sgemm {gf['plain-sgemm']:.1f}: "
      f"ratio {gemm_ratio:.3f} ({'within' if ok else 'OUTSIDE'} 0.8-1.2)")
if not ok:
    sys.exit("bench: dl-bench gemm's rate is not within 20% of a plain cblas_sgemm: its timing adds or hides work")
PYEOF
