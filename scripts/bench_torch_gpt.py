#!/usr/bin/env python3
"""PyTorch reference for the CPU training benchmark: the GPT-2 shape of configs/bench-cpu.toml
(L=4, D=128, H=4, T=128, batch 16, vocab 256, fp32, AdamW), full training steps
(forward, backward, clip, AdamW). Prints one JSON line per thread count with the median
tokens/s over the timed steps.

Usage: bench_torch_gpt.py THREADS [STEPS]
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, adamw  # noqa: E402

L, D, H, T, B, V = 4, 128, 4, 128, 16, 256


def main():
    threads = int(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(L, D, H, T, V)
    opt = adamw(model, 1e-3)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    times = []
    for i in range(steps + 5):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= 5:  # warm-up steps are not timed
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"impl": "pytorch", "version": torch.__version__, "threads": threads, "params": params,
                      "step_s": med, "tokens_per_sec": B * T / med}))


if __name__ == "__main__":
    main()
