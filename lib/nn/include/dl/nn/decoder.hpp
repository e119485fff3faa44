// What the decoder-only transformers (GptModel, LlamaModel) share: the stage driver. A model
// object holds one pipeline stage (the first stage the token embedding, the last the final norm
// and the LM head: a tied copy of the embedding or its own weight), keeps activations per
// in-flight micro-batch ("slot"), recomputes a block from its saved input under activation
// checkpointing, calls ParamGroupHooks around each parameter group (ZeRO-3), and computes the
// (vocabulary-parallel) loss. The model supplies its blocks, embedding and final norm.
#pragma once
#include <algorithm>
#include <utility>
#include <vector>

#include "dl/dist/comm.hpp"
#include "dl/nn/lm_loss.hpp"
#include "dl/nn/model.hpp"

namespace dl {

// The vocabulary rows [first, first + count) tensor-parallel rank `rank` of `ranks` holds of the
// token embedding, the head and the logits: balanced contiguous ranges, so any vocabulary splits
// (50257 over 2 ranks: 25128 and 25129 rows).
struct VocabRange {
  int64_t first = 0, count = 0;
};
VocabRange vocab_range(int64_t vocab_size, int ranks, int rank);

// Where a decoder sits in a layout (the name predates the second decoder).
struct GptParallel {
  int tp_size = 1, tp_rank = 0;
  dist::Comm* tp = nullptr;  // the tensor-parallel group (needed when tp_size > 1)
  int pp_size = 1, pp_rank = 0;
  bool activation_checkpointing = false;
};

// The parts of one layout both decoders check and derive alike.
struct DecoderShape {
  int n_layer = 0;
  int64_t n_embd = 0, vocab_size = 0, block_size = 0;
  bool tie_embeddings = true;
  bool norm_mean = false;  // the final norm keeps a mean per row (LayerNorm; RMSNorm keeps none)
};

// `Acts` is the model's forward state of one block.
template <class Acts>
class DecoderModel : public Model {
 public:
  ParamSet& params() override { return params_; }
  std::vector<std::pair<size_t, size_t>> param_groups() const override { return group_ranges_; }
  void set_hooks(ParamGroupHooks* hooks) override { hooks_ = hooks; }
  int num_groups() const { return static_cast<int>(group_ranges_.size()); }

  // Single-stage use (the Model interface): slot 0.
  ForwardStats forward(const Batch& batch) override { return forward_stage(batch, Tensor(), 0, nullptr); }
  void backward(double dloss) override { backward_stage(0, dloss, Tensor(), nullptr); }
  const Tensor& correct() const override {
    DL_CHECK(!slots_.empty(), "correct() before forward");
    return slots_[0].loss.correct;
  }
  const Tensor& logits() const override {
    DL_CHECK(!slots_.empty(), "logits() before forward");
    return slots_[0].logits;
  }
  int64_t activation_bytes() const override;
  int64_t context_length() const override { return shape_.block_size; }
  int64_t vocab_size() const override { return shape_.vocab_size; }

  // One pipeline stage (the Model stage API): the first stage reads tokens, the others the
  // residual stream [B,T,C] of the previous stage; the last stage computes the loss.
  int num_stages() const override { return par_.pp_size; }
  bool first_stage() const override { return par_.pp_rank == 0; }
  bool last_stage() const override { return par_.pp_rank == par_.pp_size - 1; }
  Shape hidden_shape(const Tensor& inputs) const override { return {inputs.size(0), inputs.size(1), shape_.n_embd}; }
  ForwardStats forward_stage(const Batch& batch, const Tensor& hidden_in, int slot, Tensor* hidden_out) override;
  void backward_stage(int slot, double dloss, const Tensor& dhidden_out, Tensor* dhidden_in) override;
  // The token embedding's gradient on the first and the last stage of a pipeline (the head's
  // copy); undefined with one stage (the lookup and the head share one tensor), in between, or
  // when the head is untied.
  Tensor tied_embedding_grad() override {
    if (par_.pp_size == 1 || !shape_.tie_embeddings || !(first_stage() || last_stage())) return Tensor();
    return G(embed_).view({params_.info(embed_).numel()});
  }

 protected:
  struct Slot {  // one micro-batch in flight
    bool used = false;
    int64_t B = 0, T = 0;
    Tensor tokens, targets;
    std::vector<Tensor> residual;  // L_local + 1 residual stream states [B,T,C]
    std::vector<Acts> acts;        // per block (empty with activation checkpointing)
    Tensor normed, norm_mean, norm_rstd, logits;  // the final norm (norm_mean: LayerNorm's only)
    LossRows loss;
  };

  // Checks the layout against the shape (usage errors name the model's keys) and finds this
  // rank's blocks and vocabulary rows.
  DecoderModel(const DecoderShape& shape, Backend& backend, DType dtype, GptParallel parallel, const char* kind);

  // What the model supplies.
  virtual Acts make_acts(int64_t B, int64_t T) = 0;
  virtual std::vector<const Tensor*> act_tensors(const Acts& a) const = 0;
  // Scratch of the model's own (beyond dres_, dc_, scratch_c_) at a batch shape, and its tensors.
  virtual void make_model_scratch(int64_t B, int64_t T) = 0;
  virtual std::vector<const Tensor*> model_scratch() const = 0;
  // out = the block's output for `in`, its state kept in `a`.
  virtual void block_forward(int l, const Tensor& in, Acts& a, Tensor& out) = 0;
  // dres_ holds d(out) and becomes d(in); parameter gradients are added.
  virtual void block_backward(int l, const Tensor& in, Acts& a) = 0;
  // The first stage's residual stream from the tokens, and the embedding's gradient from dres_.
  virtual void embed_forward(Slot& s) = 0;
  virtual void embed_backward(Slot& s) = 0;
  // The final norm of the last residual state into s.normed (its statistics kept in the slot),
  // and its backward from d(normed) `dnormed` into dres_ (written, not added).
  virtual void final_norm_forward(Slot& s) = 0;
  virtual void final_norm_backward(Slot& s, const Tensor& dnormed) = 0;

  void tp_allreduce(Tensor& t);
  Tensor& P(size_t i) { return params_.value(i); }
  Tensor& G(size_t i) { return params_.grad(i); }
  Tensor empty(Shape s) { return be_.empty(std::move(s), dtype_); }
  void group_begin() { group_ranges_.emplace_back(params_.size(), params_.size()); }
  void group_end() { group_ranges_.back().second = params_.size(); }
  // The vocabulary rows this rank holds of a [V, C] matrix (the embedding, the head).
  TensorSlice vocab_rows() const {
    return par_.tp_size > 1 ? TensorSlice{0, {{v0_, Vl_}}} : TensorSlice{};
  }

  DecoderShape shape_;
  Backend& be_;
  DType dtype_;
  GptParallel par_;
  ParamSet params_;
  int l0_ = 0, l1_ = 0;   // blocks [l0, l1) live on this stage
  int64_t Vl_ = 0, v0_ = 0;  // this rank's vocabulary rows [v0, v0 + Vl)
  size_t embed_ = 0;      // the token embedding (on the last stage of a tied pipeline: its copy)
  size_t head_ = 0;       // the LM head's weight: embed_ (tied) or its own
  std::vector<std::pair<size_t, size_t>> group_ranges_;  // [first, last) parameter index per group
  ParamGroupHooks* hooks_ = nullptr;
  Tensor scratch_c_, dres_, dc_;  // [B,T,C]: a block's partial output, d(residual), d(norm input)

 private:
  Slot& slot_for(int slot, int64_t B, int64_t T);
  void ensure_scratch(int64_t B, int64_t T);
  void hook(void (ParamGroupHooks::*fn)(int), int group) {
    if (hooks_) (hooks_->*fn)(group);
  }
  int block_group(int l) const { return (first_stage() ? 1 : 0) + (l - l0_); }
  // A single-stage tied model uses the embedding group again in the head: it stays gathered.
  bool head_uses_embedding_group() const { return shape_.tie_embeddings && first_stage() && last_stage(); }
  int head_group() const { return num_groups() - 1; }

  const char* kind_;  // "gpt", "llama": for errors
  std::vector<Slot> slots_;
  int64_t scratch_B_ = 0, scratch_T_ = 0;
  Acts recompute_{};  // the one block recomputed at a time under activation checkpointing
};

// ---------------------------------------------------------------------------------------------
// Definitions (a template: both decoders instantiate it).

template <class Acts>
DecoderModel<Acts>::DecoderModel(const DecoderShape& shape, Backend& backend, DType dtype, GptParallel parallel,
                                 const char* kind)
    : shape_(shape), be_(backend), dtype_(dtype), par_(parallel), kind_(kind) {
  const int T = par_.tp_size, P = par_.pp_size;
  if (shape_.vocab_size < T)
    throw_usage("tensor parallel tp = ", T, " needs at least one vocabulary row per rank; model.vocab_size is ",
                shape_.vocab_size);
  if (P > 1 && shape_.n_layer % P != 0)
    throw_usage("pipeline parallel pp = ", P, " needs model.n_layer (", shape_.n_layer, ") divisible by it");
  const VocabRange vocab = vocab_range(shape_.vocab_size, T, par_.tp_rank);
  v0_ = vocab.first;
  Vl_ = vocab.count;
  const int per_stage = shape_.n_layer / P;
  l0_ = par_.pp_rank * per_stage;
  l1_ = l0_ + per_stage;
}

template <class Acts>
void DecoderModel<Acts>::tp_allreduce(Tensor& t) {
  if (par_.tp_size > 1) par_.tp->allreduce(t);
}

template <class Acts>
void DecoderModel<Acts>::ensure_scratch(int64_t B, int64_t T) {
  if (B == scratch_B_ && T == scratch_T_) return;
  const int64_t C = shape_.n_embd;
  scratch_c_ = empty({B, T, C});
  dres_ = empty({B, T, C});
  dc_ = empty({B, T, C});
  make_model_scratch(B, T);
  if (par_.activation_checkpointing) recompute_ = make_acts(B, T);
  scratch_B_ = B;
  scratch_T_ = T;
}

template <class Acts>
typename DecoderModel<Acts>::Slot& DecoderModel<Acts>::slot_for(int slot, int64_t B, int64_t T) {
  if (slot >= static_cast<int>(slots_.size())) slots_.resize(static_cast<size_t>(slot) + 1);
  Slot& s = slots_[static_cast<size_t>(slot)];
  ensure_scratch(B, T);
  s.used = true;
  if (s.B == B && s.T == T) return s;
  const int64_t N = B * T, L = l1_ - l0_, C = shape_.n_embd;
  s.residual.clear();
  s.acts.clear();
  for (int64_t i = 0; i <= L; ++i) s.residual.push_back(empty({B, T, C}));
  if (!par_.activation_checkpointing)
    for (int64_t i = 0; i < L; ++i) s.acts.push_back(make_acts(B, T));
  if (last_stage()) {
    s.normed = empty({B, T, C});
    s.norm_rstd = empty({N});
    if (shape_.norm_mean) s.norm_mean = empty({N});
    s.logits = empty({N, Vl_});
    s.loss.allocate(be_, dtype_, N, par_.tp_size > 1);
  }
  s.B = B;
  s.T = T;
  return s;
}

template <class Acts>
int64_t DecoderModel<Acts>::activation_bytes() const {
  int64_t n = 0;
  auto add = [&](const Tensor* t) { n += t->defined() ? static_cast<int64_t>(t->nbytes()) : 0; };
  for (const auto& s : slots_) {
    for (const auto& r : s.residual) add(&r);
    for (const auto& a : s.acts)
      for (const Tensor* t : act_tensors(a)) add(t);
    for (const Tensor* t : {&s.normed, &s.norm_mean, &s.norm_rstd, &s.logits}) add(t);
    n += s.loss.bytes();
  }
  for (const Tensor* t : act_tensors(recompute_)) add(t);
  for (const Tensor* t : {&scratch_c_, &dres_, &dc_}) add(t);
  for (const Tensor* t : model_scratch()) add(t);
  return n;
}

template <class Acts>
ForwardStats DecoderModel<Acts>::forward_stage(const Batch& batch, const Tensor& hidden_in, int slot,
                                               Tensor* hidden_out) {
  int64_t B, T;
  if (first_stage()) {
    const Tensor& tokens = batch.inputs;
    if (tokens.dtype() != DType::i32 || tokens.ndim() != 2)
      throw_runtime(kind_, " forward: inputs must be i32[B,T], got ", tokens.describe());
    B = tokens.size(0);
    T = tokens.size(1);
  } else {
    B = hidden_in.size(0);
    T = hidden_in.size(1);
  }
  if (T > shape_.block_size) throw_usage("sequence length ", T, " exceeds model.block_size ", shape_.block_size);
  Slot& s = slot_for(slot, B, T);
  s.tokens = batch.inputs;
  s.targets = batch.targets;
  if (first_stage()) {
    hook(&ParamGroupHooks::before_forward, 0);
    embed_forward(s);
    if (!head_uses_embedding_group()) hook(&ParamGroupHooks::after_forward, 0);
  } else {
    be_.copy(s.residual[0], hidden_in);
  }
  for (int l = l0_; l < l1_; ++l) {
    const size_t i = static_cast<size_t>(l - l0_);
    hook(&ParamGroupHooks::before_forward, block_group(l));
    Acts& a = par_.activation_checkpointing ? recompute_ : s.acts[i];
    block_forward(l, s.residual[i], a, s.residual[i + 1]);
    hook(&ParamGroupHooks::after_forward, block_group(l));
  }
  if (!last_stage()) {
    if (hidden_out) *hidden_out = s.residual.back();
    return {};
  }
  hook(&ParamGroupHooks::before_forward, head_group());
  final_norm_forward(s);
  be_.matmul_forward(s.logits, s.normed, P(head_), Tensor(), WeightLayout::out_in);
  ForwardStats st =
      lm_loss_forward(be_, s.loss, s.logits, s.targets, par_.tp_size > 1 ? par_.tp : nullptr, v0_, kind_);
  hook(&ParamGroupHooks::after_forward, head_group());
  if (head_uses_embedding_group()) hook(&ParamGroupHooks::after_forward, 0);
  return st;
}

template <class Acts>
void DecoderModel<Acts>::backward_stage(int slot, double dloss, const Tensor& dhidden_out, Tensor* dhidden_in) {
  DL_CHECK(slot < static_cast<int>(slots_.size()) && slots_[static_cast<size_t>(slot)].used, "backward of slot ",
           slot, " without its forward");
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (last_stage()) {
    DL_CHECK(s.targets.defined(), "backward without targets");
    hook(&ParamGroupHooks::before_backward, head_group());
    if (head_uses_embedding_group()) hook(&ParamGroupHooks::before_backward, 0);  // the tied embedding
    // The logits are not needed after the loss: their gradient overwrites them in place.
    lm_loss_backward(be_, s.loss, s.logits, s.targets, par_.tp_size > 1, v0_, dloss);
    Tensor none;
    be_.matmul_backward(dc_, G(head_), none, s.logits, s.normed, P(head_), WeightLayout::out_in, false);
    tp_allreduce(dc_);  // each rank saw only its vocabulary slice
    final_norm_backward(s, dc_);
    hook(&ParamGroupHooks::after_backward, head_group());
  } else {
    be_.copy(dres_, dhidden_out);
  }
  for (int l = l1_ - 1; l >= l0_; --l) {
    const size_t i = static_cast<size_t>(l - l0_);
    hook(&ParamGroupHooks::before_backward, block_group(l));
    const Tensor& in = s.residual[i];
    if (par_.activation_checkpointing) {
      // Recompute this block's activations from its saved input (the output is discarded).
      block_forward(l, in, recompute_, scratch_c_);
      block_backward(l, in, recompute_);
    } else {
      block_backward(l, in, s.acts[i]);
    }
    hook(&ParamGroupHooks::after_backward, block_group(l));
  }
  if (first_stage()) {
    if (!head_uses_embedding_group()) hook(&ParamGroupHooks::before_backward, 0);
    embed_backward(s);
    hook(&ParamGroupHooks::after_backward, 0);
  } else if (dhidden_in) {
    *dhidden_in = dres_;
  }
  s.used = false;
}

}  // namespace dl
