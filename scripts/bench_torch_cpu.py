#!/usr/bin/env python3
"""PyTorch reference for the CPU training benchmark: the GPT-2 shape of configs/bench-cpu.toml
(L=4, D=128, H=4, T=128, batch 16, vocab 256) or, with --llama, the Llama shape of
configs/bench-llama-cpu.toml (L=6, D=384, 6 heads over 2 K/V heads, SwiGLU 1024, untied head);
fp32, AdamW; full training steps (forward, backward, clip, AdamW). Prints one JSON line with the
median tokens/s over the timed steps.

Usage: bench_torch_cpu.py THREADS [STEPS] [--llama] [--compile] [--fused]
  --compile  the model under torch.compile (PyTorch 2.x; its compilation runs in the warm-up steps)
  --fused    AdamW's fused implementation (PyTorch 2.4+ on the CPU), else foreach
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, adamw  # noqa: E402
from torch_llama_model import Llama  # noqa: E402

T, B, V = 128, 16, 256


def main():
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    threads = int(args[0])
    steps = int(args[1]) if len(args) > 1 else 30
    compiled, fused = "--compile" in flags, "--fused" in flags
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    llama = "--llama" in flags
    model = Llama(6, 384, 6, 2, 1024, T, V) if llama else GPT(4, 128, 4, T, V)
    opt = adamw(model, 1e-3, **({"fused": True} if fused else {}))
    step_model = torch.compile(model) if compiled else model
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    times = []
    warmup = 10 if compiled else 5  # torch.compile compiles forward and backward in the first steps
    for i in range(steps + warmup):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = step_model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= warmup:  # warm-up steps are not timed
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    params = sum(p.numel() for p in model.parameters())
    mode = ("compile" if compiled else "eager") + ("+fused" if fused else "")
    print(json.dumps({"impl": "pytorch", "model": "llama" if llama else "gpt", "version": torch.__version__,
                      "mode": mode, "threads": threads,
                      "params": params, "step_s": med, "tokens_per_sec": B * T / med}))


if __name__ == "__main__":
    main()
