#!/usr/bin/env python3
"""PyTorch reference for the CPU training benchmark: the GPT-2 shape of configs/bench-cpu.toml
(L=4, D=128, H=4, T=128, batch 16, vocab 256, fp32, AdamW), full training steps
(forward, backward, clip, AdamW). Prints one JSON line per thread count with the median
tokens/s over the timed steps.

Usage: bench_torch_gpt.py THREADS [STEPS]
"""
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

L, D, H, T, B, V = 4, 128, 4, 128, 16, 256


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.c_fc, self.mlp_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0 (Debian 12's 1.13): the explicit causal softmax
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
            att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            y = att.softmax(-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(D)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, V), tgt.view(-1))


def main():
    threads = int(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95))
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
