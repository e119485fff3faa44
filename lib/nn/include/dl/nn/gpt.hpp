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
#include "dl/nn/model.hpp"

namespace dl {

namespace dist {
class Comm;
}

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

// The vocabulary rows [first, first + count) tensor-parallel rank `rank` of `ranks` holds of the
// token embedding, the head and the logits: balanced contiguous ranges, so any vocabulary splits
// (50257 over 2 ranks: 25128 and 25129 rows).
struct VocabRange {
  int64_t first = 0, count = 0;
};
VocabRange vocab_range(int64_t vocab_size, int ranks, int rank);

struct GptParallel {
  int tp_size = 1, tp_rank = 0;
  dist::Comm* tp = nullptr;  // the tensor-parallel group (needed when tp_size > 1)
  int pp_size = 1, pp_rank = 0;
  bool activation_checkpointing = false;
};

class GptModel final : public Model {
 public:
  GptModel(const GptConfig& config, Backend& backend, DType dtype = DType::f32, GptParallel parallel = {});
  // The parameters one rank of a layout declares (names, local and whole shapes, tensor-parallel
  // slices, flat offsets) and its parameter groups, without allocating them or needing a
  // tensor-parallel group: what a checkpoint of that layout holds (dl-shard split uses it).
  static ParamSet declarations(const GptConfig& config, const GptParallel& parallel,
                               std::vector<std::pair<size_t, size_t>>* groups = nullptr);
  ModelType type() const override { return ModelType::gpt; }
  ParamSet& params() override { return params_; }
  const GptConfig& config() const { return cfg_; }
  const GptParallel& parallel() const { return par_; }
  int first_layer() const { return l0_; }
  int num_local_layers() const { return l1_ - l0_; }
  // Parameter groups of this stage in order of use: [embeddings] blocks... [head].
  int num_groups() const { return static_cast<int>(group_ranges_.size()); }
  std::vector<std::pair<size_t, size_t>> param_groups() const override { return group_ranges_; }
  void set_hooks(ParamGroupHooks* hooks) override { hooks_ = hooks; }

  // Single-stage use (the Model interface): slot 0.
  ForwardStats forward(const Batch& batch) override;
  void backward(double dloss) override;
  const Tensor& correct() const override;
  const Tensor& logits() const override;
  int64_t activation_bytes() const override;
  int64_t context_length() const override { return cfg_.block_size; }
  int64_t vocab_size() const override { return cfg_.vocab_size; }

  // One pipeline stage (the Model stage API): the first stage reads tokens, the others the
  // residual stream [B,T,C] of the previous stage; the last stage computes the loss.
  int num_stages() const override { return par_.pp_size; }
  bool first_stage() const override { return par_.pp_rank == 0; }
  bool last_stage() const override { return par_.pp_rank == par_.pp_size - 1; }
  // [B,T,C] for tokens [B,T].
  Shape hidden_shape(const Tensor& inputs) const override {
    return {inputs.size(0), inputs.size(1), static_cast<int64_t>(cfg_.n_embd)};
  }
  ForwardStats forward_stage(const Batch& batch, const Tensor& hidden_in, int slot, Tensor* hidden_out) override;
  void backward_stage(int slot, double dloss, const Tensor& dhidden_out, Tensor* dhidden_in) override;
  // The token embedding's gradient on the first and the last stage of a pipeline (the head's
  // copy); undefined with one stage (the lookup and the head share one tensor), in between, or
  // when the head is untied.
  Tensor tied_embedding_grad() override;

 private:
  struct Layer {  // parameter indices of one block
    size_t ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };
  struct Acts {  // forward state of one block
    Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };
  struct Slot {  // one micro-batch in flight
    bool used = false;
    int64_t B = 0, T = 0;
    Tensor tokens, targets;
    std::vector<Tensor> residual;  // L_local + 1 residual stream states [B,T,C]
    std::vector<Acts> acts;        // per block (empty with activation checkpointing)
    Tensor lnf, lnf_mean, lnf_rstd, logits, losses, correct;
    Tensor row_max, sum_exp, picked;  // vocabulary-parallel loss statistics
  };
  struct DeclareOnly {};
  GptModel(const GptConfig& config, Backend& backend, DType dtype, GptParallel parallel, DeclareOnly);
  void declare_params();
  Acts make_acts(int64_t B, int64_t T);
  Slot& slot_for(int slot, int64_t B, int64_t T);
  void ensure_scratch(int64_t B, int64_t T);
  void block_forward(int l, const Tensor& in, Acts& a, Tensor& out);
  void block_backward(int l, const Tensor& in, Acts& a);  // dres_ holds d(out) -> d(in)
  ForwardStats head_forward(Slot& s);
  void head_backward(Slot& s, double dloss);
  void tp_allreduce(Tensor& t);
  Tensor& P(size_t i) { return params_.value(i); }
  Tensor& G(size_t i) { return params_.grad(i); }
  void hook(void (ParamGroupHooks::*fn)(int), int group) {
    if (hooks_) (hooks_->*fn)(group);
  }
  int block_group(int l) const { return (first_stage() ? 1 : 0) + (l - l0_); }
  // A single-stage tied model uses the embedding group again in the head: it stays gathered.
  bool head_uses_embedding_group() const { return cfg_.tie_embeddings && first_stage() && last_stage(); }
  int head_group() const { return num_groups() - 1; }

  GptConfig cfg_;
  Backend& be_;
  DType dtype_;
  GptParallel par_;
  ParamSet params_;
  int l0_ = 0, l1_ = 0;          // blocks [l0, l1) live on this stage
  int64_t C_ = 0, Cl_ = 0, Fl_ = 0, Vl_ = 0, Hl_ = 0;  // widths: model, local attention, local MLP, local vocab, local heads
  int64_t v0_ = 0;                                      // this rank's first vocabulary row
  size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  size_t head_ = 0;  // the LM head's weight: wte_ (tied) or lm_head.weight
  std::vector<Layer> layers_;     // indexed by l - l0
  std::vector<std::pair<size_t, size_t>> group_ranges_;  // [first, last) parameter index per group
  ParamGroupHooks* hooks_ = nullptr;

  std::vector<Slot> slots_;
  int64_t scratch_B_ = 0, scratch_T_ = 0;
  Tensor scratch_c_, dres_, dc_, d3c_, d4c_;
  Acts recompute_;  // the one block recomputed at a time under activation checkpointing
};

}  // namespace dl
