// The model-shape flags dl-shard (plan, recommend) and dl-cost (estimate) share beside --params
// and --layers --hidden --heads --seq --vocab: one definition, so both tools spell and explain
// them alike (each tool's OptionNames maps arch, kv_heads, ffn_hidden, untied_head and
// hf_config to them). Header-only: only the tools, which parse with CLI11, include it.
#pragma once
#include <CLI/CLI.hpp>

#include "dl/plan/plan.hpp"

namespace dl::plan {

inline void add_arch_flags(CLI::App* c, ArchHints& a) {
  c->add_option("--arch", a.family,
                "with --params: gpt (GELU MLP, LayerNorm, biases, learned positions, tied head; default) | llama "
                "(SwiGLU, RMSNorm, no biases, rotary, untied head)");
  c->add_option("--kv-heads", a.kv_heads, "with --params: K/V heads of grouped-query attention (default: --heads; 1: multi-query)");
  c->add_option("--ffn-hidden", a.ffn_hidden,
                "with --params: the MLP's inner width F (default 4 x --hidden; llama: 8/3 x --hidden rounded up to 256)");
  c->add_flag("--untied-head", a.untied_head, "with --params: a separate LM head matrix (V x D) instead of the token embedding");
  c->add_option("--hf-config", a.hf_config,
                "A Hugging Face config.json (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel) "
                "instead of --params and the hints; --seq sets the training length");
}

}  // namespace dl::plan
