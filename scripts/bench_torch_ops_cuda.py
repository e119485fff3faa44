#!/usr/bin/env python3
"""PyTorch references for dl-bench on a GPU (issue 5), measured the way dl-bench measures:
each call timed by its own pair of CUDA events after warm-up calls, the median reported, operands
uniform in [-1, 1) (not zeros), rotated over enough sets to exceed twice the L2 cache.

  gemm:   torch.matmul(a, b) for row-major a[M,K], b[K,N] in the dtype (bf16, fp16, fp32; fp32 with
          TF32 off, as dl-bench's fp32), FLOP/s = 2 M N K / time.
  memory: dst.copy_(src) on the device, bytes read + written per second = 2 x size / time.

Prints one JSON object per line. Usage:
  bench_torch_ops_cuda.py gemm --dtype bf16 --size 8192 [--repeat 10 --warmup 2]
  bench_torch_ops_cuda.py memory --bytes 1073741824 [--repeat 10 --warmup 2]
"""
import argparse
import json
import statistics

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}


def l2_bytes():
    props = torch.cuda.get_device_properties(0)
    return getattr(props, "L2_cache_size", 50 << 20)


def rotation(set_bytes, limit):
    return max(1, min(limit, -(-2 * l2_bytes() // set_bytes)))


def timed(calls, warmup, repeat):
    for i in range(warmup):
        calls(i)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)]
    for i, (start, stop) in enumerate(events):
        start.record()
        calls(warmup + i)
        stop.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(stop) / 1e3 for start, stop in events]


def uniform(shape, dtype, gen):
    return (torch.rand(shape, device="cuda", generator=gen) * 2 - 1).to(dtype)


def gemm(a):
    dt = DTYPES[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = a.dtype == "tf32"
    m = n = k = a.size
    w = torch.finfo(dt).bits // 8
    sets = min(rotation((m * k + k * n + m * n) * w, 64), a.warmup + a.repeat)
    gen = torch.Generator(device="cuda").manual_seed(0)
    ops = [(uniform((m, k), dt, gen), uniform((k, n), dt, gen)) for _ in range(sets)]
    outs = [torch.empty((m, n), dtype=dt, device="cuda") for _ in range(sets)]

    def call(i):
        x, y = ops[i % sets]
        torch.matmul(x, y, out=outs[i % sets])

    t = timed(call, a.warmup, a.repeat)
    med = statistics.median(t)
    return {"reference": "torch.matmul", "dtype": a.dtype, "m": m, "n": n, "k": k, "operand_sets": sets,
            "time_s": med, "time_min_s": min(t), "time_max_s": max(t), "flops": 2.0 * m * n * k / med}


def memory(a):
    n = a.bytes // 4
    pairs = min(rotation(2 * a.bytes, 256), a.warmup + a.repeat)
    gen = torch.Generator(device="cuda").manual_seed(0)
    src = [uniform((n,), torch.float32, gen) for _ in range(pairs)]
    dst = [uniform((n,), torch.float32, gen) for _ in range(pairs)]

    def call(i):
        dst[i % pairs].copy_(src[i % pairs])

    t = timed(call, a.warmup, a.repeat)
    med = statistics.median(t)
    return {"reference": "torch copy_", "direction": "d2d", "bytes": n * 4, "buffer_pairs": pairs,
            "time_s": med, "time_min_s": min(t), "time_max_s": max(t), "bytes_per_s": 2.0 * n * 4 / med}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["gemm", "memory"])
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    assert torch.cuda.is_available(), "no CUDA device for the PyTorch reference"
    r = gemm(a) if a.what == "gemm" else memory(a)
    r.update({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "repeat": a.repeat,
              "warmup": a.warmup})
    print(json.dumps(r))


if __name__ == "__main__":
    main()
