// Runs one CUDA kernel of kernels/ on the emulated device over allocations of exactly the size it
// needs (cudaMalloc, so each ends against a guard page): `kernel_fault_worker add N LEN` adds two
// vectors of LEN floats in N-element launches and prints the sums; N > LEN runs past them, which
// the emulator must report as a GPU under compute-sanitizer would, then abort.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dl/backend/cuda/cuda_check.hpp"
#include "dl/backend/cuda/kernels.hpp"
#include "dl/backend/cuda/cuda_backend.hpp"

int main(int argc, char** argv) {
  if (argc != 4 || std::string(argv[1]) != "add") {
    std::fprintf(stderr, "usage: kernel_fault_worker add N LEN\n");
    return 2;
  }
  const long n = std::atol(argv[2]), len = std::atol(argv[3]);
  dl::cuda_backend();  // the backend's setup (the fault report's allocation lookup included)
  std::vector<float> a(static_cast<size_t>(len)), b(a.size()), out(a.size());
  for (long i = 0; i < len; ++i) a[static_cast<size_t>(i)] = static_cast<float>(i), b[static_cast<size_t>(i)] = 0.5f;
  const size_t bytes = a.size() * sizeof(float);
  void *da = nullptr, *db = nullptr, *dout = nullptr;
  DL_CUDA_CALL(cudaMalloc(&da, bytes), "a");
  DL_CUDA_CALL(cudaMalloc(&db, bytes), "b");
  DL_CUDA_CALL(cudaMalloc(&dout, bytes), "out");
  DL_CUDA_CALL(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice), "a");
  DL_CUDA_CALL(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice), "b");
  dl::cuda::add(dl::DType::f32, dout, da, db, n, nullptr);
  DL_CUDA_CALL(cudaMemcpy(out.data(), dout, bytes, cudaMemcpyDeviceToHost), "out");
  for (long i = 0; i < len; ++i) std::printf("%g\n", static_cast<double>(out[static_cast<size_t>(i)]));
  return 0;
}
