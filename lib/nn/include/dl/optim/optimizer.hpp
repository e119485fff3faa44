// Optimizer updates, the learning-rate schedule and global gradient-norm clipping. The
// optimizer is stateless here: its state buffers live wherever the parallel engine keeps them
// (whole, or one shard per data-parallel rank for ZeRO), and update() applies one step to any
// range of parameters with the matching ranges of gradients and state.
#pragma once
#include <string>
#include <vector>

#include "dl/backend/backend.hpp"
#include "dl/config/config.hpp"

namespace dl {

class Optimizer {
 public:
  // AdamW (decoupled weight decay, Loshchilov & Hutter 2019) or SGD with momentum, dampening and
  // Nesterov momentum, each following torch.optim's update.
  explicit Optimizer(const OptimConfig& config);

  std::string_view name() const { return cfg_.name.name(); }  // "adamw" | "sgd"
  // State tensors per parameter: exp_avg, exp_avg_sq (adamw); momentum_buffer (sgd, momentum > 0).
  const std::vector<std::string>& state_names() const { return state_names_; }

  // Starts a step: advances step_count() (AdamW's bias correction uses it).
  void begin_step() { ++steps_; }
  int64_t step_count() const { return steps_; }
  void set_step_count(int64_t n) { steps_ = n; }

  // One update of `param` from `grad` (times grad_scale) with its state slices (state_names()
  // order); weight decay only when `decay`.
  void update(Backend& backend, Tensor& param, const Tensor& grad, const std::vector<Tensor>& state, bool decay,
              double lr, double grad_scale) const;

 private:
  OptimConfig cfg_;
  std::vector<std::string> state_names_;
  int64_t steps_ = 0;
};

// Learning rate at a 0-based step: linear warm-up over warmup_steps, then cosine/linear decay to
// min_lr_ratio * base over decay_steps (train.steps when 0), or constant.
double learning_rate(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps);

// torch.nn.utils.clip_grad_norm_'s coefficient: max_norm / (norm + 1e-6) when that is below 1,
// else 1. max_norm <= 0 disables clipping.
double clip_scale(double norm, double max_norm);

}  // namespace dl
