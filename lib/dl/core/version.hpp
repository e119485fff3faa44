// What this build is: version, git revision, and the libraries compiled in (for --version and
// for the environment snapshot in every run directory).
#pragma once
#include <string>

namespace dl {

std::string version_string();  // "0.1.0 (git 3c79c4a)"
// Multi-line description: BLAS, CUDA/cuDNN/NCCL (when built), Gloo, compiler.
std::string build_info();

}  // namespace dl
