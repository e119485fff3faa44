// A CPU stand-in for a GPU block, so the kernels of kernels/ run without a GPU from the source
// nvcc compiles (kernels/device.cuh: built with DL_CUDA_EMULATION, by tests/kernels and by the
// emulated-device build, docs/CUDA.md). Each thread of a block is a fiber on the calling thread;
// fibers run until they reach a barrier or a warp-wide operation (shuffle, mma), which completes
// once every thread of the block (or warp) has arrived. A run is deterministic for a given
// thread order (set_order): among the threads that may run, the first in that order runs on
// until it has to wait, so with `index` warp 0 reaches each barrier before warp 1 starts, with
// `reversed` the last warp goes first, and with `shuffled` a seeded order drawn afresh at every
// block barrier mixes them. A kernel whose result depends on the order has a race that the
// barriers do not order (a GPU may interleave warps any way between barriers).
//
// It fails a launch (std::runtime_error naming the kernel, the thread and the block) where a GPU
// would refuse, fault or hang, as compute-sanitizer would report it:
// - a launch with more than 1024 threads per block (or x, y > 1024, z > 64), a grid dimension out
//   of range (x < 2^31, y and z <= 65535, none 0), or more dynamic shared memory than the kernel
//   is allowed (48 KiB unless raised by func_set_max_dynamic_shared, at most sm_90's 227 KiB);
// - a thread that leaves while others wait at a barrier, a barrier the rest never reach, threads
//   waiting at different __syncthreads() (a barrier inside a divergent branch), a warp-wide
//   operation some lane of the warp never reaches;
// - a 4- or 16-byte move at an address not aligned to its size (warp_ops.cuh's load/store);
// - a shared-memory access outside the bytes of the launch's dynamic shared memory or of a static
//   __shared__ array (each lies against an inaccessible guard page).
// Shared memory starts as 0xFF bytes in every block (NaN in every float type).
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
#include <string>

namespace dl::emu {

const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
unsigned char* shared_memory();  // this block's dynamic shared memory
int lane();

// __syncthreads() at `site` (file:line): every thread of the block must wait at the same one.
void sync_block(const char* site = "__syncthreads");
void sync_warp();  // __syncwarp()
// Every lane of the calling warp offers `mine`; returns the word that lane `src` offered.
uint32_t exchange(uint32_t mine, int src_lane);
uint64_t exchange64(uint64_t mine, int src_lane);
// d = d + a * b for one warp (bf16 or f16 inputs, f32 accumulators), every lane calling with its fragments.
void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], bool bf16);
// The tensor-core sum of one output element: c + sum of a[k] * b[k] for k < 16 (the rounding above).
float fused_dot_add(float c, const float (&a)[16], const float (&b)[16]);
constexpr int kMmaAlignBits = 25;

// A static __shared__ array of the running block: the same bytes for every thread of the block,
// one per `key` (its declaration), poisoned at each block's start, ending at a guard page.
void* static_shared(const void* key, size_t bytes, const char* name);

// Ends the running launch with `what` (prefixed with the kernel, thread and block).
[[noreturn]] void fault(const std::string& what);
// Fails unless `p` is a multiple of `bytes` (a GPU's misaligned-address fault); `what` names the move.
void check_aligned(const void* p, size_t bytes, const char* what);

// Shared memory per block on sm_90: 48 KiB of dynamic shared memory unless a kernel's limit is
// raised (cudaFuncSetAttribute(MaxDynamicSharedMemorySize)), at most 227 KiB; static arrays at
// most 48 KiB.
constexpr size_t kDefaultDynamicShared = 48 << 10;
constexpr size_t kMaxSharedPerBlock = 227 << 10;
constexpr unsigned kMaxThreadsPerBlock = 1024;
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

// Runs `body` for every thread of every block of the grid (blocks one after another). `name`
// names the kernel in every failure. Throws std::runtime_error on a launch the limits above
// refuse, a deadlock, a thread leaving early, or a fault.
void launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
            const std::function<void()>& body);
inline void launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  launch("kernel", nullptr, grid, block, shared_bytes, body);
}

// Describes a global-memory address a kernel faulted on ("12 bytes after device allocation #3
// ..."), for the fault report; set by the emulated device's runtime, empty when none is.
using AddressDescriber = std::string (*)(const void* address);
void set_address_describer(AddressDescriber describe);
// Asked after every launch: a byte the launch wrote past an allocation's end where no guard page
// could stop it (the emulated device's alignment slack), or nullptr. When one is found the
// launch is reported like a faulting access (the kernel and the allocation, not the thread) and
// the process aborts. Set by the emulated device's runtime; none in tests/kernels.
using StrayWriteFinder = const void* (*)();
void set_stray_write_finder(StrayWriteFinder find);

struct Counters {
  uint64_t blocks = 0, block_syncs = 0, warp_syncs = 0, mmas = 0;
};
Counters& counters();

}  // namespace dl::emu
