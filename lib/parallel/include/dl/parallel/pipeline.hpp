// Runs one training step's micro-batches through this rank's model stage: sequentially when
// there is one stage, else with a pipeline schedule over the pp group (activations forward to
// the next stage, their gradients back). GPipe: every forward, then every backward (all
// activations held). 1F1B (PipeDream-Flush, Narayanan et al. 2021): after a warm-up of
// pp - stage - 1 forwards, one forward and one backward alternate, so at most pp - stage
// micro-batches are in flight. Both have a bubble of (p - 1) / (m + p - 1) of the step.
#pragma once
#include <string>
#include <vector>

#include "dl/config/choice.hpp"
#include "dl/dist/comm.hpp"
#include "dl/nn/model.hpp"

namespace dl::parallel {

struct PipelineStats {
  ForwardStats loss;            // sums over the micro-batches (non-zero on the last stage only)
  double wait_seconds = 0;      // blocked waiting for the neighbouring stages
};

class PipelineRunner {
 public:
  // `model` is this rank's stage (Model's stage API); `pp` the pipeline group (size 1 for no
  // pipeline), as many ranks as the model has stages.
  PipelineRunner(Model& model, dist::Comm& pp, PipelineSchedule schedule);
  // Forward and backward of every micro-batch; dloss is d(loss)/d(each target's loss).
  PipelineStats run(const std::vector<Batch>& micro, double dloss);
  // After the gradients are reduced over data-parallel ranks: the tied embedding's gradient
  // becomes the first stage's (lookup) plus the last stage's (head), summed over `embedding`
  // (the group of those two stages; null on a rank that is on neither or without a pipeline).
  // A model with an untied head shares nothing between stages.
  void reduce_tied_gradients(dist::Comm* embedding);

 private:
  Model& model_;
  dist::Comm& pp_;
  bool gpipe_;
};

// Forward only (evaluation) of one batch through every stage: activations pass to the next
// stage, nothing comes back; the loss sums are non-zero on the last stage only.
ForwardStats forward_only(Model& stage, dist::Comm& pp, const Batch& batch);

}  // namespace dl::parallel
