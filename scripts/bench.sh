#!/usr/bin/env bash
# make bench: dl-train's CPU training throughput against PyTorch on the same GPT shape
# (configs/bench-cpu.toml), measured in one run, each at its best thread count, plus the
# machine's OpenBLAS sgemm peak. Prints a table and writes BUILD/bench/cpu-train.json.
#   REPEATS=3 (runs per implementation and thread count; the median counts)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${REPEATS:-3}
PY=/usr/bin/python3
out="$BUILD/bench"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
threads=$(seq 1 "$(nproc)")
raw="$out/cpu-train-raw.jsonl"
: > "$raw"

echo "bench: OpenBLAS sgemm peak" >&2
for t in $threads; do
  "$BUILD/bin/bench_sgemm_peak" "$t" | sed 's/^{/{"impl": "sgemm", /' >> "$raw"
done

for r in $(seq 1 "$REPEATS"); do
  for t in $threads; do
    echo "bench: run $r/$REPEATS, $t thread(s): dl-train" >&2
    "$BUILD/bin/dl-train" configs/bench-cpu.toml --run-dir "$tmp/run-$r-$t" --set "train.threads=$t" --json --quiet \
      | $PY -c '
import json, sys
rates = [json.loads(l)["tokens_per_sec"] for l in sys.stdin if "\"loss\"" in l]
rates = sorted(rates[5:])  # the first steps warm caches and the allocator
print(json.dumps({"impl": "dl-train", "threads": int(sys.argv[1]), "tokens_per_sec": rates[len(rates) // 2]}))
' "$t" >> "$raw"
    echo "bench: run $r/$REPEATS, $t thread(s): pytorch" >&2
    $PY scripts/bench_torch_gpt.py "$t" 30 >> "$raw"
  done
done

$PY - "$raw" "$out/cpu-train.json" <<'PYEOF'
import json, statistics, sys, platform
rows = [json.loads(l) for l in open(sys.argv[1])]
sgemm = max(r["sgemm_gflops"] for r in rows if r["impl"] == "sgemm")
L, D, H, T, V = 4, 128, 4, 128, 256
N = V * D + T * D + L * (12 * D * D + 13 * D) + 2 * D    # GPT-2 parameter count, tied head
flops_palm = 6 * N + 12 * L * D * T                        # PaLM appendix B (H * Q = D)
best = {}
for impl in ("dl-train", "pytorch"):
    by_t = {}
    for r in rows:
        if r["impl"] == impl:
            by_t.setdefault(r["threads"], []).append(r["tokens_per_sec"])
    med = {t: statistics.median(v) for t, v in by_t.items()}
    t = max(med, key=med.get)
    best[impl] = {"threads": t, "tokens_per_sec": med[t], "by_threads": med, "runs": by_t[t]}
ratio = best["dl-train"]["tokens_per_sec"] / best["pytorch"]["tokens_per_sec"]
gflops = best["dl-train"]["tokens_per_sec"] * flops_palm / 1e9
result = {"machine": platform.processor() or platform.machine(), "params": N, "flops_per_token": flops_palm,
          "flop_formula": "6N+12LHQT (PaLM)", "sgemm_peak_gflops": sgemm, "dl_train": best["dl-train"],
          "pytorch": best["pytorch"], "ratio": ratio, "dl_train_gflops": gflops,
          "pct_of_sgemm_peak": 100 * gflops / sgemm}
json.dump(result, open(sys.argv[2], "w"), indent=2)
print(f"GPT L={L} D={D} H={H} T={T} batch 16 V={V}, fp32 AdamW, {N} params, {flops_palm/1e6:.2f} MFLOP/token (PaLM)")
print(f"OpenBLAS sgemm peak            {sgemm:8.1f} GFLOP/s")
for impl in ("dl-train", "pytorch"):
    b = best[impl]
    per_t = ", ".join(f"{t} thr {v:.0f}" for t, v in sorted(b["by_threads"].items()))
    print(f"{impl:10s} best {b['tokens_per_sec']:9.0f} tokens/s at {b['threads']} thread(s)  (medians: {per_t})")
print(f"ratio dl-train / pytorch        {ratio:8.2f}x")
print(f"dl-train achieved               {gflops:8.1f} GFLOP/s = {100 * gflops / sgemm:.0f}% of the sgemm peak")
PYEOF
