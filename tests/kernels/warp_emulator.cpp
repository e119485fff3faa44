#include "warp_emulator.hpp"

#include <cuda_fp16.h>
#include <ucontext.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dl::emu {

namespace {

constexpr size_t kStackBytes = 256 << 10;
constexpr int kSlotsPerLane = 8;  // words a lane offers at once (an mma: 4 of A, 2 of B)

enum class Wait { none, block, warp };

struct Fiber {
  ucontext_t ctx{};
  uint3 tid{};
  int linear = 0, warp = 0, lane = 0;
  uint64_t block_arrivals = 0, warp_arrivals = 0;
  Wait wait = Wait::none;
  bool done = false;
};

struct Block {
  uint3 bid{};
  std::vector<Fiber> fibers;
  std::vector<unsigned char> shared;
  std::vector<uint32_t> slots;  // [warp][lane][kSlotsPerLane]
  ucontext_t scheduler{};
  const std::function<void()>* body = nullptr;
};

Block* g_block = nullptr;
Fiber* g_fiber = nullptr;
Counters g_counters;

Fiber& me() {
  if (!g_fiber) throw std::logic_error("warp emulator: called outside an emulated kernel");
  return *g_fiber;
}

void fiber_entry() {
  (*g_block->body)();
  g_fiber->done = true;
  swapcontext(&g_fiber->ctx, &g_block->scheduler);
}

// True when `f` may run on; throws when it waits for a thread that has already left.
bool can_run(const Block& blk, const Fiber& f) {
  if (f.done) return false;
  if (f.wait == Wait::none) return true;
  for (const Fiber& o : blk.fibers) {
    if (f.wait == Wait::warp && o.warp != f.warp) continue;
    const uint64_t mine = f.wait == Wait::block ? f.block_arrivals : f.warp_arrivals;
    const uint64_t theirs = f.wait == Wait::block ? o.block_arrivals : o.warp_arrivals;
    if (theirs < mine) {
      if (o.done)
        throw std::runtime_error("warp emulator: thread " + std::to_string(f.linear) + " waits at a " +
                                 (f.wait == Wait::block ? "block barrier" : "warp-wide operation") + " that thread " +
                                 std::to_string(o.linear) + " left the kernel without reaching");
      return false;
    }
  }
  return true;
}

void arrive(Wait kind) {
  Fiber& f = me();
  if (kind == Wait::block) {
    ++f.block_arrivals;
    ++g_counters.block_syncs;
  } else {
    ++f.warp_arrivals;
    ++g_counters.warp_syncs;
  }
  f.wait = kind;
  swapcontext(&f.ctx, &g_block->scheduler);
  f.wait = Wait::none;
}

uint32_t* lane_slots(int warp, int lane) {
  return &g_block->slots[(static_cast<size_t>(warp) * 32 + static_cast<size_t>(lane)) * kSlotsPerLane];
}

float from16(uint16_t bits, bool bf16) {
  if (bf16) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}
uint16_t half_of(uint32_t word, int k) { return static_cast<uint16_t>(k & 1 ? word >> 16 : word & 0xffffu); }

// A fresh context that starts in fiber_entry on `stack`. Its own function: getcontext returns
// twice, which would leave the caller's loop variables undefined (-Wclobbered).
__attribute__((noinline)) void make_fiber(Fiber& f, char* stack) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = stack;
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_entry, 0);
}

}  // namespace

const uint3& thread_idx() { return me().tid; }
const uint3& block_idx() { return g_block->bid; }
unsigned char* shared_memory() { return g_block->shared.data(); }
int lane() { return me().lane; }
void sync_block() { arrive(Wait::block); }
void sync_warp() { arrive(Wait::warp); }
Counters& counters() { return g_counters; }

uint32_t exchange(uint32_t mine, int src_lane) {
  Fiber& f = me();
  lane_slots(f.warp, f.lane)[0] = mine;
  sync_warp();
  const uint32_t got = lane_slots(f.warp, src_lane & 31)[0];
  sync_warp();  // nobody overwrites a slot before every lane has read
  return got;
}

void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], bool bf16) {
  Fiber& f = me();
  uint32_t* mine = lane_slots(f.warp, f.lane);
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  mine[4] = b[0];
  mine[5] = b[1];
  sync_warp();
  // A[row][k] lives in lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k & 1;
  // B[k][col] in lane col * 4 + (k % 8) / 2, register 4 + (k >= 8), half k & 1.
  auto A = [&](int row, int k) {
    const uint32_t w = lane_slots(f.warp, (row % 8) * 4 + (k % 8) / 2)[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
    return from16(half_of(w, k), bf16);
  };
  auto B = [&](int k, int col) {
    const uint32_t w = lane_slots(f.warp, col * 4 + (k % 8) / 2)[4 + (k >= 8 ? 1 : 0)];
    return from16(half_of(w, k), bf16);
  };
  const int g = f.lane / 4, t = f.lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    double acc = 0;
    for (int k = 0; k < 16; ++k) acc += static_cast<double>(A(row, k)) * static_cast<double>(B(k, col));
    out[i] = static_cast<float>(static_cast<double>(d[i]) + acc);
  }
  ++g_counters.mmas;
  sync_warp();  // every lane has read the others' registers
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

void launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  if (block.y != 1 || block.z != 1 || block.x % 32 != 0 || block.x == 0)
    throw std::invalid_argument("warp emulator: blocks must be 1-D and whole warps");
  if (g_block) throw std::logic_error("warp emulator: launch inside a launch");
  const int n = static_cast<int>(block.x);
  std::vector<std::unique_ptr<char[]>> stacks(static_cast<size_t>(n));
  for (auto& s : stacks) s = std::make_unique<char[]>(kStackBytes);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        Block blk;
        blk.bid = uint3{x, y, z};
        blk.shared.assign(shared_bytes, 0xFF);
        blk.slots.assign(static_cast<size_t>(n) * kSlotsPerLane, 0u);
        blk.body = &body;
        blk.fibers.resize(static_cast<size_t>(n));
        g_block = &blk;
        for (int i = 0; i < n; ++i) {
          Fiber& f = blk.fibers[static_cast<size_t>(i)];
          f.tid = uint3{static_cast<unsigned>(i), 0u, 0u};
          f.linear = i;
          f.warp = i / 32;
          f.lane = i % 32;
          make_fiber(f, stacks[static_cast<size_t>(i)].get());
        }
        try {
          for (;;) {
            bool all_done = true, ran = false;
            for (Fiber& f : blk.fibers) {
              if (f.done) continue;
              all_done = false;
              if (!can_run(blk, f)) continue;
              g_fiber = &f;
              swapcontext(&blk.scheduler, &f.ctx);
              g_fiber = nullptr;
              ran = true;
            }
            if (all_done) break;
            if (!ran) throw std::runtime_error("warp emulator: deadlock: every live thread waits at a barrier");
          }
        } catch (...) {
          g_block = nullptr;
          g_fiber = nullptr;
          throw;
        }
        g_block = nullptr;
        ++g_counters.blocks;
      }
}

}  // namespace dl::emu
