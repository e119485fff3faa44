// The bridge from a training config's [model] section to a GptConfig. Apart from gpt.hpp so
// that the model itself knows nothing of the config (issue 17): only the code that builds a
// model from a config (train/, plan/, shard/) includes this.
#pragma once
#include "dl/config/config.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/llama.hpp"

namespace dl {

// Both refuse a mixture of experts (refuse_experts): no model here has experts.
GptConfig gpt_config_from(const ModelConfig& m);
// model.type = "llama": n_kv_head 0 becomes n_head, ffn_hidden 0 becomes 4 x n_embd.
LlamaConfig llama_config_from(const ModelConfig& m);
// A usage error naming model.n_experts when it is set: a mixture of experts is for dl-shard plan
// and dl-cost estimate; dl-train builds no experts.
void refuse_experts(const ModelConfig& m);

}  // namespace dl
