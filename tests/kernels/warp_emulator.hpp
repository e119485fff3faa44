// A CPU stand-in for a GPU block, for testing the index arithmetic of warp-level kernels without
// a GPU (kernels/warp_ops.cuh compiled with DL_WARP_EMULATION). Each thread of a block is a fiber
// on the calling thread; fibers run until they reach a barrier, a shuffle or an mma, which
// complete once every thread of the block (or warp) has arrived. A run is deterministic for a
// given thread order (set_order): among the threads that may run, the first in that order runs
// on until it has to wait, so with `index` warp 0 reaches each barrier before warp 1 starts,
// with `reversed` the last warp goes first, and with `shuffled` a seeded order drawn afresh at
// every block barrier mixes them. A kernel whose result depends on the order has a race that the
// barriers do not order (a GPU may interleave warps any way between barriers): the tests run each
// launch in all three orders and require the same bits.
//
// It fails a launch (std::runtime_error naming the thread and block) where a GPU would fault or
// hang: a thread that leaves while others wait at a barrier, a barrier the rest never reach, a
// 4- or 16-byte move at an address not aligned to its size (warp_ops.cuh's load/store), a shared-
// memory access outside the bytes the launch requested (guard pages around them), and a launch
// asking for more dynamic shared memory than the kernel is allowed (48 KiB unless raised by
// func_set_max_dynamic_shared, at most sm_90's 227 KiB). Shared memory starts as 0xFF bytes (NaN
// in every float type).
//
// mma_16816 computes D = C + A B from the registers each lane holds, decoded by the PTX ISA's
// fragment layout for m16n8k16 (see warp_ops.cuh), in the tensor cores' arithmetic as published
// probes describe it (Fasi et al. 2021, "Numerical behavior of NVIDIA tensor cores": exact
// products, alignment to the largest exponent with truncation, rounding toward zero; a 25-bit
// alignment width has been reported for H100 fp16): for each element the 16 products are exact;
// they and C are aligned to the largest exponent among them and cut toward zero to
// kMmaAlignBits bits below its leading bit, summed without further loss, and the sum cut to f32
// toward zero, one fused step per instruction. Not compared bit for bit with an H100 here (no GPU
// lent); a double sum rounded once, what it did before, was more accurate than any tensor core.
#pragma once
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

namespace dl::emu {

const uint3& thread_idx();
const uint3& block_idx();
unsigned char* shared_memory();  // this block's dynamic shared memory
int lane();

void sync_block();  // __syncthreads()
void sync_warp();   // __syncwarp()
// Every lane of the calling warp offers `mine`; returns the word that lane `src` offered.
uint32_t exchange(uint32_t mine, int src_lane);
// d = d + a * b for one warp (bf16 or f16 inputs, f32 accumulators), every lane calling with its fragments.
void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], bool bf16);
// The tensor-core sum of one output element: c + sum of a[k] * b[k] for k < 16 (the rounding above).
float fused_dot_add(float c, const float (&a)[16], const float (&b)[16]);
constexpr int kMmaAlignBits = 25;

// Fails unless `p` is a multiple of `bytes` (a GPU's misaligned-address fault); `what` names the move.
void check_aligned(const void* p, size_t bytes, const char* what);

// Shared memory per block on sm_90: 48 KiB of dynamic shared memory unless a kernel's limit is
// raised (cudaFuncSetAttribute(MaxDynamicSharedMemorySize)), at most 227 KiB.
constexpr size_t kDefaultDynamicShared = 48 << 10;
constexpr size_t kMaxSharedPerBlock = 227 << 10;
// A kernel's identity for the launch limits: its function's address.
template <class K>
const void* kernel_key(K* kernel) {
  const void* key;
  static_assert(sizeof(kernel) == sizeof(key));
  std::memcpy(&key, &kernel, sizeof(key));
  return key;
}
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes): fails above 227 KiB.
void func_set_max_dynamic_shared(const void* kernel, size_t bytes);

enum class Order { index, reversed, shuffled };
// The thread order of later launches (shuffled: drawn from `seed`, the block and the barrier count).
void set_order(Order order, uint64_t seed = 0);
const char* order_name(Order order);

// Runs `body` for every thread of every block of the grid (blocks one after another; 1-D blocks
// of whole warps). Throws std::runtime_error on a deadlock, a thread leaving early, a fault
// (above), or a request for more shared memory than `kernel` may have (nullptr: the default).
void launch(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body);
inline void launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  launch(nullptr, grid, block, shared_bytes, body);
}

struct Counters {
  uint64_t blocks = 0, block_syncs = 0, warp_syncs = 0, mmas = 0;
};
Counters& counters();

}  // namespace dl::emu
