// dl-bench on a GPU: the device description, cuBLASLt GEMMs and device copies. Declared in every
// build (no CUDA type appears here); defined only in CUDA builds (bench/cuda/cuda_bench.cpp), and
// called only under DL_HAVE_CUDA.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dl/bench/common.hpp"
#include "dl/bench/gemm.hpp"
#include "dl/plan/bench_input.hpp"

namespace dl::bench {

class GemmRunner;

struct CudaBenchDevice {
  bool usable = false;
  std::string why;        // why not usable (no driver, no device, ...)
  DeviceInfo info;        // device_type "cuda", name, canonical model, driver and runtime versions
  int64_t l2_bytes = 0;   // the last-level cache operand rotation must exceed
  double total_bytes = 0, free_bytes = 0;
  int device_count = 0;   // GPUs this process can see
};
// This process's GPU (cuda_device_for_this_process), probed without throwing.
CudaBenchDevice cuda_bench_device();

// C = A B in row-major on the GPU through cuBLASLt: fp32 (CUBLAS_COMPUTE_32F), tf32
// (32F_FAST_TF32), bf16 and fp16 (16-bit A, B and C, fp32 accumulation) - the call torch.matmul
// makes for contiguous operands of that dtype. Calls are timed with CUDA events.
std::unique_ptr<GemmRunner> make_cuda_gemm(const GemmShape& shape, MathPrecision dtype, int sets, uint64_t seed);

// Device copies: d2d (cudaMemcpyAsync device to device), h2d and d2h (pinned host memory). Per-copy seconds by CUDA events over `pairs` rotating buffer pairs, and the sampled
// check of the last copy into each pair.
struct CudaCopyResult {
  std::vector<double> seconds;
  int checked = 0, wrong = 0;
};
CudaCopyResult time_cuda_copy(plan::CopyDirection direction, int64_t bytes, int pairs, int warmup, int repeat);

// Seconds per call of run(i) for `repeat` calls after `warmup` untimed ones, one CUDA event pair
// around each on the CUDA backend's stream (where dlkit's kernels and NCCL collectives run), so
// back-to-back calls are timed as the GPU ran them. `wait` is called before the events are read
// (NCCL's wait, which gives up after its timeout instead of hanging on a lost peer).
std::vector<double> time_on_backend_stream(int warmup, int repeat, const std::function<void(int)>& run,
                                           const std::function<void()>& wait);

}  // namespace dl::bench
