// Reductions with a fixed order of operations (the same bits on every run and every GPU):
// column sums over row chunks (bias and LayerNorm parameter gradients) and whole-tensor sums in
// double (loss sums, gradient norms).
#include <algorithm>

#include "common.cuh"

namespace dl::cuda {

namespace {

// Column sums of x[N,C] over chunks of kColumnChunkRows rows (common.cuh's column_chunk_sum).
template <class T>
__global__ void column_sum_partial_kernel(float* partial, const T* x, int64_t N, int64_t C) {
  int64_t c;
  float s;
  if (column_chunk_sum(N, C, [=](int64_t r, int64_t col) { return to_f32(x[r * C + col]); }, c, s))
    partial[blockIdx.y * C + c] = s;
}

template <class T>
__global__ void column_sum_finish_kernel(T* dst, const float* partial, int64_t chunks, int64_t C, int64_t ld) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * ld + c];
  dst[c] = from_f32<T>(to_f32(dst[c]) + s);
}

// Grid-stride partial sums in double, one per block, then one block adds the partials in order.
template <class T>
__global__ void sum_partial_kernel(double* partial, const T* x, int64_t n, bool squares) {
  DL_SHARED_ARRAY(double, scratch, [32]);
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    double v = static_cast<double>(to_f32(x[i]));
    s += squares ? v * v : v;
  }
  s = block_reduce(s, scratch, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_finish_kernel(double* result, const double* partial, int n) {
  DL_SHARED_ARRAY(double, scratch, [32]);
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = block_reduce(s, scratch, SumOp{}, 0.0);
  if (threadIdx.x == 0) result[0] = s;
}

}  // namespace

void column_sum_partial(DType dt, float* partial, const void* x, int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(column_chunks(N)));
  dispatch_float(dt, "column_sum", [&](auto z) {
    using T = decltype(z);
    launch("column_sum_partial_kernel", column_sum_partial_kernel<T>, grid, dim3(32, 8), 0, stream, partial,
           static_cast<const T*>(x), N, C);
  });
  DL_KERNEL_CHECK("column_sum_partial_kernel", "N=", N, " C=", C);
}

void column_sum_finish(DType dt, void* dst, const float* partial, int64_t chunks, int64_t C, int64_t ld,
                       cudaStream_t stream) {
  if (C == 0) return;
  dispatch_float(dt, "column_sum", [&](auto z) {
    using T = decltype(z);
    launch("column_sum_finish_kernel", column_sum_finish_kernel<T>, grid_for(C, 256), 256, 0, stream,
           static_cast<T*>(dst), partial, chunks, C, ld);
  });
  DL_KERNEL_CHECK("column_sum_finish_kernel", "chunks=", chunks, " C=", C);
}

void sum_to_double(DType dt, double* result, double* partial, const void* x, int64_t n, bool squares,
                   cudaStream_t stream) {
  // As many blocks as have work, up to kSumBlocks: a function of n alone, so the order of the
  // additions (and the bits) is still fixed for a given tensor size.
  const int blocks = static_cast<int>(std::clamp<int64_t>((n + 255) / 256, 1, kSumBlocks));
  dispatch_float(dt, "sum", [&](auto z) {
    using T = decltype(z);
    launch("sum_partial_kernel", sum_partial_kernel<T>, blocks, 256, 0, stream, partial, static_cast<const T*>(x), n,
           squares);
  });
  DL_KERNEL_CHECK("sum_partial_kernel", "n=", n);
  launch("sum_finish_kernel", sum_finish_kernel, 1, 256, 0, stream, result, partial, blocks);
  DL_KERNEL_CHECK("sum_finish_kernel", "n=", n);
}

}  // namespace dl::cuda
