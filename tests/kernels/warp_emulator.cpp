#include "warp_emulator.hpp"

#include <cuda_fp16.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
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
  ucontext_t ctx{};  // where it starts
  jmp_buf env{};     // where it waits (a switch without the signal-mask syscall swapcontext makes)
  bool started = false;
  uint3 tid{};
  int linear = 0, warp = 0, lane = 0;
  Wait wait = Wait::none;
  bool done = false;
};

struct Block {
  uint3 bid{};
  std::vector<Fiber> fibers;
  unsigned char* shared = nullptr;
  std::vector<uint32_t> slots;  // [warp][lane][kSlotsPerLane]
  jmp_buf scheduler{};
  ucontext_t scheduler_ctx{};
  const std::function<void()>* body = nullptr;
  // order[p]: the fiber with priority p (0 runs first); ready: bit p set when order[p] may run.
  std::vector<int> order, position;
  std::vector<uint64_t> ready;
  int live = 0, block_waiting = 0;
  std::vector<int> warp_live, warp_waiting;
  uint64_t barriers = 0;
  std::string error;  // the first failure; the launch throws it
};

Block* g_block = nullptr;
Fiber* g_fiber = nullptr;
Counters g_counters;
Order g_order = Order::index;
uint64_t g_seed = 0;
std::map<const void*, size_t> g_shared_limits;  // raised by func_set_max_dynamic_shared
char g_fault[256];                              // written by the SIGSEGV handler

Fiber& me() {
  if (!g_fiber) throw std::logic_error("warp emulator: called outside an emulated kernel");
  return *g_fiber;
}

std::string where(const Block& b, const Fiber& f) {
  return "thread " + std::to_string(f.linear) + " of block (" + std::to_string(b.bid.x) + "," +
         std::to_string(b.bid.y) + "," + std::to_string(b.bid.z) + ")";
}

// Back to the scheduler; returns when the scheduler runs this fiber again.
void yield(Fiber& f) {
  if (_setjmp(f.env) == 0) _longjmp(g_block->scheduler, 1);
}

// Ends the launch with `message`: the calling fiber stops where it is (its stack is dropped, as a
// faulting GPU kernel's state is) and the scheduler throws.
[[noreturn]] void fail(const std::string& message) {
  if (!g_block || !g_fiber) throw std::runtime_error(message);
  if (g_block->error.empty()) g_block->error = message;
  g_fiber->done = true;
  _longjmp(g_block->scheduler, 1);
}

void set_ready(Block& b, int fiber, bool on) {
  const auto p = static_cast<size_t>(b.position[static_cast<size_t>(fiber)]);
  if (on) b.ready[p / 64] |= uint64_t{1} << (p % 64);
  else b.ready[p / 64] &= ~(uint64_t{1} << (p % 64));
}

int first_ready(const Block& b) {
  for (size_t w = 0; w < b.ready.size(); ++w)
    if (b.ready[w]) return static_cast<int>(w * 64 + static_cast<size_t>(std::countr_zero(b.ready[w])));
  return -1;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The priority order for the block's next stretch between barriers.
void draw_order(Block& b) {
  const int n = static_cast<int>(b.fibers.size());
  for (int i = 0; i < n; ++i) b.order[static_cast<size_t>(i)] = g_order == Order::reversed ? n - 1 - i : i;
  if (g_order == Order::shuffled) {
    uint64_t s = g_seed ^ (uint64_t{b.bid.x} << 40) ^ (uint64_t{b.bid.y} << 20) ^ b.bid.z ^ (b.barriers << 52);
    for (int i = n - 1; i > 0; --i)
      std::swap(b.order[static_cast<size_t>(i)], b.order[splitmix(s) % static_cast<uint64_t>(i + 1)]);
  }
  for (int p = 0; p < n; ++p) b.position[static_cast<size_t>(b.order[static_cast<size_t>(p)])] = p;
  std::fill(b.ready.begin(), b.ready.end(), 0);
  for (const Fiber& f : b.fibers)
    if (!f.done && f.wait == Wait::none) set_ready(b, f.linear, true);
}

void release(Block& b, Wait kind, int warp) {
  for (Fiber& f : b.fibers)
    if (!f.done && f.wait == kind && (kind == Wait::block || f.warp == warp)) {
      f.wait = Wait::none;
      set_ready(b, f.linear, true);
    }
  if (kind == Wait::block) {
    b.block_waiting = 0;
    ++b.barriers;
    if (g_order == Order::shuffled) draw_order(b);
  } else {
    b.warp_waiting[static_cast<size_t>(warp)] = 0;
  }
}

const Fiber* first_done(const Block& b, int warp) {
  for (const Fiber& o : b.fibers)
    if (o.done && (warp < 0 || o.warp == warp)) return &o;
  return nullptr;
}
const Fiber* first_waiting(const Block& b, Wait kind, int warp) {
  for (const Fiber& o : b.fibers)
    if (!o.done && o.wait == kind && (warp < 0 || o.warp == warp)) return &o;
  return nullptr;
}
std::string left_early(const Block& b, const Fiber& waiting, Wait kind, const Fiber& gone) {
  return "warp emulator: " + where(b, waiting) + " waits at a " +
         (kind == Wait::block ? "block barrier" : "warp-wide operation") + " that thread " +
         std::to_string(gone.linear) + " left the kernel without reaching";
}

void arrive(Wait kind) {
  Fiber& f = me();
  Block& b = *g_block;
  const auto w = static_cast<size_t>(f.warp);
  f.wait = kind;
  set_ready(b, f.linear, false);
  if (kind == Wait::block) {
    ++g_counters.block_syncs;
    if (const Fiber* gone = first_done(b, -1)) fail(left_early(b, f, kind, *gone));
    if (++b.block_waiting == b.live) release(b, kind, f.warp);
  } else {
    ++g_counters.warp_syncs;
    if (const Fiber* gone = first_done(b, f.warp)) fail(left_early(b, f, kind, *gone));
    if (++b.warp_waiting[w] == 32) release(b, kind, f.warp);
  }
  yield(f);
}

// The calling fiber has returned from the kernel.
void leave(Block& b, Fiber& f) {
  f.done = true;
  set_ready(b, f.linear, false);
  --b.live;
  --b.warp_live[static_cast<size_t>(f.warp)];
  if (const Fiber* w = first_waiting(b, Wait::block, -1)) fail(left_early(b, *w, Wait::block, f));
  if (const Fiber* w = first_waiting(b, Wait::warp, f.warp)) fail(left_early(b, *w, Wait::warp, f));
}

void fiber_entry() {
  try {
    (*g_block->body)();
  } catch (const std::exception& e) {  // the handler ends before the jump: no exception is left open
    if (g_block->error.empty()) g_block->error = "warp emulator: " + where(*g_block, *g_fiber) + " threw: " + e.what();
    g_fiber->done = true;
  }
  if (!g_fiber->done) leave(*g_block, *g_fiber);
  _longjmp(g_block->scheduler, 1);
}

uint32_t* lane_slots(int warp, int lane) {
  return &g_block->slots[(static_cast<size_t>(warp) * 32 + static_cast<size_t>(lane)) * kSlotsPerLane];
}

float from16(uint16_t bits, bool bf16) {
  if (bf16) return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
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

// Runs `f` until it waits, leaves or fails.
__attribute__((noinline)) void resume(Block& b, Fiber& f) {
  g_fiber = &f;
  if (_setjmp(b.scheduler) == 0) {
    if (!f.started) {
      f.started = true;
      swapcontext(&b.scheduler_ctx, &f.ctx);  // never returns here: fibers come back by _longjmp
    }
    _longjmp(f.env, 1);
  }
  g_fiber = nullptr;
}

// The launch's shared memory between two inaccessible pages: the bytes requested (rounded up to
// 16) end where the upper guard page starts, so any access past them faults; so does one more
// than a page's slack before them.
class SharedPages {
 public:
  explicit SharedPages(size_t bytes) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t used = (bytes + 15) / 16 * 16;
    body_ = (used + page_ - 1) / page_ * page_;
    if (body_ == 0) body_ = page_;
    void* m = mmap(nullptr, body_ + 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error("warp emulator: mmap of shared memory failed");
    map_ = static_cast<unsigned char*>(m);
    mprotect(map_, page_, PROT_NONE);
    mprotect(map_ + page_ + body_, page_, PROT_NONE);
    base_ = map_ + page_ + body_ - used;
  }
  ~SharedPages() { munmap(map_, body_ + 2 * page_); }
  SharedPages(const SharedPages&) = delete;
  SharedPages& operator=(const SharedPages&) = delete;
  unsigned char* base() const { return base_; }
  bool in_guard(const unsigned char* a) const {
    return (a >= map_ && a < map_ + page_) || (a >= map_ + page_ + body_ && a < map_ + body_ + 2 * page_);
  }

 private:
  size_t page_ = 0, body_ = 0;
  unsigned char* map_ = nullptr;
  unsigned char* base_ = nullptr;
};

const SharedPages* g_pages = nullptr;
size_t g_shared_bytes = 0;
struct sigaction g_previous_segv {};

// A fault in a guard page ends the launch as a GPU's out-of-range shared access would; any other
// fault goes to the previous handler (doctest's) when the instruction repeats. SA_NODEFER keeps
// SIGSEGV unblocked after the jump back to the scheduler.
void on_segv(int, siginfo_t* si, void*) {
  const auto* a = static_cast<const unsigned char*>(si->si_addr);
  if (g_block && g_fiber && g_pages && g_pages->in_guard(a)) {
    const long offset = static_cast<long>(a - g_pages->base());
    std::snprintf(g_fault, sizeof(g_fault),
                  "warp emulator: thread %d of block (%u,%u,%u) touched shared memory at byte %ld of the %zu the "
                  "launch requested (out of range)",
                  g_fiber->linear, g_block->bid.x, g_block->bid.y, g_block->bid.z, offset, g_shared_bytes);
    g_fiber->done = true;
    _longjmp(g_block->scheduler, 1);
  }
  sigaction(SIGSEGV, &g_previous_segv, nullptr);
}

class SegvHandler {
 public:
  SegvHandler() {
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
  }
  ~SegvHandler() { sigaction(SIGSEGV, &g_previous_segv, nullptr); }
  SegvHandler(const SegvHandler&) = delete;
  SegvHandler& operator=(const SegvHandler&) = delete;
};

// Fiber stacks, kept from launch to launch (never touched beyond what the fibers use).
char* stack(size_t i) {
  static std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() <= i) stacks.emplace_back(new char[kStackBytes]);
  return stacks[i].get();
}

void run_block(Block& blk) {
  for (;;) {
    const int p = first_ready(blk);
    if (p < 0) {
      if (blk.live > 0 && blk.error.empty())
        blk.error = "warp emulator: deadlock: every live thread waits at a barrier";
      break;
    }
    resume(blk, blk.fibers[static_cast<size_t>(blk.order[static_cast<size_t>(p)])]);
    if (g_fault[0]) blk.error = g_fault;
    if (!blk.error.empty()) break;
  }
}

}  // namespace

const uint3& thread_idx() { return me().tid; }
const uint3& block_idx() { return g_block->bid; }
unsigned char* shared_memory() { return g_block->shared; }
int lane() { return me().lane; }
void sync_block() { arrive(Wait::block); }
void sync_warp() { arrive(Wait::warp); }
Counters& counters() { return g_counters; }

void set_order(Order order, uint64_t seed) {
  g_order = order;
  g_seed = seed;
}
const char* order_name(Order order) {
  return order == Order::index ? "index" : order == Order::reversed ? "reversed" : "shuffled";
}

void check_aligned(const void* p, size_t bytes, const char* what) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a % bytes == 0) return;
  std::string msg = "warp emulator: misaligned address: " + std::string(what) + " at 0x";
  char hex[32];
  std::snprintf(hex, sizeof(hex), "%llx", static_cast<unsigned long long>(a));
  msg += hex;
  msg += " is not a multiple of " + std::to_string(bytes) + " bytes";
  if (g_block && g_fiber) msg += " (" + where(*g_block, *g_fiber) + ")";
  fail(msg);
}

void func_set_max_dynamic_shared(const void* kernel, size_t bytes) {
  if (bytes > kMaxSharedPerBlock)
    throw std::runtime_error("warp emulator: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " +
                             std::to_string(bytes) + ") fails: sm_90 allows at most " +
                             std::to_string(kMaxSharedPerBlock) + " bytes per block");
  g_shared_limits[kernel] = bytes;
}

uint32_t exchange(uint32_t mine, int src_lane) {
  Fiber& f = me();
  lane_slots(f.warp, f.lane)[0] = mine;
  sync_warp();
  const uint32_t got = lane_slots(f.warp, src_lane & 31)[0];
  sync_warp();  // nobody overwrites a slot before every lane has read
  return got;
}

float fused_dot_add(float c, const float (&a)[16], const float (&b)[16]) {
  double t[17];
  t[0] = c;
  bool finite = std::isfinite(c);
  for (int k = 0; k < 16; ++k) {
    t[k + 1] = static_cast<double>(a[k]) * static_cast<double>(b[k]);  // exact: at most 11 x 11 significant bits
    finite = finite && std::isfinite(t[k + 1]);
  }
  if (!finite) {  // Inf and NaN propagate as in any sum
    double s = 0;
    for (double x : t) s += x;
    return static_cast<float>(s);
  }
  int emax = INT_MIN;
  for (double x : t)
    if (x != 0) emax = std::max(emax, static_cast<int>((std::bit_cast<uint64_t>(x) >> 52) & 0x7ff) - 1023);
  if (emax == INT_MIN) return c;
  // Every term cut toward zero to a multiple of the quantum: kMmaAlignBits bits below the largest
  // leading bit. The cut terms (17 of at most 25 bits on one grid) sum exactly in double.
  const double quantum = std::ldexp(1.0, emax - (kMmaAlignBits - 1));
  double s = 0;
  for (double x : t) s += std::trunc(x / quantum) * quantum;
  float r = static_cast<float>(s);  // to nearest; then toward zero where that rounded up
  if (std::fabs(static_cast<double>(r)) > std::fabs(s)) r = std::nextafter(r, 0.0f);
  return r;
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
    float arow[16], bcol[16];
    for (int k = 0; k < 16; ++k) {
      arow[k] = A(row, k);
      bcol[k] = B(k, col);
    }
    out[i] = fused_dot_add(d[i], arow, bcol);
  }
  ++g_counters.mmas;
  sync_warp();  // every lane has read the others' registers
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

void launch(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  if (block.y != 1 || block.z != 1 || block.x % 32 != 0 || block.x == 0)
    throw std::invalid_argument("warp emulator: blocks must be 1-D and whole warps");
  if (g_block) throw std::logic_error("warp emulator: launch inside a launch");
  const auto raised = g_shared_limits.find(kernel);
  const size_t limit = raised == g_shared_limits.end() ? kDefaultDynamicShared : raised->second;
  if (shared_bytes > limit)
    throw std::runtime_error("warp emulator: launch requests " + std::to_string(shared_bytes) +
                             " bytes of dynamic shared memory; the kernel may have " + std::to_string(limit) +
                             " (too many resources requested for launch: raise the limit with "
                             "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) first)");
  const int n = static_cast<int>(block.x);
  SharedPages pages(shared_bytes);
  SegvHandler handler;
  g_pages = &pages;
  g_shared_bytes = shared_bytes;
  g_fault[0] = '\0';
  std::string error;
  for (unsigned z = 0; z < grid.z && error.empty(); ++z)
    for (unsigned y = 0; y < grid.y && error.empty(); ++y)
      for (unsigned x = 0; x < grid.x && error.empty(); ++x) {
        Block blk;
        blk.bid = uint3{x, y, z};
        blk.shared = pages.base();
        std::memset(blk.shared, 0xFF, shared_bytes);
        blk.slots.assign(static_cast<size_t>(n) * kSlotsPerLane, 0u);
        blk.body = &body;
        blk.fibers.resize(static_cast<size_t>(n));
        blk.order.resize(static_cast<size_t>(n));
        blk.position.resize(static_cast<size_t>(n));
        blk.ready.assign((static_cast<size_t>(n) + 63) / 64, 0);
        blk.live = n;
        blk.warp_live.assign(static_cast<size_t>(n / 32), 32);
        blk.warp_waiting.assign(static_cast<size_t>(n / 32), 0);
        for (int i = 0; i < n; ++i) {
          Fiber& f = blk.fibers[static_cast<size_t>(i)];
          f.tid = uint3{static_cast<unsigned>(i), 0u, 0u};
          f.linear = i;
          f.warp = i / 32;
          f.lane = i % 32;
          make_fiber(f, stack(static_cast<size_t>(i)));
        }
        draw_order(blk);
        g_block = &blk;
        run_block(blk);
        g_block = nullptr;
        g_fiber = nullptr;
        error = blk.error;
        ++g_counters.blocks;
      }
  g_pages = nullptr;
  if (!error.empty()) throw std::runtime_error(error);
}

}  // namespace dl::emu
