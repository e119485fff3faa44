// The Llama family's ops (lib/nn/llama.*): RMSNorm, rotary position embedding (rotate-half),
// SwiGLU and the grouped K/V pack/unpack around the attention kernel. f32 arithmetic on f32, bf16
// or f16 storage, each result rounded once. RMSNorm: one block per row; its weight gradient is a
// column sum over fixed row chunks (reduce.cu finishes it), so it is deterministic. The rest are
// grid-stride loops; unpack sums each K/V head's group in a fixed order, no atomics.
#include "common.cuh"

namespace dl::cuda {

namespace {

constexpr int kThreads = 256;

// Threads per row for RMSNorm: about 8 columns each, a whole number of warps, at most 1024.
int rms_threads(int64_t C) {
  const int64_t warps = (C + 8 * 32 - 1) / (8 * 32);
  return static_cast<int>(32 * (warps < 1 ? 1 : warps > 32 ? 32 : warps));
}

template <class T>
__global__ void rmsnorm_forward_kernel(T* out, T* rstd, const T* inp, const T* w, int64_t C, float eps) {
  DL_SHARED_ARRAY(float, scratch, [32]);
  const int64_t row = blockIdx.x;
  const T* x = inp + row * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = to_f32(x[c]);
    ss += v * v;
  }
  ss = block_reduce(ss, scratch, SumOp{}, 0.0f);
  const float rs = rsqrtf(ss / static_cast<float>(C) + eps);
  T* o = out + row * C;
  // out may be inp: each element is read, then written, by one thread.
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = from_f32<T>(to_f32(x[c]) * rs * to_f32(w[c]));
  if (threadIdx.x == 0) rstd[row] = from_f32<T>(rs);
}

// y = w x r with r = (mean(x^2) + eps)^-1/2: dx = r w dy - x r^3 mean(w dy x). The saved rstd is
// used as the CPU does (the op takes no eps to recompute it with).
template <class T>
__global__ void rmsnorm_backward_input_kernel(T* dinp, const T* dout, const T* inp, const T* w, const T* rstd,
                                              int64_t C, bool accumulate) {
  DL_SHARED_ARRAY(float, scratch, [32]);
  const int64_t row = blockIdx.x;
  const T* x = inp + row * C;
  const T* d = dout + row * C;
  const float rs = to_f32(rstd[row]);
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += to_f32(w[c]) * to_f32(d[c]) * to_f32(x[c]);
  dot = block_reduce(dot, scratch, SumOp{}, 0.0f);
  const float k = dot / static_cast<float>(C) * rs * rs * rs;
  T* dx = dinp + row * C;
  // dinp may be dout when not accumulating: each element is read, then written, by one thread
  // (the weight gradient has read dout before this kernel runs).
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = rs * to_f32(w[c]) * to_f32(d[c]) - to_f32(x[c]) * k;
    dx[c] = from_f32<T>(accumulate ? to_f32(dx[c]) + g : g);
  }
}

// partial[k][c] = sum over chunk k's rows of dout * inp * rstd (common.cuh's column_chunk_sum).
template <class T>
__global__ void rmsnorm_weight_partial_kernel(float* partial, const T* dout, const T* inp, const T* rstd, int64_t N,
                                              int64_t C) {
  int64_t c;
  float s;
  auto term = [=](int64_t r, int64_t col) {
    return to_f32(dout[r * C + col]) * to_f32(inp[r * C + col]) * to_f32(rstd[r]);
  };
  if (column_chunk_sum(N, C, term, c, s)) partial[blockIdx.y * C + c] = s;
}

// One thread per pair (i, i + hs/2) of a head: rotated by t * inv_freq[i] (sign -1: back). The
// angle is formed in f32 as on the CPU; cosf/sinf reduce large angles (t up to the context) exactly.
template <class T>
__global__ void rope_kernel(T* out, const T* inp, const float* inv_freq, int64_t n_pairs, int64_t Tn, int64_t H,
                            int64_t half, float sign) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n_pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p % half, head = p / half;  // head: (b*T + t)*H + h
    const int64_t t = (head / H) % Tn;
    const float angle = static_cast<float>(t) * inv_freq[i];
    const float c = cosf(angle), s = sign * sinf(angle);
    const int64_t at = head * 2 * half + i;
    const float x1 = to_f32(inp[at]), x2 = to_f32(inp[at + half]);  // both read first: out may be inp
    out[at] = from_f32<T>(x1 * c - x2 * s);
    out[at + half] = from_f32<T>(x2 * c + x1 * s);
  }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <class T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = to_f32(gate[i]);
    out[i] = from_f32<T>(g * sigmoid(g) * to_f32(up[i]));
  }
}

// d silu(g) / dg = s (1 + g (1 - s)) with s = sigmoid(g).
template <class T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = to_f32(gate[i]), u = to_f32(up[i]), d = to_f32(dout[i]), s = sigmoid(g);
    dgate[i] = from_f32<T>(d * u * s * (1.0f + g * (1.0f - s)));
    dup[i] = from_f32<T>(d * g * s);
  }
}

// Between q[BT,C], k and v [BT,Ckv] and qkv[BT,3C], query head h reading K/V head h / group: one
// thread per element of q, k and v. Pack copies a K/V element into its group's query heads' slots
// (no rounding); unpack (qkv is then dqkv, q/k/v the gradients) sums those slots in head order in
// f32, rounded once, so no two threads write one element and no atomics are needed.
template <class T, bool kPack>
__global__ void qkv_kernel(T* qkv, T* q, T* k, T* v, int64_t n, int64_t C, int64_t Ckv, int64_t hs, int64_t group) {
  const int64_t width = C + 2 * Ckv;  // elements of q, k and v per row
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / width, j = e % width;
    T* row = qkv + r * 3 * C;
    if (j < C) {
      if (kPack) row[j] = q[r * C + j];
      else q[r * C + j] = row[j];
      continue;
    }
    const int64_t is_v = (j - C) / Ckv, within = (j - C) % Ckv;
    T* kv = (is_v ? v : k) + r * Ckv + within;
    T* slot = row + (1 + is_v) * C + within / hs * group * hs + within % hs;  // the group's first head
    if (kPack) {
      const T x = *kv;
      for (int64_t h = 0; h < group; ++h) slot[h * hs] = x;
    } else {
      float s = 0.0f;
      for (int64_t h = 0; h < group; ++h) s += to_f32(slot[h * hs]);
      *kv = from_f32<T>(s);
    }
  }
}

}  // namespace

void rmsnorm_forward(DType dt, void* out, void* rstd, const void* inp, const void* weight, int64_t N, int64_t C,
                     float eps, cudaStream_t stream) {
  if (N == 0) return;
  dispatch_float(dt, "rmsnorm_forward", [&](auto z) {
    using T = decltype(z);
    launch("rmsnorm_forward_kernel", rmsnorm_forward_kernel<T>, static_cast<unsigned>(N), rms_threads(C), 0, stream,
           static_cast<T*>(out), static_cast<T*>(rstd), static_cast<const T*>(inp), static_cast<const T*>(weight), C,
           eps);
  });
  DL_KERNEL_CHECK("rmsnorm_forward_kernel", "N=", N, " C=", C);
}

void rmsnorm_backward(DType dt, void* dinp, float* partial, void* dweight, const void* dout, const void* inp,
                      const void* weight, const void* rstd, int64_t N, int64_t C, bool accumulate,
                      cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(column_chunks(N)));
  dispatch_float(dt, "rmsnorm_backward", [&](auto z) {
    using T = decltype(z);
    // The weight gradient first: dinp may be dout.
    launch("rmsnorm_weight_partial_kernel", rmsnorm_weight_partial_kernel<T>, grid, dim3(32, 8), 0, stream, partial,
           static_cast<const T*>(dout), static_cast<const T*>(inp), static_cast<const T*>(rstd), N, C);
    DL_KERNEL_CHECK("rmsnorm_weight_partial_kernel", "N=", N, " C=", C);
    launch("rmsnorm_backward_input_kernel", rmsnorm_backward_input_kernel<T>, static_cast<unsigned>(N), rms_threads(C),
           0, stream, static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp),
           static_cast<const T*>(weight), static_cast<const T*>(rstd), C, accumulate);
    DL_KERNEL_CHECK("rmsnorm_backward_input_kernel", "N=", N, " C=", C);
  });
  column_sum_finish(dt, dweight, partial, column_chunks(N), C, C, stream);
}

void rope(DType dt, void* out, const void* inp, const float* inv_freq, int64_t B, int64_t T, int64_t H, int64_t hs,
          int sign, cudaStream_t stream) {
  const int64_t n_pairs = B * T * H * (hs / 2);
  if (n_pairs == 0) return;
  dispatch_float(dt, sign > 0 ? "rope_forward" : "rope_backward", [&](auto z) {
    using S = decltype(z);
    launch("rope_kernel", rope_kernel<S>, grid_for(n_pairs, kThreads), kThreads, 0, stream, static_cast<S*>(out),
           static_cast<const S*>(inp), inv_freq, n_pairs, T, H, hs / 2, static_cast<float>(sign));
  });
  DL_KERNEL_CHECK("rope_kernel", "B=", B, " T=", T, " H=", H, " hs=", hs);
}

void swiglu_forward(DType dt, void* out, const void* gate, const void* up, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, "swiglu_forward", [&](auto z) {
    using T = decltype(z);
    launch("swiglu_forward_kernel", swiglu_forward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream,
           static_cast<T*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), n);
  });
  DL_KERNEL_CHECK("swiglu_forward_kernel", "n=", n);
}

void swiglu_backward(DType dt, void* dgate, void* dup, const void* dout, const void* gate, const void* up, int64_t n,
                     cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, "swiglu_backward", [&](auto z) {
    using T = decltype(z);
    launch("swiglu_backward_kernel", swiglu_backward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream,
           static_cast<T*>(dgate), static_cast<T*>(dup), static_cast<const T*>(dout), static_cast<const T*>(gate),
           static_cast<const T*>(up), n);
  });
  DL_KERNEL_CHECK("swiglu_backward_kernel", "n=", n);
}

// q, k, v and qkv as the kernel takes them: pack reads q/k/v and writes qkv, unpack the reverse.
static void qkv_launch(const char* op, bool pack, DType dt, void* qkv, void* q, void* k, void* v, int64_t BT, int64_t H,
                       int64_t Hkv, int64_t hs, cudaStream_t stream) {
  const int64_t C = H * hs, Ckv = Hkv * hs, n = BT * (C + 2 * Ckv);
  if (n == 0) return;
  dispatch_float(dt, op, [&](auto z) {
    using T = decltype(z);
    launch(pack ? "qkv_pack_kernel" : "qkv_unpack_kernel", pack ? qkv_kernel<T, true> : qkv_kernel<T, false>,
           grid_for(n, kThreads), kThreads, 0, stream, static_cast<T*>(qkv), static_cast<T*>(q), static_cast<T*>(k),
           static_cast<T*>(v), n, C, Ckv, hs, H / Hkv);
  });
  DL_KERNEL_CHECK(pack ? "qkv_pack_kernel" : "qkv_unpack_kernel", "BT=", BT, " H=", H, " Hkv=", Hkv, " hs=", hs);
}

void qkv_pack(DType dt, void* qkv, const void* q, const void* k, const void* v, int64_t BT, int64_t H, int64_t Hkv,
              int64_t hs, cudaStream_t stream) {
  qkv_launch("qkv_pack", true, dt, qkv, const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), BT, H, Hkv,
             hs, stream);
}

void qkv_unpack(DType dt, void* dq, void* dk, void* dv, const void* dqkv, int64_t BT, int64_t H, int64_t Hkv,
                int64_t hs, cudaStream_t stream) {
  qkv_launch("qkv_unpack", false, dt, const_cast<void*>(dqkv), dq, dk, dv, BT, H, Hkv, hs, stream);
}

}  // namespace dl::cuda
