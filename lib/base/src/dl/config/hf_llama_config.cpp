#include "dl/config/hf_llama_config.hpp"

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/io/jsonl.hpp"

namespace dl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool has_value(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

int64_t positive_count(const json& j, const char* key, const fs::path& file) {
  if (!has_value(j, key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1)
    throw_usage(file.string(), ": \"", key, "\" must be a positive integer",
                j.contains(key) ? ", got " + j[key].dump() : std::string(" and is missing"),
                " (a Llama config.json has hidden_size, num_hidden_layers, num_attention_heads, intermediate_size "
                "and vocab_size)");
  return j[key].get<int64_t>();
}

double positive_number(const json& j, const char* key, double fallback, const fs::path& file) {
  if (!has_value(j, key)) return fallback;
  if (!j[key].is_number() || !(j[key].get<double>() > 0))
    throw_usage(file.string(), ": \"", key, "\" must be a positive number, got ", j[key].dump());
  return j[key].get<double>();
}

// Keys of the mixture-of-experts configs (Mixtral, Qwen2-MoE, DeepSeek): each token's MLP is a
// routed choice of several, which dl-train's llama does not have.
constexpr const char* kMoeKeys[] = {"num_local_experts", "num_experts",     "num_experts_per_tok",
                                    "moe_intermediate_size", "n_routed_experts", "n_shared_experts",
                                    "shared_expert_intermediate_size"};

void read_rope_scaling(const json& j, const fs::path& file, HfLlamaShape& s) {
  if (!has_value(j, "rope_scaling")) return;
  const json& r = j["rope_scaling"];
  if (!r.is_object()) throw_usage(file.string(), ": rope_scaling must be an object or null, got ", r.dump());
  // transformers reads "rope_type", and "type" in configs written before it was renamed.
  const json type = r.contains("rope_type") ? r["rope_type"] : r.value("type", json());
  if (type == "default") return;  // transformers' name for no scaling
  if (type != "llama3" && type != "linear")
    throw_usage(file.string(), ": rope_scaling type ", type.dump(),
                "; dl-train's llama computes rotary embeddings unscaled or with rope_scaling \"linear\" or \"llama3\"");
  s.rope_scaling = type == "llama3" ? RopeScaling::llama3 : RopeScaling::linear;
  s.rope_factor = positive_number(r, "factor", 0, file);
  if (s.rope_factor == 0) throw_usage(file.string(), ": rope_scaling has no \"factor\"");
  if (s.rope_scaling == RopeScaling::linear) return;
  for (const char* key : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
    if (!has_value(r, key)) throw_usage(file.string(), ": rope_scaling of type \"llama3\" has no \"", key, "\"");
  s.rope_low_freq_factor = positive_number(r, "low_freq_factor", 1.0, file);
  s.rope_high_freq_factor = positive_number(r, "high_freq_factor", 4.0, file);
  s.rope_original_max_position = positive_count(r, "original_max_position_embeddings", file);
}

}  // namespace

bool is_hf_llama_family(const std::string& model_type) {
  return model_type == "llama" || model_type == "mistral" || model_type == "qwen2";
}

std::string hf_config_model_type(const fs::path& file) {
  const json j = read_json_file(file);
  if (!j.is_object()) throw_usage(file.string(), ": not a JSON object (a Hugging Face config.json is one)");
  if (!has_value(j, "model_type")) return "";
  if (!j["model_type"].is_string()) throw_usage(file.string(), ": model_type must be a string, got ", j["model_type"].dump());
  return j["model_type"].get<std::string>();
}

HfLlamaShape read_hf_llama_config(const fs::path& file) {
  const json j = read_json_file(file);
  if (!j.is_object()) throw_usage(file.string(), ": not a JSON object (a Llama config.json is one)");
  HfLlamaShape s;
  s.model_type = j.value("model_type", "");
  if (s.model_type != "llama" && s.model_type != "mistral" && s.model_type != "qwen2")
    throw_usage(file.string(), ": model_type is ", j.value("model_type", json()).dump(),
                "; model.init_from reads model_type \"gpt2\", \"llama\", \"mistral\" and \"qwen2\"");
  // Qwen2Attention gives q_proj, k_proj and v_proj biases whatever config.json says.
  s.qkv_bias = s.model_type == "qwen2";
  s.n_layer = positive_count(j, "num_hidden_layers", file);
  s.n_head = positive_count(j, "num_attention_heads", file);
  s.n_kv_head = has_value(j, "num_key_value_heads") ? positive_count(j, "num_key_value_heads", file) : s.n_head;
  s.n_embd = positive_count(j, "hidden_size", file);
  s.ffn_hidden = positive_count(j, "intermediate_size", file);
  s.vocab_size = positive_count(j, "vocab_size", file);
  s.max_position_embeddings = positive_count(j, "max_position_embeddings", file);
  if (s.n_embd % s.n_head != 0 || (s.n_embd / s.n_head) % 2 != 0)
    throw_usage(file.string(), ": hidden_size (", s.n_embd, ") is not num_attention_heads (", s.n_head,
                ") heads of an even size");
  if (s.n_head % s.n_kv_head != 0)
    throw_usage(file.string(), ": num_key_value_heads (", s.n_kv_head, ") does not divide num_attention_heads (",
                s.n_head, ")");
  if (has_value(j, "head_dim") && j["head_dim"] != s.n_embd / s.n_head)
    throw_usage(file.string(), ": head_dim is ", j["head_dim"].dump(), "; dl-train's llama has heads of hidden_size / "
                "num_attention_heads = ", s.n_embd / s.n_head);
  if (has_value(j, "hidden_act") && j["hidden_act"] != "silu")
    throw_usage(file.string(), ": hidden_act is ", j["hidden_act"].dump(), "; dl-train's llama MLP is SwiGLU (\"silu\")");
  if (has_value(j, "attention_bias") && j["attention_bias"] != false)
    throw_usage(file.string(), ": attention_bias is ", j["attention_bias"].dump(),
                " (biases on q_proj, k_proj, v_proj and o_proj); dl-train's llama has biases on q_proj, k_proj and "
                "v_proj only (Qwen2's)");
  if (has_value(j, "mlp_bias") && j["mlp_bias"] != false)
    throw_usage(file.string(), ": mlp_bias is ", j["mlp_bias"].dump(), "; dl-train's llama MLP has no biases");
  for (const char* key : kMoeKeys)
    if (has_value(j, key) && j[key] != 0)
      throw_usage(file.string(), ": ", key, " is ", j[key].dump(),
                  " (a mixture of experts); dl-train's llama has one dense MLP per block");
  s.rms_norm_eps = positive_number(j, "rms_norm_eps", 1e-6, file);
  s.rope_theta = positive_number(j, "rope_theta", 10000.0, file);
  read_rope_scaling(j, file, s);
  if (has_value(j, "tie_word_embeddings")) {
    if (!j["tie_word_embeddings"].is_boolean())
      throw_usage(file.string(), ": tie_word_embeddings must be true or false, got ", j["tie_word_embeddings"].dump());
    s.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  if (s.model_type == "qwen2") {
    // Qwen2 configs carry sliding_window (and max_window_layers) with use_sliding_window = false,
    // the default: then every layer attends to the whole sequence.
    if (has_value(j, "use_sliding_window") && j["use_sliding_window"] != false)
      throw_usage(file.string(), ": use_sliding_window is ", j["use_sliding_window"].dump(),
                  "; dl-train's llama attends to the whole block (Qwen2 with use_sliding_window = false)");
  } else if (has_value(j, "sliding_window")) {
    s.sliding_window = positive_count(j, "sliding_window", file);
  } else if (s.model_type == "mistral" && !j.contains("sliding_window")) {
    s.sliding_window = 4096;  // MistralConfig's default; LlamaConfig has none
  }
  return s;
}

}  // namespace dl
