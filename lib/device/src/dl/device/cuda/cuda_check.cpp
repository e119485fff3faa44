#include "dl/device/cuda/cuda_check.hpp"

namespace dl::cuda {

void fail_cuda(cudaError_t code, const char* call, const std::string& context) {
  std::string hint;
  if (code == cudaErrorMemoryAllocation) hint = " (the GPU is out of memory: lower the batch size)";
  if (code == cudaErrorIllegalAddress || code == cudaErrorLaunchFailure)
    hint = " (a kernel faulted; the op named may be a later one: rerun with DL_CUDA_SYNC=1 to stop at the first)";
  throw_runtime("CUDA error in ", context, ": ", call, " returned ", cudaGetErrorName(code), " (",
                cudaGetErrorString(code), ")", hint);
}

void fail_cublas(cublasStatus_t code, const char* call, const std::string& context) {
  throw_runtime("cuBLAS error in ", context, ": ", call, " returned ", cublasGetStatusName(code), " (",
                cublasGetStatusString(code), ")");
}

}  // namespace dl::cuda
