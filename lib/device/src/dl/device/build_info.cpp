#include "dl/device/build_info.hpp"

#include "dl/backend/build_info.hpp"
#ifdef DL_HAVE_CUDA
#include "dl/device/cuda/cuda_backend.hpp"
#endif

namespace dl {

std::string device_build_info() {
#ifdef DL_HAVE_CUDA
  return build_info(cuda_build_info());
#else
  return build_info();
#endif
}

}  // namespace dl
