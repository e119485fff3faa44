#!/usr/bin/env python3
"""Per-kernel time shares of one profiled training step, from Nsight Compute's raw CSV:

  DL_CUDA_PROFILE_STEP=4 ncu --profile-from-start off --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum --csv --page raw --print-units base dl-train ... > step.csv
  kernel_breakdown.py step.csv [--json out.json] [--top 25]

Kernels are grouped by name (templates and arguments stripped: "attention_forward_kernel", not
its full signature). Prints a table (calls, total ms, share of the summed kernel time) and, with
--json, the same rows. ncu serializes kernels and replays each, so the sum is kernel time only:
launch gaps and host work are not in it (compare with the step's wall time).
"""
import argparse
import csv
import json
import re
import sys


def short_name(name):
    name = name.replace("(anonymous namespace)", "anon")
    depth, out = 0, []
    for ch in name:                              # template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    base = re.sub(r"\(.*$", "", "".join(out)).split()  # arguments, then "void" and the like
    short = base[-1].split("::")[-1] if base else name
    # CUTLASS-style wrappers say nothing by their own name: name them by their template argument.
    if short in ("Kernel", "Kernel2", "device_kernel", "kernel") and "<" in name:
        inner = name[name.index("<") + 1:]
        return short + "<" + re.split(r"[<>,(]", inner)[0].strip().split("::")[-1][:72] + ">"
    return short


# ncu writes durations in the unit of the units row (nanoseconds with --print-units base).
UNIT_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


def read_rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own log lines ("==PROF==") are unquoted
    reader = csv.reader(lines)
    header, scale = None, 1.0
    for row in reader:
        if header is None:
            if "Kernel Name" in row:
                header = row
            continue
        rec = dict(zip(header, row))
        value = rec.get("gpu__time_duration.sum", "").replace(",", "")
        if value in UNIT_NS:  # the units row
            scale = UNIT_NS[value]
            continue
        try:
            ns = float(value) * scale
        except ValueError:
            continue
        yield rec["Kernel Name"], ns


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--json")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    groups = {}
    for name, ns in read_rows(a.csv):
        g = groups.setdefault(short_name(name), [0, 0.0])
        g[0] += 1
        g[1] += ns
    total = sum(v[1] for v in groups.values())
    if not groups or total <= 0:
        sys.exit(f"kernel_breakdown: no kernel timings in {a.csv} (was the step profiled? see the ncu log)")
    rows = sorted(({"kernel": k, "calls": v[0], "ms": v[1] / 1e6, "share": v[1] / total} for k, v in groups.items()),
                  key=lambda r: -r["ms"])
    print(f"{'kernel':<48} {'calls':>6} {'ms':>9} {'share':>7}")
    for r in rows[:a.top]:
        print(f"{r['kernel'][:48]:<48} {r['calls']:>6} {r['ms']:>9.3f} {100 * r['share']:>6.1f}%")
    rest = rows[a.top:]
    if rest:
        print(f"{'(' + str(len(rest)) + ' more)':<48} {sum(r['calls'] for r in rest):>6} "
              f"{sum(r['ms'] for r in rest):>9.3f} {100 * sum(r['share'] for r in rest):>6.1f}%")
    print(f"{'total kernel time':<48} {sum(r['calls'] for r in rows):>6} {total / 1e6:>9.3f} 100.0%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"total_kernel_ms": total / 1e6, "kernels": rows}, f, indent=1)


if __name__ == "__main__":
    main()
