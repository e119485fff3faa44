// The whole GPT on the GPU against PyTorch on the same GPU (tests/scripts/torch_parity.py with
// "device": "cuda", TF32 off): the same initial weights and batches give the same loss and
// gradients, and the same losses over 10 AdamW steps with clipping. The Python is
// $DL_TORCH_PYTHON (scripts/gpu-check.sh points it at the GPU machine's PyTorch). On the
// emulated device the reference is PyTorch on the CPU.
#include <doctest/doctest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/core/rng.hpp"
#include "dl/device/select.hpp"
#include "dl/nn/gpt.hpp"
#include "support/support.hpp"
#include "support/torch_parity.hpp"

using namespace dl;
using namespace dl::test;
using nlohmann::json;

TEST_CASE("GPT on the GPU: loss, gradients and 10 AdamW steps match PyTorch on the GPU") {
  // A shape that takes the GEMM, attention (head size 64, T not a multiple of the tiles) and
  // cross-entropy paths the 124M model takes, small enough for the reference's T x T attention.
  // On the emulated device (CI, every CUDA thread a fiber on the CPU: 104 s of CPU at this shape)
  // one block of two rows takes the same paths; a GPU runs the whole shape.
  const bool emulated = cuda_device_is_emulated();
  GptConfig c;
  c.n_layer = emulated ? 1 : 2;
  c.n_head = 4;
  c.n_embd = 256;
  c.block_size = 100;
  c.vocab_size = 1000;
  const int64_t B = emulated ? 2 : 4, T = 100;
  GptModel model(c, cuda_backend(), DType::f32);
  std::vector<Batch> batches;
  for (int k = 0; k < kParitySteps; ++k) {
    Batch b{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
    const uint64_t key = stream_key(11, "parity/gpt-cuda/" + std::to_string(k));
    for (int64_t i = 0; i < B * T; ++i) {
      b.inputs.data<int32_t>()[i] = static_cast<int32_t>(below_at(key, i, 1000));
      b.targets.data<int32_t>()[i] = i % 7 == 3 ? -1 : static_cast<int32_t>(below_at(key, i, 1000, 1));
    }
    batches.push_back(std::move(b));
  }
  // The emulated device has no PyTorch of its own: the reference runs on the CPU (fp32).
  const char* torch_device = emulated ? "cpu" : "cuda";
  json spec{{"model", "gpt"}, {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}, {"device", torch_device}};
  json r = run_torch_parity(model, cuda_backend(), batches, spec);
  INFO(r.dump());
  // Both sides compute in fp32 on the same GPU but sum in different orders (cuBLASLt's and
  // PyTorch's kernels, our flash attention against the explicit softmax): a few ulps per op.
  CHECK(r["loss_rel"].get<double>() < 1e-5);
  CHECK(r["grad_rel_max"].get<double>() < 1e-4);
  CHECK(r["steps_rel_max"].get<double>() < 1e-4);
}
