// GPT-2 (Radford et al. 2019) with explicit forward and backward, llm.c style: pre-LayerNorm
// blocks of causal self-attention and a GELU MLP, learned position embeddings, final
// LayerNorm, LM head tied to the token embedding. Parameters use the Hugging Face GPT-2 names
// and Conv1D [in,out] layouts, so checkpoints load into transformers' GPT2LMHeadModel.
#pragma once
#include "dl/config/config.hpp"
#include "dl/nn/model.hpp"

namespace dl {

struct GptConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int block_size = 128;  // maximum sequence length (n_positions)
  int vocab_size = 256;
  double init_std = 0.02;
};

// Parameter count for a config, as GptModel declares it (shared with the planner).
int64_t gpt_param_count(const GptConfig& c);
// The model section of a training config as a GptConfig.
GptConfig gpt_config_from(const ModelConfig& m);

class GptModel final : public Model {
 public:
  GptModel(const GptConfig& config, Backend& backend, DType dtype = DType::f32);
  std::string kind() const override { return "gpt"; }
  ParamSet& params() override { return params_; }
  const GptConfig& config() const { return cfg_; }

  ForwardStats forward(const Batch& batch) override;
  void backward(double dloss) override;
  const Tensor& correct() const override { return correct_; }
  const Tensor& logits() const override { return logits_; }
  int64_t activation_bytes() const override;

 private:
  struct Layer {  // parameter indices of one block
    size_t ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };
  struct Acts {  // forward state of one block
    Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };
  void ensure_buffers(int64_t B, int64_t T);
  Tensor& P(size_t i) { return params_.value(i); }
  Tensor& G(size_t i) { return params_.grad(i); }

  GptConfig cfg_;
  Backend& be_;
  DType dtype_;
  ParamSet params_;
  size_t wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Layer> layers_;

  int64_t B_ = 0, T_ = 0;
  std::vector<Tensor> residual_;  // L+1 residual stream states [B,T,C]
  std::vector<Acts> acts_;
  Tensor lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, correct_, scratch_c_;
  Tensor dres_, dc_, d3c_, d4c_;
  Tensor tokens_, targets_;
};

}  // namespace dl
