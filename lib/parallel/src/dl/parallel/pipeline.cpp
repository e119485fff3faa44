#include "dl/parallel/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

namespace dl::parallel {

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
void add(ForwardStats& a, const ForwardStats& b) {
  a.loss_sum += b.loss_sum;
  a.targets += b.targets;
  a.correct += b.correct;
}
}  // namespace

PipelineRunner::PipelineRunner(Model& model, dist::Comm& pp, PipelineSchedule schedule)
    : model_(model), pp_(pp), gpipe_(schedule == PipelineSchedule::gpipe) {
  DL_CHECK(pp_.size() == model_.num_stages(), "a ", model_.kind(), " model of ", model_.num_stages(),
           " stages in a pipeline of ", pp_.size());
}

PipelineStats PipelineRunner::run(const std::vector<Batch>& micro, double dloss) {
  PipelineStats out;
  const int m = static_cast<int>(micro.size());
  if (pp_.size() == 1) {
    for (const auto& mb : micro) {
      add(out.loss, model_.forward(mb));
      model_.backward(dloss);
    }
    return out;
  }
  Model& stage = model_;
  const int s = pp_.rank(), p = pp_.size();
  const bool first = stage.first_stage(), last = stage.last_stage();
  // In-flight capacity: every micro-batch for GPipe, pp - stage for 1F1B.
  const int cap = gpipe_ ? m : std::min(p - s, m);
  Backend& be = stage.params().backend();
  Tensor recv_buf = be.empty(stage.hidden_shape(micro[0].inputs), stage.params().dtype());
  std::vector<Tensor> grad_send(static_cast<size_t>(cap));
  std::vector<std::unique_ptr<dist::Request>> fwd_req(static_cast<size_t>(cap)), bwd_req(static_cast<size_t>(cap));
  auto settle = [](std::unique_ptr<dist::Request>& r) {
    if (r) r->wait();
    r.reset();
  };

  auto forward = [&](int i) {
    const int slot = i % cap;
    settle(fwd_req[static_cast<size_t>(slot)]);  // the slot's previous output has left
    Tensor in;
    if (!first) {
      double t0 = now();
      pp_.recv(recv_buf, s - 1);
      out.wait_seconds += now() - t0;
      in = recv_buf;
    }
    Tensor hidden;
    add(out.loss, stage.forward_stage(micro[static_cast<size_t>(i)], in, slot, &hidden));
    if (!last) fwd_req[static_cast<size_t>(slot)] = pp_.isend(hidden, s + 1);
  };
  auto backward = [&](int i) {
    const int slot = i % cap;
    Tensor dout;
    if (!last) {
      double t0 = now();
      pp_.recv(recv_buf, s + 1);
      out.wait_seconds += now() - t0;
      dout = recv_buf;
    }
    Tensor din;
    stage.backward_stage(slot, dloss, dout, &din);
    if (!first) {
      settle(bwd_req[static_cast<size_t>(slot)]);
      Tensor& buf = grad_send[static_cast<size_t>(slot)];
      if (!buf.defined()) buf = be.empty(din.shape(), din.dtype());
      be.copy(buf, din);  // din aliases the model's scratch, reused by the next backward
      bwd_req[static_cast<size_t>(slot)] = pp_.isend(buf, s - 1);
    }
  };

  if (gpipe_) {
    for (int i = 0; i < m; ++i) forward(i);
    for (int i = 0; i < m; ++i) backward(i);
  } else {
    const int warm = std::min(p - s - 1, m);
    for (int i = 0; i < warm; ++i) forward(i);
    for (int k = 0; k + warm < m; ++k) {
      forward(warm + k);
      backward(k);
    }
    for (int k = m - warm; k < m; ++k) backward(k);
  }
  double t0 = now();
  for (auto& r : fwd_req) settle(r);
  for (auto& r : bwd_req) settle(r);
  out.wait_seconds += now() - t0;
  return out;
}

void PipelineRunner::reduce_tied_gradients(dist::Comm* embedding) {
  Tensor grad = model_.tied_embedding_grad();
  if (!grad.defined()) return;  // one stage, a middle stage, or an untied head: nothing is shared
  DL_CHECK(embedding != nullptr, "the tied embedding's gradient on a stage without the embedding group");
  embedding->allreduce(grad);
}

ForwardStats forward_only(Model& stage, dist::Comm& pp, const Batch& batch) {
  if (pp.size() == 1) return stage.forward(batch);
  Tensor in, out;
  if (!stage.first_stage()) {
    in = stage.params().backend().empty(stage.hidden_shape(batch.inputs), stage.params().dtype());
    pp.recv(in, pp.rank() - 1);
  }
  ForwardStats st = stage.forward_stage(batch, in, 0, &out);
  if (!stage.last_stage()) pp.send(out, pp.rank() + 1);
  return st;
}

}  // namespace dl::parallel
