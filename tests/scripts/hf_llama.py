#!/usr/bin/env python3
"""Writes small Hugging Face Llama-family folders (Qwen2's too) from the independent PyTorch Llama
(torch_llama.py), for dl-train's model.init_from tests, and computes the reference's loss; reads
a folder back (a dl-train checkpoint) and computes the loss of its weights.

Usage: hf_llama.py --many JSON_LIST_OF_[OUT_DIR, SPEC]   prints a list of {"loss": L}
       hf_llama.py --loss JSON_LIST_OF_[DIR, DATA_DIR] WINDOWS   prints a list of {"loss": L}: DIR's
                                                          config.json and model.safetensors (F32) on
                                                          DATA_DIR/val.bin
       hf_llama.py --transformers-loss DATA_DIR WINDOWS DIR...   prints a list of {"loss": L}:
                                                          transformers' AutoModelForCausalLM.from_pretrained(DIR)
                                                          (config.json's architecture: LlamaForCausalLM,
                                                          Qwen2ForCausalLM), refusing missing or unused keys
                                                          (and "tokenizer": AutoTokenizer's bos/eos ids,
                                                          config.json's, and the ids of "hello world",
                                                          when DIR holds a tokenizer.json)

SPEC: n_layer, n_head, n_kv_head, n_embd, intermediate_size, max_position_embeddings (the
windows' length T), vocab_size, seed, text (a file whose bytes, mapped onto the vocabulary as
(byte * 197) % vocab_size, give the token ids), and optionally dtype ("F32" | "BF16" | "F16"),
shards (1: model.safetensors; more: model-0000K-of-0000N.safetensors and the index), tie
(tie_word_embeddings; false: an lm_head.weight of its own), inv_freq (the
model.layers.N.self_attn.rotary_emb.inv_freq buffers older exports carry), model_type ("llama"
| "mistral" | "qwen2": Qwen2ForCausalLM's config with use_sliding_window false and random q/k/v
biases), config (keys overriding config.json), val_windows.

Writes OUT_DIR/config.json, the weights, train.bin and val.bin (as hf_gpt2.py). The loss is the
mean cross-entropy over val.bin's windows (window k: ids [k T, k T + T] predict the next), in f32
with the weights as stored.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_gpt2 import TORCH_DTYPE, write_tokens, write_weights  # noqa: E402
from st import load as load_safetensors  # noqa: E402
from torch_llama import inv_freq, llama_loss  # noqa: E402


def spec_from_config(config):
    """torch_llama's spec from a config.json, as transformers' LlamaConfig defaults it (Qwen2's
    q/k/v biases are its architecture's, not a config key)."""
    scaling = config.get("rope_scaling")
    if scaling and "rope_type" not in scaling:
        scaling = dict(scaling, rope_type=scaling["type"])
    return {"n_layer": config["num_hidden_layers"], "n_head": config["num_attention_heads"],
            "n_kv_head": config.get("num_key_value_heads") or config["num_attention_heads"],
            "n_embd": config["hidden_size"], "rms_norm_eps": config.get("rms_norm_eps", 1e-6),
            "rope_theta": config.get("rope_theta", 10000.0), "rope_scaling": scaling,
            "tie_word_embeddings": config.get("tie_word_embeddings", False),
            "qkv_bias": config.get("model_type") == "qwen2"}


def random_weights(spec, dtype):
    """LlamaForCausalLM's state dict, random: matrices wide enough that the logits are far from
    uniform (a weight in the wrong place moves the loss well beyond the tolerance), norms away
    from 1; rounded to the file's dtype."""
    torch.manual_seed(spec.get("seed", 1))
    L, H, KV, C, F, V = (spec[k] for k in ("n_layer", "n_head", "n_kv_head", "n_embd", "intermediate_size",
                                            "vocab_size"))
    hd = C // H
    W = {"model.embed_tokens.weight": torch.randn(V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        W[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(C)
        W[p + "self_attn.q_proj.weight"] = torch.randn(H * hd, C) * 0.3
        W[p + "self_attn.k_proj.weight"] = torch.randn(KV * hd, C) * 0.3
        W[p + "self_attn.v_proj.weight"] = torch.randn(KV * hd, C) * 0.3
        if spec.get("model_type") == "qwen2":
            W[p + "self_attn.q_proj.bias"] = torch.randn(H * hd) * 0.5
            W[p + "self_attn.k_proj.bias"] = torch.randn(KV * hd) * 0.5
            W[p + "self_attn.v_proj.bias"] = torch.randn(KV * hd) * 0.5
        W[p + "self_attn.o_proj.weight"] = torch.randn(C, H * hd) * 0.3
        W[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(C)
        W[p + "mlp.gate_proj.weight"] = torch.randn(F, C) * 0.3
        W[p + "mlp.up_proj.weight"] = torch.randn(F, C) * 0.3
        W[p + "mlp.down_proj.weight"] = torch.randn(C, F) * 0.3
    W["model.norm.weight"] = 1 + 0.1 * torch.randn(C)
    if not spec.get("tie", False):
        W["lm_head.weight"] = torch.randn(V, C) * 0.3
    return {n: t.to(TORCH_DTYPE[dtype]).float() for n, t in W.items()}


def windows_loss(W, spec, val, T, n):
    x = torch.tensor([val[k * T:k * T + T] for k in range(n)])
    y = torch.tensor([val[k * T + 1:k * T + T + 1] for k in range(n)])
    with torch.no_grad():
        return llama_loss(W, x, y, spec).item()


def write_folder(out_dir, spec):
    dtype = spec.get("dtype", "F32")
    T, V = spec["max_position_embeddings"], spec["vocab_size"]
    model_type = spec.get("model_type", "llama")
    arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}[model_type]
    config = {"architectures": [arch], "model_type": model_type, "hidden_size": spec["n_embd"],
              "intermediate_size": spec["intermediate_size"], "num_hidden_layers": spec["n_layer"],
              "num_attention_heads": spec["n_head"], "num_key_value_heads": spec["n_kv_head"],
              "max_position_embeddings": T, "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "rope_scaling": None, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
              "tie_word_embeddings": spec.get("tie", False), "torch_dtype": {"F32": "float32", "BF16": "bfloat16",
                                                                               "F16": "float16"}[dtype],
              "bos_token_id": 1, "eos_token_id": 2}
    if model_type == "qwen2":
        # As Qwen2.5's config.json: no bias keys (the biases are the architecture's), a window
        # written but off.
        del config["attention_bias"], config["mlp_bias"]
        config.update({"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 21})
    config.update(spec.get("config", {}))
    W = random_weights(spec, dtype)
    os.makedirs(out_dir, exist_ok=True)
    tensors = list(W.items())
    if spec.get("inv_freq"):
        freq = inv_freq(spec_from_config(config), spec["n_embd"] // spec["n_head"], "cpu")
        tensors += [(f"model.layers.{l}.self_attn.rotary_emb.inv_freq", freq) for l in range(spec["n_layer"])]
    write_weights(out_dir, tensors, dtype, spec.get("shards", 1))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    with open(spec["text"], "rb") as f:
        ids = [(b * 197) % V for b in f.read()]
    n = spec.get("val_windows", 4)
    split = len(ids) - (n * T + 1)
    assert split > T + 1, "the text is too short for the training and validation windows"
    write_tokens(os.path.join(out_dir, "train.bin"), ids[:split])
    write_tokens(os.path.join(out_dir, "val.bin"), ids[split:])
    return {"loss": windows_loss(W, spec_from_config(config), ids[split:], T, n)}


def folder_loss(folder, data_dir, n):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    arrays, _ = load_safetensors(os.path.join(folder, "model.safetensors"))
    W = {name: torch.from_numpy(a).float() for name, a in arrays.items()}
    x, y = val_windows(data_dir, config["max_position_embeddings"], n)
    with torch.no_grad():
        return {"loss": llama_loss(W, x, y, spec_from_config(config)).item()}


def val_windows(data_dir, T, n):
    val = np.fromfile(os.path.join(data_dir, "val.bin"), dtype="<u2", offset=1024).astype(np.int64)
    return (torch.tensor(np.stack([val[k * T:k * T + T] for k in range(n)])),
            torch.tensor(np.stack([val[k * T + 1:k * T + T + 1] for k in range(n)])))


def transformers_losses(data_dir, n, folders):
    """transformers' AutoModelForCausalLM.from_pretrained of each folder (the class its config.json
    names), its loss on the windows; a weight the class wants and the folder lacks, or the reverse,
    is an error (from_pretrained would start it at random and only warn)."""
    from transformers import AutoModelForCausalLM
    out = []
    for folder in folders:
        model, info = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32,
                                                           output_loading_info=True)
        model.eval()
        with open(os.path.join(folder, "config.json")) as f:
            arch = json.load(f)["architectures"][0]
        assert type(model).__name__ == arch, (folder, type(model).__name__, arch)
        problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        assert not problems, (folder, problems)
        x, y = val_windows(data_dir, model.config.max_position_embeddings, n)
        with torch.no_grad():
            logits = model(x).logits
        entry = {"loss": torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                           y.reshape(-1)).item()}
        if os.path.exists(os.path.join(folder, "tokenizer.json")):
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_pretrained(folder)
            entry["tokenizer"] = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
                                  "config_bos_token_id": model.config.bos_token_id,
                                  "config_eos_token_id": model.config.eos_token_id,
                                  "ids": tok.encode("hello world", add_special_tokens=False)}
        out.append(entry)
    return out


def main():
    if sys.argv[1] == "--many":
        print(json.dumps([write_folder(d, spec) for d, spec in json.loads(sys.argv[2])]))
    elif sys.argv[1] == "--transformers-loss":
        print(json.dumps(transformers_losses(sys.argv[2], int(sys.argv[3]), sys.argv[4:])))
    elif sys.argv[1] == "--loss":
        print(json.dumps([folder_loss(d, data, int(sys.argv[3])) for d, data in json.loads(sys.argv[2])]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
