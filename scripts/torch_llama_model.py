"""The Llama the PyTorch CPU benchmark trains (scripts/bench_torch_llama.py): transformers'
LlamaForCausalLM's computation as a plain nn.Module (RMSNorm, rotate-half RoPE, grouped K/V,
SwiGLU, no biases, untied head), written the way a PyTorch user would: scaled_dot_product_attention
with enable_gqa where PyTorch has it (2.5+), else K/V repeated per group and the explicit masked
softmax (Debian 12's 1.13). The parity reference is tests/scripts/torch_llama.py, not this."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


# scaled_dot_product_attention's enable_gqa (PyTorch 2.5+).
GQA_SDPA = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn):
        super().__init__()
        self.h, self.kv, self.hs = heads, kv_heads, d // heads
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hs, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hs, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.h, self.hs).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.kv, self.hs).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.kv, self.hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if GQA_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k, v = (t.repeat_interleave(self.h // self.kv, dim=1) for t in (k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hs)
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.o_proj(y.transpose(1, 2).reshape(B, T, D))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    """forward(idx, tgt) -> mean cross-entropy."""

    def __init__(self, layers, d, heads, kv_heads, ffn, seq, vocab, rope_theta=10000.0):
        super().__init__()
        self.vocab = vocab
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([Block(d, heads, kv_heads, ffn) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        hs = d // heads
        inv = 1.0 / (rope_theta ** (torch.arange(0, hs, 2).float() / hs))
        ang = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, idx, tgt):
        T = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.layers:
            x = b(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, self.vocab), tgt.view(-1))
