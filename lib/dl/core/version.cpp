#include "dl/core/version.hpp"

#include <cblas.h>

namespace dl {

std::string version_string() {
  std::string rev = DL_GIT_REV;
  return std::string(DL_VERSION) + (rev.empty() ? "" : " (git " + rev + ")");
}

std::string build_info() {
  std::string s;
  s += "BLAS: OpenBLAS " DL_OPENBLAS_VERSION " (" + std::string(openblas_get_config()) + ")\n";
#ifdef DL_WITH_CUDA
  s += "CUDA backend: yes\n";
#else
  s += "CUDA backend: not built (CPU only)\n";
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
