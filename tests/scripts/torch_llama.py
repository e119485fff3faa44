"""An independent PyTorch Llama for dlkit's parity tests (imported by torch_parity.py).

Written from transformers' modeling_llama.py conventions, not from dlkit: LlamaRMSNorm (in
float32, weight times the normalized input), rotary embeddings with rotate_half on the pairs
(i, i + head_dim/2) and inv_freq from rope_theta with the "linear" and "llama3" rope_scaling of
modeling_rope_utils.py, repeat_kv for grouped K/V heads, LlamaMLP down(silu(gate(x)) * up(x)),
nn.Linear [out, in] weights without biases (but Qwen2ForCausalLM's on q_proj, k_proj and v_proj
when spec "qkv_bias"), and an lm_head that is the embedding when
tie_word_embeddings. Parameters are looked up by LlamaForCausalLM's state-dict names.
"""
import math

import torch
import torch.nn.functional as F


def inv_freq(spec, head_dim, device):
    base = spec["rope_theta"]
    freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    scaling = spec.get("rope_scaling")
    if not scaling:
        return freq.to(device)
    factor = scaling["factor"]
    if scaling["rope_type"] == "linear":
        return (freq / factor).to(device)
    assert scaling["rope_type"] == "llama3", scaling
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > low_wavelen, freq / factor, freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled).to(device)


def rms_norm(x, weight, eps):
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    b, h, t, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def llama_loss(W, idx, tgt, spec):
    L, H, KV, C = spec["n_layer"], spec["n_head"], spec["n_kv_head"], spec["n_embd"]
    eps = spec["rms_norm_eps"]
    B, T = idx.shape
    hd = C // H
    freq = inv_freq(spec, hd, idx.device)
    pos = torch.arange(T, device=idx.device).float()
    emb = torch.cat([torch.outer(pos, freq)] * 2, dim=-1)  # [T, hd]
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=idx.device), diagonal=1)
    x = W["model.embed_tokens.weight"][idx.long()]
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        bq, bk, bv = ((W[p + f"self_attn.{n}_proj.bias"] for n in "qkv") if spec.get("qkv_bias")
                      else (None, None, None))
        q = F.linear(h, W[p + "self_attn.q_proj.weight"], bq).view(B, T, H, hd).transpose(1, 2)
        k = F.linear(h, W[p + "self_attn.k_proj.weight"], bk).view(B, T, KV, hd).transpose(1, 2)
        v = F.linear(h, W[p + "self_attn.v_proj.weight"], bv).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        att = (q @ k.transpose(2, 3)) / math.sqrt(hd)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1, dtype=torch.float32).to(q.dtype)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, W[p + "self_attn.o_proj.weight"])
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = F.silu(F.linear(h, W[p + "mlp.gate_proj.weight"])) * F.linear(h, W[p + "mlp.up_proj.weight"])
        x = x + F.linear(g, W[p + "mlp.down_proj.weight"])
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if spec["tie_word_embeddings"] else W["lm_head.weight"]
    logits = F.linear(x, head)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1).long(), ignore_index=-1)
