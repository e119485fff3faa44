// A CPU stand-in for a GPU block, for testing the index arithmetic of warp-level kernels without
// a GPU (kernels/warp_ops.cuh compiled with DL_WARP_EMULATION). Each thread of a block is a fiber
// (ucontext) on the calling thread; fibers run until they reach a barrier, a shuffle or an mma,
// which complete once every thread of the block (or warp) has arrived, in a fixed order, so a
// run is deterministic. A thread that leaves while others wait at a barrier, or a barrier the
// rest never reach, is reported as an error (the GPU would hang or be undefined there).
//
// mma_16816 computes D += A B from the registers each lane holds, decoded by the PTX ISA's
// fragment layout for m16n8k16 (see warp_ops.cuh), products summed in double and added to the
// f32 accumulator once. Shared memory starts as 0xFF bytes (NaN in every float type).
#pragma once
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
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
// d += a * b for one warp (bf16 or f16 inputs, f32 accumulators), every lane calling with its fragments.
void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], bool bf16);

// Runs `body` for every thread of every block of the grid (blocks one after another; 1-D blocks
// of whole warps). Throws std::runtime_error on a deadlock or a thread leaving early.
void launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body);

struct Counters {
  uint64_t blocks = 0, block_syncs = 0, warp_syncs = 0, mmas = 0;
};
Counters& counters();

}  // namespace dl::emu
