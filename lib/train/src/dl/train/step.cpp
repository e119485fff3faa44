#include "dl/train/step.hpp"

#include <algorithm>
#include <cmath>

#include "dl/cli/app.hpp"
#include "dl/optim/optimizer.hpp"

namespace dl {

namespace {

// This rank's micro-batches: micro-batch a of dp rank r covers global positions
// [position + (a * dp + r) * B, + B), so the step's examples are the same for every layout.
// `targets` gets the step's targets over every dp rank.
std::vector<Batch> micro_batches(StepParts& p, int64_t position, int64_t* targets) {
  const int64_t B = p.cfg.train.batch_size, A = micro_batches_per_step(p.cfg), dp = p.mesh.shape().dp;
  std::vector<Batch> micro;
  int64_t mine = 0;
  for (int64_t a = 0; a < A; ++a) {
    int64_t first = position + (a * dp + p.mesh.dp_rank()) * B;
    micro.push_back(p.data.make_batch(p.sampler.examples(first, B)));
    const int32_t* t = micro.back().targets.data<int32_t>();
    for (int64_t i = 0; i < micro.back().targets.numel(); ++i) mine += t[i] >= 0;
  }
  Tensor count = Tensor::empty({1}, DType::i64);
  count.data<int64_t>()[0] = mine;
  p.mesh.dp().allreduce(count);
  *targets = count.data<int64_t>()[0];
  return micro;
}

}  // namespace

bool reports_loss(const Model& model, parallel::Mesh& mesh) { return model.last_stage() && mesh.tp_rank() == 0; }

StepRecord train_step(StepParts& p, int64_t step, int64_t position, int64_t total) {
  parallel::Mesh& mesh = p.mesh;
  StepRecord r;
  r.step = step + 1;
  const double t0 = monotonic_seconds();
  const double comm0 = mesh.comm_seconds(), pp0 = mesh.pp().seconds_in_comm();
  int64_t targets = 0;
  const std::vector<Batch> micro = micro_batches(p, position, &targets);
  const double t1 = monotonic_seconds();

  p.engine.zero_grad();
  // The loss is the mean over every target of the step (all micro-batches and ranks), so each
  // backward is scaled by 1 / (targets in the whole step).
  // fp16: the backward pass carries loss_scale x the loss so small gradients survive.
  r.loss_scale = p.scaler.scale();
  parallel::PipelineStats ps = p.runner.run(micro, targets ? r.loss_scale / static_cast<double>(targets) : 0.0);
  p.engine.reduce_gradients();
  p.runner.reduce_tied_gradients(mesh.embedding());
  // One all-reduce for the step's global numbers: loss, accuracy, gradient norm, stop flag.
  Tensor g = Tensor::empty({4}, DType::f64);
  double* gv = g.data<double>();
  const bool counts = reports_loss(p.model, mesh);
  gv[0] = counts ? ps.loss.loss_sum : 0.0;
  gv[1] = counts ? static_cast<double>(ps.loss.correct) : 0.0;
  gv[2] = p.engine.grad_norm_squared();
  gv[3] = interrupt_requested() ? 1.0 : 0.0;
  mesh.world().allreduce(g);
  r.loss = targets ? gv[0] / static_cast<double>(targets) : 0.0;
  r.grad_norm = std::sqrt(gv[2]) / r.loss_scale;
  r.stop = gv[3] > 0;
  const double t2 = monotonic_seconds();

  // fp16: a step whose gradients overflowed is skipped and the scale halved (every rank sees
  // the same all-reduced norm, so every rank decides alike).
  const bool finite = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  r.applied = p.scaler.update(finite);
  r.diverged = !finite && (!p.scaler.enabled() || p.scaler.exhausted());
  if (r.diverged) return r;
  r.lr = learning_rate(p.cfg.schedule, p.cfg.optim.lr, step, total);
  // The optimizer sees the true gradient: unscaled, then clipped.
  if (r.applied) p.engine.step(r.lr, clip_scale(r.grad_norm, p.cfg.optim.grad_clip) / r.loss_scale);
  const double t3 = monotonic_seconds();

  // Communication: dp/tp collectives; the pipeline's send/recv counts as waiting on the stages.
  const double pp_s = mesh.pp().seconds_in_comm() - pp0;
  const double comm_s = (mesh.comm_seconds() - comm0) - pp_s;
  r.times = {t1 - t0, std::max(0.0, (t2 - t1) - comm_s - pp_s), comm_s, ps.wait_seconds, t3 - t2};
  r.seconds = t3 - t0;
  return r;
}

}  // namespace dl
