#!/usr/bin/env bash
# make bench: tokenizer.json encoding speed. dlkit's HfTokenizer on one core (bench_tokenize,
# pinned to CPU 0) against Hugging Face's tokenizers on one thread (the PyPI package, Rust inside,
# in the venv scripts/tokenizers-venv.sh makes under BUILD; encode_batch of the text's lines with
# RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false, pinned the same), in alternating rounds on
# 4 MB of generated multilingual text, for tokenizers trained locally in the three styles dlkit
# reads (tests/scripts/hf_tokenizers_reference.py: gpt2 = ByteLevel, llama3 = Split + ByteLevel,
# sentencepiece = Prepend/Replace + byte fallback). Prints a table; writes BUILD/bench/hf-tokenizer.json.
#   REPEATS=3 (rounds; each round times 3 encodes per implementation; the median counts)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${REPEATS:-3}
out="$BUILD/bench"
ref="$out/hf-tokenizer"
venv="$BUILD/venv-tokenizers"
mkdir -p "$out"
if ! scripts/tokenizers-venv.sh "$venv"; then
  echo "bench: tokenizer.json bench skipped: no venv with tokenizers (reason above)" >&2
  exit 0
fi
raw="$ref/raw.jsonl"
# The tokenizers and text depend only on the script: made again when it changes.
stamp=$(sha256sum tests/scripts/hf_tokenizers_reference.py | cut -c1-16)
if [ "$(cat "$ref/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$ref"
  "$venv/bin/python" tests/scripts/hf_tokenizers_reference.py "$ref" . 4000000 --no-ids
  echo "$stamp" > "$ref/stamp"
fi
: > "$raw"
pin="taskset -c 0"
command -v taskset > /dev/null || pin=""
styles="gpt2 llama3 sentencepiece"
for r in $(seq 1 "$REPEATS"); do
  for s in $styles; do
    echo "bench: round $r/$REPEATS: $s, dlkit and tokenizers, one core" >&2
    $pin "$BUILD/bin/bench_tokenize" "$ref/$s" "$ref/text.txt" 3 | sed "s/^{/{\"style\": \"$s\", /" >> "$raw"
    RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false $pin "$venv/bin/python" scripts/bench_hf_tokenizers.py \
      "$ref/$s" "$ref/text.txt" 3 | sed "s/^{/{\"style\": \"$s\", /" >> "$raw"
  done
done

/usr/bin/python3 - "$raw" "$out/hf-tokenizer.json" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
res = {"text_bytes": rows[0]["bytes"], "tokenizers_version": next(r["version"] for r in rows if r["impl"] == "tokenizers")}
print("tokenizer.json encoding on one core, %d bytes of multilingual text, median of rounds" % res["text_bytes"])
print("%-14s %12s %12s %8s %10s %10s" % ("style", "dlkit MB/s", "hf MB/s", "ratio", "dlkit tok", "hf tok"))
slower = []
for s in dict.fromkeys(r["style"] for r in rows):
    d = statistics.median(r["mb_per_s"] for r in rows if r["style"] == s and r["impl"] == "dlkit")
    h = statistics.median(r["mb_per_s"] for r in rows if r["style"] == s and r["impl"] == "tokenizers")
    dt = next(r["tokens"] for r in rows if r["style"] == s and r["impl"] == "dlkit")
    ht = next(r["tokens"] for r in rows if r["style"] == s and r["impl"] == "tokenizers")
    res[s] = {"dlkit_mb_per_s": d, "tokenizers_mb_per_s": h, "ratio": d / h, "dlkit_tokens": dt, "tokenizers_tokens": ht,
              "runs": sum(1 for r in rows if r["style"] == s and r["impl"] == "dlkit")}
    print("%-14s %12.2f %12.2f %7.2fx %10d %10d" % (s, d, h, d / h, dt, ht))
    if d < h:
        slower.append(s)
json.dump(res, open(sys.argv[2], "w"), indent=2)
print("(tokenizers %s encodes lines with encode_batch; dlkit the whole text, so token counts differ slightly)" % res["tokenizers_version"])
if slower:
    print("bench: dlkit's tokenizer.json encoding is slower than tokenizers on one core for " + ", ".join(slower), file=sys.stderr)
PYEOF
