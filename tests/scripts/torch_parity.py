#!/usr/bin/env python3
"""PyTorch reference for dlkit's parity tests.

Usage: torch_parity.py DIR

DIR holds what the C++ test wrote: weights.safetensors (initial parameters, dlkit/Hugging Face
names and layouts), batches.safetensors (inputs.K / targets.K for K = 0..steps-1),
grads.safetensors (dlkit's gradients for batch 0 at the initial weights) and spec.json (model
shape and optimizer settings, dlkit's loss for batch 0 and its losses over the AdamW steps).
The script rebuilds the model in PyTorch (the llama: torch_llama.py) (plain tensor ops, fp32; on the GPU when spec.json says
"device": "cuda"), computes the loss and
gradients for batch 0, then runs the same AdamW steps with torch.optim.AdamW and
clip_grad_norm_, and prints one JSON object with the relative errors.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from torch_llama import llama_loss  # noqa: E402


def gpt_loss(W, idx, tgt, spec):
    L, H, C = spec["n_layer"], spec["n_head"], spec["n_embd"]
    B, T = idx.shape
    hs = C // H
    x = W["wte.weight"][idx.long()] + W["wpe.weight"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=idx.device), diagonal=1)
    for l in range(L):
        p = f"h.{l}."
        h = F.layer_norm(x, (C,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], 1e-5)
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, H, hs).transpose(1, 2)
        k = k.view(B, T, H, hs).transpose(1, 2)
        v = v.view(B, T, H, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], 1e-5)
        h = F.gelu(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), W["ln_f.weight"], W["ln_f.bias"], 1e-5)
    logits = x @ W["wte.weight"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1).long(), ignore_index=-1)


def mlp_loss(W, x, tgt, spec):
    n = len([k for k in W if k.endswith(".weight")])
    for i in range(n):
        x = x @ W[f"layers.{i}.weight"].t() + W[f"layers.{i}.bias"]
        if i + 1 < n:
            x = F.relu(x) if spec["activation"] == "relu" else F.gelu(x, approximate="tanh")
    return F.cross_entropy(x, tgt.long(), ignore_index=-1)


def rel(a, b):
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def main():
    d = sys.argv[1]
    torch.set_num_threads(1)
    spec = json.load(open(os.path.join(d, "spec.json")))
    # spec "device": "cuda" runs the reference on the GPU in true fp32 (no TF32), as dlkit's CUDA
    # backend computes f32 tensors.
    dev = torch.device(spec.get("device", "cpu"))
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    weights, _ = st.load(os.path.join(d, "weights.safetensors"))
    batches, _ = st.load(os.path.join(d, "batches.safetensors"))
    grads, _ = st.load(os.path.join(d, "grads.safetensors"))
    names = spec["param_order"]
    W = {k: torch.tensor(weights[k], device=dev, requires_grad=True) for k in names}
    loss_fn = {"gpt": gpt_loss, "mlp": mlp_loss, "llama": llama_loss}[spec["model"]]

    def batch(k):
        return torch.tensor(batches[f"inputs.{k}"], device=dev), torch.tensor(batches[f"targets.{k}"], device=dev)

    x, y = batch(0)
    loss = loss_fn(W, x, y, spec)
    loss.backward()
    out = {"loss": float(loss), "loss_rel": abs(float(loss) - spec["loss0"]) / abs(float(loss))}
    worst, worst_name = 0.0, ""
    for k in names:
        e = rel(torch.tensor(grads[k], device=dev), W[k].grad)
        if e > worst:
            worst, worst_name = e, k
    out["grad_rel_max"] = worst
    out["grad_worst"] = worst_name

    # The optimizer run: AdamW with weight decay on matrices only, clipping, constant lr.
    o = spec["optim"]
    P = {k: torch.tensor(weights[k], device=dev, requires_grad=True) for k in names}
    decay = [P[k] for k in names if P[k].dim() >= 2]
    no_decay = [P[k] for k in names if P[k].dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": o["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses = []
    for k in range(spec["steps"]):
        x, y = batch(k)
        opt.zero_grad()
        l = loss_fn(P, x, y, spec)
        l.backward()
        torch.nn.utils.clip_grad_norm_([P[n] for n in names], o["grad_clip"])
        opt.step()
        losses.append(float(l))
    out["losses"] = losses
    out["steps_rel_max"] = max(abs(a - b) / abs(a) for a, b in zip(losses, spec["losses"]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
