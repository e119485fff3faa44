#!/usr/bin/env bash
# make bench, distributed part: on the CPU benchmark shape (configs/bench-cpu.toml, global batch
# 16), with 1 thread per rank so that 2 ranks use the 2 cores,
#   - data-parallel scaling efficiency at dp=2 and the communication share of its step,
#   - the measured pipeline bubble at pp=2, m=4 (GPipe and 1F1B) against (p-1)/(m+p-1),
#   - Gloo allreduce bus bandwidth at the gradient bucket size ([dist] bucket_mb) and at this
#     model's gradient size (dl-bench collective, nccl-tests conventions).
# Every figure is the median over REPEATS runs (per run: the median step after 5 warm-up steps).
# Prints a table and writes BUILD/bench/dist.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-25}
PY=/usr/bin/python3
out="$BUILD/bench"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
raw="$out/dist-raw.jsonl"
: > "$raw"

# One run: its metrics.jsonl reduced to the median step and the median per-rank time split.
run_layout() {  # name, then dl-train arguments
  local name=$1; shift
  local dir="$tmp/$name-$r"
  "$BUILD/bin/dl-train" configs/bench-cpu.toml --run-dir "$dir" --set "train.steps=$STEPS" --quiet "$@" > /dev/null
  $PY - "$dir/metrics.jsonl" "$name" "$r" >> "$raw" <<'PYEOF'
import json, statistics as st, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][5:]
med = lambda xs: st.median(xs)
row = {"layout": sys.argv[2], "repeat": int(sys.argv[3]), "step_s": med([r["step_s"] for r in recs]),
       "tokens_per_sec": med([r["tokens_per_sec"] for r in recs])}
for k in ("compute", "comm", "pipeline_wait", "optimizer", "data"):
    key = f"rank_time_{k}_s"
    if key in recs[0]:
        row[f"{k}_s"] = [med([r[key][i] for r in recs]) for i in range(len(recs[0][key]))]
    else:
        row[f"{k}_s"] = [med([r[f"time_{k}_s"] for r in recs])]
print(json.dumps(row))
PYEOF
}

for r in $(seq 1 "$REPEATS"); do
  echo "bench-dist: run $r/$REPEATS: single process, 1 thread" >&2
  run_layout single --set train.threads=1
  echo "bench-dist: run $r/$REPEATS: dp=2" >&2
  run_layout dp2 --nproc-per-node 2 --set parallel.dp=2
  for sched in gpipe 1f1b; do
    echo "bench-dist: run $r/$REPEATS: pp=2 m=4 $sched" >&2
    run_layout "pp2-$sched" --nproc-per-node 2 --set parallel.pp=2 --set parallel.microbatches=4 \
      --set "parallel.schedule=\"$sched\""
  done
done

# Gloo allreduce at the bucket size and at this model's gradient size (fp32).
bucket_bytes=$($PY -c 'print(int(25e6))')
grad_bytes=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["params"] * 4)' "$tmp/single-1/summary.json")
coll="$out/dist-allreduce.jsonl"
echo "bench-dist: Gloo allreduce, 2 ranks, $grad_bytes and $bucket_bytes bytes" >&2
: > "$coll"
for bytes in "$grad_bytes" "$bucket_bytes"; do
  "$BUILD/bin/dl-bench" collective allreduce --nproc-per-node 2 -b "$bytes" -e "$bytes" --repeat 20 --warmup 5 \
    --format jsonl >> "$coll"
done

$PY - "$raw" "$coll" "$out/dist.json" <<'PYEOF'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
coll = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["layout"], []).append(r)
def med(layout, key, rank=None):
    vals = [r[key] if rank is None else r[key][rank] for r in by[layout]]
    return st.median(vals)
res = {"repeats": len(by["single"])}
t1 = med("single", "tokens_per_sec"); t2 = med("dp2", "tokens_per_sec")
res["single_tokens_per_sec"] = t1
res["dp2_tokens_per_sec"] = t2
res["dp2_scaling_efficiency"] = t2 / (2 * t1)
res["dp2_comm_share"] = st.median([r["comm_s"][0] / r["step_s"] for r in by["dp2"]])
p, m = 2, 4
res["bubble_theory"] = (p - 1) / (m + p - 1)
for sched in ("gpipe", "1f1b"):
    L = f"pp2-{sched}"
    # Idle share of each stage: the step minus its own compute and optimizer time.
    idle = [st.median([1 - (r["compute_s"][i] + r["optimizer_s"][i]) / r["step_s"] for r in by[L]]) for i in range(p)]
    res[f"{L}_tokens_per_sec"] = med(L, "tokens_per_sec")
    res[f"{L}_idle_per_stage"] = idle
    res[f"{L}_bubble_measured"] = sum(idle) / p
    res[f"{L}_pipeline_wait_share"] = [st.median([r["pipeline_wait_s"][i] / r["step_s"] for r in by[L]]) for i in range(p)]
res["allreduce"] = [{"bytes": c["size"], "busbw_GBps": c["oop_busbw"], "algbw_GBps": c["oop_algbw"],
                     "time_us": c["oop_time_us"], "wrong": c["oop_wrong"] + c["ip_wrong"]} for c in coll]
json.dump(res, open(sys.argv[3], "w"), indent=2)
print(f"CPU GPT bench shape, global batch 16, 1 thread per rank, median of {res['repeats']} runs")
print(f"single process          {t1:9.0f} tokens/s")
print(f"dp=2                    {t2:9.0f} tokens/s   scaling efficiency {100 * res['dp2_scaling_efficiency']:.0f}%"
      f"   communication {100 * res['dp2_comm_share']:.1f}% of the step")
for sched in ("gpipe", "1f1b"):
    L = f"pp2-{sched}"
    print(f"pp=2 m=4 {sched:6s}         {res[L + '_tokens_per_sec']:9.0f} tokens/s   bubble {100 * res[L + '_bubble_measured']:.1f}%"
          f" (stages {', '.join(f'{100 * x:.1f}%' for x in res[L + '_idle_per_stage'])}) vs (p-1)/(m+p-1) = {100 * res['bubble_theory']:.0f}%")
for c in res["allreduce"]:
    print(f"Gloo allreduce {c['bytes']:>10} B   busbw {c['busbw_GBps']:.2f} GB/s   algbw {c['algbw_GBps']:.2f} GB/s"
          f"   time {c['time_us']:.0f} us   #wrong {c['wrong']}")
PYEOF
