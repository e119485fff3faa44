// Finding the GPU without throwing, choosing this process's device, and the versions of the
// CUDA libraries compiled in (for --version).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdlib>

#include "dl/device/cuda/cuda_backend.hpp"

#ifdef DL_HAVE_CUDNN
#include <cudnn.h>
#endif
#ifdef DL_HAVE_NCCL
#include <nccl.h>
#endif

namespace dl {

namespace {
std::string error_text(const char* call, cudaError_t e) {
  return str(call, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}
std::string version_3(int code, int major_div, int minor_div) {
  return str(code / major_div, ".", (code % major_div) / minor_div, ".", code % minor_div);
}
}  // namespace

int cuda_device_for_this_process(int device_count) {
  if (device_count <= 0) return 0;
  return cuda_process_options().local_rank % device_count;
}

CudaDeviceInfo cuda_probe() {
  CudaDeviceInfo info;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // leave no error behind for the next caller
    info.reason = error_text("cudaGetDeviceCount", e);
    return info;
  }
  info.device_count = count;
  if (count == 0) {
    info.reason = "cudaGetDeviceCount found no CUDA device";
    return info;
  }
  info.device = cuda_device_for_this_process(count);
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, info.device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    info.reason = error_text("cudaGetDeviceProperties", e);
    return info;
  }
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_bytes = prop.totalGlobalMem;
  e = cudaSetDevice(info.device);
  if (e == cudaSuccess) e = cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    info.reason = error_text("creating a context on the GPU", e);
    return info;
  }
  info.usable = true;
  return info;
}

std::string cuda_build_info() {
  std::string s;
  int runtime = 0, driver = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  cudaError_t de = cudaDriverGetVersion(&driver);
  (void)cudaGetLastError();
  s += str("CUDA backend: yes (nvcc ", DL_CUDA_COMPILER_VERSION, ", architectures ", DL_CUDA_ARCHS, "; runtime ",
           runtime / 1000, ".", (runtime % 1000) / 10, ", driver ",
           de == cudaSuccess && driver > 0 ? str(driver / 1000, ".", (driver % 1000) / 10) : std::string("none"),
           ")\n");
  // Loads cuBLASLt (cublas_loader.cpp): --version says whether this machine can.
  try {
    s += str("cuBLASLt: ", version_3(static_cast<int>(cublasLtGetVersion()), 10000, 100), " (built against ",
             CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR, ".", CUBLAS_VER_PATCH, ")\n");
  } catch (const Error& e) {
    s += str("cuBLASLt: cannot be loaded: ", e.what(), "\n");
  }
#ifdef DL_HAVE_CUDNN
  s += str("cuDNN: ", version_3(static_cast<int>(cudnnGetVersion()), 10000, 100), " (built against ", CUDNN_MAJOR,
           ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL, "; linked, not yet used by any op)\n");
#else
  s += "cuDNN: not built (not found at configure time)\n";
#endif
#ifdef DL_HAVE_NCCL
  int nccl = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess) nccl = 0;
  s += str("NCCL: ", version_3(nccl, 10000, 100), " (built against ", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH,
           "; device collectives; Gloo through host memory when ranks share a GPU)\n");
#else
  s += "NCCL: not built (not found at configure time)\n";
#endif
  return s;
}

}  // namespace dl
