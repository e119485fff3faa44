// Runs one CUDA kernel of kernels/ on the emulated device over buffers of exactly the size it
// needs, then prints the sums:
//   kernel_fault_worker add N LEN [OUT]      two vectors of LEN floats into one of OUT (default LEN),
//                                            each its own cudaMalloc (ending against a guard page)
//   kernel_fault_worker tensors N LEN [OUT]  the same over tensors of the CUDA backend's arena
//                                            (fenced unless DL_CUDA_ARENA_FENCED=0)
// in one N-element launch. N > LEN or N > OUT runs past a buffer, which the emulator must report
// as a GPU under compute-sanitizer would, then abort.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/device/cuda/cuda_check.hpp"
#include "dl/device/cuda/kernels.hpp"
#include "dl/device/select.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if ((argc != 4 && argc != 5) || (mode != "add" && mode != "tensors")) {
    std::fprintf(stderr, "usage: kernel_fault_worker add|tensors N LEN [OUT]\n");
    return 2;
  }
  const long n = std::atol(argv[2]), len = std::atol(argv[3]), out_len = argc == 5 ? std::atol(argv[4]) : len;
  dl::prepare_cuda_process();  // the tools' options: DL_CUDA_ARENA_FENCED
  dl::CudaBackend& be = dl::cuda_backend();  // the backend's setup (the fault report's lookups included)
  std::vector<float> a(static_cast<size_t>(len)), b(a.size()), out(static_cast<size_t>(out_len));
  for (long i = 0; i < len; ++i) a[static_cast<size_t>(i)] = static_cast<float>(i), b[static_cast<size_t>(i)] = 0.5f;
  const size_t bytes = a.size() * sizeof(float), out_bytes = out.size() * sizeof(float);
  void *da = nullptr, *db = nullptr, *dout = nullptr;
  std::vector<dl::Tensor> tensors;  // keeps the arena's blocks alive
  if (mode == "add") {
    DL_CUDA_CALL(cudaMalloc(&da, bytes), "a");
    DL_CUDA_CALL(cudaMalloc(&db, bytes), "b");
    DL_CUDA_CALL(cudaMalloc(&dout, out_bytes), "out");
  } else {
    for (long size : {len, len, out_len}) tensors.push_back(be.empty({size}, dl::DType::f32));
    da = tensors[0].raw(), db = tensors[1].raw(), dout = tensors[2].raw();
  }
  DL_CUDA_CALL(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice), "a");
  DL_CUDA_CALL(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice), "b");
  dl::cuda::add(dl::DType::f32, dout, da, db, n, nullptr);
  DL_CUDA_CALL(cudaMemcpy(out.data(), dout, out_bytes, cudaMemcpyDeviceToHost), "out");
  for (long i = 0; i < out_len; ++i) std::printf("%g\n", static_cast<double>(out[static_cast<size_t>(i)]));
  return 0;
}
