// Warp-level building blocks of the tensor-core kernels (mma.sync.m16n8k16, shuffles, 16- and
// 32-bit shared/global moves), behind one seam so the same kernel source also runs on the CPU:
// with DL_CUDA_EMULATION defined (device.cuh), every thread of a block is a fiber of
// lib/emulator/warp_emulator, barriers and shuffles are scheduled there and
// mma.sync is computed from the PTX ISA's fragment layout. The fragment indexing of a kernel is thereby tested without
// a GPU; what only the hardware shows (speed, a wrong emulator) is left to tests/cuda.
//
// Fragment layout of mma.m16n8k16 with 16-bit inputs and f32 accumulators (PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type"), g = lane / 4, t = lane % 4:
//   A (16 x 16, row-major): reg0 = A[g][2t, 2t+1], reg1 = A[g+8][2t..], reg2 = A[g][2t+8..],
//                           reg3 = A[g+8][2t+8..]        (the lower column in the low half)
//   B (16 x 8, "col"):      reg0 = B[2t, 2t+1][g], reg1 = B[2t+8, 2t+9][g]
//   C/D (16 x 8, f32):      c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
// So C of two neighbouring n-tiles is, once rounded to 16 bits, the A operand of the next
// product (FlashAttention-2's register reuse of P).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device.cuh"

namespace dl::cuda::warp {

// Raw moves. Shared tiles are uint16_t arrays (the 16-bit patterns), so no type is read
// through another's pointer on the host; on the device these are single ld/st instructions,
// which fault on an address not aligned to their size: so does the emulator.
#ifdef DL_CUDA_EMULATION
inline uint32_t load_u32(const void* p) {
  ::dl::emu::check_aligned(p, 4, "32-bit load");
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void store_u32(void* p, uint32_t v) {
  ::dl::emu::check_aligned(p, 4, "32-bit store");
  std::memcpy(p, &v, 4);
}
inline uint4 load_u128(const void* p) {
  ::dl::emu::check_aligned(p, 16, "16-byte load");
  uint4 v;
  std::memcpy(&v, p, 16);
  return v;
}
inline void store_u128(void* p, uint4 v) {
  ::dl::emu::check_aligned(p, 16, "16-byte store");
  std::memcpy(p, &v, 16);
}
inline void block_sync() { ::dl::emu::sync_block(); }
inline float shfl_xor(float v, int lane_mask) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = ::dl::emu::exchange(u, ::dl::emu::lane() ^ lane_mask);
  std::memcpy(&v, &u, 4);
  return v;
}
template <class E>
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  ::dl::emu::mma_16816(d, a, b, std::is_same_v<E, __nv_bfloat16>);
}
#else
__device__ __forceinline__ uint32_t load_u32(const void* p) { return *static_cast<const uint32_t*>(p); }
__device__ __forceinline__ void store_u32(void* p, uint32_t v) { *static_cast<uint32_t*>(p) = v; }
__device__ __forceinline__ uint4 load_u128(const void* p) { return *static_cast<const uint4*>(p); }
__device__ __forceinline__ void store_u128(void* p, uint4 v) { *static_cast<uint4*>(p) = v; }
__device__ __forceinline__ void block_sync() { __syncthreads(); }
__device__ __forceinline__ float shfl_xor(float v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, v, lane_mask); }
// d += a * b on the tensor cores (sm_80 and newer; the host dispatch checks the device).
template <class E>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  (void)d, (void)a, (void)b;
  __trap();
#endif
}
#endif

// Two f32 values rounded (to nearest even) into one 32-bit register of E pairs, `lo` in the low half.
template <class E>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&r, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    std::memcpy(&r, &v, 4);
  }
  return r;
}
// The f32 value of the low (half = 0) or high half of a register of E pairs.
template <class E>
__device__ __forceinline__ float unpack(uint32_t w, int half) {
  const uint16_t bits = static_cast<uint16_t>(half ? w >> 16 : w & 0xffffu);
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    const uint32_t f = static_cast<uint32_t>(bits) << 16;
    float v;
    std::memcpy(&v, &f, 4);
    return v;
  } else {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
}

// f32 value of a stored element.
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }

// A fragment of the 16 x 16 block at `p` of a row-major shared matrix with row stride `ld`.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* p, int ld, int g, int t) {
  a[0] = load_u32(p + g * ld + 2 * t);
  a[1] = load_u32(p + (g + 8) * ld + 2 * t);
  a[2] = load_u32(p + g * ld + 2 * t + 8);
  a[3] = load_u32(p + (g + 8) * ld + 2 * t + 8);
}
// B fragment (k 16 x n 8) with B[k][n] = M[n][k], `p` at M[n0][k0] of a row-major shared M: the
// operand of X * M^T, where M's rows are contiguous in k.
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const uint16_t* p, int ld, int g, int t) {
  b[0] = load_u32(p + g * ld + 2 * t);
  b[1] = load_u32(p + g * ld + 2 * t + 8);
}
// The A operand (16 rows x 16 k) made of two f32 accumulator tiles: k 0-7 from `lo`, 8-15 from `hi`.
template <class E>
__device__ __forceinline__ void pack_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack2<E>(lo[0], lo[1]);
  a[1] = pack2<E>(lo[2], lo[3]);
  a[2] = pack2<E>(hi[0], hi[1]);
  a[3] = pack2<E>(hi[2], hi[3]);
}

}  // namespace dl::cuda::warp
