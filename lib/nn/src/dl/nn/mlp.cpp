#include "dl/nn/mlp.hpp"

#include <algorithm>
#include <cmath>

namespace dl {

namespace {
std::vector<int> layer_widths(const MlpConfig& c) {
  std::vector<int> w{c.n_inputs};
  w.insert(w.end(), c.hidden.begin(), c.hidden.end());
  w.push_back(c.n_classes);
  return w;
}
}  // namespace

int64_t mlp_param_count(const MlpConfig& c) {
  auto w = layer_widths(c);
  int64_t n = 0;
  for (size_t i = 0; i + 1 < w.size(); ++i) n += int64_t(w[i]) * w[i + 1] + w[i + 1];
  return n;
}

std::vector<int> MlpModel::widths() const { return layer_widths(cfg_); }

ParamSet mlp_param_declarations(const MlpConfig& c) {
  ParamSet params;
  auto w = layer_widths(c);
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    double std = c.init_std > 0 ? c.init_std : std::sqrt(2.0 / w[i]);
    std::string p = "layers." + std::to_string(i) + ".";
    params.declare(p + "weight", {w[i + 1], w[i]}, ParamInit::normal, std, true);
    params.declare(p + "bias", {w[i + 1]}, ParamInit::zeros, 0, false);
  }
  return params;
}

MlpModel::MlpModel(const MlpConfig& config, Backend& backend, DType dtype)
    : cfg_(config), be_(backend), dtype_(dtype), gelu_(config.activation == Activation::gelu) {
  params_ = mlp_param_declarations(cfg_);
  params_.allocate(backend, dtype);
}

void MlpModel::ensure_buffers(int64_t B) {
  if (B == B_) return;
  auto w = widths();
  zs_.clear();
  hs_.clear();
  int widest = *std::max_element(w.begin(), w.end());
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    zs_.push_back(be_.empty({B, w[i + 1]}, dtype_));
    if (i + 2 < w.size()) hs_.push_back(be_.empty({B, w[i + 1]}, dtype_));
  }
  losses_ = be_.empty({B}, dtype_);
  correct_ = be_.empty({B}, DType::i32);
  dh_ = be_.empty({B, widest}, dtype_);
  dz_ = be_.empty({B, widest}, dtype_);
  B_ = B;
}

int64_t MlpModel::activation_bytes() const {
  int64_t n = 0;
  for (const auto& t : zs_) n += t.nbytes();
  for (const auto& t : hs_) n += t.nbytes();
  for (const Tensor* t : {&losses_, &correct_, &dh_, &dz_}) n += t->defined() ? t->nbytes() : 0;
  return n;
}

ForwardStats MlpModel::forward(const Batch& batch) {
  const Tensor& x = batch.inputs;
  if (x.ndim() != 2 || x.size(1) != cfg_.n_inputs || x.dtype() != dtype_)
    throw_runtime("mlp forward: inputs must be ", dtype_name(dtype_), "[B,", cfg_.n_inputs, "], got ", x.describe());
  const int64_t B = x.size(0);
  ensure_buffers(B);
  inputs_ = x;
  targets_ = batch.targets;
  size_t nl = zs_.size();
  if (hooks_) hooks_->before_forward(0);
  for (size_t i = 0; i < nl; ++i) {
    const Tensor& in = i == 0 ? inputs_ : hs_[i - 1];
    be_.matmul_forward(zs_[i], in, params_.value(2 * i), params_.value(2 * i + 1), WeightLayout::out_in);
    if (i + 1 < nl) {
      if (gelu_) be_.gelu_forward(hs_[i], zs_[i]);
      else be_.relu_forward(hs_[i], zs_[i]);
    }
  }
  if (hooks_) hooks_->after_forward(0);
  ForwardStats st;
  if (!targets_.defined()) return st;
  be_.crossentropy_forward(losses_, correct_, zs_.back(), targets_);
  st.loss_sum = be_.sum(losses_);
  const int32_t* t = targets_.data<int32_t>();
  const int32_t* c = correct_.data<int32_t>();
  for (int64_t i = 0; i < B; ++i) {
    st.targets += t[i] >= 0;
    st.correct += c[i];
  }
  return st;
}

void MlpModel::backward(double dloss) {
  DL_CHECK(targets_.defined(), "backward without a forward with targets");
  auto w = widths();
  size_t nl = zs_.size();
  // dz holds the gradient of the current layer's pre-activation; dh the gradient of its input.
  Tensor dz = dz_.flat_slice(0, {B_, w[nl]});
  if (hooks_) hooks_->before_backward(0);
  be_.crossentropy_backward(dz, zs_.back(), targets_, dloss);
  for (size_t i = nl; i-- > 0;) {
    const Tensor& in = i == 0 ? inputs_ : hs_[i - 1];
    Tensor dh = i == 0 ? Tensor() : dh_.flat_slice(0, {B_, w[i]});
    be_.matmul_backward(dh, params_.grad(2 * i), params_.grad(2 * i + 1), dz, in, params_.value(2 * i),
                        WeightLayout::out_in, false);
    if (i == 0) break;
    dz = dz_.flat_slice(0, {B_, w[i]});
    if (gelu_) be_.gelu_backward(dz, dh, zs_[i - 1], false);
    else be_.relu_backward(dz, dh, zs_[i - 1], false);
  }
  if (hooks_) hooks_->after_backward(0);
}

}  // namespace dl
