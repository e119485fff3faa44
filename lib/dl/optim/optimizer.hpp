// Optimizers over a model's flat parameter buffers, the learning-rate schedule, and global
// gradient-norm clipping.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dl/config/config.hpp"
#include "dl/nn/params.hpp"

namespace dl {

// A named optimizer state buffer laid out like ParamSet::flat_values() ("exp_avg" for AdamW).
struct OptimizerState {
  std::string name;
  Tensor flat;
};

class Optimizer {
 public:
  // AdamW (decoupled weight decay, Loshchilov & Hutter 2019) or SGD with momentum; weight
  // decay applies only to parameters marked `decay` (matrices and embeddings).
  Optimizer(const OptimConfig& config, ParamSet& params);

  // One update from the current gradients; grad_scale multiplies every gradient first
  // (clipping). Advances step_count().
  void step(double lr, double grad_scale = 1.0);

  int64_t step_count() const { return steps_; }
  void set_step_count(int64_t n) { steps_ = n; }
  std::vector<OptimizerState>& state() { return state_; }
  const std::string& name() const { return cfg_.name; }

 private:
  OptimConfig cfg_;
  ParamSet& params_;
  std::vector<OptimizerState> state_;
  int64_t steps_ = 0;
};

// Learning rate at a 0-based step: linear warm-up over warmup_steps, then cosine/linear decay to
// min_lr_ratio * base over decay_steps (train.steps when 0), or constant.
double learning_rate(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps);

// Global L2 norm of all gradients, in double (NaN/Inf propagate).
double grad_norm(ParamSet& params);
// torch.nn.utils.clip_grad_norm_'s coefficient: max_norm / (norm + 1e-6) when that is below 1,
// else 1. max_norm <= 0 disables clipping.
double clip_scale(double norm, double max_norm);

}  // namespace dl
