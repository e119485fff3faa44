// LayerNorm over the last dimension (eps 1e-5, GPT-2): one warp per row, f32 statistics.
// Backward: one warp per row for the input gradient; the weight and bias gradients are column
// sums over fixed row chunks (reduce.cu finishes them), so they are deterministic.
#include "common.cuh"

namespace dl::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block
constexpr float kEps = 1e-5f;

template <class T>
__device__ void row_stats(const T* x, int64_t C, int lane, float& mean, float& rstd) {
  float s = 0.0f;
  for (int64_t c = lane; c < C; c += 32) s += to_f32(x[c]);
  mean = warp_sum(s) / static_cast<float>(C);
  float v = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float d = to_f32(x[c]) - mean;
    v += d * d;
  }
  rstd = rsqrtf(warp_sum(v) / static_cast<float>(C) + kEps);
}

template <class T>
__global__ void layernorm_forward_kernel(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N,
                                         int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (row >= N) return;
  const T* x = inp + row * C;
  float m, rs;
  row_stats(x, C, lane, m, rs);
  T* o = out + row * C;
  for (int64_t c = lane; c < C; c += 32) o[c] = from_f32<T>((to_f32(x[c]) - m) * rs * to_f32(w[c]) + to_f32(b[c]));
  if (lane == 0) {
    mean[row] = from_f32<T>(m);
    rstd[row] = from_f32<T>(rs);
  }
}

template <class T>
__global__ void layernorm_backward_input_kernel(T* dinp, float* mean32, float* rstd32, const T* dout, const T* inp,
                                                const T* w, const T* mean, const T* rstd, bool recompute_stats,
                                                int64_t N, int64_t C, bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* d = dout + row * C;
  float m, rs;
  if (recompute_stats) {
    row_stats(x, C, lane, m, rs);
  } else {
    m = to_f32(mean[row]);
    rs = to_f32(rstd[row]);
  }
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float norm = (to_f32(x[c]) - m) * rs;
    float dnorm = to_f32(w[c]) * to_f32(d[c]);
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean = warp_sum(dnorm_mean) / static_cast<float>(C);
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / static_cast<float>(C);
  T* dx = dinp + row * C;
  // dinp may alias dout only when not accumulating (each element is read, then written, by one
  // thread): the model never does that, but nothing here breaks if it did.
  for (int64_t c = lane; c < C; c += 32) {
    float norm = (to_f32(x[c]) - m) * rs;
    float dnorm = to_f32(w[c]) * to_f32(d[c]);
    float g = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
    dx[c] = from_f32<T>(accumulate ? to_f32(dx[c]) + g : g);
  }
  if (lane == 0) {
    mean32[row] = m;
    rstd32[row] = rs;
  }
}

template <class T>
__global__ void layernorm_params_partial_kernel(float* partial, const T* dout, const T* inp, const float* mean32,
                                                const float* rstd32, int64_t N, int64_t C) {
  DL_SHARED_ARRAY(float, acc_w, [8][33]);
  DL_SHARED_ARRAY(float, acc_b, [8][33]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = blockIdx.x * 32LL + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * kColumnChunkRows, r1 = min(N, r0 + kColumnChunkRows);
  float sw = 0.0f, sb = 0.0f;
  if (c < C) {
    for (int64_t r = r0 + ty; r < r1; r += 8) {
      float d = to_f32(dout[r * C + c]);
      float norm = (to_f32(inp[r * C + c]) - mean32[r]) * rstd32[r];
      sw += d * norm;
      sb += d;
    }
  }
  acc_w[ty][tx] = sw;
  acc_b[ty][tx] = sb;
  __syncthreads();
  if (ty == 0 && c < C) {
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < 8; ++k) {
      tw += acc_w[k][tx];
      tb += acc_b[k][tx];
    }
    partial[chunk * 2 * C + c] = tw;
    partial[chunk * 2 * C + C + c] = tb;
  }
}

}  // namespace

void layernorm_forward(DType dt, void* out, void* mean, void* rstd, const void* inp, const void* weight,
                       const void* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  dispatch_float(dt, "layernorm_forward", [&](auto z) {
    using T = decltype(z);
    launch("layernorm_forward_kernel", layernorm_forward_kernel<T>, blocks, 32 * kRowsPerBlock, 0, stream,
           static_cast<T*>(out), static_cast<T*>(mean), static_cast<T*>(rstd), static_cast<const T*>(inp),
           static_cast<const T*>(weight), static_cast<const T*>(bias), N, C);
  });
  DL_KERNEL_CHECK("layernorm_forward_kernel", "N=", N, " C=", C);
}

void layernorm_backward_input(DType dt, void* dinp, float* mean32, float* rstd32, const void* dout, const void* inp,
                              const void* weight, const void* mean, const void* rstd, bool recompute_stats,
                              int64_t N, int64_t C, bool accumulate, cudaStream_t stream) {
  if (N == 0) return;
  unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  dispatch_float(dt, "layernorm_backward", [&](auto z) {
    using T = decltype(z);
    launch("layernorm_backward_input_kernel", layernorm_backward_input_kernel<T>, blocks, 32 * kRowsPerBlock, 0, stream,
           static_cast<T*>(dinp), mean32, rstd32, static_cast<const T*>(dout), static_cast<const T*>(inp),
           static_cast<const T*>(weight), static_cast<const T*>(mean), static_cast<const T*>(rstd), recompute_stats, N,
           C, accumulate);
  });
  DL_KERNEL_CHECK("layernorm_backward_input_kernel", "N=", N, " C=", C);
}

void layernorm_backward_params_partial(DType dt, float* partial, const void* dout, const void* inp,
                                       const float* mean32, const float* rstd32, int64_t N, int64_t C,
                                       cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(column_chunks(N)));
  dispatch_float(dt, "layernorm_backward", [&](auto z) {
    using T = decltype(z);
    launch("layernorm_params_partial_kernel", layernorm_params_partial_kernel<T>, grid, dim3(32, 8), 0, stream, partial,
           static_cast<const T*>(dout), static_cast<const T*>(inp), mean32, rstd32, N, C);
  });
  DL_KERNEL_CHECK("layernorm_params_partial_kernel", "N=", N, " C=", C);
}

}  // namespace dl::cuda
