#include "dl/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dl {

Optimizer::Optimizer(const OptimConfig& config, ParamSet& params) : cfg_(config), params_(params) {
  Backend& be = params.backend();
  auto make = [&](const char* name) {
    OptimizerState s{name, be.empty({params.numel()}, params.dtype())};
    be.zero(s.flat);
    state_.push_back(std::move(s));
  };
  if (cfg_.name == "adamw") {
    make("exp_avg");
    make("exp_avg_sq");
  } else if (cfg_.name == "sgd") {
    if (cfg_.momentum != 0.0) make("momentum_buffer");
  } else {
    throw_usage("optim.name: unknown optimizer '", cfg_.name, "' (use adamw or sgd)");
  }
}

void Optimizer::step(double lr, double grad_scale) {
  ++steps_;
  Backend& be = params_.backend();
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamInfo& info = params_.info(i);
    Tensor& p = params_.value(i);
    const Tensor& g = params_.grad(i);
    double wd = info.decay ? cfg_.weight_decay : 0.0;
    if (cfg_.name == "adamw") {
      Tensor m = state_[0].flat.flat_slice(info.offset, info.shape);
      Tensor v = state_[1].flat.flat_slice(info.offset, info.shape);
      AdamWParams ap;
      ap.lr = lr;
      ap.beta1 = cfg_.beta1;
      ap.beta2 = cfg_.beta2;
      ap.eps = cfg_.eps;
      ap.weight_decay = wd;
      ap.step = steps_;
      ap.grad_scale = grad_scale;
      be.adamw_step(p, g, m, v, ap);
    } else {
      SgdParams sp;
      sp.lr = lr;
      sp.momentum = cfg_.momentum;
      sp.weight_decay = wd;
      sp.nesterov = cfg_.nesterov;
      sp.first_step = steps_ == 1;
      sp.grad_scale = grad_scale;
      Tensor buf = state_.empty() ? Tensor() : state_[0].flat.flat_slice(info.offset, info.shape);
      be.sgd_step(p, g, buf, sp);
    }
  }
}

double learning_rate(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total_steps) {
  if (s.warmup_steps > 0 && step < s.warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.decay == "constant") return base_lr;
  int64_t horizon = s.decay_steps > 0 ? s.decay_steps : total_steps;
  double span = std::max<int64_t>(1, horizon - s.warmup_steps);
  double progress = std::clamp(static_cast<double>(step - s.warmup_steps) / span, 0.0, 1.0);
  double min_lr = base_lr * s.min_lr_ratio;
  if (s.decay == "linear") return base_lr - (base_lr - min_lr) * progress;
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (base_lr - min_lr);
}

double grad_norm(ParamSet& params) { return std::sqrt(params.backend().sum_squares(params.flat_grads())); }

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0 || !std::isfinite(norm)) return 1.0;
  double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

}  // namespace dl
