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
#include "support/torch_parity.hpp"

using namespace dl;
using namespace dl::test;
using nlohmann::json;


TEST_CASE("GPT loss, gradients and 10 AdamW steps match PyTorch") {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.block_size = 32;
  c.vocab_size = 256;
  GptModel model(c, cpu_backend());
  std::vector<Batch> batches;
  for (int k = 0; k < kParitySteps; ++k) {
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
  json r = run_torch_parity(model, cpu_backend(), batches, spec);
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
    c.activation = choice_from_name<Activation>(act);
    MlpModel model(c, cpu_backend());
    std::vector<Batch> batches;
    for (int k = 0; k < kParitySteps; ++k) {
      Batch b{random_tensor({24, 10}, DType::f32, 500 + k, -2, 2), Tensor::empty({24}, DType::i32)};
      for (int64_t i = 0; i < 24; ++i)
        b.targets.data<int32_t>()[i] = static_cast<int32_t>(below_at(stream_key(9, "parity/mlp"), k * 24 + i, 5));
      batches.push_back(std::move(b));
    }
    json r = run_torch_parity(model, cpu_backend(), batches, json{{"model", "mlp"}, {"activation", act}});
    INFO(r.dump());
    CHECK(r["loss_rel"].get<double>() < 1e-5);
    CHECK(r["grad_rel_max"].get<double>() < 1e-5);
    CHECK(r["steps_rel_max"].get<double>() < 1e-5);
  }
}
