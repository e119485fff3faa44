"""Minimal safetensors reader for the tests (stdlib + numpy), independent of dlkit's C++ code.

load(path) -> (dict name -> numpy array, metadata dict). Checks the format as REFERENCE.md
describes it (header length, '{', contiguous offsets from 0, byte counts, file size) and raises
ValueError naming the problem.
"""
import json
import struct

import numpy as np

_DT = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U16": "<u2", "U8": "u1"}


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the file")
    header = blob[8 : 8 + n]
    if not header.startswith(b"{"):
        raise ValueError(f"{path}: header does not start with '{{'")
    meta = json.loads(header.decode("utf-8"))
    metadata = meta.pop("__metadata__", {})
    data = blob[8 + n :]
    entries = sorted(meta.items(), key=lambda kv: kv[1]["data_offsets"][0])
    pos = 0
    out = {}
    for name, e in entries:
        b, end = e["data_offsets"]
        if b != pos:
            raise ValueError(f"{path}: tensor {name} starts at {b}, expected {pos}")
        dt = np.dtype(_DT[e["dtype"]])
        count = int(np.prod(e["shape"])) if e["shape"] else 1
        if end - b != count * dt.itemsize:
            raise ValueError(f"{path}: tensor {name} holds {end - b} bytes, needs {count * dt.itemsize}")
        out[name] = np.frombuffer(data[b:end], dtype=dt).reshape(e["shape"]).copy()
        pos = end
    if pos != len(data):
        raise ValueError(f"{path}: data section is {len(data)} bytes, tensors cover {pos}")
    return out, metadata
