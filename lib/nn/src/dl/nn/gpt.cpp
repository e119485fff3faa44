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

namespace {
DecoderShape decoder_shape(const GptConfig& c) {
  return {c.n_layer, c.n_embd, c.vocab_size, c.block_size, c.tie_embeddings, /*norm_mean=*/true};
}
}  // namespace

GptModel::GptModel(const GptConfig& config, Backend& backend, DType dtype, GptParallel parallel, DeclareOnly)
    : DecoderModel(decoder_shape(config), backend, dtype, parallel, "gpt"), cfg_(config) {
  const int T = par_.tp_size;
  DL_CHECK(cfg_.n_head > 0 && cfg_.n_embd % cfg_.n_head == 0, "n_embd ", cfg_.n_embd, " not divisible by n_head ",
           cfg_.n_head);
  if (T > 1 && cfg_.n_head % T != 0)
    throw_usage("tensor parallel tp = ", T, " needs model.n_head (", cfg_.n_head, ") divisible by it");
  C_ = cfg_.n_embd;
  Cl_ = C_ / T;
  Fl_ = 4 * C_ / T;
  Hl_ = cfg_.n_head / T;
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

  if (first_stage()) {
    group_begin();
    embed_ = Ps.size();
    Ps.declare_slice("wte.weight", {V, C}, vocab_rows(), ParamInit::normal, std, true);
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
      Ps.declare_slice("lm_head.weight", {V, C}, vocab_rows(), ParamInit::normal, std, true);
    } else if (!first_stage()) {
      // The LM head is tied to the token embedding, which lives on the first stage: the last
      // stage keeps a copy, initialised identically and kept equal by summing both stages'
      // gradients before the (identical) optimizer updates.
      embed_ = Ps.size();
      Ps.declare_slice("wte.weight", {V, C}, vocab_rows(), ParamInit::normal, std, true, /*tied_copy=*/true);
    }
    if (cfg_.tie_embeddings) head_ = embed_;
    group_end();
  }
  if (par_.tp_size == 1 && par_.pp_size == 1) DL_CHECK(Ps.numel() == gpt_param_count(cfg_), "parameter count");
}

GptModel::Acts GptModel::make_acts(int64_t B, int64_t T) {
  const int64_t N = B * T;
  auto make = [&](Shape s) { return empty(std::move(s)); };
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

std::vector<const Tensor*> GptModel::act_tensors(const Acts& a) const {
  return {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv, &a.atty, &a.att, &a.residual2, &a.ln2, &a.ln2_mean, &a.ln2_rstd,
          &a.fch, &a.fch_gelu};
}

void GptModel::make_model_scratch(int64_t B, int64_t T) {
  d3c_ = empty({B, T, 3 * Cl_});
  d4c_ = empty({B, T, Fl_});
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

void GptModel::embed_forward(Slot& s) {
  Tensor wpe = par_.tp_rank == 0 ? P(wpe_).rows(0, s.T) : Tensor();
  be_.encoder_forward(s.residual[0], s.tokens, P(embed_), wpe, v0_, cfg_.vocab_size);
  tp_allreduce(s.residual[0]);
}

void GptModel::final_norm_forward(Slot& s) {
  be_.layernorm_forward(s.normed, s.norm_mean, s.norm_rstd, s.residual.back(), P(lnf_w_), P(lnf_b_));
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

void GptModel::final_norm_backward(Slot& s, const Tensor& dnormed) {
  be_.layernorm_backward(dres_, G(lnf_w_), G(lnf_b_), dnormed, s.residual.back(), P(lnf_w_), s.norm_mean, s.norm_rstd,
                         false);
}

void GptModel::embed_backward(Slot& s) {
  Tensor wpe_grad = G(wpe_).rows(0, s.T);
  be_.encoder_backward(G(embed_), wpe_grad, dres_, s.tokens, v0_);
}

}  // namespace dl
