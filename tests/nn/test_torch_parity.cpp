// The whole model against PyTorch (Debian's python3-torch, CPU, fp32): the same initial weights,
// read by an independent safetensors reader, and the same batches give the same loss and
// gradients, and the same losses over 10 AdamW steps with clipping.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "dl/core/rng.hpp"
#include "dl/io/safetensors.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/mlp.hpp"
#include "dl/dist/comm.hpp"
#include "dl/optim/optimizer.hpp"
#include "dl/parallel/zero.hpp"
#include "support/numeric.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::test;
using nlohmann::json;

namespace {

constexpr int kSteps = 10;

// Runs the model's first forward/backward and 10 optimizer steps, writes everything the Python
// reference needs, runs it, and returns its JSON verdict.
json run_parity(Model& model, const std::vector<Batch>& batches, json spec) {
  TempDir dir("parity");
  ParamSet& P = model.params();
  P.initialize(42);
  json order = json::array();
  SafetensorsWriter w;
  for (size_t i = 0; i < P.size(); ++i) {
    w.add(P.info(i).name, P.value(i).clone());
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
  for (size_t i = 0; i < P.size(); ++i) gw.add(P.info(i).name, P.grad(i).clone());
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
  for (int k = 0; k < kSteps; ++k) {
    ForwardStats s = model.forward(batches[k]);
    engine.zero_grad();
    model.backward(1.0 / s.targets);
    double norm = std::sqrt(engine.grad_norm_squared());
    engine.step(oc.lr, clip_scale(norm, oc.grad_clip));
    losses.push_back(s.loss_sum / s.targets);
  }
  spec["losses"] = losses;
  spec["steps"] = kSteps;
  spec["param_order"] = order;
  spec["optim"] = {{"lr", oc.lr}, {"beta1", oc.beta1}, {"beta2", oc.beta2}, {"eps", oc.eps},
                   {"weight_decay", oc.weight_decay}, {"grad_clip", oc.grad_clip}};
  write_file(dir / "spec.json", spec.dump());

  RunResult r = run(torch_python(), {source_path("tests/scripts/torch_parity.py").string(), dir.path().string()});
  INFO("python stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("GPT loss, gradients and 10 AdamW steps match PyTorch") {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.block_size = 32;
  c.vocab_size = 256;
  GptModel model(c, cpu_backend());
  std::vector<Batch> batches;
  for (int k = 0; k < kSteps; ++k) {
    Batch b{Tensor::empty({4, 32}, DType::i32), Tensor::empty({4, 32}, DType::i32)};
    uint64_t key = stream_key(7, "parity/gpt/" + std::to_string(k));
    for (int64_t i = 0; i < 128; ++i) {
      b.inputs.data<int32_t>()[i] = static_cast<int32_t>(below_at(key, i, 256));
      // Every 7th target ignored, as the synthetic tasks do.
      b.targets.data<int32_t>()[i] = i % 7 == 3 ? -1 : static_cast<int32_t>(below_at(key, i, 256, 1));
    }
    batches.push_back(std::move(b));
  }
  json spec{{"model", "gpt"}, {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}};
  json r = run_parity(model, batches, spec);
  INFO(r.dump());
  CHECK(r["loss_rel"].get<double>() < 1e-5);
  CHECK(r["grad_rel_max"].get<double>() < 1e-5);
  CHECK(r["steps_rel_max"].get<double>() < 1e-5);
}

TEST_CASE("MLP loss, gradients and 10 AdamW steps match PyTorch") {
  for (std::string act : {"relu", "gelu"}) {
    CAPTURE(act);
    MlpConfig c;
    c.n_inputs = 10;
    c.hidden = {32, 16};
    c.n_classes = 5;
    c.activation = act;
    MlpModel model(c, cpu_backend());
    std::vector<Batch> batches;
    for (int k = 0; k < kSteps; ++k) {
      Batch b{random_tensor({24, 10}, DType::f32, 500 + k, -2, 2), Tensor::empty({24}, DType::i32)};
      for (int64_t i = 0; i < 24; ++i)
        b.targets.data<int32_t>()[i] = static_cast<int32_t>(below_at(stream_key(9, "parity/mlp"), k * 24 + i, 5));
      batches.push_back(std::move(b));
    }
    json r = run_parity(model, batches, json{{"model", "mlp"}, {"activation", act}});
    INFO(r.dump());
    CHECK(r["loss_rel"].get<double>() < 1e-5);
    CHECK(r["grad_rel_max"].get<double>() < 1e-5);
    CHECK(r["steps_rel_max"].get<double>() < 1e-5);
  }
}
