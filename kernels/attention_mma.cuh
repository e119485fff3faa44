// Causal attention on tensor cores for bf16 and f16 (f32 accumulation and softmax):
// FlashAttention-2 (Dao 2023) with mma.sync.m16n8k16, for head sizes 32, 64 and 128.
// kernels/attention.cu dispatches here and keeps its f32 kernel for f32 and other head sizes;
// tests/kernels/ runs this same source on the CPU under the warp emulator (warp_ops.cuh).
//
// Layout as attention.cu: qkv[B,T,3C] = q | k | v, head h owns columns [h*HS, (h+1)*HS) of each;
// out and dout [B,T,C]; lse and delta [B*H, T] f32 (lse in natural-log units, as the f32 kernel
// writes it, so either backward reads either forward's state).
//
// A block owns 64 rows (4 warps x 16) of one (batch, head) and walks the other side in tiles of
// 64 rows staged in shared memory (rows padded by 8 elements, so each fragment load touches 32
// distinct banks); operands that a product needs with the other dimension contiguous are staged
// transposed as well. Softmax in base 2 with the scale folded in (exp2 of s * scale * log2 e).
// 16-bit roundings beyond the inputs: P before P.V and dS before dS.K / dS^T.Q (as FA2 does),
// and the outputs.
//   forward:  S = Q K^T, online softmax, O += P V; out = O / l, lse = (m + log2 l) ln 2.
//   delta:    rowsum(dO * O) from the forward's output, one warp per row and head (also used by
//             attention.cu's f32 kernels).
//   dQ:       per query tile: S, dP = dO V^T, dS = P (dP - delta), dQ += dS K.
//   dK, dV:   per key tile: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q.
// Every output row has one owner: no atomics, the same bits on every run.
#pragma once
#include "warp_ops.cuh"

namespace dl::cuda::attention_mma {

using warp::load_a;
using warp::load_b;
using warp::pack_a;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 64;  // rows a block owns (16 per warp), and rows of the other side per step
constexpr int kPad = 8;    // 16-bit elements added to every shared row
constexpr int kTStride = kTile + kPad;  // row stride of the transposed [HS][kTile] tiles
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct Dims {
  int T, C, H;
};

// Rows [row0, row0 + kTile) of the HS columns at `src` (row stride `stride` elements) into the
// shared tile [kTile][HS + kPad] and/or its transpose [HS][kTStride]; rows at or past T are zero.
// 16-byte global loads: the caller checked that every row start is 16-byte aligned.
template <int HS, class E>
__device__ __forceinline__ void load_tile(uint16_t* tile, uint16_t* transposed, const E* src, int64_t stride, int row0, int T) {
  constexpr int kChunks = HS / 8;
  for (int idx = static_cast<int>(threadIdx.x); idx < kTile * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    uint4 v{0u, 0u, 0u, 0u};
    if (row0 + r < T) v = warp::load_u128(src + static_cast<int64_t>(row0 + r) * stride + c);
    if (tile) warp::store_u128(tile + r * (HS + kPad) + c, v);
    if (transposed) {
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int k = 0; k < 8; ++k)
        transposed[(c + k) * kTStride + r] = static_cast<uint16_t>((k & 1) ? w[k / 2] >> 16 : w[k / 2] & 0xffffu);
    }
  }
}

// S (16 x kTile per warp) = A B^T over HS: A as fragments, B's rows in a shared [kTile][HS+kPad] tile.
template <class E, int HS>
__device__ __forceinline__ void rows_times_tile(float (&s)[kTile / 8][4], const uint32_t (&a)[HS / 16][4], const uint16_t* tile, int g,
                            int t) {
#pragma unroll
  for (int nb = 0; nb < kTile / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nb][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HS / 16; ++ks) {
      uint32_t b[2];
      load_b(b, tile + nb * 8 * (HS + kPad) + ks * 16, HS + kPad, g, t);
      warp::mma_16816<E>(s[nb], a[ks], b);
    }
  }
}

// acc (16 x HS) += P (16 x kTile, f32 accumulators rounded to E) * M, M[k][n] = transposed[n][k].
template <class E, int HS>
__device__ __forceinline__ void accumulate_times_tile(float (&acc)[HS / 8][4], const float (&p)[kTile / 8][4],
                                  const uint16_t* transposed, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    uint32_t a[4];
    pack_a<E>(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) {
      uint32_t b[2];
      load_b(b, transposed + nd * 8 * kTStride + kk * 16, kTStride, g, t);
      warp::mma_16816<E>(acc[nd], a, b);
    }
  }
}

// The warp's 16 rows of a shared [kTile][HS+kPad] tile as A fragments.
template <int HS>
__device__ __forceinline__ void load_rows(uint32_t (&a)[HS / 16][4], const uint16_t* tile, int warp_id, int g, int t) {
#pragma unroll
  for (int ks = 0; ks < HS / 16; ++ks) load_a(a[ks], tile + warp_id * 16 * (HS + kPad) + ks * 16, HS + kPad, g, t);
}

__device__ __forceinline__ float quad_sum(float v) {
  v += warp::shfl_xor(v, 1);
  return v + warp::shfl_xor(v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, warp::shfl_xor(v, 1));
  return fmaxf(v, warp::shfl_xor(v, 2));
}

// Where a thread works: its warp, its lane's fragment coordinates (g = lane / 4, t = lane % 4),
// the block's batch x head index and first owned row, and the offsets of that head in qkv and out.
template <int HS>
struct Place {
  int warp_id, g, t, bh, row0;
  int64_t C3, qkv_offset, out_offset;
  __device__ __forceinline__ explicit Place(const Dims& dm) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    warp_id = static_cast<int>(threadIdx.x) / 32;
    g = lane / 4;
    t = lane % 4;
    bh = static_cast<int>(blockIdx.x);
    const int b = bh / dm.H, h = bh % dm.H;
    row0 = static_cast<int>(blockIdx.y) * kTile;
    C3 = 3LL * dm.C;
    qkv_offset = static_cast<int64_t>(b) * dm.T * C3 + static_cast<int64_t>(h) * HS;
    out_offset = static_cast<int64_t>(b) * dm.T * dm.C + static_cast<int64_t>(h) * HS;
  }
};

// Forward: out and lse.
template <class E, int HS>
__global__ void __launch_bounds__(kThreads) forward_kernel(E* out, float* lse, const E* qkv, Dims dm, float scale_log2) {
  DL_DYNAMIC_SHARED(unsigned char, smem);
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem);  // [kTile][HS + kPad]
  uint16_t* sk = sq + kTile * (HS + kPad);             // [kTile][HS + kPad]
  uint16_t* svt = sk + kTile * (HS + kPad);            // [HS][kTStride]: V transposed
  const Place<HS> at(dm);
  const int warp_id = at.warp_id, g = at.g, t = at.t, bh = at.bh, i0 = at.row0;
  const int64_t C3 = at.C3;
  const E* base = qkv + at.qkv_offset;

  load_tile<HS>(sq, nullptr, base, C3, i0, dm.T);
  warp::block_sync();
  uint32_t qf[HS / 16][4];
  load_rows<HS>(qf, sq, warp_id, g, t);
  const int rows[2] = {i0 + warp_id * 16 + g, i0 + warp_id * 16 + g + 8};
  float o[HS / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int last = (i0 + kTile < dm.T ? i0 + kTile : dm.T) - 1;  // the block needs keys [0, last]
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    warp::block_sync();  // the previous tiles are consumed
    load_tile<HS>(sk, nullptr, base + dm.C, C3, j0, dm.T);
    load_tile<HS>(nullptr, svt, base + 2 * dm.C, C3, j0, dm.T);
    warp::block_sync();
    float s[kTile / 8][4];
    rows_times_tile<E, HS>(s, qf, sk, g, t);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < kTile / 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, key = j0 + nb * 8 + 2 * t + (e & 1);
        const float v = key <= rows[r] && key < dm.T ? s[nb][e] * scale_log2 : -INFINITY;
        s[nb][e] = v;
        mx[r] = fmaxf(mx[r], v);
      }
    float base2[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(mx[r]));
      base2[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet: p = 0, not NaN
      alpha[r] = exp2f(m[r] - base2[r]);
      m[r] = m_new;
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < kTile / 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nb][e] = exp2f(s[nb][e] - base2[e >> 1]);
        rs[e >> 1] += s[nb][e];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + quad_sum(rs[r]);
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) {
      o[nd][0] *= alpha[0];
      o[nd][1] *= alpha[0];
      o[nd][2] *= alpha[1];
      o[nd][3] *= alpha[1];
    }
    accumulate_times_tile<E, HS>(o, s, svt, g, t);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= dm.T) continue;
    const float inv = 1.0f / l[r];
    const int64_t orow = at.out_offset + static_cast<int64_t>(rows[r]) * dm.C;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd)
      warp::store_u32(out + orow + nd * 8 + 2 * t, warp::pack2<E>(o[nd][2 * r] * inv, o[nd][2 * r + 1] * inv));
    if (t == 0) lse[static_cast<int64_t>(bh) * dm.T + rows[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// delta[(b*H + h)*T + t] = sum over the head's columns of dout * out at row (b, t): one warp per
// (b, t, h), for f32, bf16 and f16 (FA2 reads the forward's output the same way).
template <class E>
__global__ void __launch_bounds__(kThreads)
    delta_kernel(float* delta, const E* dout, const E* out, int64_t rows, int T, int H, int hs) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / 32;  // (b*T+t)*H+h
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float acc = 0.0f;
  if (row < rows) {  // the same for the whole warp
    const E* o = out + row * hs;
    const E* d = dout + row * hs;
    for (int i = lane; i < hs; i += 32) acc += warp::widen(o[i]) * warp::widen(d[i]);
  }
  for (int m = 16; m > 0; m >>= 1) acc += warp::shfl_xor(acc, m);
  if (row < rows && lane == 0) {
    const int64_t bt = row / H, b = bt / T, t = bt % T;
    delta[(b * H + row % H) * T + t] = acc;
  }
}

// dQ for 64 query rows: dQ_i = scale * sum_{j <= i} dS_ij k_j.
template <class E, int HS>
__global__ void __launch_bounds__(kThreads)
    backward_dq_kernel(E* dqkv, const E* dout, const E* qkv, const float* lse, const float* delta, Dims dm,
                       float scale_log2, float scale) {
  DL_DYNAMIC_SHARED(unsigned char, smem);
  uint16_t* sk = reinterpret_cast<uint16_t*>(smem);  // [kTile][HS + kPad]: keys (first: queries)
  uint16_t* sv = sk + kTile * (HS + kPad);             // [kTile][HS + kPad]: values (first: dO)
  uint16_t* skt = sv + kTile * (HS + kPad);            // [HS][kTStride]: keys transposed
  const Place<HS> at(dm);
  const int warp_id = at.warp_id, g = at.g, t = at.t, bh = at.bh, i0 = at.row0;
  const int64_t C3 = at.C3;
  const E* base = qkv + at.qkv_offset;
  const E* dbase = dout + at.out_offset;

  load_tile<HS>(sk, nullptr, base, C3, i0, dm.T);
  load_tile<HS>(sv, nullptr, dbase, dm.C, i0, dm.T);
  warp::block_sync();
  uint32_t qf[HS / 16][4], dof[HS / 16][4];
  load_rows<HS>(qf, sk, warp_id, g, t);
  load_rows<HS>(dof, sv, warp_id, g, t);
  const int rows[2] = {i0 + warp_id * 16 + g, i0 + warp_id * 16 + g + 8};
  float L[2], D[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool valid = rows[r] < dm.T;
    L[r] = valid ? lse[static_cast<int64_t>(bh) * dm.T + rows[r]] * kLog2e : 0.0f;
    D[r] = valid ? delta[static_cast<int64_t>(bh) * dm.T + rows[r]] : 0.0f;
  }
  float dq[HS / 8][4] = {};

  const int last = (i0 + kTile < dm.T ? i0 + kTile : dm.T) - 1;
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    warp::block_sync();
    load_tile<HS>(sk, skt, base + dm.C, C3, j0, dm.T);
    load_tile<HS>(sv, nullptr, base + 2 * dm.C, C3, j0, dm.T);
    warp::block_sync();
    float s[kTile / 8][4], dp[kTile / 8][4];
    rows_times_tile<E, HS>(s, qf, sk, g, t);
    rows_times_tile<E, HS>(dp, dof, sv, g, t);
#pragma unroll
    for (int nb = 0; nb < kTile / 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, key = j0 + nb * 8 + 2 * t + (e & 1);
        const bool valid = key <= rows[r] && key < dm.T && rows[r] < dm.T;
        const float p = valid ? exp2f(s[nb][e] * scale_log2 - L[r]) : 0.0f;
        s[nb][e] = p * (dp[nb][e] - D[r]);  // dS
      }
    accumulate_times_tile<E, HS>(dq, s, skt, g, t);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= dm.T) continue;
    E* row = dqkv + at.qkv_offset + static_cast<int64_t>(rows[r]) * C3;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd)
      warp::store_u32(row + nd * 8 + 2 * t, warp::pack2<E>(dq[nd][2 * r] * scale, dq[nd][2 * r + 1] * scale));
  }
}

// dK, dV for 64 key rows: dK_j = scale * sum_{i >= j} dS_ij q_i, dV_j = sum_{i >= j} P_ij dO_i.
template <class E, int HS>
__global__ void __launch_bounds__(kThreads)
    backward_dkv_kernel(E* dqkv, const E* dout, const E* qkv, const float* lse, const float* delta, Dims dm,
                        float scale_log2, float scale) {
  DL_DYNAMIC_SHARED(unsigned char, smem);
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem);  // [kTile][HS + kPad]: queries (first: keys)
  uint16_t* sdo = sq + kTile * (HS + kPad);            // [kTile][HS + kPad]: dO (first: values)
  uint16_t* sqt = sdo + kTile * (HS + kPad);           // [HS][kTStride]: queries transposed
  uint16_t* sdot = sqt + HS * kTStride;                // [HS][kTStride]: dO transposed
  float* sl = reinterpret_cast<float*>(sdot + HS * kTStride);  // [kTile]: lse * log2 e
  float* sd = sl + kTile;                                        // [kTile]: delta
  const Place<HS> at(dm);
  const int warp_id = at.warp_id, g = at.g, t = at.t, bh = at.bh, j0 = at.row0;
  const int64_t C3 = at.C3;
  const E* base = qkv + at.qkv_offset;
  const E* dbase = dout + at.out_offset;

  load_tile<HS>(sq, nullptr, base + dm.C, C3, j0, dm.T);
  load_tile<HS>(sdo, nullptr, base + 2 * dm.C, C3, j0, dm.T);
  warp::block_sync();
  uint32_t kf[HS / 16][4], vf[HS / 16][4];
  load_rows<HS>(kf, sq, warp_id, g, t);
  load_rows<HS>(vf, sdo, warp_id, g, t);
  const int keys[2] = {j0 + warp_id * 16 + g, j0 + warp_id * 16 + g + 8};
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};

  for (int q0 = j0; q0 < dm.T; q0 += kTile) {  // queries i >= j0 only
    warp::block_sync();
    load_tile<HS>(sq, sqt, base, C3, q0, dm.T);
    load_tile<HS>(sdo, sdot, dbase, dm.C, q0, dm.T);
    for (int idx = static_cast<int>(threadIdx.x); idx < kTile; idx += kThreads) {
      const int i = q0 + idx;
      sl[idx] = i < dm.T ? lse[static_cast<int64_t>(bh) * dm.T + i] * kLog2e : 0.0f;
      sd[idx] = i < dm.T ? delta[static_cast<int64_t>(bh) * dm.T + i] : 0.0f;
    }
    warp::block_sync();
    float st[kTile / 8][4], dpt[kTile / 8][4];
    rows_times_tile<E, HS>(st, kf, sq, g, t);
    rows_times_tile<E, HS>(dpt, vf, sdo, g, t);
#pragma unroll
    for (int nb = 0; nb < kTile / 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, qi = nb * 8 + 2 * t + (e & 1), query = q0 + qi;
        const bool valid = query >= keys[r] && query < dm.T && keys[r] < dm.T;
        const float p = valid ? exp2f(st[nb][e] * scale_log2 - sl[qi]) : 0.0f;
        st[nb][e] = p;
        dpt[nb][e] = p * (dpt[nb][e] - sd[qi]);  // dS^T
      }
    accumulate_times_tile<E, HS>(dv, st, sdot, g, t);
    accumulate_times_tile<E, HS>(dk, dpt, sqt, g, t);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= dm.T) continue;
    E* row = dqkv + at.qkv_offset + static_cast<int64_t>(keys[r]) * C3;
#pragma unroll
    for (int nd = 0; nd < HS / 8; ++nd) {
      warp::store_u32(row + dm.C + nd * 8 + 2 * t, warp::pack2<E>(dk[nd][2 * r] * scale, dk[nd][2 * r + 1] * scale));
      warp::store_u32(row + 2 * dm.C + nd * 8 + 2 * t, warp::pack2<E>(dv[nd][2 * r], dv[nd][2 * r + 1]));
    }
  }
}

// Shared-memory bytes of each kernel.
template <int HS>
constexpr size_t forward_smem() {
  return sizeof(uint16_t) * (2 * kTile * (HS + kPad) + HS * kTStride);
}
template <int HS>
constexpr size_t dkv_smem() {
  return sizeof(uint16_t) * (2 * kTile * (HS + kPad) + 2 * HS * kTStride) + 2 * kTile * sizeof(float);
}

inline bool supports_head_size(int64_t hs) { return hs == 32 || hs == 64 || hs == 128; }

// Calls fn(std::integral_constant<int, HS>) for a supported head size.
template <class F>
void dispatch_head_size(int64_t hs, F&& fn) {
  switch (hs) {
    case 32: fn(std::integral_constant<int, 32>{}); break;
    case 64: fn(std::integral_constant<int, 64>{}); break;
    case 128: fn(std::integral_constant<int, 128>{}); break;
    default: break;
  }
}

// Launchers. `prepare(kernel, smem_bytes, name)` raises a kernel's shared-memory limit on the
// device (nothing under the emulator); `check(name)` checks the launch. qkv, out and dout must be
// 16-byte aligned (every row start then is: HS is a multiple of 8).
template <class E, class Stream, class Prepare, class Check>
void forward(E* out, float* lse, const E* qkv, int64_t B, Dims dm, Stream stream, Prepare&& prepare, Check&& check) {
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(dm.C / dm.H));
  const dim3 grid(static_cast<unsigned>(B * dm.H), static_cast<unsigned>((dm.T + kTile - 1) / kTile));
  dispatch_head_size(dm.C / dm.H, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    auto kernel = forward_kernel<E, HS>;
    prepare(kernel, forward_smem<HS>(), "attention_mma::forward_kernel");
    launch("attention_mma::forward_kernel", kernel, grid, dim3(kThreads), forward_smem<HS>(), stream, out, lse, qkv, dm,
           scale_log2);
    check("attention_mma::forward_kernel");
  });
}

// delta for backward (both kernel sets): rowsum(dout * out) per (b, h, t).
template <class E, class Stream, class Check>
void delta(float* out_delta, const E* dout, const E* out, int64_t B, Dims dm, Stream stream, Check&& check) {
  const int64_t rows = B * dm.T * dm.H;
  const dim3 grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps));
  launch("attention_mma::delta_kernel", delta_kernel<E>, grid, dim3(kThreads), 0, stream, out_delta, dout, out, rows,
         dm.T, dm.H, dm.C / dm.H);
  check("attention_mma::delta_kernel");
}

// `out` is the forward's output for these qkv; delta is scratch of B*H*T floats.
template <class E, class Stream, class Prepare, class Check>
void backward(E* dqkv, float* delta_scratch, const E* dout, const E* qkv, const E* out, const float* lse, int64_t B,
              Dims dm, Stream stream, Prepare&& prepare, Check&& check) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dm.C / dm.H)), scale_log2 = kLog2e * scale;
  const dim3 grid(static_cast<unsigned>(B * dm.H), static_cast<unsigned>((dm.T + kTile - 1) / kTile));
  delta(delta_scratch, dout, out, B, dm, stream, check);
  dispatch_head_size(dm.C / dm.H, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    auto k_dq = backward_dq_kernel<E, HS>;
    prepare(k_dq, forward_smem<HS>(), "attention_mma::backward_dq_kernel");
    launch("attention_mma::backward_dq_kernel", k_dq, grid, dim3(kThreads), forward_smem<HS>(), stream, dqkv, dout, qkv,
           lse, delta_scratch, dm, scale_log2, scale);
    check("attention_mma::backward_dq_kernel");
    auto k_dkv = backward_dkv_kernel<E, HS>;
    prepare(k_dkv, dkv_smem<HS>(), "attention_mma::backward_dkv_kernel");
    launch("attention_mma::backward_dkv_kernel", k_dkv, grid, dim3(kThreads), dkv_smem<HS>(), stream, dqkv, dout, qkv,
           lse, delta_scratch, dm, scale_log2, scale);
    check("attention_mma::backward_dkv_kernel");
  });
}

}  // namespace dl::cuda::attention_mma
