// Token + position embeddings, forward and backward. The token-embedding gradient is a scatter
// with collisions (a token repeats in a batch); instead of float atomics, the host groups the
// rows by token (counting sort) and one block per distinct token adds its rows in order, so the
// sums are the same on every run.
#include "common.cuh"

namespace dl::cuda {

namespace {

template <class T>
__global__ void encoder_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t BT,
                                       int64_t T_, int64_t C, int64_t v0, int64_t rows) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < BT * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i % C;
    const int64_t tok = static_cast<int64_t>(tokens[r]) - v0;
    float v = tok >= 0 && tok < rows ? to_f32(wte[tok * C + c]) : 0.0f;
    if (wpe) v += to_f32(wpe[(r % T_) * C + c]);
    out[i] = from_f32<T>(v);
  }
}

// Block u: token row row_ids[u]; threads stride over channels; rows in ascending order.
template <class T>
__global__ void encoder_backward_wte_kernel(T* dwte, const T* dout, const int32_t* row_ids, const int32_t* offsets,
                                            const int32_t* rows_of, int64_t C) {
  const int64_t u = blockIdx.x;
  const int64_t row = row_ids[u];
  const int32_t b = offsets[u], e = offsets[u + 1];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.0f;
    for (int32_t k = b; k < e; ++k) s += to_f32(dout[static_cast<int64_t>(rows_of[k]) * C + c]);
    dwte[row * C + c] = from_f32<T>(to_f32(dwte[row * C + c]) + s);
  }
}

template <class T>
__global__ void encoder_backward_wpe_kernel(T* dwpe, const T* dout, int64_t B, int64_t T_, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T_ * C; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t b = 0; b < B; ++b) s += to_f32(dout[b * T_ * C + i]);
    dwpe[i] = from_f32<T>(to_f32(dwpe[i]) + s);
  }
}

}  // namespace

void encoder_forward(DType dt, void* out, const int32_t* tokens, const void* wte, const void* wpe, int64_t B,
                     int64_t T, int64_t C, int64_t v0, int64_t rows, cudaStream_t stream) {
  if (B * T * C == 0) return;
  dispatch_float(dt, "encoder_forward", [&](auto z) {
    using E = decltype(z);
    launch("encoder_forward_kernel", encoder_forward_kernel<E>, grid_for(B * T * C, 256), 256, 0, stream,
           static_cast<E*>(out), tokens, static_cast<const E*>(wte), static_cast<const E*>(wpe), B * T, T, C, v0, rows);
  });
  DL_KERNEL_CHECK("encoder_forward_kernel", "B=", B, " T=", T, " C=", C);
}

void encoder_backward_wte(DType dt, void* dwte, const void* dout, const int32_t* row_ids, const int32_t* offsets,
                          const int32_t* rows_of, int64_t n_unique, int64_t C, cudaStream_t stream) {
  if (n_unique == 0 || C == 0) return;
  DL_CHECK(n_unique < (1LL << 31), "too many distinct tokens: ", n_unique);
  int threads = C >= 256 ? 256 : 32 * static_cast<int>((C + 31) / 32);
  dispatch_float(dt, "encoder_backward", [&](auto z) {
    using E = decltype(z);
    launch("encoder_backward_wte_kernel", encoder_backward_wte_kernel<E>, static_cast<unsigned>(n_unique), threads, 0,
           stream, static_cast<E*>(dwte), static_cast<const E*>(dout), row_ids, offsets, rows_of, C);
  });
  DL_KERNEL_CHECK("encoder_backward_wte_kernel", "distinct tokens=", n_unique, " C=", C);
}

void encoder_backward_wpe(DType dt, void* dwpe, const void* dout, int64_t B, int64_t T, int64_t C,
                          cudaStream_t stream) {
  if (T * C == 0) return;
  dispatch_float(dt, "encoder_backward", [&](auto z) {
    using E = decltype(z);
    launch("encoder_backward_wpe_kernel", encoder_backward_wpe_kernel<E>, grid_for(T * C, 256), 256, 0, stream,
           static_cast<E*>(dwpe), static_cast<const E*>(dout), B, T, C);
  });
  DL_KERNEL_CHECK("encoder_backward_wpe_kernel", "B=", B, " T=", T, " C=", C);
}

}  // namespace dl::cuda
