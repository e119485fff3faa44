// The device half of dl-bench gemm: one device's GEMM C = A B (row-major) over rotating operand
// sets, timed and read back for the sampled check. gemm.cpp holds the CPU one (OpenBLAS); a CUDA
// build adds one over cuBLASLt (bench/cuda/cuda_bench.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dl/bench/gemm.hpp"

namespace dl::bench {

class GemmRunner {
 public:
  virtual ~GemmRunner() = default;
  virtual std::string library() const = 0;
  // Per-call seconds of `repeat` timed calls after `warmup` untimed ones, cycling the sets.
  virtual std::vector<double> time_calls(int warmup, int repeat) = 0;
  // Row i of A and column j of B of a set as the device holds them (after rounding to dtype),
  // and C[i, j] as computed.
  virtual std::vector<double> a_row(int set, int64_t i) const = 0;
  virtual std::vector<double> b_col(int set, int64_t j) const = 0;
  virtual double c_at(int set, int64_t i, int64_t j) const = 0;
};

// Bytes of one operand set: A and B in `dtype`, C in the output type (fp32 for fp32/tf32, else
// the 16-bit input type, as torch.matmul returns it on a GPU; the CPU writes fp32).
double gemm_set_bytes(const GemmShape& s, MathPrecision dtype, bool device);

}  // namespace dl::bench
