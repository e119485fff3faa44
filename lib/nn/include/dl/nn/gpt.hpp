// GPT-2 (Radford et al. 2019) with explicit forward and backward, llm.c style: pre-LayerNorm
// blocks of causal self-attention and a GELU MLP, learned position embeddings, final
// LayerNorm, LM head tied to the token embedding or (tie_embeddings = false) a separate
// lm_head.weight [V, C]. Parameters use the Hugging Face GPT-2 names and Conv1D [in,out] layouts,
// so checkpoints load into transformers' GPT2LMHeadModel.
//
// The same class runs every parallel layout:
//  - tensor parallel (Megatron-LM, Shoeybi et al. 2019): c_attn and c_fc split by output
//    columns (whole heads), attn.c_proj and mlp.c_proj by input rows, the token embedding and the
//    loss split by vocabulary (contiguous row ranges, uneven when tp does not divide the
//    vocabulary: GPT-2's 50257); one all-reduce after each row-parallel layer in forward and after
//    each column-parallel layer's input gradient in backward;
//  - pipeline parallel: a model object holds one stage (contiguous blocks; the first stage the
//    embeddings, the last the final LayerNorm and the head: a tied copy of the token embedding or
//    the untied lm_head.weight),
//    and keeps activations per in-flight micro-batch ("slot");
//  - activation checkpointing: only each block's input is kept; backward recomputes the block;
//  - ZeRO-3: ParamGroupHooks let an engine gather a group's parameters just before use.
// Every local tensor is a slice of the whole-model tensor (ParamInfo::slice), so initial values,
// checkpoints and the loss are the same for every layout.
#pragma once
#include "dl/nn/decoder.hpp"

namespace dl {

struct GptConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int block_size = 128;  // maximum sequence length (n_positions)
  int vocab_size = 256;
  double init_std = 0.02;
  bool tie_embeddings = true;  // false: the LM head is a parameter of its own, lm_head.weight [V, C]
};

// Parameter count for a config, as GptModel declares it (shared with the planner).
int64_t gpt_param_count(const GptConfig& c);

// The forward state of one GPT-2 block.
struct GptActs {
  Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
};

class GptModel final : public DecoderModel<GptActs> {
 public:
  GptModel(const GptConfig& config, Backend& backend, DType dtype = DType::f32, GptParallel parallel = {});
  // The parameters one rank of a layout declares (names, local and whole shapes, tensor-parallel
  // slices, flat offsets) and its parameter groups, without allocating them or needing a
  // tensor-parallel group: what a checkpoint of that layout holds (dl-shard split uses it).
  static ParamSet declarations(const GptConfig& config, const GptParallel& parallel,
                               std::vector<std::pair<size_t, size_t>>* groups = nullptr);
  ModelType type() const override { return ModelType::gpt; }
  const GptConfig& config() const { return cfg_; }

 private:
  using Acts = GptActs;
  struct Layer {  // parameter indices of one block
    size_t ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };
  struct DeclareOnly {};
  GptModel(const GptConfig& config, Backend& backend, DType dtype, GptParallel parallel, DeclareOnly);
  void declare_params();
  Acts make_acts(int64_t B, int64_t T) override;
  std::vector<const Tensor*> act_tensors(const Acts& a) const override;
  void make_model_scratch(int64_t B, int64_t T) override;
  std::vector<const Tensor*> model_scratch() const override { return {&d3c_, &d4c_}; }
  void block_forward(int l, const Tensor& in, Acts& a, Tensor& out) override;
  void block_backward(int l, const Tensor& in, Acts& a) override;
  void embed_forward(Slot& s) override;
  void embed_backward(Slot& s) override;
  void final_norm_forward(Slot& s) override;
  void final_norm_backward(Slot& s, const Tensor& dnormed) override;

  GptConfig cfg_;
  int64_t C_ = 0, Cl_ = 0, Fl_ = 0, Hl_ = 0;  // widths: model, local attention, local MLP; local heads
  size_t wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<Layer> layers_;  // indexed by l - l0
  Tensor d3c_, d4c_;
};

}  // namespace dl
