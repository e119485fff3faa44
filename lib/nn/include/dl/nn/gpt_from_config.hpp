// The bridge from a training config's [model] section to a GptConfig. Apart from gpt.hpp so
// that the model itself knows nothing of the config (issue 17): only the code that builds a
// model from a config (train/, plan/, shard/) includes this.
#pragma once
#include "dl/config/config.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/llama.hpp"

namespace dl {

GptConfig gpt_config_from(const ModelConfig& m);
// model.type = "llama": n_kv_head 0 becomes n_head, ffn_hidden 0 becomes 4 x n_embd.
LlamaConfig llama_config_from(const ModelConfig& m);

}  // namespace dl
