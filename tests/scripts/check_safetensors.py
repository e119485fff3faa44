#!/usr/bin/env python3
"""Independent safetensors checker for dlkit's tests (stdlib + numpy; no dlkit code).

Usage: check_safetensors.py FILE

Parses FILE per the safetensors format (REFERENCE.md "File formats") and checks, strictly:
  - u64 little-endian header length N, N <= file size - 8
  - the JSON header starts with '{', 8 + N is a multiple of 8 (space padding), only spaces pad it
  - every entry has a known dtype, a shape of non-negative ints, data_offsets [begin, end]
    with end - begin == numel * dtype size
  - the entries' ranges, sorted by begin, are contiguous from 0 with no holes or overlaps
  - the data section ends exactly at the end of the file
On success prints one JSON object: {name: {"dtype", "shape", "sum"}} (sum of the values in
float64), plus "__metadata__" when the file has it. On any violation prints the reason to stderr
and exits 1.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {
    "F64": (8, np.dtype("<f8")),
    "F32": (4, np.dtype("<f4")),
    "F16": (2, np.dtype("<f2")),
    "BF16": (2, None),  # numpy has no bfloat16: widened by hand below
    "I64": (8, np.dtype("<i8")),
    "I32": (4, np.dtype("<i4")),
    "I16": (2, np.dtype("<i2")),
    "I8": (1, np.dtype("i1")),
    "U64": (8, np.dtype("<u8")),
    "U32": (4, np.dtype("<u4")),
    "U16": (2, np.dtype("<u2")),
    "U8": (1, np.dtype("u1")),
    "BOOL": (1, np.dtype("?")),
}


def fail(path, msg):
    print(f"{path}: {msg}", file=sys.stderr)
    sys.exit(1)


def values(dtype, raw):
    size, np_dtype = DTYPES[dtype]
    if dtype == "BF16":
        # bfloat16 is the top half of a float32.
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    return np.frombuffer(raw, dtype=np_dtype).astype(np.float64)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(path, f"file is {len(blob)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        fail(path, f"header length {n} exceeds the {len(blob) - 8} bytes after it")
    if (8 + n) % 8 != 0:
        fail(path, f"header length {n}: 8 + N is not a multiple of 8 (missing padding)")
    header_bytes = blob[8 : 8 + n]
    if not header_bytes.startswith(b"{"):
        fail(path, "header does not start with '{'")
    text = header_bytes.decode("utf-8")
    body = text.rstrip(" ")
    if not body.endswith("}"):
        fail(path, "header is padded with something other than spaces")
    try:
        header = json.loads(body)
    except json.JSONDecodeError as e:
        fail(path, f"header is not valid JSON: {e}")
    if not isinstance(header, dict):
        fail(path, "header is not a JSON object")

    data = blob[8 + n :]
    summary = {}
    entries = []
    for name, e in header.items():
        if name == "__metadata__":
            if not isinstance(e, dict) or not all(isinstance(v, str) for v in e.values()):
                fail(path, "__metadata__ must map strings to strings")
            summary["__metadata__"] = e
            continue
        if set(e) != {"dtype", "shape", "data_offsets"}:
            fail(path, f"tensor {name!r}: keys {sorted(e)} are not dtype, shape, data_offsets")
        dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in DTYPES:
            fail(path, f"tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            fail(path, f"tensor {name!r}: bad shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)):
            fail(path, f"tensor {name!r}: bad data_offsets {offsets!r}")
        numel = 1
        for d in shape:
            numel *= d
        begin, end = offsets
        if end - begin != numel * DTYPES[dtype][0]:
            fail(path, f"tensor {name!r}: data_offsets {offsets} hold {end - begin} bytes, {dtype}{shape} needs {numel * DTYPES[dtype][0]}")
        entries.append((begin, end, name, dtype, shape))

    expected = 0
    for begin, end, name, dtype, shape in sorted(entries):
        if begin != expected:
            fail(path, f"tensor {name!r}: begins at {begin}, expected {expected} (hole or overlap)")
        expected = end
        summary[name] = {"dtype": dtype, "shape": shape, "sum": float(values(dtype, data[begin:end]).sum())}
    if expected != len(data):
        fail(path, f"data section is {len(data)} bytes, the tensors cover {expected}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
