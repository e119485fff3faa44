// One training step, as the loop (trainer's run_training) calls it: this rank's micro-batches,
// forward and backward through the pipeline, gradient reductions, the global loss and gradient
// norm, the loss scale's verdict, clipping and the optimizer. Internal to lib/train.
#pragma once
#include <cstdint>

#include "dl/config/config.hpp"
#include "dl/data/dataset.hpp"
#include "dl/nn/model.hpp"
#include "dl/optim/loss_scale.hpp"
#include "dl/parallel/mesh.hpp"
#include "dl/parallel/pipeline.hpp"
#include "dl/parallel/zero.hpp"

namespace dl {

// What a step works on; the loop owns every piece.
struct StepParts {
  const Config& cfg;
  Model& model;
  parallel::Mesh& mesh;
  parallel::ZeroEngine& engine;
  parallel::PipelineRunner& runner;
  LossScaler& scaler;
  const Dataset& data;
  const Sampler& sampler;
};

// This rank's time in a step, seconds: making the micro-batches, computing, dp/tp collectives,
// blocked on the neighbouring pipeline stages (the bubble), the optimizer.
struct StepTimes {
  double data = 0, compute = 0, comm = 0, pipeline_wait = 0, optimizer = 0;
};

struct StepRecord {
  int64_t step = 0;         // the step's number, from 1
  double loss = 0;          // mean over every target of the step (all micro-batches and ranks)
  double grad_norm = 0;     // of the true (unscaled) gradient, before clipping
  double lr = 0;
  double loss_scale = 1;    // the scale the step's backward carried (fp16; else 1)
  bool applied = true;      // false: skipped, the gradients overflowed (fp16; the scale was halved)
  bool diverged = false;    // loss or gradient norm NaN/Inf and no loss scale left to lower:
                            // nothing was applied
  bool stop = false;        // a rank was asked to stop (SIGINT/SIGTERM)
  StepTimes times;
  double seconds = 0;       // the whole step
};

// Whether this rank's loss numbers count in a global sum (one copy per data-parallel rank): the
// last stage's tensor-parallel rank 0.
bool reports_loss(const Model& model, parallel::Mesh& mesh);

// Runs step `step` + 1 of `total`, taking the examples at data positions [position, + global batch).
StepRecord train_step(StepParts& parts, int64_t step, int64_t position, int64_t total);

}  // namespace dl
