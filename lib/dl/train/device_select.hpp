// Which backend a run trains on: train.device = "cpu" | "cuda" | "auto", checked against what
// this build has, what the machine has, and what the CUDA path supports so far (docs/CUDA.md).
#pragma once
#include "dl/backend/backend.hpp"
#include "dl/config/config.hpp"

namespace dl {

// "cuda": the GPU when one is usable, else Error(usage) saying why there is none (exit 2).
// "auto": the GPU when one is usable and the run's settings are supported there, else the CPU
// with a notice on stderr (when `log`).
Backend& select_backend(const Config& config, bool log);

}  // namespace dl
