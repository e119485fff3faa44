// Softmax cross-entropy over the vocabulary, one block per row: the row max (and argmax), the sum
// of exponentials and the loss in one kernel, reading the logits from memory twice and never
// writing the probabilities; backward writes (softmax - onehot) * dloss, in place if asked.
// Pieces for the vocabulary-parallel loss (row max, sum of exponentials, target pick) too.
#include "common.cuh"

namespace dl::cuda {

namespace {

constexpr int kThreads = 512;

// Row max and the first index holding it (ties go to the smaller index, as on the CPU).
template <class T>
__device__ void block_argmax(const T* l, int64_t V, float* sval, int* sidx, float& mx, int64_t& am) {
  float best = -INFINITY;
  int64_t bi = V;  // "none yet": loses every tie
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    float v = to_f32(l[j]);
    if (bi == V || v > best) {  // a thread's indices rise, so strict > keeps the first maximum
      best = v;
      bi = j;
    }
  }
  // Combine within the warp, then across warps, preferring the larger value, then the smaller index.
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, best, o);
    int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) {
      best = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) {
    sval[warp] = best;
    sidx[warp] = static_cast<int>(bi);
  }
  __syncthreads();
  best = lane < nwarps ? sval[lane] : -INFINITY;
  bi = lane < nwarps ? sidx[lane] : V;
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, best, o);
    int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) {
      best = ov;
      bi = oi;
    }
  }
  mx = best;
  am = bi;
}

template <class T>
__device__ float block_row_max(const T* l, int64_t V, float* scratch) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, to_f32(l[j]));
  return block_reduce(m, scratch, MaxOp{}, -INFINITY);
}

template <class T>
__device__ float block_sum_exp(const T* l, int64_t V, float mx, float* scratch) {
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(to_f32(l[j]) - mx);
  return block_reduce(s, scratch, SumOp{}, 0.0f);
}

template <class T, class L>
__global__ void crossentropy_forward_kernel(L* losses, int32_t* correct, const T* logits, const int32_t* targets,
                                            int64_t V) {
  DL_SHARED_ARRAY(float, sval, [32]);
  DL_SHARED_ARRAY(float, scratch, [32]);
  DL_SHARED_ARRAY(int, sidx, [32]);
  const int64_t r = blockIdx.x;
  const T* l = logits + r * V;
  const int32_t t = targets[r];
  float mx;
  int64_t am;
  block_argmax(l, V, sval, sidx, mx, am);
  if (t < 0) {
    if (threadIdx.x == 0) {
      losses[r] = from_f32<L>(0.0f);
      if (correct) correct[r] = 0;
    }
    return;
  }
  float s = block_sum_exp(l, V, mx, scratch);
  if (threadIdx.x == 0) {
    losses[r] = from_f32<L>(logf(s) + mx - to_f32(l[t]));
    if (correct) correct[r] = am == t ? 1 : 0;
  }
}

template <class T>
__global__ void crossentropy_backward_kernel(T* dlogits, const T* logits, const int32_t* targets, int64_t V,
                                             float dloss) {
  DL_SHARED_ARRAY(float, scratch, [32]);
  const int64_t r = blockIdx.x;
  const T* l = logits + r * V;
  T* d = dlogits + r * V;
  const int32_t t = targets[r];
  if (t < 0) {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) d[j] = from_f32<T>(0.0f);
    return;
  }
  float mx = block_row_max(l, V, scratch);
  float s = block_sum_exp(l, V, mx, scratch);
  float k = dloss / s;
  // Each element is read and then written by the same thread, so dlogits may be logits.
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    d[j] = from_f32<T>(expf(to_f32(l[j]) - mx) * k - (j == t ? dloss : 0.0f));
}

template <class T>
__global__ void argmax_kernel(int32_t* out, const T* logits, int64_t V) {
  DL_SHARED_ARRAY(float, sval, [32]);
  DL_SHARED_ARRAY(int, sidx, [32]);
  float mx;
  int64_t am;
  block_argmax(logits + blockIdx.x * V, V, sval, sidx, mx, am);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(am);
}

template <class T>
__global__ void row_max_kernel(T* row_max, const T* logits, int64_t V) {
  DL_SHARED_ARRAY(float, scratch, [32]);
  float m = block_row_max(logits + blockIdx.x * V, V, scratch);
  if (threadIdx.x == 0) row_max[blockIdx.x] = from_f32<T>(m);
}

template <class T>
__global__ void sum_exp_kernel(T* sum_exp, const T* logits, const T* row_max, int64_t V) {
  DL_SHARED_ARRAY(float, scratch, [32]);
  float s = block_sum_exp(logits + blockIdx.x * V, V, to_f32(row_max[blockIdx.x]), scratch);
  if (threadIdx.x == 0) sum_exp[blockIdx.x] = from_f32<T>(s);
}

template <class T>
__global__ void pick_kernel(T* picked, const T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t v0) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= N) return;
  const int64_t t = static_cast<int64_t>(targets[r]) - v0;
  picked[r] = targets[r] >= 0 && t >= 0 && t < V ? logits[r * V + t] : from_f32<T>(0.0f);
}

template <class T>
__global__ void crossentropy_backward_sharded_kernel(T* dlogits, const T* logits, const int32_t* targets,
                                                     const T* row_max, const T* sum_exp, int64_t V, int64_t v0,
                                                     float dloss) {
  const int64_t r = blockIdx.x;
  const T* l = logits + r * V;
  T* d = dlogits + r * V;
  if (targets[r] < 0) {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) d[j] = from_f32<T>(0.0f);
    return;
  }
  const float mx = to_f32(row_max[r]), k = dloss / to_f32(sum_exp[r]);
  const int64_t t = static_cast<int64_t>(targets[r]) - v0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    d[j] = from_f32<T>(expf(to_f32(l[j]) - mx) * k - (j == t ? dloss : 0.0f));
}

void check_rows(int64_t N, const char* op) {
  DL_CHECK(N < (1LL << 31), op, ": ", N, " rows exceed one launch");
}

}  // namespace

void crossentropy_forward(DType dt, DType loss_t, void* losses, int32_t* correct, const void* logits,
                          const int32_t* targets, int64_t N, int64_t V, cudaStream_t stream) {
  if (N == 0) return;
  check_rows(N, "crossentropy_forward");
  dispatch_float(dt, "crossentropy_forward", [&](auto z) {
    using T = decltype(z);
    dispatch_float(loss_t, "crossentropy_forward (losses)", [&](auto y) {
      using L = decltype(y);
      launch("crossentropy_forward_kernel", crossentropy_forward_kernel<T, L>, static_cast<unsigned>(N), kThreads, 0,
             stream, static_cast<L*>(losses), correct, static_cast<const T*>(logits), targets, V);
    });
  });
  DL_KERNEL_CHECK("crossentropy_forward_kernel", "N=", N, " V=", V);
}

void crossentropy_backward(DType dt, void* dlogits, const void* logits, const int32_t* targets, int64_t N,
                           int64_t V, float dloss, cudaStream_t stream) {
  if (N == 0) return;
  check_rows(N, "crossentropy_backward");
  dispatch_float(dt, "crossentropy_backward", [&](auto z) {
    using T = decltype(z);
    launch("crossentropy_backward_kernel", crossentropy_backward_kernel<T>, static_cast<unsigned>(N), kThreads, 0,
           stream, static_cast<T*>(dlogits), static_cast<const T*>(logits), targets, V, dloss);
  });
  DL_KERNEL_CHECK("crossentropy_backward_kernel", "N=", N, " V=", V);
}

void argmax(DType dt, int32_t* out, const void* logits, int64_t N, int64_t V, cudaStream_t stream) {
  if (N == 0) return;
  check_rows(N, "argmax");
  dispatch_float(dt, "argmax", [&](auto z) {
    using T = decltype(z);
    launch("argmax_kernel", argmax_kernel<T>, static_cast<unsigned>(N), kThreads, 0, stream, out,
           static_cast<const T*>(logits), V);
  });
  DL_KERNEL_CHECK("argmax_kernel", "N=", N, " V=", V);
}

void logits_row_max(DType dt, void* row_max, const void* logits, int64_t N, int64_t V, cudaStream_t stream) {
  if (N == 0) return;
  check_rows(N, "logits_row_max");
  dispatch_float(dt, "logits_row_max", [&](auto z) {
    using T = decltype(z);
    launch("row_max_kernel", row_max_kernel<T>, static_cast<unsigned>(N), kThreads, 0, stream, static_cast<T*>(row_max),
           static_cast<const T*>(logits), V);
  });
  DL_KERNEL_CHECK("row_max_kernel", "N=", N, " V=", V);
}

void logits_sum_exp(DType dt, void* sum_exp, const void* logits, const void* row_max, int64_t N, int64_t V,
                    cudaStream_t stream) {
  if (N == 0) return;
  check_rows(N, "logits_sum_exp");
  dispatch_float(dt, "logits_sum_exp", [&](auto z) {
    using T = decltype(z);
    launch("sum_exp_kernel", sum_exp_kernel<T>, static_cast<unsigned>(N), kThreads, 0, stream, static_cast<T*>(sum_exp),
           static_cast<const T*>(logits), static_cast<const T*>(row_max), V);
  });
  DL_KERNEL_CHECK("sum_exp_kernel", "N=", N, " V=", V);
}

void logits_pick(DType dt, void* picked, const void* logits, const int32_t* targets, int64_t N, int64_t V,
                 int64_t v0, cudaStream_t stream) {
  if (N == 0) return;
  dispatch_float(dt, "logits_pick", [&](auto z) {
    using T = decltype(z);
    launch("pick_kernel", pick_kernel<T>, grid_for(N, 256), 256, 0, stream, static_cast<T*>(picked),
           static_cast<const T*>(logits), targets, N, V, v0);
  });
  DL_KERNEL_CHECK("pick_kernel", "N=", N, " V=", V);
}

void crossentropy_backward_sharded(DType dt, void* dlogits, const void* logits, const int32_t* targets,
                                   const void* row_max, const void* sum_exp, int64_t N, int64_t V, int64_t v0,
                                   float dloss, cudaStream_t stream) {
  if (N == 0) return;
  check_rows(N, "crossentropy_backward_sharded");
  dispatch_float(dt, "crossentropy_backward_sharded", [&](auto z) {
    using T = decltype(z);
    launch("crossentropy_backward_sharded_kernel", crossentropy_backward_sharded_kernel<T>, static_cast<unsigned>(N),
           kThreads, 0, stream, static_cast<T*>(dlogits), static_cast<const T*>(logits), targets,
           static_cast<const T*>(row_max), static_cast<const T*>(sum_exp), V, v0, dloss);
  });
  DL_KERNEL_CHECK("crossentropy_backward_sharded_kernel", "N=", N, " V=", V);
}

}  // namespace dl::cuda
