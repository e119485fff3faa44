#include "dl/nn/gpt.hpp"

#include <cmath>

namespace dl {

int64_t gpt_param_count(const GptConfig& c) {
  int64_t C = c.n_embd, L = c.n_layer;
  int64_t per_layer = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  return int64_t(c.vocab_size) * C + int64_t(c.block_size) * C + L * per_layer + 2 * C;
}

GptConfig gpt_config_from(const ModelConfig& m) {
  GptConfig g;
  g.n_layer = static_cast<int>(m.n_layer);
  g.n_head = static_cast<int>(m.n_head);
  g.n_embd = static_cast<int>(m.n_embd);
  g.block_size = static_cast<int>(m.block_size);
  g.vocab_size = static_cast<int>(m.vocab_size);
  g.init_std = m.init_std;
  return g;
}

GptModel::GptModel(const GptConfig& config, Backend& backend, DType dtype)
    : cfg_(config), be_(backend), dtype_(dtype) {
  const int64_t C = cfg_.n_embd, V = cfg_.vocab_size, Tm = cfg_.block_size;
  DL_CHECK(cfg_.n_head > 0 && C % cfg_.n_head == 0, "n_embd ", C, " not divisible by n_head ", cfg_.n_head);
  const double std = cfg_.init_std;
  // GPT-2 scales the residual projections by 1/sqrt(2L) (two per block).
  const double proj_std = std / std::sqrt(2.0 * cfg_.n_layer);
  auto& P = params_;
  P.declare("wte.weight", {V, C}, ParamInit::normal, std, true);
  P.declare("wpe.weight", {Tm, C}, ParamInit::normal, std, true);
  wte_ = 0;
  wpe_ = 1;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    std::string h = "h." + std::to_string(l) + ".";
    Layer L;
    L.ln1_w = P.size(); P.declare(h + "ln_1.weight", {C}, ParamInit::ones, 0, false);
    L.ln1_b = P.size(); P.declare(h + "ln_1.bias", {C}, ParamInit::zeros, 0, false);
    L.attn_w = P.size(); P.declare(h + "attn.c_attn.weight", {C, 3 * C}, ParamInit::normal, std, true);
    L.attn_b = P.size(); P.declare(h + "attn.c_attn.bias", {3 * C}, ParamInit::zeros, 0, false);
    L.proj_w = P.size(); P.declare(h + "attn.c_proj.weight", {C, C}, ParamInit::normal, proj_std, true);
    L.proj_b = P.size(); P.declare(h + "attn.c_proj.bias", {C}, ParamInit::zeros, 0, false);
    L.ln2_w = P.size(); P.declare(h + "ln_2.weight", {C}, ParamInit::ones, 0, false);
    L.ln2_b = P.size(); P.declare(h + "ln_2.bias", {C}, ParamInit::zeros, 0, false);
    L.fc_w = P.size(); P.declare(h + "mlp.c_fc.weight", {C, 4 * C}, ParamInit::normal, std, true);
    L.fc_b = P.size(); P.declare(h + "mlp.c_fc.bias", {4 * C}, ParamInit::zeros, 0, false);
    L.fcproj_w = P.size(); P.declare(h + "mlp.c_proj.weight", {4 * C, C}, ParamInit::normal, proj_std, true);
    L.fcproj_b = P.size(); P.declare(h + "mlp.c_proj.bias", {C}, ParamInit::zeros, 0, false);
    layers_.push_back(L);
  }
  lnf_w_ = P.size(); P.declare("ln_f.weight", {C}, ParamInit::ones, 0, false);
  lnf_b_ = P.size(); P.declare("ln_f.bias", {C}, ParamInit::zeros, 0, false);
  DL_CHECK(P.numel() == gpt_param_count(cfg_), "parameter count");
  P.allocate(backend, dtype);
}

void GptModel::ensure_buffers(int64_t B, int64_t T) {
  if (B == B_ && T == T_) return;
  const int64_t C = cfg_.n_embd, V = cfg_.vocab_size, N = B * T;
  auto make = [&](Shape s) { return be_.empty(std::move(s), dtype_); };
  residual_.clear();
  acts_.clear();
  for (int l = 0; l <= cfg_.n_layer; ++l) residual_.push_back(make({B, T, C}));
  for (int l = 0; l < cfg_.n_layer; ++l) {
    Acts a;
    a.ln1 = make({B, T, C});
    a.ln1_mean = make({N});
    a.ln1_rstd = make({N});
    a.qkv = make({B, T, 3 * C});
    a.atty = make({B, T, C});
    a.att = make(be_.attention_state_shape(B, T, C, cfg_.n_head));
    a.residual2 = make({B, T, C});
    a.ln2 = make({B, T, C});
    a.ln2_mean = make({N});
    a.ln2_rstd = make({N});
    a.fch = make({B, T, 4 * C});
    a.fch_gelu = make({B, T, 4 * C});
    acts_.push_back(std::move(a));
  }
  lnf_ = make({B, T, C});
  lnf_mean_ = make({N});
  lnf_rstd_ = make({N});
  logits_ = make({N, V});
  losses_ = make({N});
  correct_ = be_.empty({N}, DType::i32);
  scratch_c_ = make({B, T, C});
  dres_ = make({B, T, C});
  dc_ = make({B, T, C});
  d3c_ = make({B, T, 3 * C});
  d4c_ = make({B, T, 4 * C});
  B_ = B;
  T_ = T;
}

int64_t GptModel::activation_bytes() const {
  int64_t n = 0;
  auto add = [&](const Tensor& t) { n += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; };
  for (const auto& r : residual_) add(r);
  for (const auto& a : acts_) {
    for (const Tensor* t : {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv, &a.atty, &a.att, &a.residual2, &a.ln2,
                            &a.ln2_mean, &a.ln2_rstd, &a.fch, &a.fch_gelu})
      add(*t);
  }
  for (const Tensor* t : {&lnf_, &lnf_mean_, &lnf_rstd_, &logits_, &losses_, &correct_, &scratch_c_, &dres_, &dc_,
                          &d3c_, &d4c_})
    add(*t);
  return n;
}

ForwardStats GptModel::forward(const Batch& batch) {
  const Tensor& tokens = batch.inputs;
  if (tokens.dtype() != DType::i32 || tokens.ndim() != 2)
    throw_runtime("gpt forward: inputs must be i32[B,T], got ", tokens.describe());
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (T > cfg_.block_size)
    throw_usage("sequence length ", T, " exceeds model.block_size ", cfg_.block_size);
  ensure_buffers(B, T);
  tokens_ = tokens;
  targets_ = batch.targets;
  const int H = cfg_.n_head;
  Tensor wpe = P(wpe_).rows(0, T);

  be_.encoder_forward(residual_[0], tokens, P(wte_), wpe);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const Layer& L = layers_[l];
    Acts& a = acts_[l];
    be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual_[l], P(L.ln1_w), P(L.ln1_b));
    be_.matmul_forward(a.qkv, a.ln1, P(L.attn_w), P(L.attn_b), WeightLayout::in_out);
    be_.attention_forward(a.atty, a.att, a.qkv, H);
    be_.matmul_forward(scratch_c_, a.atty, P(L.proj_w), P(L.proj_b), WeightLayout::in_out);
    be_.add(a.residual2, residual_[l], scratch_c_);
    be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, P(L.ln2_w), P(L.ln2_b));
    be_.matmul_forward(a.fch, a.ln2, P(L.fc_w), P(L.fc_b), WeightLayout::in_out);
    be_.gelu_forward(a.fch_gelu, a.fch);
    be_.matmul_forward(scratch_c_, a.fch_gelu, P(L.fcproj_w), P(L.fcproj_b), WeightLayout::in_out);
    be_.add(residual_[l + 1], a.residual2, scratch_c_);
  }
  be_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual_.back(), P(lnf_w_), P(lnf_b_));
  be_.matmul_forward(logits_, lnf_, P(wte_), Tensor(), WeightLayout::out_in);

  ForwardStats st;
  if (!targets_.defined()) return st;
  if (targets_.numel() != B * T)
    throw_runtime("gpt forward: targets ", targets_.describe(), " do not match inputs ", tokens.describe());
  be_.crossentropy_forward(losses_, correct_, logits_, targets_);
  st.loss_sum = be_.sum(losses_);
  const int32_t* t = targets_.data<int32_t>();
  const int32_t* c = correct_.data<int32_t>();
  for (int64_t i = 0; i < B * T; ++i) {
    st.targets += t[i] >= 0;
    st.correct += c[i];
  }
  return st;
}

void GptModel::backward(double dloss) {
  DL_CHECK(targets_.defined(), "backward without a forward with targets");
  const int H = cfg_.n_head;
  Tensor wpe_grad = G(wpe_).rows(0, T_);
  // The logits are not needed after the loss: their gradient overwrites them in place.
  be_.crossentropy_backward(logits_, logits_, targets_, dloss);
  Tensor none;
  be_.matmul_backward(dc_, G(wte_), none, logits_, lnf_, P(wte_), WeightLayout::out_in, false);
  be_.layernorm_backward(dres_, G(lnf_w_), G(lnf_b_), dc_, residual_.back(), P(lnf_w_), lnf_mean_, lnf_rstd_,
                         false);
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const Layer& L = layers_[l];
    Acts& a = acts_[l];
    // residual[l+1] = residual2 + mlp(ln2(residual2)); dres holds d residual[l+1].
    be_.matmul_backward(d4c_, G(L.fcproj_w), G(L.fcproj_b), dres_, a.fch_gelu, P(L.fcproj_w),
                        WeightLayout::in_out, false);
    be_.gelu_backward(d4c_, d4c_, a.fch, false);
    be_.matmul_backward(dc_, G(L.fc_w), G(L.fc_b), d4c_, a.ln2, P(L.fc_w), WeightLayout::in_out, false);
    be_.layernorm_backward(dres_, G(L.ln2_w), G(L.ln2_b), dc_, a.residual2, P(L.ln2_w), a.ln2_mean, a.ln2_rstd,
                           true);
    // residual2 = residual[l] + attn(ln1(residual[l])); dres now holds d residual2.
    be_.matmul_backward(dc_, G(L.proj_w), G(L.proj_b), dres_, a.atty, P(L.proj_w), WeightLayout::in_out, false);
    be_.attention_backward(d3c_, dc_, a.qkv, a.att, H);
    be_.matmul_backward(dc_, G(L.attn_w), G(L.attn_b), d3c_, a.ln1, P(L.attn_w), WeightLayout::in_out, false);
    be_.layernorm_backward(dres_, G(L.ln1_w), G(L.ln1_b), dc_, residual_[l], P(L.ln1_w), a.ln1_mean, a.ln1_rstd,
                           true);
  }
  be_.encoder_backward(G(wte_), wpe_grad, dres_, tokens_);
}

}  // namespace dl
