#!/usr/bin/env bash
# make bench: GPT-2 tokenizing speed. dlkit's tokenizer on one core (bench_tokenize, pinned to
# CPU 0) against tiktoken's gpt2 encoding on one core (the PyPI package, Rust inside, in a venv
# under BUILD/bench; its Encoding built from the same ../shared/data/gpt2 vocab.json + merges.txt
# with tiktoken's data-gym loader), in alternating rounds on the same 8 MB English text: the
# repository's README.md and docs/*.md concatenated and repeated to 8,000,000 bytes (cut at a
# line end). Then `dl-train tokenize` on that text with 1 and 2 threads (and every core when there
# are more), checking its shards hold tiktoken's ids: its whole time (reading, encoding, writing
# and fsyncing the shard) and its threads' encoding alone, from the summary it prints. Prints a table; writes BUILD/bench/tokenize.json.
#   REPEATS=3 (rounds; each round times 3 encodes per implementation; the median counts)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${REPEATS:-3}
GPT2=${DL_SHARED_DIR:-../shared}/data/gpt2
out="$BUILD/bench"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text="$out/tokenize-bench.txt"
raw="$out/tokenize-raw.jsonl"
: > "$raw"

/usr/bin/python3 - "$text" README.md docs/*.md <<'PYEOF'
import sys
src = b"".join(open(p, "rb").read() + b"\n" for p in sorted(sys.argv[2:]))
n = 8_000_000
data = (src * (n // len(src) + 1))[:n]
data = data[: data.rindex(b"\n") + 1]
open(sys.argv[1], "wb").write(data)
PYEOF

venv="$BUILD/bench/venv-tiktoken"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import tiktoken" 2>/dev/null; then
  echo "bench: installing tiktoken into $venv" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q tiktoken
fi
pin="taskset -c 0"
command -v taskset > /dev/null || pin=""

for r in $(seq 1 "$REPEATS"); do
  echo "bench: round $r/$REPEATS: dlkit and tiktoken, one core" >&2
  $pin "$BUILD/bin/bench_tokenize" "$GPT2" "$text" 3 >> "$raw"
  $pin "$venv/bin/python" scripts/bench_tiktoken.py "$GPT2" "$text" 3 "$tmp/tiktoken-ids.txt" >> "$raw"
done

threads="1 2"
[ "$(nproc)" -gt 2 ] && threads="$threads $(nproc)"
for r in $(seq 1 "$REPEATS"); do
  for t in $threads; do
    echo "bench: round $r/$REPEATS: dl-train tokenize --threads $t" >&2
    rm -rf "$tmp/shards"
    "$BUILD/bin/dl-train" tokenize "$text" --tokenizer "$GPT2" -o "$tmp/shards" --threads "$t" \
      > "$tmp/shards.txt" 2> "$tmp/summary.txt"
    /usr/bin/python3 - "$t" "$tmp/summary.txt" "$tmp/shards.txt" "$tmp/tiktoken-ids.txt" >> "$raw" <<'PYEOF'
import json, re, struct, sys
t, summary, shards, ref = sys.argv[1:5]
line = open(summary).read()
m = re.search(r"([0-9.]+) MB: ([0-9]+) train \+ ([0-9]+) val tokens in [0-9]+ shard\(s\), ([0-9.e+-]+) s .*encoding ([0-9.e+-]+) s", line)
mb, tokens, secs, enc = float(m.group(1)), int(m.group(2)) + int(m.group(3)), float(m.group(4)), float(m.group(5))
ids = []
for row in open(shards):
    b = open(row.split("\t")[0], "rb").read()
    n = struct.unpack_from("<3i", b)[2]
    ids += struct.unpack_from("<%dH" % n, b, 1024)
same = ids == [int(x) for x in open(ref)]
print(json.dumps({"impl": "dl-train tokenize", "threads": int(t), "tokens": tokens, "time_s": secs,
                  "mb_per_s": mb / secs, "tokens_per_s": tokens / secs, "encode_mb_per_s": mb / enc,
                  "encode_tokens_per_s": tokens / enc, "same_ids_as_tiktoken": same}))
PYEOF
  done
done

/usr/bin/python3 - "$raw" "$out/tokenize.json" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(impl, threads=None):
    rs = [r for r in rows if r["impl"] == impl and (threads is None or r.get("threads") == threads)]
    return {"tokens": rs[0]["tokens"], "mb_per_s": statistics.median(r["mb_per_s"] for r in rs),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs), "runs": len(rs),
            **({"same_ids_as_tiktoken": all(r["same_ids_as_tiktoken"] for r in rs),
                "encode_mb_per_s": statistics.median(r["encode_mb_per_s"] for r in rs),
                "encode_tokens_per_s": statistics.median(r["encode_tokens_per_s"] for r in rs)} if threads else {})}
res = {"text_bytes": rows[0]["bytes"], "dlkit_1core": med("dlkit"), "tiktoken_1core": med("tiktoken")}
res["tiktoken_version"] = next(r["version"] for r in rows if r["impl"] == "tiktoken")
for t in sorted({r["threads"] for r in rows if r["impl"] == "dl-train tokenize"}):
    res["dl_train_tokenize_%d_threads" % t] = med("dl-train tokenize", t)
res["ratio_dlkit_over_tiktoken"] = res["dlkit_1core"]["mb_per_s"] / res["tiktoken_1core"]["mb_per_s"]
json.dump(res, open(sys.argv[2], "w"), indent=2)
print("GPT-2 tokenizing, %d bytes of English text (repo docs repeated), median of rounds" % res["text_bytes"])
print("%-34s %9s %13s %8s" % ("", "MB/s", "tokens/s", "tokens"))
for k, v in res.items():
    if isinstance(v, dict):
        print("%-34s %9.2f %13.0f %8d%s" % (k, v["mb_per_s"], v["tokens_per_s"], v["tokens"],
              "" if "same_ids_as_tiktoken" not in v else ("  ids == tiktoken's" if v["same_ids_as_tiktoken"] else "  IDS DIFFER")))
        if "encode_mb_per_s" in v:
            print("%-34s %9.2f %13.0f" % ("  (encoding alone)", v["encode_mb_per_s"], v["encode_tokens_per_s"]))
print("dlkit / tiktoken on one core: %.2fx (tiktoken %s)" % (res["ratio_dlkit_over_tiktoken"], res["tiktoken_version"]))
if res["ratio_dlkit_over_tiktoken"] < 1.0:
    print("bench: dlkit's tokenizer is slower than tiktoken on one core", file=sys.stderr)
if not all(v.get("same_ids_as_tiktoken", True) for v in res.values() if isinstance(v, dict)):
    sys.exit("bench: dl-train tokenize's ids differ from tiktoken's")
PYEOF
