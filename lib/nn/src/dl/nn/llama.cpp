#include "dl/nn/llama.hpp"

#include <cmath>
#include <numbers>

#include "dl/dist/comm.hpp"

namespace dl {

int64_t llama_param_count(const LlamaConfig& c) {
  const int64_t C = c.n_embd, L = c.n_layer, F = c.ffn_hidden, V = c.vocab_size;
  const int64_t Ckv = int64_t(c.n_kv_head) * c.head_size();
  const int64_t qkv_bias = c.qkv_bias ? C + 2 * Ckv : 0;
  const int64_t per_layer = 2 * C + C * C + 2 * Ckv * C + C * C + 3 * F * C + qkv_bias;
  return V * C * (c.tie_embeddings ? 1 : 2) + L * per_layer + C;
}

std::vector<float> llama_inv_freq(const LlamaConfig& c) {
  const int dim = c.head_size();
  std::vector<float> f(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
  const double factor = c.rope_factor;
  if (c.rope_scaling == RopeScaling::linear) {
    for (float& x : f) x = static_cast<float>(x / factor);
  } else if (c.rope_scaling == RopeScaling::llama3) {
    const double old_len = c.rope_original_max_position;
    const double low_wavelen = old_len / c.rope_low_freq_factor, high_wavelen = old_len / c.rope_high_freq_factor;
    for (float& x : f) {
      const double wavelen = 2 * std::numbers::pi / x;
      if (wavelen < high_wavelen) continue;  // high frequencies: kept
      if (wavelen > low_wavelen) {           // low frequencies: divided by the factor
        x = static_cast<float>(x / factor);
        continue;
      }
      const double smooth = (old_len / wavelen - c.rope_low_freq_factor) /
                            (c.rope_high_freq_factor - c.rope_low_freq_factor);
      x = static_cast<float>((1 - smooth) * x / factor + smooth * x);
    }
  }
  return f;
}

LlamaModel::LlamaModel(const LlamaConfig& config, Backend& backend, DType dtype, GptParallel parallel)
    : LlamaModel(config, backend, dtype, parallel, DeclareOnly{}) {
  if (par_.tp_size > 1 && !par_.tp) throw_usage("tensor parallel tp = ", par_.tp_size, " needs a tensor-parallel group");
  params_.allocate(backend, dtype);
  const std::vector<float> freq = llama_inv_freq(cfg_);
  Tensor host = Tensor::empty({static_cast<int64_t>(freq.size())}, DType::f32);
  std::copy(freq.begin(), freq.end(), host.data<float>());
  inv_freq_ = backend.empty(host.shape(), DType::f32);
  backend.copy(inv_freq_, host);
}

LlamaModel::LlamaModel(const LlamaConfig& config, Backend& backend, DType dtype, GptParallel parallel, DeclareOnly)
    : DecoderModel({config.n_layer, config.n_embd, config.vocab_size, config.block_size, config.tie_embeddings},
                   backend, dtype, parallel, "llama"),
      cfg_(config) {
  const int T = par_.tp_size;
  DL_CHECK(cfg_.n_head > 0 && cfg_.n_embd % cfg_.n_head == 0 && cfg_.head_size() % 2 == 0, "n_embd ", cfg_.n_embd,
           " is not n_head ", cfg_.n_head, " heads of an even size");
  DL_CHECK(cfg_.n_kv_head > 0 && cfg_.n_head % cfg_.n_kv_head == 0, "n_kv_head ", cfg_.n_kv_head,
           " does not divide n_head ", cfg_.n_head);
  if (T > 1 && cfg_.n_kv_head % T != 0)
    throw_usage("tensor parallel tp = ", T, " needs model.n_kv_head (", cfg_.n_kv_head,
                ") divisible by it (each rank holds whole groups of query heads with their K/V head)");
  if (T > 1 && cfg_.ffn_hidden % T != 0)
    throw_usage("tensor parallel tp = ", T, " needs model.ffn_hidden (", cfg_.ffn_hidden, ") divisible by it");
  const int64_t hs = cfg_.head_size();
  Hl_ = cfg_.n_head / T;
  Hkvl_ = cfg_.n_kv_head / T;
  Cq_ = Hl_ * hs;
  Ckv_ = Hkvl_ * hs;
  Fl_ = cfg_.ffn_hidden / T;
  declare_params();
}

ParamSet LlamaModel::declarations(const LlamaConfig& config, const GptParallel& parallel,
                                  std::vector<std::pair<size_t, size_t>>* groups) {
  LlamaModel m(config, cpu_backend(), DType::f32, parallel, DeclareOnly{});
  if (groups) *groups = m.group_ranges_;
  return m.params_;
}

void LlamaModel::declare_params() {
  const int64_t C = cfg_.n_embd, V = cfg_.vocab_size, F = cfg_.ffn_hidden, r = par_.tp_rank;
  const int64_t Cq = int64_t(cfg_.n_head) * cfg_.head_size(), Ckv = int64_t(cfg_.n_kv_head) * cfg_.head_size();
  const double std = cfg_.init_std;
  const bool tp = par_.tp_size > 1;
  auto& Ps = params_;
  // nn.Linear [out, in]: column-parallel layers hold rows [start, start + len) (dim 0),
  // row-parallel ones columns (dim 1).
  auto part = [&](int dim, int64_t start, int64_t len) {
    return tp ? TensorSlice{dim, {{start, len}}} : TensorSlice{};
  };
  auto matrix = [&](const std::string& name, Shape shape, TensorSlice slice) {
    size_t i = Ps.size();
    Ps.declare_slice(name, std::move(shape), std::move(slice), ParamInit::normal, std, true);
    return i;
  };
  auto bias_vector = [&](const std::string& name, int64_t n, TensorSlice slice) {
    size_t i = Ps.size();
    Ps.declare_slice(name, {n}, std::move(slice), ParamInit::zeros, 0, false);
    return i;
  };
  auto norm = [&](const std::string& name) {
    size_t i = Ps.size();
    Ps.declare(name, {C}, ParamInit::ones, 0, false);
    return i;
  };

  if (first_stage()) {
    group_begin();
    embed_ = matrix("model.embed_tokens.weight", {V, C}, vocab_rows());
    group_end();
  }
  for (int l = l0_; l < l1_; ++l) {
    group_begin();
    const std::string h = "model.layers." + std::to_string(l) + ".";
    Layer L;
    L.in_norm = norm(h + "input_layernorm.weight");
    L.q = matrix(h + "self_attn.q_proj.weight", {Cq, C}, part(0, r * Cq_, Cq_));
    L.k = matrix(h + "self_attn.k_proj.weight", {Ckv, C}, part(0, r * Ckv_, Ckv_));
    L.v = matrix(h + "self_attn.v_proj.weight", {Ckv, C}, part(0, r * Ckv_, Ckv_));
    if (cfg_.qkv_bias) {  // split with their rows, as the weights
      L.bq = bias_vector(h + "self_attn.q_proj.bias", Cq, part(0, r * Cq_, Cq_));
      L.bk = bias_vector(h + "self_attn.k_proj.bias", Ckv, part(0, r * Ckv_, Ckv_));
      L.bv = bias_vector(h + "self_attn.v_proj.bias", Ckv, part(0, r * Ckv_, Ckv_));
    }
    L.o = matrix(h + "self_attn.o_proj.weight", {C, Cq}, part(1, r * Cq_, Cq_));
    L.post_norm = norm(h + "post_attention_layernorm.weight");
    L.gate = matrix(h + "mlp.gate_proj.weight", {F, C}, part(0, r * Fl_, Fl_));
    L.up = matrix(h + "mlp.up_proj.weight", {F, C}, part(0, r * Fl_, Fl_));
    L.down = matrix(h + "mlp.down_proj.weight", {C, F}, part(1, r * Fl_, Fl_));
    layers_.push_back(L);
    group_end();
  }
  if (last_stage()) {
    group_begin();
    norm_ = norm("model.norm.weight");
    if (!cfg_.tie_embeddings) {
      head_ = matrix("lm_head.weight", {V, C}, vocab_rows());
    } else if (!first_stage()) {
      // The tied head's copy of the embedding on the last stage (as GptModel's).
      embed_ = Ps.size();
      Ps.declare_slice("model.embed_tokens.weight", {V, C}, vocab_rows(), ParamInit::normal, std, true,
                       /*tied_copy=*/true);
    }
    if (cfg_.tie_embeddings) head_ = embed_;
    group_end();
  }
  if (par_.tp_size == 1 && par_.pp_size == 1) DL_CHECK(Ps.numel() == llama_param_count(cfg_), "parameter count");
}

LlamaModel::Acts LlamaModel::make_acts(int64_t B, int64_t T) {
  const int64_t N = B * T, C = cfg_.n_embd;
  Acts a;
  a.xn1 = empty({B, T, C});
  a.rstd1 = empty({N});
  a.qkv = empty({B, T, 3 * Cq_});
  a.atty = empty({B, T, Cq_});
  a.att = empty(be_.attention_state_shape(B, T, Cq_, Hl_));
  a.residual2 = empty({B, T, C});
  a.xn2 = empty({B, T, C});
  a.rstd2 = empty({N});
  a.gate = empty({B, T, Fl_});
  a.up = empty({B, T, Fl_});
  a.hidden = empty({B, T, Fl_});
  return a;
}

std::vector<const Tensor*> LlamaModel::act_tensors(const Acts& a) const {
  return {&a.xn1, &a.rstd1, &a.qkv, &a.atty, &a.att, &a.residual2, &a.xn2, &a.rstd2, &a.gate, &a.up, &a.hidden};
}

void LlamaModel::make_model_scratch(int64_t B, int64_t T) {
  d3c_ = empty({B, T, 3 * Cq_});
  q_ = empty({B, T, Cq_});
  k_ = empty({B, T, Ckv_});
  v_ = empty({B, T, Ckv_});
  dgate_ = empty({B, T, Fl_});
  dup_ = empty({B, T, Fl_});
  dhidden_ = empty({B, T, Fl_});
}

std::vector<const Tensor*> LlamaModel::model_scratch() const { return {&d3c_, &q_, &k_, &v_, &dgate_, &dup_, &dhidden_}; }

// ---------------------------------------------------------------------------------------------
// Forward.

void LlamaModel::block_forward(int l, const Tensor& in, Acts& a, Tensor& out) {
  const Layer& L = layers_[static_cast<size_t>(l - l0_)];
  const double eps = cfg_.rms_norm_eps;
  const Tensor none;
  const auto linear = WeightLayout::out_in;
  be_.rmsnorm_forward(a.xn1, a.rstd1, in, P(L.in_norm), eps);
  be_.matmul_forward(q_, a.xn1, P(L.q), bias(L.bq), linear);
  be_.matmul_forward(k_, a.xn1, P(L.k), bias(L.bk), linear);
  be_.matmul_forward(v_, a.xn1, P(L.v), bias(L.bv), linear);
  be_.rope_forward(q_, q_, inv_freq_, Hl_);
  be_.rope_forward(k_, k_, inv_freq_, Hkvl_);
  be_.qkv_pack(a.qkv, q_, k_, v_, Hl_, Hkvl_);
  be_.attention_forward(a.atty, a.att, a.qkv, Hl_);
  // Row-parallel projections: partial sums over this rank's heads (or MLP columns), all-reduced.
  be_.matmul_forward(scratch_c_, a.atty, P(L.o), none, linear);
  tp_allreduce(scratch_c_);
  be_.add(a.residual2, in, scratch_c_);
  be_.rmsnorm_forward(a.xn2, a.rstd2, a.residual2, P(L.post_norm), eps);
  be_.matmul_forward(a.gate, a.xn2, P(L.gate), none, linear);
  be_.matmul_forward(a.up, a.xn2, P(L.up), none, linear);
  be_.swiglu_forward(a.hidden, a.gate, a.up);
  be_.matmul_forward(scratch_c_, a.hidden, P(L.down), none, linear);
  tp_allreduce(scratch_c_);
  be_.add(out, a.residual2, scratch_c_);
}

void LlamaModel::embed_forward(Slot& s) {
  be_.encoder_forward(s.residual[0], s.tokens, P(embed_), Tensor(), v0_, cfg_.vocab_size);
  tp_allreduce(s.residual[0]);
}

void LlamaModel::final_norm_forward(Slot& s) {
  be_.rmsnorm_forward(s.normed, s.norm_rstd, s.residual.back(), P(norm_), cfg_.rms_norm_eps);
}

// ---------------------------------------------------------------------------------------------
// Backward.

void LlamaModel::block_backward(int l, const Tensor& in, Acts& a) {
  const Layer& L = layers_[static_cast<size_t>(l - l0_)];
  Tensor none;
  const auto linear = WeightLayout::out_in;
  // out = residual2 + down(swiglu(gate(xn2), up(xn2))); dres_ holds d(out).
  be_.matmul_backward(dhidden_, G(L.down), none, dres_, a.hidden, P(L.down), linear, false);
  be_.swiglu_backward(dgate_, dup_, dhidden_, a.gate, a.up);
  Tensor& dc = dc_;
  be_.matmul_backward(dc, G(L.gate), none, dgate_, a.xn2, P(L.gate), linear, false);
  be_.matmul_backward(dc, G(L.up), none, dup_, a.xn2, P(L.up), linear, true);
  tp_allreduce(dc);  // column-parallel input gradient: partial over this rank's rows
  be_.rmsnorm_backward(dres_, G(L.post_norm), dc, a.residual2, P(L.post_norm), a.rstd2, true);
  // residual2 = in + o(attention(rope(q), rope(k), v)); dres_ now holds d(residual2).
  Tensor datty = dc_.flat_slice(0, a.atty.shape());
  be_.matmul_backward(datty, G(L.o), none, dres_, a.atty, P(L.o), linear, false);
  be_.attention_backward(d3c_, datty, a.qkv, a.atty, a.att, Hl_);
  be_.qkv_unpack(q_, k_, v_, d3c_, Hl_, Hkvl_);
  be_.rope_backward(q_, q_, inv_freq_, Hl_);
  be_.rope_backward(k_, k_, inv_freq_, Hkvl_);
  Tensor dbq = bias_grad(L.bq), dbk = bias_grad(L.bk), dbv = bias_grad(L.bv);
  be_.matmul_backward(dc, G(L.q), dbq, q_, a.xn1, P(L.q), linear, false);
  be_.matmul_backward(dc, G(L.k), dbk, k_, a.xn1, P(L.k), linear, true);
  be_.matmul_backward(dc, G(L.v), dbv, v_, a.xn1, P(L.v), linear, true);
  tp_allreduce(dc);
  be_.rmsnorm_backward(dres_, G(L.in_norm), dc, in, P(L.in_norm), a.rstd1, true);
}

void LlamaModel::final_norm_backward(Slot& s, const Tensor& dnormed) {
  be_.rmsnorm_backward(dres_, G(norm_), dnormed, s.residual.back(), P(norm_), s.norm_rstd, false);
}

void LlamaModel::embed_backward(Slot& s) {
  Tensor no_positions;
  be_.encoder_backward(G(embed_), no_positions, dres_, s.tokens, v0_);
}

}  // namespace dl
