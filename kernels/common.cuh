// Shared pieces of the CUDA kernels: f32 <-> storage type conversion, dtype dispatch, warp and
// block reductions, launch checks. Kernels see the machine through device.cuh.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "device.cuh"
#include "dl/device/cuda/cuda_check.hpp"
#include "dl/device/cuda/kernels.hpp"
#include "dl/core/error.hpp"

namespace dl::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;  // IEEE binary16 (DType::f16)

// Storage types widen exactly to f32; f32 results round once, to nearest even (an f16 result
// beyond 65504 becomes +-Inf, which fp16 loss scaling detects as an overflow).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(f16 x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ f16 from_f32<f16>(float x) {
  return __float2half_rn(x);
}

// Calls fn(T{}) with T = float, bf16 or f16 per `dt`; other dtypes are an error naming the op.
template <class F>
void dispatch_float(DType dt, const char* op, F&& fn) {
  switch (dt) {
    case DType::f32: fn(float{}); break;
    case DType::bf16: fn(bf16{}); break;
    case DType::f16: fn(f16{}); break;
    default: throw_runtime(op, ": the CUDA backend takes f32, bf16 or f16 tensors, got ", dtype_name(dt));
  }
}

inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < max_blocks ? b : max_blocks);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide reductions for blockDim.x a multiple of 32 (at most 1024). `scratch` holds 32
// values; every thread gets the result. The order of operations is fixed by the thread layout.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, T* scratch, Op op, T identity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? scratch[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) r = op(r, __shfl_xor_sync(0xffffffffu, r, o));
  return r;
}

// Column sums over row chunks, in a fixed order: block (32 columns x 8 row lanes), grid (column
// tiles, chunks of kColumnChunkRows rows). Each row lane sums term(r, c) over every 8th row of the
// chunk in order; the 8 lane sums are then added in order. True in the one thread per column
// (ty == 0, c < C) that holds the chunk's sum of column c in `sum`.
template <class Term>
__device__ __forceinline__ bool column_chunk_sum(int64_t N, int64_t C, Term term, int64_t& c, float& sum) {
  DL_SHARED_ARRAY(float, acc, [8][33]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  c = blockIdx.x * 32LL + tx;
  const int64_t r0 = blockIdx.y * kColumnChunkRows, r1 = min(N, r0 + kColumnChunkRows);
  float s = 0.0f;
  if (c < C)
    for (int64_t r = r0 + ty; r < r1; r += 8) s += term(r, c);
  acc[ty][tx] = s;
  __syncthreads();
  if (ty != 0 || c >= C) return false;
  sum = 0.0f;
  for (int k = 0; k < 8; ++k) sum += acc[k][tx];
  return true;
}

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

}  // namespace dl::cuda
