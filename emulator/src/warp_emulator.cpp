#include "emulator/warp_emulator.hpp"

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
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dl::emu {

namespace {

constexpr size_t kStackBytes = 256 << 10;
constexpr int kSlotsPerLane = 8;  // words a lane offers at once (an mma: 4 of A, 2 of B)

enum class Wait { none, block, warp };

// One emulated GPU thread of the running block.
struct Thread {
  uint3 tid{};
  int linear = 0, warp = 0, lane = 0;
  Wait wait = Wait::none;
  const char* site = nullptr;  // the barrier it waits at
  bool started = false, done = false;
  struct Fiber* fiber = nullptr;  // the stack it runs on, once started
  unsigned shuffles = 0;          // shuffles so far: their parity picks the exchange buffer
};

// A stack that runs emulated threads one after another: it takes the next thread that has not
// started yet whenever its current one returns, so a kernel without barriers runs a whole grid
// on one fiber, and a new one is made only while the threads before it wait at a barrier.
struct Fiber {
  ucontext_t ctx{};  // where it starts
  jmp_buf env{};     // where it waits (a switch without the signal-mask syscall swapcontext makes)
  std::unique_ptr<char[]> stack{new char[kStackBytes]};
  bool running = false;  // inside fiber_main (false: fresh, or its stack was dropped by a failure)
  bool idle = false;     // between threads, waiting for the next
  Thread* thread = nullptr;
};

struct Block {
  uint3 bid{};
  std::vector<Thread> threads;
  unsigned char* shared = nullptr;
  std::vector<uint32_t> slots;      // [warp][lane][kSlotsPerLane]
  std::vector<uint64_t> exchanged;  // [2][warp][lane]: what each lane offered at a shuffle
  jmp_buf scheduler{};
  ucontext_t scheduler_ctx{};
  const std::function<void()>* body = nullptr;
  // order[p]: the thread with priority p (0 runs first); ready: bit p set when order[p] may run.
  std::vector<int> order, position;
  std::vector<uint64_t> ready;
  int live = 0, block_waiting = 0;
  std::vector<int> warp_lanes, warp_waiting, warp_done;  // counts per warp
  uint64_t barriers = 0;
  std::string error;  // the first failure; the launch throws it
};

// The launch's shared memory (dynamic, or one static array) between two inaccessible pages: the
// bytes requested (rounded up to 16) end where the upper guard page starts, so any access past
// them faults; so does one more than a page's slack before them.
class SharedPages {
 public:
  explicit SharedPages(size_t bytes) : bytes_(bytes) {
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
  size_t bytes() const { return bytes_; }
  void poison() const { std::memset(base_, 0xFF, bytes_); }
  bool in_guard(const unsigned char* a) const {
    return (a >= map_ && a < map_ + page_) || (a >= map_ + page_ + body_ && a < map_ + body_ + 2 * page_);
  }

 private:
  size_t bytes_ = 0, page_ = 0, body_ = 0;
  unsigned char* map_ = nullptr;
  unsigned char* base_ = nullptr;
};

struct StaticArray {
  std::unique_ptr<SharedPages> pages;
  const char* name = nullptr;
};

// The running launch. Thread-local: ranks that share a process launch on their own threads.
struct Launch {
  const char* name = "kernel";
  dim3 grid{}, block{};
  const SharedPages* dynamic = nullptr;
  std::map<const void*, StaticArray> statics;  // by declaration
  size_t static_bytes = 0;
};

thread_local Block* g_block = nullptr;
thread_local Thread* g_thread = nullptr;
thread_local Fiber* g_fiber = nullptr;
thread_local Launch* g_launch = nullptr;
thread_local std::vector<std::unique_ptr<Fiber>> g_fibers;
thread_local std::vector<Fiber*> g_idle;
thread_local Counters g_counters;
thread_local Order g_order = Order::index;
thread_local uint64_t g_seed = 0;
thread_local std::map<const void*, size_t> g_shared_limits;  // raised by func_set_max_dynamic_shared
thread_local char g_fault[512];                              // written by the SIGSEGV handler
AddressDescriber g_describe_address = nullptr;
StrayWriteFinder g_find_stray_write = nullptr;

Thread& me() {
  if (!g_thread) throw std::logic_error("warp emulator: called outside an emulated kernel");
  return *g_thread;
}

std::string kernel_name() { return g_launch ? g_launch->name : "kernel"; }

std::string where(const Block& b, const Thread& t) {
  return "thread (" + std::to_string(t.tid.x) + "," + std::to_string(t.tid.y) + "," + std::to_string(t.tid.z) +
         ") of block (" + std::to_string(b.bid.x) + "," + std::to_string(b.bid.y) + "," + std::to_string(b.bid.z) +
         ") of " + kernel_name();
}

// Back to the scheduler; returns when the scheduler runs this fiber again.
void yield(Fiber& f) {
  if (_setjmp(f.env) == 0) _longjmp(g_block->scheduler, 1);
}

// Ends the launch with `message`: the calling thread stops where it is (its stack is dropped, as
// a faulting GPU kernel's state is) and the scheduler throws.
[[noreturn]] void fail(const std::string& message) {
  if (!g_block || !g_thread) throw std::runtime_error(message);
  if (g_block->error.empty()) g_block->error = message;
  g_thread->done = true;
  g_fiber->running = false;
  _longjmp(g_block->scheduler, 1);
}

void set_ready(Block& b, int thread, bool on) {
  const auto p = static_cast<size_t>(b.position[static_cast<size_t>(thread)]);
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
  const int n = static_cast<int>(b.threads.size());
  for (int i = 0; i < n; ++i) b.order[static_cast<size_t>(i)] = g_order == Order::reversed ? n - 1 - i : i;
  if (g_order == Order::shuffled) {
    uint64_t s = g_seed ^ (uint64_t{b.bid.x} << 40) ^ (uint64_t{b.bid.y} << 20) ^ b.bid.z ^ (b.barriers << 52);
    for (int i = n - 1; i > 0; --i)
      std::swap(b.order[static_cast<size_t>(i)], b.order[splitmix(s) % static_cast<uint64_t>(i + 1)]);
  }
  for (int p = 0; p < n; ++p) b.position[static_cast<size_t>(b.order[static_cast<size_t>(p)])] = p;
  std::fill(b.ready.begin(), b.ready.end(), 0);
  for (const Thread& t : b.threads)
    if (!t.done && t.wait == Wait::none) set_ready(b, t.linear, true);
}

// The threads of `warp` (every thread when warp < 0): the counts above keep the checks of a
// barrier or shuffle from scanning them, except to name a thread in a failure.
std::pair<size_t, size_t> thread_range(const Block& b, int warp) {
  if (warp < 0) return {0, b.threads.size()};
  const auto first = static_cast<size_t>(warp) * 32;
  return {first, first + static_cast<size_t>(b.warp_lanes[static_cast<size_t>(warp)])};
}

void release(Block& b, Wait kind, int warp) {
  const auto [first, last] = thread_range(b, kind == Wait::block ? -1 : warp);
  for (size_t i = first; i < last; ++i) {
    Thread& t = b.threads[i];
    if (!t.done && t.wait == kind) {
      t.wait = Wait::none;
      set_ready(b, t.linear, true);
    }
  }
  if (kind == Wait::block) {
    b.block_waiting = 0;
    ++b.barriers;
    if (g_order == Order::shuffled) draw_order(b);
  } else {
    b.warp_waiting[static_cast<size_t>(warp)] = 0;
  }
}

const Thread& first_done(const Block& b, int warp) {
  const auto [first, last] = thread_range(b, warp);
  for (size_t i = first; i < last; ++i)
    if (b.threads[i].done) return b.threads[i];
  throw std::logic_error("warp emulator: no thread has left");
}
const Thread& first_waiting(const Block& b, Wait kind, int warp) {
  const auto [first, last] = thread_range(b, warp);
  for (size_t i = first; i < last; ++i)
    if (!b.threads[i].done && b.threads[i].wait == kind) return b.threads[i];
  throw std::logic_error("warp emulator: no thread waits");
}
std::string left_early(const Block& b, const Thread& waiting, Wait kind, const Thread& gone) {
  return "warp emulator: " + where(b, waiting) + " waits at a " +
         (kind == Wait::block ? std::string("block barrier (") + waiting.site + ")" : "warp-wide operation") +
         " that thread " + std::to_string(gone.linear) + " left the kernel without reaching";
}

// Every live thread waits at a barrier: they must all wait at the same one.
void check_same_barrier(const Block& b) {
  const Thread* first = nullptr;
  for (const Thread& t : b.threads) {
    if (t.done || t.wait != Wait::block) continue;
    if (!first) first = &t;
    else if (std::strcmp(first->site, t.site) != 0)
      fail("warp emulator: barrier divergence in block (" + std::to_string(b.bid.x) + "," + std::to_string(b.bid.y) +
           "," + std::to_string(b.bid.z) + ") of " + kernel_name() + ": thread " + std::to_string(first->linear) +
           " waits at the __syncthreads() of " + first->site + ", thread " + std::to_string(t.linear) + " at " +
           t.site + " (a barrier inside a branch that not every thread of the block takes)");
  }
}

void arrive(Wait kind, const char* site) {
  Thread& t = me();
  Block& b = *g_block;
  const auto w = static_cast<size_t>(t.warp);
  t.wait = kind;
  t.site = site;
  set_ready(b, t.linear, false);
  if (kind == Wait::block) {
    ++g_counters.block_syncs;
    if (b.live < static_cast<int>(b.threads.size())) fail(left_early(b, t, kind, first_done(b, -1)));
    if (++b.block_waiting == b.live) {
      check_same_barrier(b);
      release(b, kind, t.warp);
    }
  } else {
    ++g_counters.warp_syncs;
    if (b.warp_done[w] > 0) fail(left_early(b, t, kind, first_done(b, t.warp)));
    if (++b.warp_waiting[w] == b.warp_lanes[w]) release(b, kind, t.warp);
  }
  yield(*g_fiber);
}

// The calling thread has returned from the kernel.
void leave(Block& b, Thread& t) {
  t.done = true;
  set_ready(b, t.linear, false);
  --b.live;
  ++b.warp_done[static_cast<size_t>(t.warp)];
  if (b.block_waiting > 0) fail(left_early(b, first_waiting(b, Wait::block, -1), Wait::block, t));
  if (b.warp_waiting[static_cast<size_t>(t.warp)] > 0)
    fail(left_early(b, first_waiting(b, Wait::warp, t.warp), Wait::warp, t));
}

// A fiber's life: run the thread it is given, then park until the scheduler gives it the next.
void fiber_main() {
  for (;;) {
    Fiber& f = *g_fiber;
    try {
      (*g_block->body)();
    } catch (const std::exception& e) {  // the handler ends before the jump: no exception is left open
      if (g_block->error.empty()) g_block->error = "warp emulator: " + where(*g_block, *g_thread) + " threw: " + e.what();
      g_thread->done = true;
    }
    if (!g_thread->done) leave(*g_block, *g_thread);
    f.idle = true;
    f.thread = nullptr;
    g_idle.push_back(&f);
    yield(f);
  }
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

// A fresh context that starts in fiber_main on the fiber's stack. Its own function: getcontext
// returns twice, which would leave the caller's loop variables undefined (-Wclobbered).
__attribute__((noinline)) void make_fiber(Fiber& f) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.get();
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
}

// A fiber for a thread that starts now: a parked one, else a new one.
Fiber& fiber_for(Thread& t) {
  Fiber* f = nullptr;
  if (!g_idle.empty()) {
    f = g_idle.back();
    g_idle.pop_back();
  } else {
    for (auto& candidate : g_fibers)
      if (!candidate->running) {
        f = candidate.get();
        break;
      }
    if (!f) f = g_fibers.emplace_back(std::make_unique<Fiber>()).get();
  }
  f->idle = false;
  f->thread = &t;
  return *f;
}

// Runs thread `t` until it waits, leaves or fails.
__attribute__((noinline)) void resume(Block& b, Thread& t, Fiber& f) {
  g_thread = &t;
  g_fiber = &f;
  if (_setjmp(b.scheduler) == 0) {
    if (!f.running) {
      f.running = true;
      make_fiber(f);
      swapcontext(&b.scheduler_ctx, &f.ctx);  // never returns here: fibers come back by _longjmp
    }
    _longjmp(f.env, 1);
  }
  g_thread = nullptr;
  g_fiber = nullptr;
}

const StaticArray* static_holding(const unsigned char* a) {
  for (const auto& [key, arr] : g_launch->statics)
    if (arr.pages->in_guard(a)) return &arr;
  return nullptr;
}

struct sigaction g_previous_segv {};

// A fault in a guard page of shared memory ends the launch as a GPU's out-of-range shared access
// would. Any other fault inside a kernel is a global access outside every allocation (the
// emulated device's memory has guard pages too): reported the way compute-sanitizer reports it,
// then the process aborts, as a GPU context is lost after one. A fault outside a kernel goes to
// the previous handler when the instruction repeats. SA_NODEFER keeps SIGSEGV unblocked after
// the jump back to the scheduler.
void on_segv(int, siginfo_t* si, void*) {
  const auto* a = static_cast<const unsigned char*>(si->si_addr);
  if (g_block && g_thread && g_launch) {
    const Thread& t = *g_thread;
    const Block& b = *g_block;
    if (g_launch->dynamic && g_launch->dynamic->in_guard(a)) {
      std::snprintf(g_fault, sizeof(g_fault),
                    "warp emulator: thread (%u,%u,%u) of block (%u,%u,%u) of %s touched dynamic shared memory at "
                    "byte %ld of the %zu the launch requested (out of range)",
                    t.tid.x, t.tid.y, t.tid.z, b.bid.x, b.bid.y, b.bid.z, g_launch->name,
                    static_cast<long>(a - g_launch->dynamic->base()), g_launch->dynamic->bytes());
    } else if (const StaticArray* arr = static_holding(a)) {
      std::snprintf(g_fault, sizeof(g_fault),
                    "warp emulator: thread (%u,%u,%u) of block (%u,%u,%u) of %s touched __shared__ %s at byte %ld "
                    "of its %zu (out of range)",
                    t.tid.x, t.tid.y, t.tid.z, b.bid.x, b.bid.y, b.bid.z, g_launch->name, arr->name,
                    static_cast<long>(a - arr->pages->base()), arr->pages->bytes());
    } else {
      const std::string near = g_describe_address ? g_describe_address(a) : std::string();
      std::fprintf(stderr,
                   "========= Invalid __global__ access (emulated device)\n"
                   "=========     by thread (%u,%u,%u) in block (%u,%u,%u) of kernel %s\n"
                   "=========     Address %p is %s\n"
                   "========= The kernel faulted: aborting (a GPU's context is lost after such a fault)\n",
                   t.tid.x, t.tid.y, t.tid.z, b.bid.x, b.bid.y, b.bid.z, g_launch->name, si->si_addr,
                   near.empty() ? "outside every device allocation" : near.c_str());
      std::fflush(stderr);
      sigaction(SIGSEGV, &g_previous_segv, nullptr);
      std::abort();
    }
    g_thread->done = true;
    g_fiber->running = false;
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

// What a hung block waits at: a thread at a block barrier (its place) and one at a warp-wide
// operation that the first one's warp never reaches, as a GPU would hang.
std::string deadlock(const Block& b) {
  std::string what = "warp emulator: deadlock in block (" + std::to_string(b.bid.x) + "," + std::to_string(b.bid.y) +
                     "," + std::to_string(b.bid.z) + ") of " + kernel_name() + ": every live thread waits";
  const Thread* at_barrier = nullptr;
  const Thread* at_warp_op = nullptr;
  for (const Thread& t : b.threads) {
    if (t.done) continue;
    if (t.wait == Wait::block && !at_barrier) at_barrier = &t;
    if (t.wait == Wait::warp && !at_warp_op) at_warp_op = &t;
  }
  if (at_barrier) what += ": thread " + std::to_string(at_barrier->linear) + " at the __syncthreads() of " + at_barrier->site;
  if (at_warp_op) what += ", thread " + std::to_string(at_warp_op->linear) + " at a warp-wide operation (shuffle) of its warp";
  return what + " (a barrier or shuffle inside a branch that not every thread takes)";
}

void run_block(Block& blk) {
  for (;;) {
    const int p = first_ready(blk);
    if (p < 0) {
      if (blk.live > 0 && blk.error.empty()) blk.error = deadlock(blk);
      break;
    }
    Thread& t = blk.threads[static_cast<size_t>(blk.order[static_cast<size_t>(p)])];
    if (!t.started) {
      t.started = true;
      t.fiber = &fiber_for(t);
    }
    resume(blk, t, *t.fiber);
    if (g_fault[0]) blk.error = g_fault;
    if (!blk.error.empty()) break;
  }
}

std::string dims(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

// A GPU's refusal of a launch configuration (cudaErrorInvalidConfiguration and kin), naming the kernel.
void check_launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t shared_bytes) {
  const auto refuse = [&](const std::string& why) {
    throw std::runtime_error(std::string("CUDA error in launch of ") + name + " (emulated device): grid " +
                             dims(grid) + ", block " + dims(block) + ", " + std::to_string(shared_bytes) +
                             " bytes of dynamic shared memory: " + why);
  };
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
    refuse("cudaErrorInvalidConfiguration (a grid or block dimension is 0)");
  if (threads > kMaxThreadsPerBlock || block.x > 1024 || block.y > 1024 || block.z > 64)
    refuse("cudaErrorInvalidConfiguration (" + std::to_string(threads) +
           " threads per block; at most 1024, with x and y <= 1024 and z <= 64)");
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    refuse("cudaErrorInvalidConfiguration (grid x must be < 2^31, y and z <= 65535)");
  const auto raised = g_shared_limits.find(kernel);
  const size_t limit = raised == g_shared_limits.end() ? kDefaultDynamicShared : raised->second;
  if (shared_bytes > limit)
    refuse("cudaErrorInvalidValue (too many resources requested for launch: the kernel may have " +
           std::to_string(limit) + " bytes; raise the limit with cudaFuncSetAttribute(MaxDynamicSharedMemorySize) first)");
}

}  // namespace

const uint3& thread_idx() { return me().tid; }
const uint3& block_idx() { return g_block->bid; }
const dim3& block_dim() { return g_launch->block; }
const dim3& grid_dim() { return g_launch->grid; }
unsigned char* shared_memory() { return g_block->shared; }
int lane() { return me().lane; }
void sync_block(const char* site) { arrive(Wait::block, site); }
void sync_warp() { arrive(Wait::warp, "__syncwarp"); }
Counters& counters() { return g_counters; }
void set_address_describer(AddressDescriber describe) { g_describe_address = describe; }
void set_stray_write_finder(StrayWriteFinder find) { g_find_stray_write = find; }

void set_order(Order order, uint64_t seed) {
  g_order = order;
  g_seed = seed;
}
const char* order_name(Order order) {
  return order == Order::index ? "index" : order == Order::reversed ? "reversed" : "shuffled";
}

void fault(const std::string& what) {
  if (g_block && g_thread) fail("warp emulator: " + where(*g_block, *g_thread) + ": " + what);
  throw std::runtime_error("warp emulator: " + what);
}

void check_aligned(const void* p, size_t bytes, const char* what) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a % bytes == 0) return;
  std::string msg = "warp emulator: misaligned address: " + std::string(what) + " at 0x";
  char hex[32];
  std::snprintf(hex, sizeof(hex), "%llx", static_cast<unsigned long long>(a));
  msg += hex;
  msg += " is not a multiple of " + std::to_string(bytes) + " bytes";
  if (g_block && g_thread) msg += " (" + where(*g_block, *g_thread) + ")";
  fail(msg);
}

void* static_shared(const void* key, size_t bytes, const char* name) {
  Launch& l = *g_launch;
  auto it = l.statics.find(key);
  if (it == l.statics.end()) {
    if (l.static_bytes + bytes > kDefaultDynamicShared ||
        l.static_bytes + bytes + (l.dynamic ? l.dynamic->bytes() : 0) > kMaxSharedPerBlock)
      fail("warp emulator: " + kernel_name() + ": __shared__ " + name + " (" + std::to_string(bytes) +
           " bytes) takes the block's static shared memory past 48 KiB, or static and dynamic past 227 KiB");
    l.static_bytes += bytes;
    it = l.statics.emplace(key, StaticArray{std::make_unique<SharedPages>(bytes), name}).first;
    it->second.pages->poison();
  }
  return it->second.pages->base();
}

void func_set_max_dynamic_shared(const void* kernel, size_t bytes) {
  if (bytes > kMaxSharedPerBlock)
    throw std::runtime_error("warp emulator: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " +
                             std::to_string(bytes) + ") fails: sm_90 allows at most " +
                             std::to_string(kMaxSharedPerBlock) + " bytes per block");
  g_shared_limits[kernel] = bytes;
}

// One warp-wide wait per shuffle: consecutive shuffles write alternate buffers, so a lane that
// has gone on to the next one cannot overwrite what a slower lane has still to read (nobody gets
// two shuffles ahead: the next one waits for every lane).
uint64_t exchange64(uint64_t mine, int src_lane) {
  Thread& t = me();
  Block& b = *g_block;
  const size_t warps = b.warp_lanes.size();
  uint64_t* buffer = &b.exchanged[(t.shuffles++ & 1u) * warps * 32 + static_cast<size_t>(t.warp) * 32];
  buffer[t.lane] = mine;
  sync_warp();
  const int src = src_lane & 31;
  if (src >= g_block->warp_lanes[static_cast<size_t>(t.warp)])
    fail("warp emulator: " + where(*g_block, t) + " reads lane " + std::to_string(src) +
         " of a warp with fewer lanes (the block is not a whole number of warps)");
  return buffer[src];
}

uint32_t exchange(uint32_t mine, int src_lane) { return static_cast<uint32_t>(exchange64(mine, src_lane)); }

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
  Thread& f = me();
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

void launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
            const std::function<void()>& body) {
  if (g_block) throw std::logic_error("warp emulator: launch of " + std::string(name) + " inside a launch");
  check_launch(name, kernel, grid, block, shared_bytes);
  const int n = static_cast<int>(block.x * block.y * block.z);
  const int warps = (n + 31) / 32;
  SharedPages pages(shared_bytes);
  Launch l;
  l.name = name;
  l.grid = grid;
  l.block = block;
  l.dynamic = &pages;
  SegvHandler handler;
  g_launch = &l;
  g_fault[0] = '\0';
  std::string error;
  Block blk;
  blk.threads.resize(static_cast<size_t>(n));
  blk.order.resize(static_cast<size_t>(n));
  blk.position.resize(static_cast<size_t>(n));
  blk.slots.assign(static_cast<size_t>(warps) * 32 * kSlotsPerLane, 0u);
  blk.exchanged.assign(2 * static_cast<size_t>(warps) * 32, 0u);
  blk.body = &body;
  blk.shared = pages.base();
  for (unsigned z = 0; z < grid.z && error.empty(); ++z)
    for (unsigned y = 0; y < grid.y && error.empty(); ++y)
      for (unsigned x = 0; x < grid.x && error.empty(); ++x) {
        blk.bid = uint3{x, y, z};
        pages.poison();
        for (auto& [key, arr] : l.statics) arr.pages->poison();
        blk.ready.assign((static_cast<size_t>(n) + 63) / 64, 0);
        blk.live = n;
        blk.block_waiting = 0;
        blk.barriers = 0;
        blk.warp_lanes.assign(static_cast<size_t>(warps), 32);
        if (n % 32) blk.warp_lanes.back() = n % 32;
        blk.warp_waiting.assign(static_cast<size_t>(warps), 0);
        blk.warp_done.assign(static_cast<size_t>(warps), 0);
        for (int i = 0; i < n; ++i) {
          Thread& t = blk.threads[static_cast<size_t>(i)];
          const auto u = static_cast<unsigned>(i);
          t = Thread{};
          t.tid = uint3{u % block.x, u / block.x % block.y, u / (block.x * block.y)};
          t.linear = i;
          t.warp = i / 32;
          t.lane = i % 32;
        }
        draw_order(blk);
        g_block = &blk;
        run_block(blk);
        g_block = nullptr;
        g_thread = nullptr;
        g_fiber = nullptr;
        error = blk.error;
        ++g_counters.blocks;
      }
  // Fibers whose thread was stopped mid-way (a failure) start afresh next time.
  for (auto& f : g_fibers)
    if (!f->idle) f->running = false, f->thread = nullptr;
  g_launch = nullptr;
  if (!error.empty()) throw std::runtime_error(error);
  // A write into an allocation's slack (past its end, short of the guard page) faults on no page;
  // compute-sanitizer would have reported it at the access, so report it now, as a fault.
  if (const void* stray = g_find_stray_write ? g_find_stray_write() : nullptr) {
    const std::string near = g_describe_address ? g_describe_address(stray) : std::string();
    std::fprintf(stderr,
                 "========= Invalid __global__ write (emulated device)\n"
                 "=========     by a thread of kernel %s (found after the launch: the bytes past an allocation's "
                 "end that no guard page covers are checked after every launch)\n"
                 "=========     Address %p is %s\n"
                 "========= The kernel faulted: aborting (a GPU's context is lost after such a fault)\n",
                 name, stray, near.empty() ? "outside every device allocation" : near.c_str());
    std::fflush(stderr);
    std::abort();
  }
}

}  // namespace dl::emu
