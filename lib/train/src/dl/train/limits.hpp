// The sizes a training config asks for, checked against this machine before a run allocates or
// creates anything (docs/RELIABILITY.md, "Bounded resources"); internal to lib/train.
#pragma once
#include "dl/config/config.hpp"
#include "dl/dist/launch_env.hpp"

namespace dl {

// Usage errors (exit 2) naming the key: train.threads or DL_NUM_THREADS beyond max_threads();
// a model whose weights alone could fill no machine; the planner's memory per rank (plan/:
// model states, one micro-batch's activations; on the CPU) plus the step's input batches
// (train.grad_accum x parallel.microbatches x train.batch_size rows, built before the step), times
// the ranks on this node, beyond available_memory().
void check_run_limits(const Config& cfg, const dist::LaunchEnv& env);

}  // namespace dl
