"""tiktoken's gpt2 encoding on one thread, for scripts/bench-tokenize.sh.

The Encoding is built from the same local vocab.json + merges.txt with tiktoken's data-gym loader
(tiktoken cannot download here) and GPT-2's pattern as tiktoken's r50k/gpt2 encodings spell it.
Prints one JSON line: median time of REPEATS encode_ordinary calls on the whole text, MB/s, tokens/s.
    python bench_tiktoken.py DIR TEXT_FILE [REPEATS] [IDS_OUT]
IDS_OUT: the ids written one per line, to check that both tokenizers agree on the bench text.
"""
import json
import os
import statistics
import sys
import time

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks

GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def main():
    folder, text_file = sys.argv[1], sys.argv[2]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=os.path.join(folder, "merges.txt"),
                                            encoder_json_file=os.path.join(folder, "vocab.json"))
    enc = tiktoken.Encoding(name="gpt2-local", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256})
    text = open(text_file, encoding="utf-8").read()
    nbytes = len(text.encode("utf-8"))
    times, ids = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ids = enc.encode_ordinary(text)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    if len(sys.argv) > 4:
        with open(sys.argv[4], "w") as f:
            f.write("\n".join(map(str, ids)) + "\n")
    print(json.dumps({"impl": "tiktoken", "version": tiktoken.__version__, "bytes": nbytes, "tokens": len(ids),
                      "time_s": t, "mb_per_s": nbytes / 1e6 / t, "tokens_per_s": len(ids) / t}))


if __name__ == "__main__":
    main()
