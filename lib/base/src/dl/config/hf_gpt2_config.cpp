#include "dl/config/hf_gpt2_config.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/io/jsonl.hpp"

namespace dl {

namespace fs = std::filesystem;
using nlohmann::json;

std::string hf_gpt2_config_json(const ModelConfig& m) {
  json j{{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", m.vocab_size},
         {"n_positions", m.block_size},
         {"n_ctx", m.block_size},
         {"n_embd", m.n_embd},
         {"n_layer", m.n_layer},
         {"n_head", m.n_head},
         {"n_inner", nullptr},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", 1e-5},
         {"initializer_range", m.init_std},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0},
         {"scale_attn_weights", true},
         {"tie_word_embeddings", m.tie_embeddings},
         {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

namespace {

int64_t positive_int(const json& j, const char* key, const fs::path& file) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1)
    throw_usage(file.string(), ": \"", key, "\" must be a positive integer",
                j.contains(key) ? ", got " + j[key].dump() : std::string(" and is missing"),
                " (a GPT-2 config.json has n_layer, n_head, n_embd, n_positions and vocab_size)");
  return j[key].get<int64_t>();
}

// A key that, when present, must have the value dl-train's GPT-2 computes with.
bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

}  // namespace

HfGpt2Shape read_hf_gpt2_config(const fs::path& file) {
  const json j = read_json_file(file);
  if (!j.is_object()) throw_usage(file.string(), ": not a JSON object (a GPT-2 config.json is one)");
  if (present(j, "model_type") && j["model_type"] != "gpt2")
    throw_usage(file.string(), ": model_type is ", j["model_type"].dump(),
                "; model.init_from reads GPT-2 models (model_type \"gpt2\")");
  HfGpt2Shape s;
  s.n_layer = positive_int(j, "n_layer", file);
  s.n_head = positive_int(j, "n_head", file);
  s.n_embd = positive_int(j, "n_embd", file);
  s.n_positions = positive_int(j, present(j, "n_positions") ? "n_positions" : "n_ctx", file);
  s.vocab_size = positive_int(j, "vocab_size", file);
  if (s.n_embd % s.n_head != 0)
    throw_usage(file.string(), ": n_embd (", s.n_embd, ") is not divisible by n_head (", s.n_head, ")");
  // A value of the wrong JSON type is named like any other, not a JSON library's type_error (exit 1).
  auto require_type = [&](const char* key, bool ok, const char* what) {
    if (!ok) throw_usage(file.string(), ": \"", key, "\" must be ", what, ", got ", j[key].dump());
  };
  if (present(j, "layer_norm_epsilon")) {
    require_type("layer_norm_epsilon", j["layer_norm_epsilon"].is_number(), "a number");
    const double eps = j["layer_norm_epsilon"].get<double>();
    if (std::fabs(eps - 1e-5) > 1e-12)
      throw_usage(file.string(), ": layer_norm_epsilon is ", eps, "; dl-train's GPT-2 computes LayerNorm with 1e-5");
  }
  if (present(j, "activation_function")) {
    require_type("activation_function", j["activation_function"].is_string(), "a string");
    const std::string a = j["activation_function"].get<std::string>();
    // All three are GELU's tanh approximation; "gelu" (erf) and the rest compute something else.
    if (a != "gelu_new" && a != "gelu_pytorch_tanh" && a != "gelu_fast")
      throw_usage(file.string(), ": activation_function is \"", a,
                  "\"; dl-train's GPT-2 computes GELU's tanh approximation (gelu_new, gelu_pytorch_tanh)");
  }
  // 4 n_embd compared without computing it: n_embd may be any positive int64.
  if (present(j, "n_inner") &&
      !(j["n_inner"].is_number_integer() && j["n_inner"].get<int64_t>() % 4 == 0 && j["n_inner"].get<int64_t>() / 4 == s.n_embd))
    throw_usage(file.string(), ": n_inner is ", j["n_inner"].dump(), "; dl-train's GPT-2 MLP is 4 n_embd = 4 x ", s.n_embd,
                " wide");
  if (present(j, "scale_attn_weights") && j["scale_attn_weights"] != true)
    throw_usage(file.string(), ": scale_attn_weights is false; dl-train's attention scales by 1/sqrt(head size)");
  if (present(j, "scale_attn_by_inverse_layer_idx") && j["scale_attn_by_inverse_layer_idx"] == true)
    throw_usage(file.string(), ": scale_attn_by_inverse_layer_idx is true; dl-train's attention does not scale by layer");
  if (present(j, "add_cross_attention") && j["add_cross_attention"] == true)
    throw_usage(file.string(), ": add_cross_attention is true; dl-train's GPT-2 is a decoder without cross-attention");
  if (present(j, "tie_word_embeddings")) {
    require_type("tie_word_embeddings", j["tie_word_embeddings"].is_boolean(), "true or false");
    s.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  return s;
}

fs::path init_from_config_json(const fs::path& folder) {
  const fs::path cfg = folder / "config.json";
  std::error_code ec;
  if (fs::is_regular_file(cfg, ec)) return cfg;
  if (fs::is_directory(folder / "checkpoints", ec))
    throw_usage(folder.string(), " is a dl-train run directory: give one of its checkpoints (",
                (folder / "checkpoints" / "step_NNNNNNNN").string(), ") as model.init_from");
  throw_usage(folder.string(), ": no config.json (model.init_from needs a Hugging Face GPT-2 folder: config.json with "
                               "model.safetensors or model.safetensors.index.json, or a dl-train checkpoint)");
}

}  // namespace dl
