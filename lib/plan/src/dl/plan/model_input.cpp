// Where the planner's model shapes come from: --params with architecture hints (--arch,
// --kv-heads, --ffn-hidden, --untied-head), a Hugging Face config.json (--hf-config), and a
// dl-train config (through the shared config loader, for every model.type).
#include <filesystem>
#include <map>
#include <vector>
#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/plan/plan.hpp"

namespace dl::plan {

namespace fs = std::filesystem;
using nlohmann::json;

ModelShape model_from_hints(std::optional<double> params, int64_t n_layer, int64_t hidden, int64_t heads, int64_t seq,
                            int64_t vocab, const ArchHints& arch) {
  if (!arch.hf_config.empty()) {
    if (params) throw_option_error("{hf_config} gives the exact parameter count: leave out {params}");
    if (n_layer || hidden || heads || vocab || arch.kv_heads || arch.ffn_hidden || !arch.family.empty() ||
        arch.untied_head || arch.experts || arch.active_experts || arch.expert_ffn || arch.shared_experts || arch.dense_layers)
      throw_option_error("{hf_config} describes the whole model: leave out {layers}, {hidden}, {heads}, {vocab}, ",
                         "{kv_heads}, {ffn_hidden}, {arch}, {untied_head} and the expert flags ({seq} sets the training "
                         "length, {capacity_factor} the experts' capacity, {moe_max_nodes} the routing's node limit)");
    if (seq < 0) throw_option_error("{seq}: need a positive sequence length, got ", seq);
    ModelShape m = model_from_hf_config(arch.hf_config, seq);
    if (arch.capacity_factor || arch.moe_max_nodes) {
      if (!m.is_moe())
        throw_option_error(arch.capacity_factor ? "{capacity_factor}" : "{moe_max_nodes}", ": ", arch.hf_config,
                           " is not a mixture of experts");
      m.capacity_factor = arch.capacity_factor.value_or(m.capacity_factor);
      m.moe_max_nodes = arch.moe_max_nodes;
      check_moe(m);
    }
    return m;
  }
  if (!params) throw_option_error("give {params} with the architecture hints (or {hf_config} config.json)");
  if (arch.kv_heads < 0 || arch.ffn_hidden < 0) throw_option_error("{kv_heads} and {ffn_hidden} must be positive");
  // A bare GPT count keeps Korthikanti et al.'s dropout (the published formula), as before.
  ModelShape hints = with_dims(with_family(ModelShape{}, arch.family.empty() ? Family::gpt : parse_family(arch.family)),
                               n_layer, hidden, heads, seq, vocab);
  hints.kv_heads = arch.kv_heads;
  hints.ffn_hidden = arch.ffn_hidden;
  if (arch.untied_head) hints.tied_head = false;
  if ((arch.ffn_hidden || arch.untied_head || arch.kv_heads) && !(n_layer > 0 && hidden > 0))
    throw_option_error("{kv_heads}, {ffn_hidden} and {untied_head} shape the blocks: give {layers} and {hidden} too");
  hints.experts = arch.experts.value_or(0);
  hints.active_experts = arch.active_experts;
  hints.expert_ffn = arch.expert_ffn;
  hints.shared_experts = arch.shared_experts;
  hints.dense_layers = arch.dense_layers;
  hints.capacity_factor = arch.capacity_factor.value_or(1.0);
  hints.moe_max_nodes = arch.moe_max_nodes;
  // {experts} 0 is a mistake, not a dense model: a dense model leaves the flag out.
  if (arch.experts && *arch.experts < 1) throw_option_error("{experts}: need at least 1 routed expert, got ", *arch.experts);
  check_moe(hints);
  return model_from_params(*params, hints);
}

// ---------------------------------------------------------------------------------------------
// Hugging Face config.json

namespace {

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// A model dimension: an integer from `least` to kMaxModelDimension (larger ones would overflow the
// counts; no model has them).
int64_t dimension(const json& j, const char* key, const std::string& file, int64_t least) {
  const int64_t value = j[key].is_number_integer() ? j[key].get<int64_t>() : -1;
  if (!j[key].is_number_integer() || value < least || value > kMaxModelDimension)
    throw_usage(file, ": \"", key, "\" must be an integer from ", least, " to ", kMaxModelDimension, ", got ",
                j[key].dump());
  return value;
}

int64_t positive(const json& j, const char* key, const std::string& file, const char* family) {
  if (!present(j, key))
    throw_usage(file, ": \"", key, "\" must be a positive integer and is missing (a ", family, " config.json has it)");
  return dimension(j, key, file, 1);
}

bool flag(const json& j, const char* key, bool fallback, const std::string& file) {
  if (!present(j, key)) return fallback;
  if (!j[key].is_boolean()) throw_usage(file, ": \"", key, "\" must be true or false, got ", j[key].dump());
  return j[key].get<bool>();
}

// Mixture-of-experts keys: a key naming experts, routing or MoE layers that the family's reader
// does not take is an error, never read as a dense model.
bool moe_key(const std::string& key) {
  for (const char* word : {"expert", "moe", "router", "topk", "top_k", "routed", "sparse"})
    if (key.find(word) != std::string::npos) return true;
  return false;
}

// Where the family's config.json keeps its mixture of experts (nullptr: a key it does not have).
struct MoeKeys {
  const char* experts;         // routed experts
  const char* expert_ffn;      // each expert's width
  const char* shared_experts;  // a count of shared experts of the experts' width
  const char* shared_ffn;      // one shared expert of this width
  const char* dense_layers;    // the first k layers dense
  std::vector<const char*> fixed_one;  // keys that must be 1 (MoE in every layer)
  std::vector<const char*> ignored;    // training-only routing settings the plan does not depend on
};

}  // namespace

ModelShape model_from_hf_config(const std::string& file, int64_t seq) {
  if (seq > kMaxModelDimension)
    throw_option_error("{seq} ", seq, ": at most ", kMaxModelDimension, " (no model dimension is larger)");
  const json j = read_json_file(file);
  if (!j.is_object()) throw_usage(file, ": not a JSON object (a Hugging Face config.json is one)");
  std::string arch;
  if (present(j, "architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  std::string type = present(j, "model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  constexpr const char* kKnown =
      "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel, or the mixtures of experts "
      "MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, "
      "OlmoeForCausalLM";
  struct Known {
    const char* arch;
    const char* type;
  };
  constexpr Known kFamilies[] = {{"LlamaForCausalLM", "llama"},         {"MistralForCausalLM", "mistral"},
                                 {"Qwen2ForCausalLM", "qwen2"},         {"GPT2LMHeadModel", "gpt2"},
                                 {"MixtralForCausalLM", "mixtral"},     {"Qwen2MoeForCausalLM", "qwen2_moe"},
                                 {"Qwen3MoeForCausalLM", "qwen3_moe"},  {"DeepseekV2ForCausalLM", "deepseek_v2"},
                                 {"DeepseekV3ForCausalLM", "deepseek_v3"}, {"OlmoeForCausalLM", "olmoe"}};
  const std::vector<const char*> kRouting = {"num_experts_per_tok", "norm_topk_prob", "router_aux_loss_coef",
                                             "output_router_logits", "router_jitter_noise"};
  const auto with_routing = [&](std::vector<const char*> extra) {
    extra.insert(extra.end(), kRouting.begin(), kRouting.end());
    return extra;
  };
  const std::map<std::string, MoeKeys> kMoe = {
      {"mixtral", {"num_local_experts", "intermediate_size", nullptr, nullptr, nullptr, {}, with_routing({})}},
      {"qwen2_moe",
       {"num_experts", "moe_intermediate_size", nullptr, "shared_expert_intermediate_size", nullptr, {"decoder_sparse_step"},
        with_routing({})}},
      {"qwen3_moe", {"num_experts", "moe_intermediate_size", nullptr, nullptr, nullptr, {"decoder_sparse_step"}, with_routing({})}},
      {"deepseek_v2",
       {"n_routed_experts", "moe_intermediate_size", "n_shared_experts", nullptr, "first_k_dense_replace", {"moe_layer_freq"},
        with_routing({"topk_method", "topk_group", "n_group", "routed_scaling_factor", "scoring_func", "seq_aux",
                      "aux_loss_alpha", "ep_size"})}},
      {"deepseek_v3",
       {"n_routed_experts", "moe_intermediate_size", "n_shared_experts", nullptr, "first_k_dense_replace", {"moe_layer_freq"},
        with_routing({"topk_method", "topk_group", "n_group", "routed_scaling_factor", "scoring_func", "seq_aux",
                      "aux_loss_alpha", "ep_size"})}},
      {"olmoe", {"num_experts", "intermediate_size", nullptr, nullptr, nullptr, {}, with_routing({})}},
  };
  const Known* family = nullptr;
  for (const auto& k : kFamilies)
    if ((!arch.empty() && arch == k.arch) || (arch.empty() && type == k.type)) family = &k;
  if (!family)
    throw_usage(file, ": ", !arch.empty() ? "architectures [\"" + arch + "\"]" : "model_type \"" + type + "\"",
                " is not a model dl-shard and dl-cost plan (", kKnown, ")");
  const auto moe = kMoe.find(family->type);
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (item.value().is_null() || !moe_key(key)) continue;
    bool known = false;
    if (moe != kMoe.end()) {
      const MoeKeys& k = moe->second;
      for (const char* name : {k.experts, k.expert_ffn, k.shared_experts, k.shared_ffn, k.dense_layers})
        known = known || (name && key == name);
      for (const auto* list : {&k.fixed_one, &k.ignored})
        for (const char* name : *list) known = known || key == name;
    }
    if (!known)
      throw_usage(file, ": \"", key, "\" describes a mixture of experts the ", family->arch,
                  " reader does not plan (experts are read from ", kKnown, ")");
  }
  // Qwen2 writes sliding_window with use_sliding_window = false; Mistral v0.1 sets it on.
  if (present(j, "use_sliding_window") ? flag(j, "use_sliding_window", false, file) : present(j, "sliding_window"))
    throw_usage(file, ": \"", present(j, "use_sliding_window") ? "use_sliding_window" : "sliding_window",
                "\" is set: sliding-window attention is not planned (full causal attention only)");

  ModelShape m;
  m.type = std::nullopt;
  m.name = fs::path(file).filename().string();
  if (std::string(family->type) == "gpt2") {
    m = with_family(m, Family::gpt);
    m.n_layer = positive(j, "n_layer", file, "GPT-2");
    m.hidden = positive(j, "n_embd", file, "GPT-2");
    m.heads = positive(j, "n_head", file, "GPT-2");
    m.vocab = positive(j, "vocab_size", file, "GPT-2");
    const int64_t positions = positive(j, present(j, "n_positions") ? "n_positions" : "n_ctx", file, "GPT-2");
    if (present(j, "n_inner")) m.ffn_hidden = positive(j, "n_inner", file, "GPT-2");
    m.tied_head = flag(j, "tie_word_embeddings", true, file);
    // transformers' GPT-2 has dropout 0.1 by default; fine-tuning recipes often keep it.
    m.dropout = !(present(j, "resid_pdrop") && j["resid_pdrop"] == 0 && present(j, "attn_pdrop") && j["attn_pdrop"] == 0);
    if (seq > positions)
      throw_usage(file, ": --seq ", seq, " is longer than the position table (n_positions ", positions, ")");
    m.seq = seq > 0 ? seq : positions;
  } else {
    m = with_family(m, Family::llama);
    m.n_layer = positive(j, "num_hidden_layers", file, family->arch);
    m.hidden = positive(j, "hidden_size", file, family->arch);
    m.heads = positive(j, "num_attention_heads", file, family->arch);
    m.kv_heads = present(j, "num_key_value_heads") ? positive(j, "num_key_value_heads", file, family->arch) : m.heads;
    m.ffn_hidden = positive(j, "intermediate_size", file, family->arch);
    m.vocab = positive(j, "vocab_size", file, family->arch);
    m.seq = seq > 0 ? seq : positive(j, "max_position_embeddings", file, family->arch);
    m.tied_head = flag(j, "tie_word_embeddings", false, file);
    if (present(j, "hidden_act") && j["hidden_act"] != "silu")
      throw_usage(file, ": \"hidden_act\" is ", j["hidden_act"].dump(), "; the ", family->arch,
                  " MLP planned is SwiGLU (silu)");
    if (present(j, "head_dim") && j["head_dim"] != m.hidden / m.heads)
      throw_usage(file, ": \"head_dim\" ", j["head_dim"].dump(), " is not hidden_size / num_attention_heads = ",
                  m.hidden / m.heads, ", which the planner assumes");
    // Qwen2's q, k and v projections carry biases; Llama's attention_bias puts them on q, k, v and o.
    const bool attention_bias = flag(j, "attention_bias", false, file);
    m.qkv_bias = std::string(family->type) == "qwen2" || attention_bias;
    m.proj_bias = attention_bias;
    m.mlp_bias = flag(j, "mlp_bias", false, file);
  }
  std::string moe_note;
  if (moe != kMoe.end()) {
    const MoeKeys& k = moe->second;
    const char* arch_name = family->arch;
    m.experts = positive(j, k.experts, file, arch_name);
    m.active_experts = positive(j, "num_experts_per_tok", file, arch_name);
    if (m.active_experts > m.experts)
      throw_usage(file, ": \"num_experts_per_tok\" ", m.active_experts, " is more than the ", m.experts, " experts (\"",
                  k.experts, "\")");
    m.expert_ffn = positive(j, k.expert_ffn, file, arch_name);
    if (k.shared_experts && present(j, k.shared_experts)) m.shared_experts = dimension(j, k.shared_experts, file, 0);
    if (k.shared_ffn && present(j, k.shared_ffn)) {
      m.shared_expert_ffn = dimension(j, k.shared_ffn, file, 0);
      m.shared_experts = m.shared_expert_ffn > 0 ? 1 : 0;
    }
    if (k.dense_layers && present(j, k.dense_layers)) {
      if (!j[k.dense_layers].is_number_integer() || j[k.dense_layers].get<int64_t>() < 0 ||
          j[k.dense_layers].get<int64_t>() >= m.n_layer)
        throw_usage(file, ": \"", k.dense_layers, "\" must be an integer from 0 to ", m.n_layer - 1, ", got ",
                    j[k.dense_layers].dump());
      m.dense_layers = j[k.dense_layers].get<int64_t>();
    }
    for (const char* key : k.fixed_one)
      if (present(j, key) && j[key] != 1)
        throw_usage(file, ": \"", key, "\" is ", j[key].dump(), ": only experts in every layer (1) are planned");
    if (present(j, "mlp_only_layers") && !(j["mlp_only_layers"].is_array() && j["mlp_only_layers"].empty()))
      throw_usage(file, ": \"mlp_only_layers\" is ", j["mlp_only_layers"].dump(), ": only experts in every layer are planned");
  }
  // DeepSeek's multi-head latent attention (low-rank q and kv projections) is not modelled: its
  // attention is planned as standard multi-head attention of the same heads and width.
  if (present(j, "kv_lora_rank") || present(j, "q_lora_rank"))
    moe_note += "; multi-head latent attention (\"kv_lora_rank\") planned as standard attention of the same heads and width";
  if (present(j, "num_nextn_predict_layers") && j["num_nextn_predict_layers"] != 0)
    moe_note += "; the multi-token-prediction module (\"num_nextn_predict_layers\") is not counted";
  if (m.hidden % m.heads != 0)
    throw_usage(file, ": the hidden size ", m.hidden, " is not a multiple of the ", m.heads, " attention heads");
  if (m.heads % m.kv() != 0)
    throw_usage(file, ": num_key_value_heads ", m.kv(), " does not divide num_attention_heads ", m.heads);
  m.params = transformer_param_count(m);
  if (!(m.params <= kMaxModelParameters))
    throw_usage(file, ": ", group_digits(m.params), " parameters, more than the ", kMaxModelParameters,
                " the planner plans: check the sizes (hidden, layers, vocabulary, experts)");
  if (m.is_moe()) moe_note = str(", a mixture of experts (", describe_moe_params(m), ")") + moe_note;
  m.note = str(file, ": ", family->arch, ", ", group_digits(m.params), " parameters", moe_note,
               seq > 0 ? "" : str(", sequence length ", m.seq, " (its maximum; {seq} to train shorter)"));
  return m;
}

// ---------------------------------------------------------------------------------------------
// A dl-train config (gpt, llama or mlp)

PlanConfig load_plan_config(const std::string& path, const std::vector<std::string>& sets, const std::string& name) {
  PlanConfig p{load_config(path, sets), {}};
  p.model = model_from_config(p.config, name.empty() ? fs::path(path).filename().string() : name);
  return p;
}

}  // namespace dl::plan
