#!/usr/bin/env python3
"""PyTorch reference for the GPU training benchmark (issue 4): GPT-2 124M (L=12, D=768, H=12,
T=1024, vocabulary 50257 padded to 50304 as nanoGPT and llm.c do), AdamW, one GPU, in PyTorch's
fastest standard setup: bf16 autocast, torch.compile, fused AdamW, scaled_dot_product_attention
(flash), TF32 allowed for what stays in fp32. Full training steps: forward, backward, gradient
clipping at 1.0, optimizer step. Batch B x 1024 tokens per step, no gradient accumulation.

Prints one JSON object: tokens/s (median over the timed steps, each timed with CUDA events from
the start of its forward to the end of its optimizer step), the step times, the loss trajectory
and the settings. MFU is left to the caller, which uses the same FLOPs per token and peak as
dl-bench for both sides.

Usage: bench_torch_gpt2_cuda.py [--batch 8] [--steps 20] [--warmup 5] [--no-compile]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, adamw  # noqa: E402

L, D, H, T, V, V_PADDED = 12, 768, 12, 1024, 50257, 50304


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    assert torch.cuda.is_available(), "no CUDA device for the PyTorch reference"
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")
    model = GPT(L, D, H, T, V_PADDED).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = adamw(model, 6e-4, eps=1e-8, fused=True)
    step_model = model if a.no_compile else torch.compile(model)
    g = torch.Generator(device="cpu").manual_seed(0)
    # Random tokens from the real vocabulary (the padded rows are never targets).
    batches = [(torch.randint(0, V, (a.batch, T), generator=g), torch.randint(0, V, (a.batch, T), generator=g))
               for _ in range(4)]
    batches = [(x.to(dev), y.to(dev)) for x, y in batches]

    def step(i):
        x, y = batches[i % len(batches)]
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    for i in range(a.warmup):  # includes torch.compile's compilation
        step(i)
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    times, losses = [], []
    for i in range(a.steps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step(a.warmup + i)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
        losses.append(float(loss))
    med = statistics.median(times)
    print(json.dumps({
        "reference": "pytorch", "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
        "compile": not a.no_compile, "autocast": "bf16", "fused_adamw": True, "attention": "sdpa",
        "params": n_params, "vocab_padded": V_PADDED, "batch": a.batch, "seq": T,
        "tokens_per_step": a.batch * T, "warmup_steps": a.warmup, "warmup_s": warm_s,
        "step_s": med, "step_min_s": min(times), "step_max_s": max(times),
        "tokens_per_sec": a.batch * T / med, "losses": losses,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
    }))


if __name__ == "__main__":
    main()
