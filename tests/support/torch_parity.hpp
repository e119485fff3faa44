// The whole model against PyTorch (tests/scripts/torch_parity.py): the same initial weights and
// batches, the first forward/backward's loss and gradients, and the losses of 10 AdamW steps with
// clipping through the training loop's own optimizer path (the ZeRO engine on one rank). Shared by
// the CPU parity test (tests/nn) and the GPU one (tests/cuda).
#pragma once
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "dl/backend/backend.hpp"
#include "dl/nn/model.hpp"

namespace dl::test {

inline constexpr int kParitySteps = 10;

// Initializes the model's parameters (seed 42), runs it on `batches` (kParitySteps of them, on
// the host), writes what the Python reference needs, runs it with torch_python() and returns its
// JSON verdict: loss_rel, grad_rel_max (and grad_worst), steps_rel_max. `spec` carries the
// model's shape and may say "device": "cuda" to run PyTorch on the GPU. `be` is the model's
// backend (it copies device tensors to the host). `adjust`, when given, changes the initial
// weights after initialization (biases that start at zero set away from it).
nlohmann::json run_torch_parity(Model& model, Backend& be, const std::vector<Batch>& batches, nlohmann::json spec,
                                const std::function<void(ParamSet&)>& adjust = {});

}  // namespace dl::test
