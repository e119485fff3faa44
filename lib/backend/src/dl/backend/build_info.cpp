#include "dl/backend/build_info.hpp"

#include <cblas.h>

namespace dl {

std::string build_info(const std::string& cuda_lines) {
  std::string s;
  s += "BLAS: OpenBLAS " DL_OPENBLAS_VERSION " (" + std::string(openblas_get_config()) + ")\n";
  if (!cuda_lines.empty()) {
    s += cuda_lines;
  } else {
#ifdef DL_CUDA_ARCHS  // defined on this file when the CUDA backend is built (lib/CMakeLists.txt)
    s += "CUDA backend: built (nvcc " DL_CUDA_COMPILER_VERSION ", architectures " DL_CUDA_ARCHS
         ") into dl-train and dl-bench; this tool does not link it\n";
#else
    s += "CUDA backend: not built (CPU only; no nvcc at configure time, or DL_CUDA=OFF)\n";
#endif
  }
#ifdef DL_WITH_GLOO
  s += "Gloo: yes\n";
#else
  s += "Gloo: not built\n";
#endif
  s += "compiler: " __VERSION__ "\n";
  return s;
}

}  // namespace dl
