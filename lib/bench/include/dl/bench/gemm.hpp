// dl-bench gemm: achieved FLOP/s of C = A B against the device's dense peak, with the result
// checked on a sample of entries against a double-precision reference. Method: docs/BENCH.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dl/bench/common.hpp"

namespace dl::bench {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;  // C[m,n] = A[m,k] B[k,n]
  bool operator==(const GemmShape&) const = default;
};

// --sizes: comma-separated items, each N (the square N x N x N) or MxNxK:
// "1024,4096,8192", "4096x4096x1024", "512,8192x1024x4096". Usage error naming the item otherwise.
std::vector<GemmShape> parse_gemm_sizes(const std::string& text);

// fp32 | tf32 | bf16 | fp16; anything else is a usage error ({dtype}) listing them.
MathPrecision parse_gemm_dtype(const std::string& text);

// FLOPs of one GEMM: 2 m n k (one multiply and one add per term of every dot product).
double gemm_flops(const GemmShape& s);

// The largest error a correct GEMM may have on one entry, relative to sum_p |a_ip b_pj|:
// gamma_k = k u / (1 - k u) (Higham, Accuracy and Stability of Numerical Algorithms, 3.5), with u
// the unit roundoff of the accumulation (fp32: 2^-24), plus the rounding of the inputs to tf32
// (2^-11), bf16 (2^-8) or fp16 (2^-11) where they are rounded.
double gemm_error_bound(int64_t k, MathPrecision dtype);

struct GemmOptions {
  Choice<MathPrecision> dtype = MathPrecision::fp32;
  std::vector<GemmShape> sizes;  // empty: the device's default sizes
  int samples = 64;              // entries checked per size
};

// One row per size (schema dlkit-bench/1, benchmark "gemm"). A sampled entry outside
// gemm_error_bound is a failure in the report.
Report run_gemm(const GemmOptions& options, const CommonOptions& common);

// The CPU's peak, estimated from the measured sgemm: the fastest single OpenBLAS sgemm run this
// process has seen at the current thread count, from a calibration (5 runs each at 1024^3 and
// 2048^3, done on first use per thread count) and from every run of the gemm benchmark.
struct MeasuredPeak {
  double flops = 0;
  std::string source;  // "measured: fastest OpenBLAS sgemm run in this process (...), 2 threads"
};
MeasuredPeak cpu_sgemm_peak();
// Raises the estimate with a rate measured at the current thread count.
void note_cpu_sgemm_rate(double flops);

}  // namespace dl::bench
