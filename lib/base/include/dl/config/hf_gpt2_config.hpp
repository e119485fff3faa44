// GPT2Config, the config.json beside a Hugging Face GPT-2 model.safetensors, both ways: what
// dl-train writes into its checkpoints (so transformers loads them) and the model shape
// model.init_from reads from a folder (a Hugging Face download or a dl-train checkpoint).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "dl/config/config.hpp"

namespace dl {

// The GPT2Config JSON transformers reads (config.json beside model.safetensors).
std::string hf_gpt2_config_json(const ModelConfig& model);

// What a GPT-2 config.json fixes about the model.
struct HfGpt2Shape {
  int64_t n_layer = 0, n_head = 0, n_embd = 0;
  int64_t n_positions = 0;  // the position table's rows: model.block_size
  int64_t vocab_size = 0;
  bool tie_word_embeddings = true;  // false: the weights hold lm_head.weight as a tensor of its own
};

// Reads and checks `config_json`. A usage error names the file and the key for anything dl-train's
// GPT-2 does not compute the same way (another model_type, a LayerNorm epsilon other than 1e-5,
// an activation other than GELU's tanh approximation, n_inner other than 4 n_embd, ...).
HfGpt2Shape read_hf_gpt2_config(const std::filesystem::path& config_json);

// The config.json of a model.init_from folder: FOLDER/config.json. A usage error says what to give
// instead when the folder is a dl-train run directory or holds no config.json.
std::filesystem::path init_from_config_json(const std::filesystem::path& folder);

}  // namespace dl
