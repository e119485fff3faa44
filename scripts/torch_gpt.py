"""The GPT-2 model the PyTorch benchmark references share (scripts/bench_torch_cpu.py on the
CPU, scripts/bench_torch_gpt2_cuda.py on the GPU): pre-LayerNorm blocks, tanh GELU, tied LM head,
Hugging Face GPT-2's initialisation. Causal attention through scaled_dot_product_attention where
PyTorch has it (2.0+), else the explicit masked softmax (Debian 12's 1.13)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, layers):
        super().__init__()
        self.d, self.heads = d, heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.heads)
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), 1)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """forward(idx, tgt) -> mean cross-entropy. `vocab` rows of the (tied) embedding; targets
    must lie below the real vocabulary when `vocab` is padded."""

    def __init__(self, layers, d, heads, seq, vocab):
        super().__init__()
        self.seq, self.vocab = seq, vocab
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.h = nn.ModuleList([Block(d, heads, layers) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, tgt, head=None):
        """head: a separate (untied) LM head [vocab, d]; None: the tied embedding."""
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight if head is None else head)
        return F.cross_entropy(logits.float().view(-1, self.vocab), tgt.view(-1))


def adamw(model, lr, **kw):
    """AdamW with weight decay 0.1 on matrices only, betas (0.9, 0.95), as dl-train's configs."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), **kw)
