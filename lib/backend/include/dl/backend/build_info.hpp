// What this build is made of (for --version): the BLAS, the CUDA backend, Gloo, the compiler. It
// lives with the backends, not in core/, so the ground floor never includes a backend
// (docs/ARCHITECTURE.md). The CUDA backend's own lines (runtime, driver, cuBLASLt, cuDNN, NCCL)
// need the device library: dl/device/build_info.hpp.
#pragma once
#include <string>

namespace dl {

// Multi-line description. `cuda_lines` describes the CUDA backend linked into the program
// (device_build_info() passes them); without them, what the build knew at configure time: the
// tools that do not link the device (dl-shard, dl-cost, dl-envlock) start without CUDA's libraries.
std::string build_info(const std::string& cuda_lines = {});

}  // namespace dl
