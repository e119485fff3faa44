// The goodput factor: the share of wall time a training run spends on training steps, once
// evaluation, checkpoint writes and failures (lost work plus restart) are counted. Published
// all-in GPU-hours include these; steady-state throughput does not.
//
//   wall     = (compute x (1 + eval_share) + checkpoints x write) / (1 - failures per hour x lost)
//   checkpoints = compute / interval     write = checkpoint bytes / (GPUs x checkpoint_bw)
//   failures per hour = failures_per_gpu_hour x GPUs     lost = restart + interval / 2
//   goodput  = compute / wall
//
// The interval is the config's checkpoint_every (or --checkpoint-hours); without either, the
// interval that minimizes the overhead (Young 1974): sqrt(2 x write / failures per hour).
// Defaults and their sources: docs/COST.md, "Goodput".
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "dl/config/choice.hpp"
#include "dl/core/option_error.hpp"

namespace dl::cost {

struct GoodputModel {
  // Evaluation time as a fraction of training time (an assumption: a held-out pass of ~1% of
  // the steps' tokens, forward only).
  double eval_share = 0.01;
  // Per GPU, to storage: Llama 3's Tectonic file system, 7 TB/s over 16,384 GPUs (Llama 3 paper,
  // section 3.3.1) = 0.43 GB/s per GPU, each GPU writing its shard.
  double checkpoint_bw = 7e12 / 16384;
  // Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 H100s (Llama 3 paper,
  // section 3.3.4, table 5) = 1.97e-5 per GPU-hour.
  double failures_per_gpu_hour = 419.0 / (16384.0 * 54 * 24);
  // Detect, reschedule and reload per failure: 0.25 h, which with the defaults above gives the
  // ~90% effective training time Llama 3 reports at 16K GPUs.
  double restart_hours = 0.25;
  // No evaluation, free checkpoints, no failures: goodput 1 (steady-state throughput).
  static GoodputModel none() { return {0, std::numeric_limits<double>::infinity(), 0, 0}; }
};

struct Goodput {
  double factor = 1;                // compute / wall (0 when it never finishes)
  double eval_hours = 0;
  double checkpoint_bytes = 0;      // one checkpoint (0: no model to size it)
  double checkpoint_write_hours = 0;  // one write
  double checkpoint_interval_hours = 0;
  bool interval_optimal = false;    // the Young interval (no interval given)
  double checkpoints = 0;
  double failures = 0;              // expected over the run
  double failure_hours = 0;         // lost work and restarts
  double wall_hours = 0;
  bool finishes = true;
};

// `compute_hours` of training on `gpus` GPUs with checkpoints of `checkpoint_bytes` (0: not
// counted); `interval_hours` the compute between checkpoints (nullopt: the optimal interval; it
// is capped at compute_hours: a run checkpoints at least at its end).
Goodput goodput(double compute_hours, int64_t gpus, double checkpoint_bytes, std::optional<double> interval_hours,
                const GoodputModel& m);

// Bytes of one checkpoint of `params` parameters: weights and optimizer state as the optimizer
// keeps them (mixed precision: 16-bit weights + fp32 master + moments; fp8 saves what bf16 does:
// its FP8 weight copies are re-cast, not saved). Gradients are not saved.
double checkpoint_bytes(double params, Precision precision, StateOptimizer optimizer);

// "goodput 0.912: eval 1.0%, checkpoints 12 x 41 s (every 2.1 h, optimal), failures 3.2 (0.27 h each)"
std::string describe_goodput(const Goodput& g);

// The assumptions, for the estimate's notes: "# goodput: ..." naming each flag.
std::string goodput_note(const GoodputModel& m, const OptionNames& flags);

// Usage errors naming {eval_share}, {checkpoint_bw}, {failure_rate}, {restart_cost}.
void check_goodput_model(const GoodputModel& m);

}  // namespace dl::cost
