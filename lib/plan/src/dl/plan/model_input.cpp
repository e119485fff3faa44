// Where the planner's model shapes come from: --params with architecture hints (--arch,
// --kv-heads, --ffn-hidden, --untied-head), a Hugging Face config.json (--hf-config), and a
// dl-train config (through the shared config loader, for every model.type).
#include <filesystem>
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
        arch.untied_head)
      throw_option_error("{hf_config} describes the whole model: leave out {layers}, {hidden}, {heads}, {vocab}, ",
                         "{kv_heads}, {ffn_hidden}, {arch} and {untied_head} ({seq} sets the training length)");
    if (seq < 0) throw_option_error("{seq}: need a positive sequence length, got ", seq);
    return model_from_hf_config(arch.hf_config, seq);
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
  return model_from_params(*params, hints);
}

// ---------------------------------------------------------------------------------------------
// Hugging Face config.json

namespace {

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

int64_t positive(const json& j, const char* key, const std::string& file, const char* family) {
  if (!present(j, key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1)
    throw_usage(file, ": \"", key, "\" must be a positive integer",
                present(j, key) ? ", got " + j[key].dump() : std::string(" and is missing"), " (a ", family,
                " config.json has it)");
  return j[key].get<int64_t>();
}

bool flag(const json& j, const char* key, bool fallback, const std::string& file) {
  if (!present(j, key)) return fallback;
  if (!j[key].is_boolean()) throw_usage(file, ": \"", key, "\" must be true or false, got ", j[key].dump());
  return j[key].get<bool>();
}

// Keys that describe what the planner's dense, full-attention block does not compute.
constexpr const char* kMoeKeys[] = {"num_local_experts", "num_experts",          "num_experts_per_tok",
                                    "n_routed_experts",  "moe_intermediate_size", "n_shared_experts"};

}  // namespace

ModelShape model_from_hf_config(const std::string& file, int64_t seq) {
  const json j = read_json_file(file);
  if (!j.is_object()) throw_usage(file, ": not a JSON object (a Hugging Face config.json is one)");
  std::string arch;
  if (present(j, "architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  std::string type = present(j, "model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  constexpr const char* kKnown = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or GPT2LMHeadModel";
  struct Known {
    const char* arch;
    const char* type;
  };
  constexpr Known kFamilies[] = {{"LlamaForCausalLM", "llama"},
                                 {"MistralForCausalLM", "mistral"},
                                 {"Qwen2ForCausalLM", "qwen2"},
                                 {"GPT2LMHeadModel", "gpt2"}};
  const Known* family = nullptr;
  for (const auto& k : kFamilies)
    if ((!arch.empty() && arch == k.arch) || (arch.empty() && type == k.type)) family = &k;
  if (!family)
    throw_usage(file, ": ", !arch.empty() ? "architectures [\"" + arch + "\"]" : "model_type \"" + type + "\"",
                " is not a model dl-shard and dl-cost plan (", kKnown, ")");
  for (const char* key : kMoeKeys)
    if (present(j, key))
      throw_usage(file, ": \"", key, "\" describes a mixture of experts, which is not planned (dense ", kKnown, " only)");
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
  if (m.hidden % m.heads != 0)
    throw_usage(file, ": the hidden size ", m.hidden, " is not a multiple of the ", m.heads, " attention heads");
  if (m.heads % m.kv() != 0)
    throw_usage(file, ": num_key_value_heads ", m.kv(), " does not divide num_attention_heads ", m.heads);
  m.params = transformer_param_count(m);
  m.note = str(file, ": ", family->arch, ", ", group_digits(m.params), " parameters",
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
