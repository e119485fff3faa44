"""Hugging Face tokenizers' speed on one thread, for scripts/bench-hf-tokenizer.sh.

Loads DIR/tokenizer.json and times REPEATS calls of encode_batch on TEXT_FILE's lines (line ends
kept, add_special_tokens=False), the way tokenizers encodes a corpus; run with RAYON_NUM_THREADS=1
and TOKENIZERS_PARALLELISM=false so that it uses one thread. Prints one JSON line: median time,
MB/s, tokens/s.
    python bench_hf_tokenizers.py DIR TEXT_FILE [REPEATS]
"""
import json
import os
import statistics
import sys
import time

import tokenizers


def main():
    folder, text_file = sys.argv[1], sys.argv[2]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    tok = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    text = open(text_file, encoding="utf-8", newline="").read()
    lines = text.splitlines(keepends=True)
    nbytes = len(text.encode("utf-8"))
    times, tokens = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        encs = tok.encode_batch(lines, add_special_tokens=False)
        times.append(time.perf_counter() - t0)
        tokens = sum(len(e.ids) for e in encs)
    t = statistics.median(times)
    print(json.dumps({"impl": "tokenizers", "version": tokenizers.__version__, "bytes": nbytes, "tokens": tokens,
                      "time_s": t, "mb_per_s": nbytes / 1e6 / t, "tokens_per_s": tokens / t}))


if __name__ == "__main__":
    main()
