#include "support/torch_parity.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "dl/dist/comm.hpp"
#include "dl/io/safetensors.hpp"
#include "dl/optim/optimizer.hpp"
#include "dl/parallel/zero.hpp"
#include "support/support.hpp"

namespace dl::test {

namespace {

// A host copy of a tensor on any device the backend reaches.
Tensor host_copy(Backend& be, const Tensor& t) {
  if (t.device().is_cpu()) return t.clone();
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be.copy(h, t);
  return h;
}

}  // namespace

nlohmann::json run_torch_parity(Model& model, Backend& be, const std::vector<Batch>& batches, nlohmann::json spec,
                                const std::function<void(ParamSet&)>& adjust) {
  using nlohmann::json;
  TempDir dir("parity");
  ParamSet& P = model.params();
  P.initialize(42);
  if (adjust) adjust(P);
  json order = json::array();
  SafetensorsWriter w;
  for (size_t i = 0; i < P.size(); ++i) {
    w.add(P.info(i).name, host_copy(be, P.value(i)));
    order.push_back(P.info(i).name);
  }
  w.write(dir / "weights.safetensors");
  SafetensorsWriter bw;
  for (size_t k = 0; k < batches.size(); ++k) {
    bw.add("inputs." + std::to_string(k), batches[k].inputs);
    bw.add("targets." + std::to_string(k), batches[k].targets);
  }
  bw.write(dir / "batches.safetensors");

  ForwardStats st = model.forward(batches[0]);
  P.zero_grad();
  model.backward(1.0 / st.targets);
  spec["loss0"] = st.loss_sum / st.targets;
  SafetensorsWriter gw;
  for (size_t i = 0; i < P.size(); ++i) gw.add(P.info(i).name, host_copy(be, P.grad(i)));
  gw.write(dir / "grads.safetensors");

  OptimConfig oc;
  oc.lr = 1e-3;
  oc.beta1 = 0.9;
  oc.beta2 = 0.95;
  oc.eps = 1e-8;
  oc.weight_decay = 0.1;
  oc.grad_clip = 1.0;
  // The training loop's own optimizer path: the engine (one rank, no sharding).
  auto self = dist::make_self_comm("dp");
  parallel::ZeroEngine engine(P, model.param_groups(), *self, ParallelConfig{}, oc, 25, true);
  model.set_hooks(&engine);
  json losses = json::array();
  for (int k = 0; k < kParitySteps; ++k) {
    ForwardStats s = model.forward(batches[static_cast<size_t>(k)]);
    engine.zero_grad();
    model.backward(1.0 / s.targets);
    double norm = std::sqrt(engine.grad_norm_squared());
    engine.step(oc.lr, clip_scale(norm, oc.grad_clip));
    losses.push_back(s.loss_sum / s.targets);
  }
  spec["losses"] = losses;
  spec["steps"] = kParitySteps;
  spec["param_order"] = order;
  spec["optim"] = {{"lr", oc.lr}, {"beta1", oc.beta1}, {"beta2", oc.beta2}, {"eps", oc.eps},
                   {"weight_decay", oc.weight_decay}, {"grad_clip", oc.grad_clip}};
  write_file(dir / "spec.json", spec.dump());

  RunResult r = run(torch_python(), {source_path("tests/scripts/torch_parity.py").string(), dir.path().string()});
  if (r.exit_code != 0)
    throw std::runtime_error("torch_parity.py (" + torch_python() + ") failed with exit code " +
                             std::to_string(r.exit_code) + ": " + r.err);
  return json::parse(r.out);
}

}  // namespace dl::test
