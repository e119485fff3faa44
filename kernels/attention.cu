// Causal multi-head attention, flash style (Dao et al. 2022, FlashAttention-2's split of the
// backward pass): no T x T matrix is ever stored. Written for correctness first: f32 arithmetic
// from shared-memory tiles, no tensor cores.
//
// Layout: qkv[B,T,3C] holds q | k | v; head h owns columns [h*hs, (h+1)*hs) of each. A block
// serves one (batch, head) pair and one tile of 16 rows (4 warps x 4 rows): for each row a warp
// takes 32 keys (or queries) at a time, one per lane, and each lane owns dims lane + 32e of
// the row's accumulators (hs <= 128, so e < 4).
//
// forward:   online softmax over key tiles -> out, and lse = max + log(sum) per row.
// backward:  delta_i = rowsum(dO_i * O_i) from the forward's output (attention_mma::delta);
//            then dQ per query tile and dK, dV per key tile, each recomputing
//            P_ij = exp(s_ij - lse_i). No atomics: every output row has one owner.
#include <cstdlib>
#include <cstring>

#include "attention_mma.cuh"
#include "common.cuh"

namespace dl::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;      // 16 rows of the owned side per block
constexpr int kTile = 32;                                 // rows of the other side per step
constexpr int kDimsPerLane = static_cast<int>(kMaxHeadSize / 32);  // 4

struct Dims {
  int T, C, H, hs;
  __host__ __device__ int64_t C3() const { return 3LL * C; }
};

// Forward: out and lse.
template <class E>
__global__ void __launch_bounds__(kWarps * 32) attention_forward_kernel(E* out, float* lse, const E* qkv, Dims dm,
                                                                       float scale) {
  DL_DYNAMIC_SHARED(float, smem);
  const int hs = dm.hs;
  float* sq = smem;                               // [kRowsPerBlock][hs], scaled
  float* sk = sq + kRowsPerBlock * hs;            // [kTile][hs + 1]
  float* sv = sk + kTile * (hs + 1);              // [kTile][hs]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int bh = blockIdx.x, b = bh / dm.H, h = bh % dm.H;
  const int i0 = blockIdx.y * kRowsPerBlock;
  const int64_t C3 = dm.C3();
  const E* base = qkv + static_cast<int64_t>(b) * dm.T * C3 + static_cast<int64_t>(h) * hs;

  for (int idx = threadIdx.x; idx < kRowsPerBlock * hs; idx += blockDim.x) {
    const int r = idx / hs, d = idx % hs, i = i0 + r;
    sq[idx] = i < dm.T ? to_f32(base[static_cast<int64_t>(i) * C3 + d]) * scale : 0.0f;
  }
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int e = 0; e < kDimsPerLane; ++e) o[rr][e] = 0.0f;
  }
  const int last = min(i0 + kRowsPerBlock, dm.T) - 1;  // the block needs keys [0, last]
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and sq is written, the first time)
    for (int idx = threadIdx.x; idx < kTile * hs; idx += blockDim.x) {
      const int kk = idx / hs, d = idx % hs, j = j0 + kk;
      float kv = 0.0f, vv = 0.0f;
      if (j < dm.T) {
        kv = to_f32(base[static_cast<int64_t>(j) * C3 + dm.C + d]);
        vv = to_f32(base[static_cast<int64_t>(j) * C3 + 2 * dm.C + d]);
      }
      sk[kk * (hs + 1) + d] = kv;
      sv[kk * hs + d] = vv;
    }
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr, i = i0 + r;
      if (i >= dm.T || j0 > i) continue;  // uniform across the warp
      const int j = j0 + lane;
      float s = -INFINITY;
      if (j <= i) {
        float acc = 0.0f;
        for (int d = 0; d < hs; ++d) acc += sq[r * hs + d] * sk[lane * (hs + 1) + d];
        s = acc;
      }
      const float m_new = fmaxf(m[rr], warp_max(s));  // finite: key j0 <= i is in this tile
      const float p = expf(s - m_new);                // 0 for masked keys
      const float alpha = expf(m[rr] - m_new);        // 0 on the first tile (m = -inf)
      l[rr] = l[rr] * alpha + warp_sum(p);
#pragma unroll
      for (int e = 0; e < kDimsPerLane; ++e) o[rr][e] *= alpha;
      const int kmax = min(kTile, i - j0 + 1);
      for (int kk = 0; kk < kmax; ++kk) {
        const float pk = __shfl_sync(0xffffffffu, p, kk);
#pragma unroll
        for (int e = 0; e < kDimsPerLane; ++e) {
          const int d = lane + 32 * e;
          if (d < hs) o[rr][e] += pk * sv[kk * hs + d];
        }
      }
      m[rr] = m_new;
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = i0 + warp * kRowsPerWarp + rr;
    if (i >= dm.T) continue;
    const float inv = 1.0f / l[rr];
    const int64_t orow = (static_cast<int64_t>(b) * dm.T + i) * dm.C + static_cast<int64_t>(h) * hs;
    const int64_t srow = static_cast<int64_t>(bh) * dm.T + i;
#pragma unroll
    for (int e = 0; e < kDimsPerLane; ++e) {
      const int d = lane + 32 * e;
      if (d < hs) out[orow + d] = from_f32<E>(o[rr][e] * inv);
    }
    if (lane == 0) lse[srow] = m[rr] + logf(l[rr]);
  }
}

// dQ_i = scale * sum_{j <= i} dS_ij k_j, dS_ij = P_ij (dO_i . v_j - delta_i).
template <class E>
__global__ void __launch_bounds__(kWarps * 32) attention_backward_dq_kernel(E* dqkv, const E* dout, const E* qkv,
                                                                           const float* lse, const float* delta,
                                                                           Dims dm, float scale) {
  DL_DYNAMIC_SHARED(float, smem);
  const int hs = dm.hs;
  float* sq = smem;                        // [kRowsPerBlock][hs]
  float* sdo = sq + kRowsPerBlock * hs;    // [kRowsPerBlock][hs]
  float* sk = sdo + kRowsPerBlock * hs;    // [kTile][hs + 1]
  float* sv = sk + kTile * (hs + 1);       // [kTile][hs + 1]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int bh = blockIdx.x, b = bh / dm.H, h = bh % dm.H;
  const int i0 = blockIdx.y * kRowsPerBlock;
  const int64_t C3 = dm.C3();
  const E* base = qkv + static_cast<int64_t>(b) * dm.T * C3 + static_cast<int64_t>(h) * hs;
  const E* dbase = dout + static_cast<int64_t>(b) * dm.T * dm.C + static_cast<int64_t>(h) * hs;

  for (int idx = threadIdx.x; idx < kRowsPerBlock * hs; idx += blockDim.x) {
    const int r = idx / hs, d = idx % hs, i = i0 + r;
    const bool in = i < dm.T;
    sq[idx] = in ? to_f32(base[static_cast<int64_t>(i) * C3 + d]) : 0.0f;
    sdo[idx] = in ? to_f32(dbase[static_cast<int64_t>(i) * dm.C + d]) : 0.0f;
  }
  float L[kRowsPerWarp], D[kRowsPerWarp], dq[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = i0 + warp * kRowsPerWarp + rr;
    L[rr] = i < dm.T ? lse[static_cast<int64_t>(bh) * dm.T + i] : 0.0f;
    D[rr] = i < dm.T ? delta[static_cast<int64_t>(bh) * dm.T + i] : 0.0f;
#pragma unroll
    for (int e = 0; e < kDimsPerLane; ++e) dq[rr][e] = 0.0f;
  }
  const int last = min(i0 + kRowsPerBlock, dm.T) - 1;
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * hs; idx += blockDim.x) {
      const int kk = idx / hs, d = idx % hs, j = j0 + kk;
      float kv = 0.0f, vv = 0.0f;
      if (j < dm.T) {
        kv = to_f32(base[static_cast<int64_t>(j) * C3 + dm.C + d]);
        vv = to_f32(base[static_cast<int64_t>(j) * C3 + 2 * dm.C + d]);
      }
      sk[kk * (hs + 1) + d] = kv;
      sv[kk * (hs + 1) + d] = vv;
    }
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr, i = i0 + r;
      if (i >= dm.T || j0 > i) continue;
      const int j = j0 + lane;
      float ds = 0.0f;
      if (j <= i) {
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < hs; ++d) {
          s += sq[r * hs + d] * sk[lane * (hs + 1) + d];
          dp += sdo[r * hs + d] * sv[lane * (hs + 1) + d];
        }
        const float p = expf(s * scale - L[rr]);
        ds = p * (dp - D[rr]);
      }
      const int kmax = min(kTile, i - j0 + 1);
      for (int kk = 0; kk < kmax; ++kk) {
        const float dsk = __shfl_sync(0xffffffffu, ds, kk);
#pragma unroll
        for (int e = 0; e < kDimsPerLane; ++e) {
          const int d = lane + 32 * e;
          if (d < hs) dq[rr][e] += dsk * sk[kk * (hs + 1) + d];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = i0 + warp * kRowsPerWarp + rr;
    if (i >= dm.T) continue;
    E* row = dqkv + (static_cast<int64_t>(b) * dm.T + i) * C3 + static_cast<int64_t>(h) * hs;
#pragma unroll
    for (int e = 0; e < kDimsPerLane; ++e) {
      const int d = lane + 32 * e;
      if (d < hs) row[d] = from_f32<E>(dq[rr][e] * scale);
    }
  }
}

// dK_j = scale * sum_{i >= j} dS_ij q_i and dV_j = sum_{i >= j} P_ij dO_i, per tile of 16 keys.
template <class E>
__global__ void __launch_bounds__(kWarps * 32) attention_backward_dkv_kernel(E* dqkv, const E* dout, const E* qkv,
                                                                            const float* lse, const float* delta,
                                                                            Dims dm, float scale) {
  DL_DYNAMIC_SHARED(float, smem);
  const int hs = dm.hs;
  float* sk = smem;                        // [kRowsPerBlock][hs]: this block's keys
  float* sv = sk + kRowsPerBlock * hs;     // [kRowsPerBlock][hs]
  float* sq = sv + kRowsPerBlock * hs;     // [kTile][hs + 1]: a tile of queries
  float* sdo = sq + kTile * (hs + 1);      // [kTile][hs + 1]
  float* sl = sdo + kTile * (hs + 1);      // [kTile]
  float* sd = sl + kTile;                  // [kTile]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int bh = blockIdx.x, b = bh / dm.H, h = bh % dm.H;
  const int j0 = blockIdx.y * kRowsPerBlock;
  const int64_t C3 = dm.C3();
  const E* base = qkv + static_cast<int64_t>(b) * dm.T * C3 + static_cast<int64_t>(h) * hs;
  const E* dbase = dout + static_cast<int64_t>(b) * dm.T * dm.C + static_cast<int64_t>(h) * hs;

  for (int idx = threadIdx.x; idx < kRowsPerBlock * hs; idx += blockDim.x) {
    const int r = idx / hs, d = idx % hs, j = j0 + r;
    const bool in = j < dm.T;
    sk[idx] = in ? to_f32(base[static_cast<int64_t>(j) * C3 + dm.C + d]) : 0.0f;
    sv[idx] = in ? to_f32(base[static_cast<int64_t>(j) * C3 + 2 * dm.C + d]) : 0.0f;
  }
  float dk[kRowsPerWarp][kDimsPerLane], dv[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
    for (int e = 0; e < kDimsPerLane; ++e) dk[rr][e] = dv[rr][e] = 0.0f;

  for (int q0 = j0 - j0 % kTile; q0 < dm.T; q0 += kTile) {  // queries i >= j0 only
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * hs; idx += blockDim.x) {
      const int kk = idx / hs, d = idx % hs, i = q0 + kk;
      const bool in = i < dm.T;
      sq[kk * (hs + 1) + d] = in ? to_f32(base[static_cast<int64_t>(i) * C3 + d]) : 0.0f;
      sdo[kk * (hs + 1) + d] = in ? to_f32(dbase[static_cast<int64_t>(i) * dm.C + d]) : 0.0f;
    }
    if (threadIdx.x < kTile) {
      const int i = q0 + threadIdx.x;
      sl[threadIdx.x] = i < dm.T ? lse[static_cast<int64_t>(bh) * dm.T + i] : 0.0f;
      sd[threadIdx.x] = i < dm.T ? delta[static_cast<int64_t>(bh) * dm.T + i] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr, j = j0 + r;
      if (j >= dm.T || q0 + kTile - 1 < j) continue;  // every query of the tile precedes key j
      const int i = q0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i < dm.T && i >= j) {
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < hs; ++d) {
          s += sq[lane * (hs + 1) + d] * sk[r * hs + d];
          dp += sdo[lane * (hs + 1) + d] * sv[r * hs + d];
        }
        p = expf(s * scale - sl[lane]);
        ds = p * (dp - sd[lane]);
      }
      const int kbeg = max(0, j - q0), kend = min(kTile, dm.T - q0);
      for (int kk = kbeg; kk < kend; ++kk) {
        const float pk = __shfl_sync(0xffffffffu, p, kk);
        const float dsk = __shfl_sync(0xffffffffu, ds, kk);
#pragma unroll
        for (int e = 0; e < kDimsPerLane; ++e) {
          const int d = lane + 32 * e;
          if (d < hs) {
            dv[rr][e] += pk * sdo[kk * (hs + 1) + d];
            dk[rr][e] += dsk * sq[kk * (hs + 1) + d];
          }
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int j = j0 + warp * kRowsPerWarp + rr;
    if (j >= dm.T) continue;
    E* row = dqkv + (static_cast<int64_t>(b) * dm.T + j) * C3 + static_cast<int64_t>(h) * hs;
#pragma unroll
    for (int e = 0; e < kDimsPerLane; ++e) {
      const int d = lane + 32 * e;
      if (d < hs) {
        row[dm.C + d] = from_f32<E>(dk[rr][e] * scale);
        row[2 * dm.C + d] = from_f32<E>(dv[rr][e]);
      }
    }
  }
}

Dims make_dims(int64_t T, int64_t C, int H) {
  DL_CHECK(H > 0 && C % H == 0, "attention: C=", C, " not divisible by ", H, " heads");
  const int64_t hs = C / H;
  if (hs > kMaxHeadSize)
    throw_runtime("attention: head size ", hs, " (C=", C, ", ", H, " heads) exceeds the CUDA kernel's limit of ",
                  kMaxHeadSize);
  DL_CHECK(T < (1LL << 30) && C < (1LL << 30), "attention: T=", T, " C=", C, " too large");
  return Dims{static_cast<int>(T), static_cast<int>(C), H, static_cast<int>(hs)};
}

dim3 make_grid(int64_t B, int64_t T, int H) {
  const int64_t tiles = (T + kRowsPerBlock - 1) / kRowsPerBlock;
  DL_CHECK(tiles <= 65535, "attention: T=", T, " needs more than 65535 row tiles");
  return dim3(static_cast<unsigned>(B * H), static_cast<unsigned>(tiles));
}

// Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KB.
template <class K>
void allow_smem(K kernel, size_t bytes, const char* name) {
  if (bytes > 48 * 1024)
    DL_CUDA_CALL(set_max_dynamic_shared(kernel, static_cast<int>(bytes)),
                 "raising the shared-memory limit of ", name, " to ", bytes, " bytes");
}

// The tensor-core kernels (attention_mma.cuh) take bf16 and f16 at head sizes 32, 64 and 128 on
// sm_80 and newer, with 16-byte aligned tensors; DL_CUDA_ATTENTION=simt keeps the f32 kernels
// above for every case (a comparison, or a way around a fault).
bool use_tensor_cores(DType dt, int head_size, std::initializer_list<const void*> tensors) {
  static const bool enabled = [] {
    const char* v = std::getenv("DL_CUDA_ATTENTION");
    if (v && *v && std::strcmp(v, "mma") != 0 && std::strcmp(v, "simt") != 0)
      throw_usage("DL_CUDA_ATTENTION=", v, ": use mma (tensor cores where they apply, the default) or simt");
    return !(v && std::strcmp(v, "simt") == 0);
  }();
  static const int major = [] {
    int device = 0, m = 0;
    DL_CUDA_CALL(cudaGetDevice(&device), "attention: the current device");
    DL_CUDA_CALL(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, device), "attention: compute capability");
    return m;
  }();
  if (!enabled || major < 8 || (dt != DType::bf16 && dt != DType::f16) || !attention_mma::supports_head_size(head_size))
    return false;
  for (const void* p : tensors)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Runs fn(E{}) for the 16-bit types the tensor-core kernels take.
template <class F>
void dispatch_16bit(DType dt, F&& fn) {
  if (dt == DType::bf16) fn(bf16{});
  else fn(f16{});
}

}  // namespace

void attention_forward(DType dt, void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t C, int H,
                       cudaStream_t stream) {
  if (B * T == 0) return;
  const Dims dm = make_dims(T, C, H);
  if (use_tensor_cores(dt, dm.hs, {out, qkv})) {
    dispatch_16bit(dt, [&](auto z) {
      using E = decltype(z);
      attention_mma::forward(static_cast<E*>(out), lse, static_cast<const E*>(qkv), B,
                             attention_mma::Dims{dm.T, dm.C, dm.H}, stream,
                             [](auto k, size_t bytes, const char* name) { allow_smem(k, bytes, name); },
                             [&](const char* name) { DL_KERNEL_CHECK(name, "B=", B, " T=", T, " C=", C, " H=", H); });
    });
    return;
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.hs));
  const size_t smem = sizeof(float) * (kRowsPerBlock * dm.hs + kTile * (dm.hs + 1) + kTile * dm.hs);
  dispatch_float(dt, "attention_forward", [&](auto z) {
    using E = decltype(z);
    auto kernel = attention_forward_kernel<E>;
    allow_smem(kernel, smem, "attention_forward_kernel");
    launch("attention_forward_kernel", kernel, make_grid(B, T, H), kWarps * 32, smem, stream, static_cast<E*>(out), lse,
           static_cast<const E*>(qkv), dm, scale);
  });
  DL_KERNEL_CHECK("attention_forward_kernel", "B=", B, " T=", T, " C=", C, " H=", H);
}

void attention_backward(DType dt, void* dqkv, float* delta, const void* dout, const void* qkv, const void* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int H, cudaStream_t stream) {
  if (B * T == 0) return;
  const Dims dm = make_dims(T, C, H);
  auto check = [&](const char* name) { DL_KERNEL_CHECK(name, "B=", B, " T=", T, " C=", C, " H=", H); };
  if (use_tensor_cores(dt, dm.hs, {dqkv, dout, qkv})) {
    dispatch_16bit(dt, [&](auto z) {
      using E = decltype(z);
      attention_mma::backward(static_cast<E*>(dqkv), delta, static_cast<const E*>(dout), static_cast<const E*>(qkv),
                              static_cast<const E*>(out), lse, B, attention_mma::Dims{dm.T, dm.C, dm.H}, stream,
                              [](auto k, size_t bytes, const char* name) { allow_smem(k, bytes, name); }, check);
    });
    return;
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.hs));
  const dim3 grid = make_grid(B, T, H);
  const size_t smem_dq = sizeof(float) * (2 * kRowsPerBlock * dm.hs + 2 * kTile * (dm.hs + 1));
  const size_t smem_dkv = sizeof(float) * (2 * kRowsPerBlock * dm.hs + 2 * kTile * (dm.hs + 1) + 2 * kTile);
  dispatch_float(dt, "attention_backward", [&](auto z) {
    using E = decltype(z);
    const E* q = static_cast<const E*>(qkv);
    const E* dO = static_cast<const E*>(dout);
    E* dq = static_cast<E*>(dqkv);
    attention_mma::delta(delta, dO, static_cast<const E*>(out), B, attention_mma::Dims{dm.T, dm.C, dm.H}, stream,
                         check);
    auto k_dq = attention_backward_dq_kernel<E>;
    allow_smem(k_dq, smem_dq, "attention_backward_dq_kernel");
    launch("attention_backward_dq_kernel", k_dq, grid, kWarps * 32, smem_dq, stream, dq, dO, q, lse, delta, dm, scale);
    DL_KERNEL_CHECK("attention_backward_dq_kernel", "B=", B, " T=", T, " C=", C, " H=", H);
    auto k_dkv = attention_backward_dkv_kernel<E>;
    allow_smem(k_dkv, smem_dkv, "attention_backward_dkv_kernel");
    launch("attention_backward_dkv_kernel", k_dkv, grid, kWarps * 32, smem_dkv, stream, dq, dO, q, lse, delta, dm,
           scale);
    DL_KERNEL_CHECK("attention_backward_dkv_kernel", "B=", B, " T=", T, " C=", C, " H=", H);
  });
}

}  // namespace dl::cuda
