#include "dl/nn/params.hpp"

#include "dl/core/rng.hpp"

namespace dl {

void ParamSet::declare(std::string name, Shape shape, ParamInit init, double init_std, bool decay) {
  declare_slice(std::move(name), std::move(shape), TensorSlice{}, init, init_std, decay);
}

void ParamSet::declare_slice(std::string name, Shape global_shape, TensorSlice slice, ParamInit init,
                             double init_std, bool decay, bool tied_copy) {
  DL_CHECK(!flat_values_.defined(), "declare(", name, ") after allocate");
  DL_CHECK(!contains(name), "parameter ", name, " declared twice");
  ParamInfo p;
  p.name = std::move(name);
  p.shape = slice.local_shape(global_shape);
  p.global_shape = std::move(global_shape);
  p.slice = std::move(slice);
  p.tied_copy = tied_copy;
  p.offset = numel_;
  p.init = init;
  p.init_std = init_std;
  p.decay = decay;
  numel_ += p.numel();
  infos_.push_back(std::move(p));
}

void ParamSet::allocate(Backend& backend, DType dtype) {
  backend_ = &backend;
  dtype_ = dtype;
  flat_values_ = backend.empty({numel_}, dtype);
  flat_grads_ = backend.empty({numel_}, dtype);
  backend.zero(flat_values_);
  backend.zero(flat_grads_);
  values_.clear();
  grads_.clear();
  for (const auto& p : infos_) {
    values_.push_back(flat_values_.flat_slice(p.offset, p.shape));
    grads_.push_back(flat_grads_.flat_slice(p.offset, p.shape));
  }
}

void init_param_values(const ParamInfo& info, uint64_t seed, Tensor& out) {
  DL_CHECK(out.numel() == info.numel(), "init buffer for ", info.name);
  if (!info.slice.whole()) {
    // A shard takes its values from the whole tensor, so every layout starts from the same weights.
    ParamInfo whole = info;
    whole.shape = info.global_shape;
    whole.slice = TensorSlice{};
    Tensor g = Tensor::empty(info.global_shape, out.dtype());
    init_param_values(whole, seed, g);
    out.copy_from(extract_slice(g, info.slice));
    return;
  }
  uint64_t key = stream_key(seed, info.name);
  auto fill = [&](auto* p) {
    using F = std::remove_pointer_t<decltype(p)>;
    for (int64_t i = 0; i < out.numel(); ++i) {
      switch (info.init) {
        case ParamInit::zeros: p[i] = F(0); break;
        case ParamInit::ones: p[i] = F(1); break;
        // Rounded to f32 first so f32 and f64 models start from the same values.
        case ParamInit::normal:
          p[i] = F(static_cast<float>(info.init_std * normal_at(key, static_cast<uint64_t>(i))));
          break;
      }
    }
  };
  if (out.dtype() == DType::f32) {
    fill(out.data<float>());
  } else {
    fill(out.data<double>());
  }
}

void ParamSet::initialize(uint64_t seed) {
  for (size_t i = 0; i < infos_.size(); ++i) {
    if (values_[i].device().is_cpu()) {
      init_param_values(infos_[i], seed, values_[i]);
    } else {
      Tensor host = Tensor::empty(infos_[i].shape, values_[i].dtype());
      init_param_values(infos_[i], seed, host);
      backend_->copy(values_[i], host);
    }
  }
}

void ParamSet::zero_grad() { backend_->zero(flat_grads_); }

void ParamSet::drop_storage() {
  flat_values_ = Tensor();
  flat_grads_ = Tensor();
  for (auto& t : values_) t = Tensor();
  for (auto& t : grads_) t = Tensor();
}

void ParamSet::bind(size_t i, Tensor value, Tensor grad) {
  values_[i] = std::move(value);
  grads_[i] = std::move(grad);
}

size_t ParamSet::index(const std::string& name) const {
  for (size_t i = 0; i < infos_.size(); ++i)
    if (infos_[i].name == name) return i;
  throw_runtime("no parameter named ", name);
}

bool ParamSet::contains(const std::string& name) const {
  for (const auto& p : infos_)
    if (p.name == name) return true;
  return false;
}

}  // namespace dl
