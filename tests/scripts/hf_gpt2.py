#!/usr/bin/env python3
"""Writes a small Hugging Face GPT-2 folder from the PyTorch reference model, for dl-train's
model.init_from tests, and prints the reference's loss on the validation ids.

Usage: hf_gpt2.py OUT_DIR SPEC_JSON
       hf_gpt2.py --many JSON_LIST_OF_[OUT_DIR, SPEC]   (one PyTorch start for several folders)

SPEC_JSON: n_layer, n_head, n_embd, n_positions, vocab_size, seed, text (a file whose bytes,
mapped onto the vocabulary as (byte * id_stride) % vocab_size, give the token ids; id_stride 197
unless given), and optionally
dtype ("F32" | "F16" | "BF16"), prefix (names start with "transformer."), shards (1: one
model.safetensors; more: model-0000K-of-0000N.safetensors and model.safetensors.index.json),
lm_head ("none" | "copy": lm_head.weight equal to wte | "random": a head of its own, which the
reference's loss uses when tie is false, as transformers does), tie (config.json's
tie_word_embeddings), mask_buffers (h.N.attn.bias and h.N.attn.masked_bias, as
openai-community/gpt2 has), drop (tensor names left out), extra ({name: shape} added), transpose
(names stored transposed), config (keys overriding config.json), val_windows (windows of
n_positions + 1 ids at the end of the text held out).

Writes OUT_DIR/config.json, the weights, train.bin and val.bin (llm.c token shards: 256 int32
header with magic 20240520, version 1, count; then uint16 ids). Prints {"loss": L} (--many: a list of them) with L the
mean cross-entropy over val.bin's windows (window k: ids [k T, k T + T] predict the next).
No transformers or safetensors package: the format is written by hand (REFERENCE.md).
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from torch_gpt import GPT  # noqa: E402

TORCH_DTYPE = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def tensor_bytes(t, dtype):
    t = t.detach().contiguous().to(TORCH_DTYPE[dtype])
    if dtype == "BF16":  # numpy has no bfloat16: its bits as int16
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, torch tensor); every one stored as `dtype`."""
    header, blobs, pos = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        b = tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    return pos


def write_weights(out_dir, tensors, dtype, shards):
    """model.safetensors, or (shards > 1) model-0000K-of-0000N.safetensors and the index."""
    if shards <= 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, dtype)
        return
    weight_map, total, per = {}, 0, -(-len(tensors) // shards)
    for k in range(shards):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = tensors[k * per:(k + 1) * per]
        total += write_safetensors(os.path.join(out_dir, fname), part, dtype)
        weight_map.update({n: fname for n, _ in part})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def write_tokens(path, ids):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(ids)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(ids, dtype="<u2").tobytes())


def hf_tensors(model, spec):
    """(name, tensor) in Hugging Face GPT-2 names and layouts: nn.Linear's [out, in] weights
    become Conv1D's [in, out]."""
    out = [("wte.weight", model.wte.weight), ("wpe.weight", model.wpe.weight)]
    T = spec["n_positions"]
    for i, b in enumerate(model.h):
        p = f"h.{i}."
        out += [(p + "ln_1.weight", b.ln_1.weight), (p + "ln_1.bias", b.ln_1.bias)]
        if spec.get("mask_buffers"):
            out.append((p + "attn.bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T)))
            out.append((p + "attn.masked_bias", torch.tensor(-1e4)))
        out += [(p + "attn.c_attn.weight", b.c_attn.weight.t()), (p + "attn.c_attn.bias", b.c_attn.bias),
                (p + "attn.c_proj.weight", b.c_proj.weight.t()), (p + "attn.c_proj.bias", b.c_proj.bias),
                (p + "ln_2.weight", b.ln_2.weight), (p + "ln_2.bias", b.ln_2.bias),
                (p + "mlp.c_fc.weight", b.c_fc.weight.t()), (p + "mlp.c_fc.bias", b.c_fc.bias),
                (p + "mlp.c_proj.weight", b.mlp_proj.weight.t()), (p + "mlp.c_proj.bias", b.mlp_proj.bias)]
    out += [("ln_f.weight", model.ln_f.weight), ("ln_f.bias", model.ln_f.bias)]
    return out


def write_folder(out_dir, spec):
    L, H, C, T, V = (spec[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size"))
    dtype = spec.get("dtype", "F32")
    torch.manual_seed(spec.get("seed", 1))
    model = GPT(L, C, H, T, V)
    with torch.no_grad():
        # Matrices 10x wider than GPT-2's initialisation, so the logits are far from uniform and
        # a weight loaded into the wrong place moves the loss well beyond the tolerance; biases
        # and LayerNorm parameters away from their 0/1 initial values for the same reason.
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.mul_(10.0)
            elif name.endswith("bias"):
                p.add_(0.02 * torch.randn_like(p))
            elif "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
            # The weights as stored: rounded to the file's dtype, then computed with in fp32.
            p.copy_(p.to(TORCH_DTYPE[dtype]).float())
        # A separate head as wide as the matrices above, rounded like them.
        head = (0.2 * torch.randn_like(model.wte.weight)).to(TORCH_DTYPE[dtype]).float()
    os.makedirs(out_dir, exist_ok=True)

    tensors = hf_tensors(model, spec)
    drop, transpose = set(spec.get("drop", [])), set(spec.get("transpose", []))
    tensors = [(n, t.t() if n in transpose else t) for n, t in tensors if n not in drop]
    for name, shape in spec.get("extra", {}).items():
        tensors.append((name, torch.zeros(shape)))
    if spec.get("prefix"):
        tensors = [("transformer." + n, t) for n, t in tensors]
    head_kind = spec.get("lm_head", "none")
    if head_kind == "copy":
        tensors.append(("lm_head.weight", model.wte.weight))
    elif head_kind == "random":
        tensors.append(("lm_head.weight", head))
    untied = head_kind == "random" and not spec.get("tie", True)

    write_weights(out_dir, tensors, dtype, spec.get("shards", 1))

    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": T,
              "n_ctx": T, "n_embd": C, "n_layer": L, "n_head": H, "n_inner": None, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "scale_attn_weights": True,
              "tie_word_embeddings": spec.get("tie", True), "torch_dtype": "float32"}
    config.update(spec.get("config", {}))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    with open(spec["text"], "rb") as f:
        stride = spec.get("id_stride", 197)
        ids = [(b * stride) % V for b in f.read()]
    val_windows = spec.get("val_windows", 4)
    split = len(ids) - (val_windows * T + 1)
    assert split > T + 1, "the text is too short for the training and validation windows"
    write_tokens(os.path.join(out_dir, "train.bin"), ids[:split])
    val = ids[split:]
    write_tokens(os.path.join(out_dir, "val.bin"), val)
    x = torch.tensor([val[k * T:k * T + T] for k in range(val_windows)])
    y = torch.tensor([val[k * T + 1:k * T + T + 1] for k in range(val_windows)])
    with torch.no_grad():
        return {"loss": model(x, y, head if untied else None).item()}


def main():
    if sys.argv[1] == "--many":
        print(json.dumps([write_folder(d, spec) for d, spec in json.loads(sys.argv[2])]))
    else:
        print(json.dumps(write_folder(sys.argv[1], json.loads(sys.argv[2]))))


if __name__ == "__main__":
    main()
