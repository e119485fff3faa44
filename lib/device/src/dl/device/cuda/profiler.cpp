#include "dl/device/cuda/profiler.hpp"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include "dl/device/cuda/cuda_check.hpp"

namespace dl {

void cuda_profiler_start() {
  DL_CUDA_CALL(cudaDeviceSynchronize(), "before opening the profiled range (DL_CUDA_PROFILE_STEP)");
  DL_CUDA_CALL(cudaProfilerStart(), "opening the profiled range (DL_CUDA_PROFILE_STEP)");
}

void cuda_profiler_stop() {
  DL_CUDA_CALL(cudaDeviceSynchronize(), "closing the profiled range (DL_CUDA_PROFILE_STEP)");
  DL_CUDA_CALL(cudaProfilerStop(), "closing the profiled range (DL_CUDA_PROFILE_STEP)");
}

}  // namespace dl
