#!/usr/bin/env bash
# make bench: how long dl-train takes to load GPT-2 124M through model.init_from from a warm page
# cache. Writes a random 124M Hugging Face GPT-2 folder (fp32, openai-community/gpt2's layout:
# model.safetensors with the h.N.attn.bias mask buffers, 548 MB) in a temporary folder, warms the
# page cache with one run, then runs `dl-train --steps 0` REPEATS times and takes the time dl-train
# logs for the load (headers and weights; RUN/init_from.json). The folder is deleted at the end.
# Prints the median and writes BUILD/bench/init-from.json.
#   REPEATS=5
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${REPEATS:-5}
PY=/usr/bin/python3
out="$BUILD/bench"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "bench: writing a random GPT-2 124M folder (fp32) in $tmp/gpt2" >&2
$PY - "$tmp/gpt2" <<'PYEOF'
import json, os, struct, sys
import numpy as np
out = sys.argv[1]
os.makedirs(out)
L, D, H, T, V = 12, 768, 12, 1024, 50257
shapes = [("wte.weight", [V, D]), ("wpe.weight", [T, D])]
for i in range(L):
    p = f"h.{i}."
    shapes += [(p + "ln_1.weight", [D]), (p + "ln_1.bias", [D]), (p + "attn.bias", [1, 1, T, T]),
               (p + "attn.c_attn.weight", [D, 3 * D]), (p + "attn.c_attn.bias", [3 * D]),
               (p + "attn.c_proj.weight", [D, D]), (p + "attn.c_proj.bias", [D]),
               (p + "ln_2.weight", [D]), (p + "ln_2.bias", [D]),
               (p + "mlp.c_fc.weight", [D, 4 * D]), (p + "mlp.c_fc.bias", [4 * D]),
               (p + "mlp.c_proj.weight", [4 * D, D]), (p + "mlp.c_proj.bias", [D])]
shapes += [("ln_f.weight", [D]), ("ln_f.bias", [D])]
header, pos = {"__metadata__": {"format": "pt"}}, 0
for name, shape in shapes:
    n = 4 * int(np.prod(shape))
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [pos, pos + n]}
    pos += n
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
rng = np.random.default_rng(0)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for name, shape in shapes:
        f.write((0.02 * rng.standard_normal(int(np.prod(shape)), dtype=np.float32)).tobytes())
config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": T,
          "n_ctx": T, "n_embd": D, "n_layer": L, "n_head": H, "activation_function": "gelu_new",
          "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
# One training window of token ids (llm.c shard: 256 int32 header, uint16 ids).
ids = rng.integers(0, V, size=T + 1, dtype=np.uint16)
hdr = np.zeros(256, dtype="<i4")
hdr[:3] = [20240520, 1, len(ids)]
open(os.path.join(out, "tokens.bin"), "wb").write(hdr.tobytes() + ids.astype("<u2").tobytes())
PYEOF
ls -l "$tmp/gpt2" >&2

# No validation split (no evaluation), one window of data: the run loads, saves step 0 and ends.
cat > "$tmp/c.toml" <<TOML
[model]
init_from = "$tmp/gpt2"
[data]
source = "tokens:$tmp/gpt2/tokens.bin"
val_fraction = 0.0
[train]
steps = 0
batch_size = 1
[log]
progress = "none"
tensorboard = false
TOML

raw="$out/init-from-raw.jsonl"
: > "$raw"
for r in $(seq 0 "$REPEATS"); do
  rm -rf "$tmp/run"
  "$BUILD/bin/dl-train" "$tmp/c.toml" --run-dir "$tmp/run" --quiet > /dev/null
  if [ "$r" -gt 0 ]; then  # run 0 warms the page cache
    $PY -c 'import json, sys; j = json.load(open(sys.argv[1])); print(json.dumps({"open_s": j["open_seconds"], "load_s": j["load_seconds"], "total_s": j["open_seconds"] + j["load_seconds"]}))' \
      "$tmp/run/init_from.json" | tee -a "$raw" >&2
  fi
done

$PY - "$raw" "$out/init-from.json" "$tmp/gpt2/model.safetensors" <<'PYEOF'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
size = os.path.getsize(sys.argv[3])
med = {k: statistics.median(r[k] for r in rows) for k in ("open_s", "load_s", "total_s")}
res = {"model": "gpt2-124M fp32", "file_bytes": size, "repeats": len(rows), "median": med,
       "min_total_s": min(r["total_s"] for r in rows), "max_total_s": max(r["total_s"] for r in rows),
       "median_gb_per_s": size / med["total_s"] / 1e9, "cpus": os.cpu_count()}
json.dump(res, open(sys.argv[2], "w"), indent=2)
print(f"init_from load of GPT-2 124M ({size / 1e6:.0f} MB fp32), warm page cache, median of {len(rows)}: "
      f"{med['total_s']:.3f} s (headers {med['open_s']:.3f} s, weights {med['load_s']:.3f} s; "
      f"{res['median_gb_per_s']:.2f} GB/s; range {res['min_total_s']:.3f}-{res['max_total_s']:.3f} s)")
PYEOF
