// What this build's backends are made of (for --version): the BLAS, the CUDA backend with
// cuDNN/NCCL when built, Gloo, the compiler. It lives with the backends, not in core/, so the
// ground floor never includes a backend (docs/ARCHITECTURE.md, issue 17).
#pragma once
#include <string>

namespace dl {

// Multi-line description: BLAS, CUDA/cuDNN/NCCL (when built), Gloo, compiler.
std::string build_info();

}  // namespace dl
