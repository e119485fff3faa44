#include "dl/nn/gpt_from_config.hpp"

namespace dl {

GptConfig gpt_config_from(const ModelConfig& m) {
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

}  // namespace dl
