#!/usr/bin/env python3
"""Derive dlkit's relative-throughput table (configs/catalog/relative-throughput.toml) from
Lambda's public PyTorch training benchmarks (lambdal/deeplearning-benchmark, pytorch/ results,
kept read-only in ../shared/data/lambda_pytorch-train-throughput-*.csv).

Method (docs/COST.md, "Relative throughput"):
  1. Keep single-GPU rows (v1 files: num_gpu == 1; v2 files: the "1x<GPU>" token of the id).
  2. Map each row's GPU name to dlkit's canonical model (NAME_MAP below; the C++ test checks
     that canonical_gpu() agrees). Unmapped names are reported and skipped.
  3. Per GPU and benchmark: the geometric mean over that GPU's rows; an empty or 0 cell is a
     missing measurement and is skipped (for that row, and for the GPU when no row has it).
  4. Per GPU: ratio = geometric mean over benchmarks b present for both the GPU and the anchor
     of value[GPU][b] / value[anchor][b]. Raw numbers are never averaged across benchmarks:
     their units differ by up to 10^4 (samples/s vs tokens/s).
  5. The anchor of the first file of each precision is the reference GPU (A100-SXM-80GB). A
     later file (v2) without the reference is chained through the already-rated GPU with the most
     rows in it (H100-SXM): ratio = ratio[anchor] x geomean(value[GPU][b] / value[anchor][b]).
     GPUs rated by an earlier file keep that rating.

Usage: scripts/derive-relative-throughput.py [DATA_DIR] > configs/catalog/relative-throughput.toml
"""
import csv
import math
import os
import re
import sys

REFERENCE = "A100-SXM-80GB"
SNAPSHOT = "2025-12"
FILES = [  # (precision, file), in chaining order
    ("fp32", "lambda_pytorch-train-throughput-fp32.csv"),
    ("fp32", "lambda_pytorch-train-throughput-v2-fp32.csv"),
    ("fp16", "lambda_pytorch-train-throughput-fp16.csv"),
    ("fp16", "lambda_pytorch-train-throughput-v2-fp16.csv"),
]
# System prefixes (vendor, site) that precede the GPU name in v1 names.
PREFIXES = {"LambdaCloud", "Dell", "DellTexas", "SMC", "1CC", "RAIDZ1"}
# Cleaned benchmark GPU names -> dlkit canonical models (lib/plan/src/dl/plan/gpus.cpp).
NAME_MAP = {
    "Quadro RTX 8000": "Quadro-RTX-8000",
    "V100 16GB": "V100-SXM2-16GB",
    "RTX 3090": "RTX-3090",
    "A10": "A10",
    "A100 40GB PCIe": "A100-PCIe-40GB",
    "A100 80GB PCIe": "A100-PCIe-80GB",
    "A100 80GB SXM4": "A100-SXM-80GB",
    "RTX 6000 Ada": "RTX-6000-Ada",
    "RTX A6000": "RTX-A6000",
    "RTX 4090": "RTX-4090",
    "H100 80GB PCIe Gen5": "H100-PCIe",
    "H100 80GB SXM5": "H100-SXM",
    "H100 80GB PCIe": "H100-PCIe",
    "H200 140GB SXM": "H200",
    "GH200 96GB": "GH200-96GB",
    "B200 192GB": "B200",
}
V2_PART = re.compile(r"^(\d+GB|SXM\d?|PCIe|NVL)$")


def gpu_of_v1(name, num_gpu):
    """(count, cleaned GPU name) of a v1 name_gpu cell: '2x H100 80GB SXM5', 'LambdaCloud 4xV100 16GB'."""
    tokens = []
    for t in name.split():
        m = re.match(r"^(\d+)x(.*)$", t)
        if m:
            if m.group(2):
                tokens.append(m.group(2))
            continue
        tokens.append(t)
    while tokens and tokens[0] in PREFIXES:
        tokens.pop(0)
    return int(float(num_gpu)), " ".join(tokens)


def gpu_of_v2(config_id):
    """(count, cleaned GPU name) of a v2 id: 'LambdaOD_Texas_1xH100_80GB_SXM5_192-222-52-102_v2'."""
    parts = config_id.split("_")
    for i, t in enumerate(parts):
        m = re.match(r"^(\d+)x([A-Za-z].*)$", t)
        if m:
            name = [m.group(2)]
            for u in parts[i + 1:]:
                if not V2_PART.match(u):
                    break
                name.append(u)
            return int(m.group(1)), " ".join(name)
    return None, config_id


def number(cell):
    cell = cell.strip()
    if not cell:
        return None
    v = float(cell)
    return v if v > 0 else None


def read_table(path):
    """{model: {benchmark: [values]}}, {model: [names]}, benchmarks, unmapped names."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    v1 = header[0] == "name_gpu"
    bench = header[4:] if v1 else header[1:]
    first = 4 if v1 else 1
    values, names, unmapped = {}, {}, []
    empty = 0
    for row in rows[1:]:
        if not row:
            continue
        count, name = gpu_of_v1(row[0], row[1]) if v1 else gpu_of_v2(row[0])
        if count != 1:
            continue
        model = NAME_MAP.get(name)
        if model is None:
            unmapped.append(row[0])
            continue
        names.setdefault(model, []).append(row[0])
        per = values.setdefault(model, {})
        for b, cell in zip(bench, row[first:]):
            v = number(cell)
            if v is not None:
                per.setdefault(b, []).append(v)
            else:
                empty += 1
    return values, names, bench, unmapped, empty


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
    out = []
    notes = []
    for precision in ("fp32", "fp16"):
        ratios = {}
        for prec, file in FILES:
            if prec != precision:
                continue
            values, names, bench, unmapped, empty = read_table(os.path.join(data, file))
            for u in unmapped:
                notes.append(f"{file}: '{u}' is not a GPU in dlkit's table: skipped")
            if empty:
                notes.append(f"{file}: {empty} empty or 0 cells of single-GPU rows skipped (that benchmark is "
                             "left out for that row)")
            means = {m: {b: geomean(v) for b, v in per.items()} for m, per in values.items()}
            if REFERENCE in means:
                anchor, base = REFERENCE, 1.0
            else:
                known = [m for m in means if m in ratios]
                if not known:
                    notes.append(f"{file}: no GPU in common with earlier files: skipped")
                    continue
                anchor = max(known, key=lambda m: (len(names[m]), m))
                base = ratios[anchor]["ratio"]
            for model in sorted(means):
                if model in ratios:
                    continue
                common = [b for b in bench if b in means[model] and b in means[anchor]]
                missing = [b for b in bench if b not in common]
                if missing:
                    notes.append(f"{file}: {model} vs {anchor}: {', '.join(missing)} missing for one of the two: "
                                 f"skipped for this pair")
                if not common:
                    notes.append(f"{file}: {model} has no benchmark in common with {anchor}: skipped")
                    continue
                r = base * geomean([means[model][b] / means[anchor][b] for b in common])
                ratios[model] = {"ratio": r, "benchmarks": len(common), "missing": missing,
                                 "rows": len(names[model]), "names": names[model], "file": file,
                                 "via": "" if anchor == REFERENCE else anchor}
        for model in sorted(ratios, key=lambda m: -ratios[m]["ratio"]):
            e = ratios[model]
            out.append((precision, model, e))

    print("# Relative training throughput per GPU, against the reference GPU (ratio 1). GENERATED by")
    print("# scripts/derive-relative-throughput.py from Lambda's PyTorch training benchmarks; do not edit by")
    print("# hand. Method and caveats: docs/COST.md (\"Relative throughput\").")
    print("#")
    print("# fp32: the fp32 result files; fp16: the mixed-precision (AMP) result files, used for bf16 and fp16")
    print("# training. These are small models (ResNet-50, BERT, SSD, Tacotron 2, ...) in Lambda's containers:")
    print("# they understate the gap between Hopper and older GPUs on large transformer training. Measure")
    print("# with dl-bench (--bench) where it matters.")
    for n in notes:
        print(f"# note: {n}")
    print()
    print('schema = "dlkit-relative-throughput/1"')
    print(f'reference = "{REFERENCE}"')
    print(f'source = "Lambda deeplearning-benchmark, pytorch/ training throughput results ({SNAPSHOT} snapshot), '
          'https://github.com/lambdal/deeplearning-benchmark"')
    print('method = "per GPU: geometric mean over benchmarks of (GPU / reference) throughput ratios; '
          'single-GPU rows; rows of one GPU combined per benchmark by geometric mean; empty or 0 cells skipped"')
    for precision, model, e in out:
        print()
        print("[[ratio]]")
        print(f'precision = "{precision}"')
        print(f'gpu = "{model}"')
        print(f"ratio = {e['ratio']!r}")
        print(f"benchmarks = {e['benchmarks']}")
        print("missing = [" + ", ".join(f'"{b}"' for b in e["missing"]) + "]")
        print(f"rows = {e['rows']}")
        print(f'file = "{e["file"]}"')
        if e["via"]:
            print(f'via = "{e["via"]}"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
