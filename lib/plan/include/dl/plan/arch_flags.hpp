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
  c->add_option_function<int64_t>("--experts", [&a](const int64_t& v) { a.experts = v; },
                "with --params: a mixture of experts with this many routed experts per MoE layer (memory counts them "
                "all, FLOPs the active ones)");
  c->add_option("--active-experts", a.active_experts, "with --experts: experts each token is routed to (top-k)");
  c->add_option("--expert-ffn", a.expert_ffn, "with --experts: each expert's MLP width (default: --ffn-hidden's)");
  c->add_option("--shared-experts", a.shared_experts,
                "with --experts: experts every token passes through (DeepSeek style), of the --expert-ffn width (default 0)");
  c->add_option("--dense-layers", a.dense_layers,
                "with --experts: the first layers keep a dense MLP of --ffn-hidden's width (DeepSeek-V3: 3; default 0)");
  c->add_option_function<double>(
      "--capacity-factor", [&a](const double& v) { a.capacity_factor = v; },
      "with --experts or a MoE --hf-config: tokens an expert takes as a multiple of its fair share (default 1.0): "
      "routed activations and all-to-all volume scale with it");
  c->add_option("--moe-max-nodes", a.moe_max_nodes,
                "with --experts or a MoE --hf-config: node-limited routing, each token reaches experts on at most N "
                "nodes (DeepSeek-V3: 4): min(top-k, N) copies cross the fabric, the rest move over NVLink (default: "
                "unlimited)");
  c->add_option("--hf-config", a.hf_config,
                "A Hugging Face config.json (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel; the "
                "mixtures of experts Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3, OLMoE) "
                "instead of --params and the hints; --seq sets the training length");
}

}  // namespace dl::plan
