// Checked CUDA and cuBLAS calls. A failure throws dl::Error(runtime) naming the call, the
// library's error name and text, and the context the caller gives (the op and its tensor
// sizes); the context is only formatted when the call failed.
#pragma once
#include <cublas_api.h>
#include <cuda_runtime.h>

#include <string>

#include "dl/core/error.hpp"

namespace dl::cuda {

[[noreturn]] void fail_cuda(cudaError_t code, const char* call, const std::string& context);
[[noreturn]] void fail_cublas(cublasStatus_t code, const char* call, const std::string& context);

}  // namespace dl::cuda

#define DL_CUDA_CALL(call, ...)                                                      \
  do {                                                                               \
    cudaError_t dl_cuda_err_ = (call);                                               \
    if (dl_cuda_err_ != cudaSuccess)                                                 \
      ::dl::cuda::fail_cuda(dl_cuda_err_, #call, ::dl::str(__VA_ARGS__));            \
  } while (0)

#define DL_CUBLAS_CALL(call, ...)                                                    \
  do {                                                                               \
    cublasStatus_t dl_cublas_st_ = (call);                                           \
    if (dl_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::dl::cuda::fail_cublas(dl_cublas_st_, #call, ::dl::str(__VA_ARGS__));         \
  } while (0)

// After a kernel launch: a bad launch configuration (or an earlier asynchronous fault) is
// reported here, naming the kernel and its sizes.
#define DL_KERNEL_CHECK(kernel_name, ...) \
  DL_CUDA_CALL(cudaGetLastError(), "launch of ", kernel_name, " ", __VA_ARGS__)
