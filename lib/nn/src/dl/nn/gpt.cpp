#include "dl/nn/gpt.hpp"

#include <cmath>

#include "dl/dist/comm.hpp"

namespace dl {

int64_t gpt_param_count(const GptConfig& c) {
  int64_t C = c.n_embd, L = c.n_layer;
  int64_t per_layer = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  const int64_t embeddings = int64_t(c.vocab_size) * C * (c.tie_embeddings ? 1 : 2) + int64_t(c.block_size) * C;
  return embeddings + L * per_layer + 2 * C;
}

VocabRange vocab_range(int64_t vocab_size, int ranks, int rank) {
  const int64_t first = vocab_size * rank / ranks;
  return {first, vocab_size * (rank + 1) / ranks - first};
}

namespace {
TensorSlice segments(int dim, std::vector<std::pair<int64_t, int64_t>> segs) { return TensorSlice{dim, std::move(segs)}; }
}  // namespace

GptModel::GptModel(const GptConfig& config, Backend& backend, DType dtype, GptParallel parallel)
    : GptModel(config, backend, dtype, parallel, DeclareOnly{}) {
  if (par_.tp_size > 1 && !par_.tp) throw_usage("tensor parallel tp = ", par_.tp_size, " needs a tensor-parallel group");
  params_.allocate(backend, dtype);
}

GptModel::GptModel(const GptConfig& config, Backend& backend, DType dtype, GptParallel parallel, DeclareOnly)
    : cfg_(config), be_(backend), dtype_(dtype), par_(parallel) {
  const int T = par_.tp_size, P = par_.pp_size;
  DL_CHECK(cfg_.n_head > 0 && cfg_.n_embd % cfg_.n_head == 0, "n_embd ", cfg_.n_embd, " not divisible by n_head ",
           cfg_.n_head);
  if (T > 1 && cfg_.n_head % T != 0)
    throw_usage("tensor parallel tp = ", T, " needs model.n_head (", cfg_.n_head, ") divisible by it");
  if (cfg_.vocab_size < T)
    throw_usage("tensor parallel tp = ", T, " needs at least one vocabulary row per rank; model.vocab_size is ",
                cfg_.vocab_size);
  if (P > 1 && cfg_.n_layer % P != 0)
    throw_usage("pipeline parallel pp = ", P, " needs model.n_layer (", cfg_.n_layer, ") divisible by it");
  C_ = cfg_.n_embd;
  Cl_ = C_ / T;
  Fl_ = 4 * C_ / T;
  const VocabRange vocab = vocab_range(cfg_.vocab_size, T, par_.tp_rank);
  v0_ = vocab.first;
  Vl_ = vocab.count;
  Hl_ = cfg_.n_head / T;
  const int per_stage = cfg_.n_layer / P;
  l0_ = par_.pp_rank * per_stage;
  l1_ = l0_ + per_stage;
  declare_params();
}

ParamSet GptModel::declarations(const GptConfig& config, const GptParallel& parallel,
                                std::vector<std::pair<size_t, size_t>>* groups) {
  GptModel m(config, cpu_backend(), DType::f32, parallel, DeclareOnly{});
  if (groups) *groups = m.group_ranges_;
  return m.params_;
}

void GptModel::declare_params() {
  const int64_t C = C_, V = cfg_.vocab_size, Tm = cfg_.block_size, r = par_.tp_rank;
  const double std = cfg_.init_std;
  // GPT-2 scales the residual projections by 1/sqrt(2L) (two per block).
  const double proj_std = std / std::sqrt(2.0 * cfg_.n_layer);
  const bool tp = par_.tp_size > 1;
  auto& Ps = params_;
  auto whole = TensorSlice{};
  // Column slices of this rank's heads in q|k|v, and plain column/row ranges.
  auto qkv_cols = [&](int dim) {
    return tp ? segments(dim, {{r * Cl_, Cl_}, {C + r * Cl_, Cl_}, {2 * C + r * Cl_, Cl_}}) : whole;
  };
  auto range = [&](int dim, int64_t start, int64_t len) { return tp ? segments(dim, {{start, len}}) : whole; };
  auto group_begin = [&] { group_ranges_.emplace_back(Ps.size(), Ps.size()); };
  auto group_end = [&] { group_ranges_.back().second = Ps.size(); };

  if (first_stage()) {
    group_begin();
    wte_ = Ps.size();
    Ps.declare_slice("wte.weight", {V, C}, range(0, v0_, Vl_), ParamInit::normal, std, true);
    wpe_ = Ps.size();
    Ps.declare("wpe.weight", {Tm, C}, ParamInit::normal, std, true);
    group_end();
  }
  for (int l = l0_; l < l1_; ++l) {
    group_begin();
    std::string h = "h." + std::to_string(l) + ".";
    Layer L;
    L.ln1_w = Ps.size(); Ps.declare(h + "ln_1.weight", {C}, ParamInit::ones, 0, false);
    L.ln1_b = Ps.size(); Ps.declare(h + "ln_1.bias", {C}, ParamInit::zeros, 0, false);
    L.attn_w = Ps.size(); Ps.declare_slice(h + "attn.c_attn.weight", {C, 3 * C}, qkv_cols(1), ParamInit::normal, std, true);
    L.attn_b = Ps.size(); Ps.declare_slice(h + "attn.c_attn.bias", {3 * C}, qkv_cols(0), ParamInit::zeros, 0, false);
    L.proj_w = Ps.size(); Ps.declare_slice(h + "attn.c_proj.weight", {C, C}, range(0, r * Cl_, Cl_), ParamInit::normal, proj_std, true);
    L.proj_b = Ps.size(); Ps.declare(h + "attn.c_proj.bias", {C}, ParamInit::zeros, 0, false);
    L.ln2_w = Ps.size(); Ps.declare(h + "ln_2.weight", {C}, ParamInit::ones, 0, false);
    L.ln2_b = Ps.size(); Ps.declare(h + "ln_2.bias", {C}, ParamInit::zeros, 0, false);
    L.fc_w = Ps.size(); Ps.declare_slice(h + "mlp.c_fc.weight", {C, 4 * C}, range(1, r * Fl_, Fl_), ParamInit::normal, std, true);
    L.fc_b = Ps.size(); Ps.declare_slice(h + "mlp.c_fc.bias", {4 * C}, range(0, r * Fl_, Fl_), ParamInit::zeros, 0, false);
    L.fcproj_w = Ps.size(); Ps.declare_slice(h + "mlp.c_proj.weight", {4 * C, C}, range(0, r * Fl_, Fl_), ParamInit::normal, proj_std, true);
    L.fcproj_b = Ps.size(); Ps.declare(h + "mlp.c_proj.bias", {C}, ParamInit::zeros, 0, false);
    layers_.push_back(L);
    group_end();
  }
  if (last_stage()) {
    group_begin();
    lnf_w_ = Ps.size(); Ps.declare("ln_f.weight", {C}, ParamInit::ones, 0, false);
    lnf_b_ = Ps.size(); Ps.declare("ln_f.bias", {C}, ParamInit::zeros, 0, false);
    if (!cfg_.tie_embeddings) {
      head_ = Ps.size();
      Ps.declare_slice("lm_head.weight", {V, C}, range(0, v0_, Vl_), ParamInit::normal, std, true);
    } else if (!first_stage()) {
      // The LM head is tied to the token embedding, which lives on the first stage: the last
      // stage keeps a copy, initialised identically and kept equal by summing both stages'
      // gradients before the (identical) optimizer updates.
      wte_ = Ps.size();
      Ps.declare_slice("wte.weight", {V, C}, range(0, v0_, Vl_), ParamInit::normal, std, true, /*tied_copy=*/true);
    }
    if (cfg_.tie_embeddings) head_ = wte_;
    group_end();
  }
  if (par_.tp_size == 1 && par_.pp_size == 1) DL_CHECK(Ps.numel() == gpt_param_count(cfg_), "parameter count");
}

GptModel::Acts GptModel::make_acts(int64_t B, int64_t T) {
  const int64_t N = B * T;
  auto make = [&](Shape s) { return be_.empty(std::move(s), dtype_); };
  Acts a;
  a.ln1 = make({B, T, C_});
  a.ln1_mean = make({N});
  a.ln1_rstd = make({N});
  a.qkv = make({B, T, 3 * Cl_});
  a.atty = make({B, T, Cl_});
  a.att = make(be_.attention_state_shape(B, T, Cl_, static_cast<int>(Hl_)));
  a.residual2 = make({B, T, C_});
  a.ln2 = make({B, T, C_});
  a.ln2_mean = make({N});
  a.ln2_rstd = make({N});
  a.fch = make({B, T, Fl_});
  a.fch_gelu = make({B, T, Fl_});
  return a;
}

void GptModel::ensure_scratch(int64_t B, int64_t T) {
  if (B == scratch_B_ && T == scratch_T_) return;
  auto make = [&](Shape s) { return be_.empty(std::move(s), dtype_); };
  scratch_c_ = make({B, T, C_});
  dres_ = make({B, T, C_});
  dc_ = make({B, T, C_});
  d3c_ = make({B, T, 3 * Cl_});
  d4c_ = make({B, T, Fl_});
  if (par_.activation_checkpointing) recompute_ = make_acts(B, T);
  scratch_B_ = B;
  scratch_T_ = T;
}

GptModel::Slot& GptModel::slot_for(int slot, int64_t B, int64_t T) {
  if (slot >= static_cast<int>(slots_.size())) slots_.resize(static_cast<size_t>(slot) + 1);
  Slot& s = slots_[static_cast<size_t>(slot)];
  ensure_scratch(B, T);
  s.used = true;
  if (s.B == B && s.T == T) return s;
  const int64_t N = B * T, L = l1_ - l0_;
  auto make = [&](Shape sh) { return be_.empty(std::move(sh), dtype_); };
  s.residual.clear();
  s.acts.clear();
  for (int64_t i = 0; i <= L; ++i) s.residual.push_back(make({B, T, C_}));
  if (!par_.activation_checkpointing)
    for (int64_t i = 0; i < L; ++i) s.acts.push_back(make_acts(B, T));
  if (last_stage()) {
    s.lnf = make({B, T, C_});
    s.lnf_mean = make({N});
    s.lnf_rstd = make({N});
    s.logits = make({N, Vl_});
    // Row statistics stay in f32 under 16-bit compute: a bf16 loss keeps 3 significant digits.
    auto make_rows = [&](Shape sh) { return be_.empty(std::move(sh), dtype_ == DType::f64 ? DType::f64 : DType::f32); };
    s.losses = make_rows({N});
    s.correct = Tensor::empty({N}, DType::i32);  // host memory on every backend: read there (stats, scores)
    if (par_.tp_size > 1) {
      s.row_max = make_rows({N});
      s.sum_exp = make_rows({N});
      s.picked = make_rows({N});
    }
  }
  s.B = B;
  s.T = T;
  return s;
}

int64_t GptModel::activation_bytes() const {
  int64_t n = 0;
  auto add = [&](const Tensor& t) { n += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; };
  auto add_acts = [&](const Acts& a) {
    for (const Tensor* t : {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv, &a.atty, &a.att, &a.residual2, &a.ln2,
                            &a.ln2_mean, &a.ln2_rstd, &a.fch, &a.fch_gelu})
      add(*t);
  };
  for (const auto& s : slots_) {
    for (const auto& r : s.residual) add(r);
    for (const auto& a : s.acts) add_acts(a);
    for (const Tensor* t : {&s.lnf, &s.lnf_mean, &s.lnf_rstd, &s.logits, &s.losses, &s.correct, &s.row_max,
                            &s.sum_exp, &s.picked})
      add(*t);
  }
  add_acts(recompute_);
  for (const Tensor* t : {&scratch_c_, &dres_, &dc_, &d3c_, &d4c_}) add(*t);
  return n;
}

void GptModel::tp_allreduce(Tensor& t) {
  if (par_.tp_size > 1) par_.tp->allreduce(t);
}

// ---------------------------------------------------------------------------------------------
// Forward.

void GptModel::block_forward(int l, const Tensor& in, Acts& a, Tensor& out) {
  const Layer& L = layers_[static_cast<size_t>(l - l0_)];
  const bool tp = par_.tp_size > 1;
  const int H = static_cast<int>(Hl_);
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, in, P(L.ln1_w), P(L.ln1_b));
  be_.matmul_forward(a.qkv, a.ln1, P(L.attn_w), P(L.attn_b), WeightLayout::in_out);
  be_.attention_forward(a.atty, a.att, a.qkv, H);
  // Row-parallel projection: partial sums over this rank's heads, all-reduced, then one bias.
  be_.matmul_forward(scratch_c_, a.atty, P(L.proj_w), tp ? Tensor() : P(L.proj_b), WeightLayout::in_out);
  if (tp) {
    tp_allreduce(scratch_c_);
    be_.bias_add(scratch_c_, P(L.proj_b));
  }
  be_.add(a.residual2, in, scratch_c_);
  be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, P(L.ln2_w), P(L.ln2_b));
  be_.matmul_forward(a.fch, a.ln2, P(L.fc_w), P(L.fc_b), WeightLayout::in_out);
  be_.gelu_forward(a.fch_gelu, a.fch);
  be_.matmul_forward(scratch_c_, a.fch_gelu, P(L.fcproj_w), tp ? Tensor() : P(L.fcproj_b), WeightLayout::in_out);
  if (tp) {
    tp_allreduce(scratch_c_);
    be_.bias_add(scratch_c_, P(L.fcproj_b));
  }
  be_.add(out, a.residual2, scratch_c_);
}

ForwardStats GptModel::head_forward(Slot& s) {
  const int64_t N = s.B * s.T;
  be_.layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, s.residual.back(), P(lnf_w_), P(lnf_b_));
  be_.matmul_forward(s.logits, s.lnf, P(head_), Tensor(), WeightLayout::out_in);
  ForwardStats st;
  if (!s.targets.defined()) return st;
  if (s.targets.numel() != N)
    throw_runtime("gpt forward: targets ", s.targets.describe(), " do not match ", N, " positions");
  if (par_.tp_size == 1) {
    be_.crossentropy_forward(s.losses, s.correct, s.logits, s.targets);
  } else {
    // Vocabulary-parallel loss (Megatron): global row max, then global sum of exponentials and
    // the target's logit from whichever rank holds it.
    const int64_t v0 = v0_;
    be_.logits_row_max(s.row_max, s.logits);
    par_.tp->allreduce(s.row_max, dist::ReduceOp::max);
    be_.logits_sum_exp(s.sum_exp, s.logits, s.row_max);
    be_.logits_pick(s.picked, s.logits, s.targets, v0);
    par_.tp->allreduce(s.sum_exp);
    par_.tp->allreduce(s.picked);
    // Host arithmetic on [N] rows: the CPU backend's tensors are host memory.
    const int32_t* t = s.targets.data<int32_t>();
    int32_t* c = s.correct.data<int32_t>();
    auto rows = [&](auto* loss, const auto* mx, const auto* se, const auto* pk) {
      for (int64_t i = 0; i < N; ++i) {
        bool valid = t[i] >= 0;
        loss[i] = valid ? std::log(se[i]) + mx[i] - pk[i] : 0;
        c[i] = valid && pk[i] >= mx[i];  // the target's logit is the row maximum
      }
    };
    if (s.losses.dtype() == DType::f32)
      rows(s.losses.data<float>(), s.row_max.data<float>(), s.sum_exp.data<float>(), s.picked.data<float>());
    else
      rows(s.losses.data<double>(), s.row_max.data<double>(), s.sum_exp.data<double>(), s.picked.data<double>());
  }
  st.loss_sum = be_.sum(s.losses);
  const int32_t* t = s.targets.data<int32_t>();
  const int32_t* c = s.correct.data<int32_t>();
  for (int64_t i = 0; i < N; ++i) {
    st.targets += t[i] >= 0;
    st.correct += c[i];
  }
  return st;
}

ForwardStats GptModel::forward_stage(const Batch& batch, const Tensor& hidden_in, int slot, Tensor* hidden_out) {
  int64_t B, T;
  if (first_stage()) {
    const Tensor& tokens = batch.inputs;
    if (tokens.dtype() != DType::i32 || tokens.ndim() != 2)
      throw_runtime("gpt forward: inputs must be i32[B,T], got ", tokens.describe());
    B = tokens.size(0);
    T = tokens.size(1);
  } else {
    B = hidden_in.size(0);
    T = hidden_in.size(1);
  }
  if (T > cfg_.block_size) throw_usage("sequence length ", T, " exceeds model.block_size ", cfg_.block_size);
  Slot& s = slot_for(slot, B, T);
  s.tokens = batch.inputs;
  s.targets = batch.targets;
  if (first_stage()) {
    hook(&ParamGroupHooks::before_forward, 0);
    Tensor wpe = par_.tp_rank == 0 ? P(wpe_).rows(0, T) : Tensor();
    be_.encoder_forward(s.residual[0], s.tokens, P(wte_), wpe, v0_, cfg_.vocab_size);
    tp_allreduce(s.residual[0]);
    if (!head_uses_embedding_group()) hook(&ParamGroupHooks::after_forward, 0);
  } else {
    be_.copy(s.residual[0], hidden_in);
  }
  for (int l = l0_; l < l1_; ++l) {
    int i = l - l0_;
    hook(&ParamGroupHooks::before_forward, block_group(l));
    Acts& a = par_.activation_checkpointing ? recompute_ : s.acts[static_cast<size_t>(i)];
    block_forward(l, s.residual[static_cast<size_t>(i)], a, s.residual[static_cast<size_t>(i) + 1]);
    hook(&ParamGroupHooks::after_forward, block_group(l));
  }
  if (!last_stage()) {
    if (hidden_out) *hidden_out = s.residual.back();
    return {};
  }
  hook(&ParamGroupHooks::before_forward, head_group());
  ForwardStats st = head_forward(s);
  hook(&ParamGroupHooks::after_forward, head_group());
  if (head_uses_embedding_group()) hook(&ParamGroupHooks::after_forward, 0);
  return st;
}

// ---------------------------------------------------------------------------------------------
// Backward.

void GptModel::block_backward(int l, const Tensor& in, Acts& a) {
  const Layer& L = layers_[static_cast<size_t>(l - l0_)];
  const int H = static_cast<int>(Hl_);
  // out = residual2 + mlp(ln2(residual2)); dres_ holds d(out).
  be_.matmul_backward(d4c_, G(L.fcproj_w), G(L.fcproj_b), dres_, a.fch_gelu, P(L.fcproj_w), WeightLayout::in_out,
                      false);
  be_.gelu_backward(d4c_, d4c_, a.fch, false);
  be_.matmul_backward(dc_, G(L.fc_w), G(L.fc_b), d4c_, a.ln2, P(L.fc_w), WeightLayout::in_out, false);
  tp_allreduce(dc_);  // column-parallel input gradient: partial over this rank's columns
  be_.layernorm_backward(dres_, G(L.ln2_w), G(L.ln2_b), dc_, a.residual2, P(L.ln2_w), a.ln2_mean, a.ln2_rstd, true);
  // residual2 = in + attn(ln1(in)); dres_ now holds d(residual2).
  Tensor datty = dc_.flat_slice(0, a.atty.shape());
  be_.matmul_backward(datty, G(L.proj_w), G(L.proj_b), dres_, a.atty, P(L.proj_w), WeightLayout::in_out, false);
  be_.attention_backward(d3c_, datty, a.qkv, a.atty, a.att, H);
  be_.matmul_backward(dc_, G(L.attn_w), G(L.attn_b), d3c_, a.ln1, P(L.attn_w), WeightLayout::in_out, false);
  tp_allreduce(dc_);
  be_.layernorm_backward(dres_, G(L.ln1_w), G(L.ln1_b), dc_, in, P(L.ln1_w), a.ln1_mean, a.ln1_rstd, true);
}

void GptModel::head_backward(Slot& s, double dloss) {
  if (par_.tp_size == 1) {
    // The logits are not needed after the loss: their gradient overwrites them in place.
    be_.crossentropy_backward(s.logits, s.logits, s.targets, dloss);
  } else {
    be_.crossentropy_backward_sharded(s.logits, s.logits, s.targets, s.row_max, s.sum_exp, v0_, dloss);
  }
  Tensor none;
  be_.matmul_backward(dc_, G(head_), none, s.logits, s.lnf, P(head_), WeightLayout::out_in, false);
  tp_allreduce(dc_);  // each rank saw only its vocabulary slice
  be_.layernorm_backward(dres_, G(lnf_w_), G(lnf_b_), dc_, s.residual.back(), P(lnf_w_), s.lnf_mean, s.lnf_rstd, false);
}

void GptModel::backward_stage(int slot, double dloss, const Tensor& dhidden_out, Tensor* dhidden_in) {
  DL_CHECK(slot < static_cast<int>(slots_.size()) && slots_[static_cast<size_t>(slot)].used, "backward of slot ",
           slot, " without its forward");
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (last_stage()) {
    DL_CHECK(s.targets.defined(), "backward without targets");
    hook(&ParamGroupHooks::before_backward, head_group());
    if (head_uses_embedding_group()) hook(&ParamGroupHooks::before_backward, 0);  // the tied embedding
    head_backward(s, dloss);
    hook(&ParamGroupHooks::after_backward, head_group());
  } else {
    be_.copy(dres_, dhidden_out);
  }
  for (int l = l1_ - 1; l >= l0_; --l) {
    int i = l - l0_;
    hook(&ParamGroupHooks::before_backward, block_group(l));
    const Tensor& in = s.residual[static_cast<size_t>(i)];
    if (par_.activation_checkpointing) {
      // Recompute this block's activations from its saved input (the output is discarded).
      block_forward(l, in, recompute_, scratch_c_);
      block_backward(l, in, recompute_);
    } else {
      block_backward(l, in, s.acts[static_cast<size_t>(i)]);
    }
    hook(&ParamGroupHooks::after_backward, block_group(l));
  }
  if (first_stage()) {
    if (!head_uses_embedding_group()) hook(&ParamGroupHooks::before_backward, 0);
    Tensor wpe_grad = G(wpe_).rows(0, s.T);
    be_.encoder_backward(G(wte_), wpe_grad, dres_, s.tokens, v0_);
    hook(&ParamGroupHooks::after_backward, 0);
  } else if (dhidden_in) {
    *dhidden_in = dres_;
  }
  s.used = false;
}

// ---------------------------------------------------------------------------------------------
// The single-stage Model interface.

ForwardStats GptModel::forward(const Batch& batch) { return forward_stage(batch, Tensor(), 0, nullptr); }

void GptModel::backward(double dloss) { backward_stage(0, dloss, Tensor(), nullptr); }

Tensor GptModel::tied_embedding_grad() {
  if (par_.pp_size == 1 || !cfg_.tie_embeddings || !(first_stage() || last_stage())) return Tensor();
  return G(wte_).view({params_.info(wte_).numel()});
}

const Tensor& GptModel::correct() const {
  DL_CHECK(!slots_.empty(), "correct() before forward");
  return slots_[0].correct;
}

const Tensor& GptModel::logits() const {
  DL_CHECK(!slots_.empty(), "logits() before forward");
  return slots_[0].logits;
}

}  // namespace dl
