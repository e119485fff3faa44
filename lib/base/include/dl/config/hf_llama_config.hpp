// The config.json of a Hugging Face Llama-family folder (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM)
// as model.init_from reads it: the shape of a model.type = "llama" run. What dl-train's llama
// computes differently is refused by name (the writer is llama_config_json in checkpoint/).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "dl/config/config.hpp"

namespace dl {

struct HfLlamaShape {
  std::string model_type;  // "llama", "mistral" or "qwen2"
  int64_t n_layer = 0, n_head = 0, n_kv_head = 0, n_embd = 0, ffn_hidden = 0, vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_factor = 1.0, rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position = 8192;
  bool tie_word_embeddings = false;  // LlamaConfig's default: a separate lm_head.weight
  int64_t sliding_window = 0;        // 0: none; else attention sees only the last sliding_window tokens
  bool qkv_bias = false;             // Qwen2's biases on q_proj, k_proj and v_proj
};

// The model_type of a config.json ("" when it has none: GPT-2's old exports).
std::string hf_config_model_type(const std::filesystem::path& config_json);

// Reads and checks a llama, mistral or qwen2 config.json (Qwen2: q/k/v biases, always). A usage
// error names the file and the key for what dl-train's llama does not compute: another
// architecture, biases elsewhere (Llama's attention_bias, which biases o_proj too; mlp_bias),
// Qwen2's use_sliding_window = true, mixture-of-experts keys, rope_scaling other than llama3 and linear,
// head_dim other than hidden_size / num_attention_heads, hidden_act other than silu. The sliding
// window is returned for the caller to check against the run's block size.
HfLlamaShape read_hf_llama_config(const std::filesystem::path& config_json);

// True for the model_types read_hf_llama_config takes or refuses by name (llama, mistral, qwen2).
bool is_hf_llama_family(const std::string& model_type);

}  // namespace dl
