#include "dl/backend/build_info.hpp"

#include <cblas.h>

#ifdef DL_HAVE_CUDA
#include "dl/backend/cuda/cuda_backend.hpp"
#endif

namespace dl {

std::string build_info() {
  std::string s;
  s += "BLAS: OpenBLAS " DL_OPENBLAS_VERSION " (" + std::string(openblas_get_config()) + ")\n";
#ifdef DL_HAVE_CUDA
  s += cuda_build_info();
#else
  s += "CUDA backend: not built (CPU only; no nvcc at configure time, or DL_CUDA=OFF)\n";
#endif
#ifdef DL_WITH_GLOO
  s += "Gloo: yes\n";
#else
  s += "Gloo: not built\n";
#endif
  s += "compiler: " __VERSION__ "\n";
  return s;
}

}  // namespace dl
