// dl-train --device cuda on the GPU against the CPU backend: the Llama model's kernels (RMSNorm,
// RoPE, SwiGLU, the GQA pack/unpack around the attention) inside training steps, as
// tests/cuda_emulated runs them on the emulated device (whose own suite runs this case there, so
// gpu_main.cpp leaves it out on that device). Needs a GPU like every case of test_cuda.
#include <doctest/doctest.h>

#include <string>

#include "support/device_runs.hpp"
#include "support/support.hpp"

using namespace dl::test;

// fp32 within 1e-4 (gpu-check's bar for the GPT: cuBLASLt picks its kernels per GPU, so sums run
// in another order than on the CPU; the emulated device meets 1e-5), bf16 within 2%.
TEST_CASE("dl-train on the GPU: 20 steps of a tiny llama equal the CPU backend's (GQA untied, MQA tied)") {
  TempDir dir("gpu-llama");
  check_tiny_llama_20_steps(dir.path(), 1e-4);
}
