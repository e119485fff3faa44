#include "dl/nn/gpt_from_config.hpp"

#include "dl/core/error.hpp"

namespace dl {

void refuse_experts(const ModelConfig& m) {
  if (m.n_experts > 0)
    throw_usage("model.n_experts = ", m.n_experts, ": dl-train's models have no experts (a mixture of experts is for "
                "dl-shard plan and dl-cost estimate only); set model.n_experts = 0 to train the dense model");
}

GptConfig gpt_config_from(const ModelConfig& m) {
  refuse_experts(m);
  GptConfig g;
  g.n_layer = static_cast<int>(m.n_layer);
  g.n_head = static_cast<int>(m.n_head);
  g.n_embd = static_cast<int>(m.n_embd);
  g.block_size = static_cast<int>(m.block_size);
  g.vocab_size = static_cast<int>(m.vocab_size);
  g.init_std = m.init_std;
  g.tie_embeddings = m.tie_embeddings;
  return g;
}

LlamaConfig llama_config_from(const ModelConfig& m) {
  refuse_experts(m);  // planned (dl-shard, dl-cost), never built as a dense model
  LlamaConfig c;
  c.n_layer = static_cast<int>(m.n_layer);
  c.n_head = static_cast<int>(m.n_head);
  c.n_kv_head = static_cast<int>(m.n_kv_head > 0 ? m.n_kv_head : m.n_head);
  c.n_embd = static_cast<int>(m.n_embd);
  c.ffn_hidden = static_cast<int>(m.ffn_hidden > 0 ? m.ffn_hidden : 4 * m.n_embd);
  c.block_size = static_cast<int>(m.block_size);
  c.vocab_size = static_cast<int>(m.vocab_size);
  c.rms_norm_eps = m.rms_norm_eps;
  c.rope_theta = m.rope_theta;
  c.rope_scaling = m.rope_scaling;
  c.rope_factor = m.rope_factor;
  c.rope_low_freq_factor = m.rope_low_freq_factor;
  c.rope_high_freq_factor = m.rope_high_freq_factor;
  c.rope_original_max_position = static_cast<int>(m.rope_original_max_position);
  c.init_std = m.init_std;
  c.tie_embeddings = m.tie_embeddings;
  c.qkv_bias = m.qkv_bias;
  return c;
}

}  // namespace dl
