// dl-bench train: dl-train's own training loop (dl::run_training, not a copy) on a config, timed
// per step: tokens/s, samples/s, MFU against the device peak, and the step split into compute,
// communication, data wait, pipeline wait and optimizer as the trainer measures them.
// Method: docs/BENCH.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dl/bench/common.hpp"
#include "dl/plan/plan.hpp"

namespace dl::bench {

struct TrainBenchOptions {
  std::string config_path;             // "" : dl-train's built-in defaults (a small GPT on synthetic addition)
  std::vector<std::string> overrides;  // --set KEY=VALUE
  int64_t steps = -1;                  // timed steps per run (--repeat runs); -1: 10
  plan::FlopFormula formula = plan::FlopFormula::palm;
};

// MFU = tokens/s x FLOPs per token / (peak FLOP/s x devices).
double model_flops_utilization(double tokens_per_sec, double flops_per_token, double peak_flops, int64_t devices);

// Trains warmup + steps steps in a temporary run directory (removed afterwards) with checkpoints,
// evaluation, TensorBoard and the environment snapshot off; rows from the timed steps only.
Report run_train_bench(const TrainBenchOptions& options, const CommonOptions& common);

}  // namespace dl::bench
