#!/usr/bin/env bash
# One device call: dl-train's llama on a real GPU (binaries built on the dev machine, carried).
# 1) llama-tiny 20 steps: cuda fp32 / bf16 against the CPU; 2) a ~120M llama, bf16, tokens/s,
# against transformers' LlamaForCausalLM (same shape, bf16 autocast, fused AdamW) in the same call;
# 3) transformers loads the CPU run's checkpoint folder.
set -u
C=.gpu-carry
exec > >(tee "$OUT/log.txt") 2>&1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
scripts/gpu-deps.sh unpack /tmp/deps > /dev/null 2>&1 || echo "gpu-deps unpack failed"
libdirs=$(find /tmp/deps -name '*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  f=$(find /usr/local /opt /usr/lib -name "$l" 2>/dev/null | head -1)
  [ -n "$f" ] && libdirs="$libdirs$(dirname "$f"):"
done
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:-}"
chmod +x $C/dl-train
ldd $C/dl-train | grep -E "not found|cuda|cublas|cudnn|nccl"
echo "setup $(( $(date +%s) - t0 )) s"
T=$C/dl-train
for dev in cpu cuda; do for prec in fp32 bf16; do
  [ $dev = cpu ] && [ $prec = bf16 ] && continue
  s=$(date +%s.%N)
  timeout 120 $T configs/llama-tiny.toml --steps 20 --set log.every=1 --set train.eval_every=0 --set train.precision=$prec \
    --device $dev --run-dir /tmp/r-$dev-$prec --json -q > "$OUT/tiny-$dev-$prec.jsonl" 2> /tmp/err-$dev-$prec.txt
  echo "tiny $dev $prec rc=$? $(awk -v a="$s" -v b="$(date +%s.%N)" "BEGIN{print b-a}") s"; tail -3 /tmp/err-$dev-$prec.txt
done; done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def losses(n):
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{out}/tiny-{n}.jsonl")) if "loss" in r}
try:
    ref = losses("cpu-fp32")
    for n, tol in (("cuda-fp32", 1e-5), ("cuda-bf16", 0.02)):
        got = losses(n)
        d = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in ref)
        print(f"{n} vs cpu-fp32 over {len(ref)} steps: max relative loss difference {d:.3g} ({'within' if d <= tol else 'OUTSIDE'} {tol}); step 20 {got[20]:.6f} vs {ref[20]:.6f}")
except Exception as e:
    print("compare failed:", e)
PY
echo "tiny done $(( $(date +%s) - t0 )) s"
SHAPE="--set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12 --set model.n_kv_head=4 --set model.ffn_hidden=2048 --set model.block_size=1024 --set model.vocab_size=32000 --set train.batch_size=8"
timeout 150 $T configs/llama-tiny.toml $SHAPE --steps 40 --set log.every=1 --set train.eval_every=0 --set train.precision=bf16 \
  --set train.checkpoint_every=0 --device cuda --run-dir /tmp/r-big --json -q > "$OUT/big-dl-train.jsonl" 2> /tmp/err-big.txt
echo "big dl-train rc=$?"; tail -3 /tmp/err-big.txt
timeout 150 python3 $C/hf_llama_speed.py > "$OUT/big-transformers.json" 2> /tmp/err-hf.txt; echo "big transformers rc=$?"; tail -3 /tmp/err-hf.txt
python3 - "$OUT" <<'PY'
import json, sys, statistics
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/big-dl-train.jsonl") if '"loss"' in l]
tps = statistics.median(r["tokens_per_sec"] for r in rows[10:]) if len(rows) > 10 else float("nan")
L, D, F, V, T, H, KV = 12, 768, 2048, 32000, 1024, 12, 4
N = V * D * 2 + L * (D * D * 2 + 2 * D * (D // H) * KV + 3 * D * F + 2 * D) + D
fl = 6 * N + 12 * L * D * T
print(f"llama {N/1e6:.1f}M bf16 B8 T1024: dl-train median {tps:.0f} tokens/s = {tps*fl/989e12*100:.1f}% MFU (989 TFLOP/s dense bf16 H100/H200 peak)")
try:
    hf = json.load(open(f"{out}/big-transformers.json"))
    print(f"transformers {hf['version']} torch {hf['torch']}: {hf['tokens_per_sec']:.0f} tokens/s; dl-train / transformers = {tps/hf['tokens_per_sec']:.2f}")
except Exception as e:
    print("transformers row missing:", e)
PY
echo "big done $(( $(date +%s) - t0 )) s"
ck=$(ls -d /tmp/r-cpu-fp32/checkpoints/step_* 2>/dev/null | tail -1)
timeout 60 python3 - "$ck" <<'PY' 2>&1 | grep -v Warning | tail -8
import sys, torch, transformers
from transformers import LlamaForCausalLM
ck = sys.argv[1]
m, info = LlamaForCausalLM.from_pretrained(ck, output_loading_info=True, torch_dtype=torch.float32)
print("from_pretrained", ck, "missing", info["missing_keys"], "unexpected", info["unexpected_keys"], "mismatched", info["mismatched_keys"])
text = open("docs/RELIABILITY.md", "rb").read()
ids = torch.tensor([list(text[-129:])])
with torch.no_grad():
    print("transformers loss on the last 129 bytes of the text:", m(ids, labels=ids).loss.item())
PY
echo "all done $(( $(date +%s) - t0 )) s"
