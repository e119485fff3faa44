#include "emulator/device_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

namespace dl::cuda_emu {
namespace {

constexpr size_t kAlignment = 256;             // cudaMalloc's blocks start 256-byte aligned
constexpr size_t kPoisonChunk = size_t{16} << 20;  // one 0xFF file, mapped as often as a block needs
constexpr size_t kDefaultTotal = size_t{80} << 30;

size_t page_bytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct Block {
  unsigned char* map = nullptr;  // leading guard page, data pages, trailing guard page
  size_t map_bytes = 0;
  DeviceAllocation a;
};

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Block> blocks;  // by base
  std::map<uintptr_t, Block> freed;   // quarantined, by base
  std::deque<uintptr_t> freed_order;  // oldest first
  size_t freed_map_bytes = 0;
  std::map<uintptr_t, size_t> host;   // pinned host blocks by address
  size_t allocated = 0;
  uint64_t next_serial = 1;
  int poison_fd = -1;
};

// Never destroyed: blocks may be freed by static destructors that run after it would be.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// A file of kPoisonChunk 0xFF bytes whose pages every block maps copy-on-write.
int poison_file(Registry& r) {
  if (r.poison_fd >= 0) return r.poison_fd;
  int fd = memfd_create("dl-cuda-emu-poison", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(kPoisonChunk)) != 0) {
    close(fd);
    return -1;
  }
  void* p = mmap(nullptr, kPoisonChunk, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return -1;
  }
  std::memset(p, 0xFF, kPoisonChunk);
  munmap(p, kPoisonChunk);
  r.poison_fd = fd;
  return fd;
}

std::optional<size_t> configured_total() {
  static const std::optional<size_t> total = []() -> std::optional<size_t> {
    const char* env = std::getenv("DL_CUDA_EMU_MEMORY");
    if (!env || !*env) return kDefaultTotal;
    auto v = parse_byte_count(env);
    if (!v)
      std::fprintf(stderr,
                   "DL_CUDA_EMU_MEMORY=%s is not a byte count: give the emulated GPU's memory in bytes or with a "
                   "K/M/G/T suffix (e.g. 80G)\n",
                   env);
    return v;
  }();
  return total;
}

// The block of `blocks` whose mapping (guards included) holds p.
const Block* block_near(const std::map<uintptr_t, Block>& blocks, uintptr_t p) {
  auto it = blocks.upper_bound(p);
  if (it != blocks.end()) {
    const Block& b = it->second;
    if (p >= reinterpret_cast<uintptr_t>(b.map)) return &b;
  }
  if (it != blocks.begin()) {
    const Block& b = std::prev(it)->second;
    if (p < reinterpret_cast<uintptr_t>(b.map) + b.map_bytes) return &b;
  }
  return nullptr;
}

// The first byte of [p, p + n) that is not 0xFF, or nullptr.
const unsigned char* first_unpoisoned(const unsigned char* p, size_t n) {
  static const std::vector<unsigned char> poison(4096, 0xFF);
  for (size_t off = 0; off < n; off += poison.size()) {
    const size_t len = std::min(poison.size(), n - off);
    if (std::memcmp(p + off, poison.data(), len) == 0) continue;
    for (size_t i = 0; i < len; ++i)
      if (p[off + i] != 0xFF) return p + off + i;
  }
  return nullptr;
}

// Drops the oldest quarantined blocks until the quarantine fits its budgets.
void trim_quarantine(Registry& r) {
  while ((r.freed_map_bytes > kQuarantineBytes || r.freed.size() > kQuarantineBlocks) && !r.freed_order.empty()) {
    auto it = r.freed.find(r.freed_order.front());
    r.freed_order.pop_front();
    if (it == r.freed.end()) continue;
    munmap(it->second.map, it->second.map_bytes);
    r.freed_map_bytes -= it->second.map_bytes;
    r.freed.erase(it);
  }
}

}  // namespace

bool DeviceAllocation::contains(const void* p, size_t bytes) const {
  auto q = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base);
  return q >= b && q - b < size && bytes <= size - (q - b);
}

std::string DeviceAllocation::describe() const {
  char text[112];
  std::snprintf(text, sizeof text, "%sdevice allocation #%llu (%zu bytes at %p)", freed ? "freed " : "",
                static_cast<unsigned long long>(serial), size, static_cast<const void*>(base));
  return text;
}

std::optional<DeviceAllocation> find_allocation(const void* p, bool nearby) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto at = reinterpret_cast<uintptr_t>(p);
  if (const Block* b = block_near(r.blocks, at); b && (nearby || b->a.contains(p))) return b->a;
  if (const Block* b = nearby ? block_near(r.freed, at) : nullptr) return b->a;
  return std::nullopt;
}

const void* first_stray_write() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const size_t page = page_bytes();
  for (const auto& [base, b] : r.blocks) {
    const unsigned char* lead = b.map + page;
    if (const auto* hit = first_unpoisoned(lead, static_cast<size_t>(b.a.base - lead))) return hit;
    const size_t span = round_up(b.a.size, kAlignment);
    if (const auto* hit = first_unpoisoned(b.a.base + b.a.size, span - b.a.size)) return hit;
  }
  return nullptr;
}

bool is_device_range(const void* p, size_t bytes) {
  auto a = find_allocation(p);
  return a && a->contains(p, bytes);
}

cudaError_t allocate(void** out, size_t bytes) {
  if (!out) return cudaErrorInvalidValue;
  *out = nullptr;
  const auto total = configured_total();
  if (!total) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;  // cudaMalloc(&p, 0) succeeds with p = NULL
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (bytes > *total - r.allocated) return cudaErrorMemoryAllocation;
  const int fd = poison_file(r);
  if (fd < 0) return cudaErrorMemoryAllocation;
  const size_t page = page_bytes(), span = round_up(bytes, kAlignment), data = round_up(span, page);
  const size_t map_bytes = data + 2 * page;
  void* m = mmap(nullptr, map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return cudaErrorMemoryAllocation;
  auto* map = static_cast<unsigned char*>(m);
  for (size_t off = 0; off < data; off += kPoisonChunk) {
    const size_t len = std::min(kPoisonChunk, data - off);
    if (mmap(map + page + off, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE, fd, 0) ==
        MAP_FAILED) {
      munmap(map, map_bytes);
      return cudaErrorMemoryAllocation;
    }
  }
  Block b;
  b.map = map;
  b.map_bytes = map_bytes;
  b.a.base = map + page + data - span;
  b.a.size = bytes;
  b.a.serial = r.next_serial++;
  r.blocks.emplace(reinterpret_cast<uintptr_t>(b.a.base), b);
  r.allocated += bytes;
  *out = const_cast<unsigned char*>(b.a.base);
  return cudaSuccess;
}

cudaError_t release(void* p) {
  if (!p) return cudaSuccess;  // cudaFree(NULL) is a no-op
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.blocks.end()) return cudaErrorInvalidValue;  // not a block's start, or freed already
  Block b = it->second;
  r.allocated -= b.a.size;
  r.blocks.erase(it);
  // Quarantine: the pages go back to the system, the addresses stay reserved and inaccessible.
  if (mmap(b.map, b.map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
      MAP_FAILED) {
    munmap(b.map, b.map_bytes);
    return cudaSuccess;
  }
  b.a.freed = true;
  const auto key = reinterpret_cast<uintptr_t>(b.a.base);
  r.freed.emplace(key, b);
  r.freed_order.push_back(key);
  r.freed_map_bytes += b.map_bytes;
  trim_quarantine(r);
  return cudaSuccess;
}

size_t memory_total() { return configured_total().value_or(0); }

size_t memory_allocated() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.allocated;
}

size_t live_allocations() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.blocks.size();
}

size_t quarantined_allocations() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.freed.size();
}

cudaError_t allocate_host(void** out, size_t bytes) {
  if (!out) return cudaErrorInvalidValue;
  *out = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* p = std::aligned_alloc(page_bytes(), round_up(bytes, page_bytes()));
  if (!p) return cudaErrorMemoryAllocation;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.host.emplace(reinterpret_cast<uintptr_t>(p), bytes);
  *out = p;
  return cudaSuccess;
}

cudaError_t release_host(void* p) {
  if (!p) return cudaSuccess;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.host.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.host.end()) return cudaErrorInvalidValue;
  std::free(p);
  r.host.erase(it);
  return cudaSuccess;
}

std::optional<size_t> parse_byte_count(const std::string& text) {
  size_t i = 0;
  unsigned long long v = 0;
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const unsigned d = static_cast<unsigned>(text[i] - '0');
    if (v > (~0ull - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  int shift = 0;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: return std::nullopt;
    }
    if (++i != text.size()) return std::nullopt;
  }
  if (v == 0 || v > (~0ull >> shift)) return std::nullopt;
  return static_cast<size_t>(v << shift);
}

}  // namespace dl::cuda_emu
