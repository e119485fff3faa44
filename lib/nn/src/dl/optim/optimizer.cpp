#include "dl/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dl {

Optimizer::Optimizer(const OptimConfig& config) : cfg_(config) {
  switch (cfg_.name.get()) {
    case OptimizerKind::adamw: state_names_ = {"exp_avg", "exp_avg_sq"}; break;
    case OptimizerKind::sgd:
      if (cfg_.momentum != 0.0) state_names_ = {"momentum_buffer"};
      break;
  }
}

void Optimizer::update(Backend& be, Tensor& param, const Tensor& grad, const std::vector<Tensor>& state, bool decay,
                       double lr, double grad_scale) const {
  const double wd = decay ? cfg_.weight_decay : 0.0;
  if (cfg_.name == OptimizerKind::adamw) {
    AdamWParams ap;
    ap.lr = lr;
    ap.beta1 = cfg_.beta1;
    ap.beta2 = cfg_.beta2;
    ap.eps = cfg_.eps;
    ap.weight_decay = wd;
    ap.step = steps_;
    ap.grad_scale = grad_scale;
    Tensor m = state[0], v = state[1];
    be.adamw_step(param, grad, m, v, ap);
  } else {
    SgdParams sp;
    sp.lr = lr;
    sp.momentum = cfg_.momentum;
    sp.dampening = cfg_.dampening;
    sp.weight_decay = wd;
    sp.nesterov = cfg_.nesterov;
    sp.first_step = steps_ == 1;
    sp.grad_scale = grad_scale;
    Tensor buf = state.empty() ? Tensor() : state[0];
    be.sgd_step(param, grad, buf, sp);
  }
}

double learning_rate(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total_steps) {
  if (s.warmup_steps > 0 && step < s.warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.decay == Decay::constant) return base_lr;
  int64_t horizon = s.decay_steps > 0 ? s.decay_steps : total_steps;
  double span = std::max<int64_t>(1, horizon - s.warmup_steps);
  double progress = std::clamp(static_cast<double>(step - s.warmup_steps) / span, 0.0, 1.0);
  double min_lr = base_lr * s.min_lr_ratio;
  if (s.decay == Decay::linear) return base_lr - (base_lr - min_lr) * progress;
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (base_lr - min_lr);
}

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0 || !std::isfinite(norm)) return 1.0;
  double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

}  // namespace dl
