#include "dl/device/cuda/arena.hpp"

#include <algorithm>
#include <iterator>

#include "dl/device/cuda/cuda_check.hpp"
#include "dl/cli/table.hpp"

namespace dl::cuda {

DeviceArena::DeviceArena(int device, size_t capacity, Backing backing) : device_(device), backing_(backing) {
  capacity_ = capacity / kAlignment * kAlignment;
  DL_CUDA_CALL(cudaSetDevice(device_), "selecting cuda:", device_);
  if (backing_ == Backing::packed) {
    void* p = nullptr;
    DL_CUDA_CALL(cudaMalloc(&p, capacity_), "reserving the device arena of ", format_bytes(double(capacity_), true),
                 " on cuda:", device_, " (set DL_CUDA_ARENA to a smaller size)");
    base_ = static_cast<char*>(p);
  }
  free_[0] = capacity_;
}

DeviceArena::~DeviceArena() {
  // At process exit the runtime may already be unloading; nothing useful can be done about an
  // error here, and throwing from a destructor would abort.
  if (base_) (void)cudaFree(base_);
  if (backing_ == Backing::fenced)
    for (auto& [off, b] : used_) (void)cudaFree(b.memory);
}

void* DeviceArena::allocate(size_t bytes, const std::string& what) {
  const size_t need = std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t off = it->first, left = it->second - need;
    char* memory = base_ + off;
    if (backing_ == Backing::fenced) {
      void* p = nullptr;
      DL_CUDA_CALL(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "allocating ", what, " (",
                   format_bytes(double(bytes), true), ") in the fenced device arena on cuda:", device_);
      memory = static_cast<char*>(p);
    }
    free_.erase(it);
    if (left > 0) free_[off + need] = left;
    used_[off] = Block{need, bytes, what, memory};
    by_address_[reinterpret_cast<uintptr_t>(memory)] = off;
    in_use_ += need;
    peak_ = std::max(peak_, in_use_);
    return memory;
  }
  size_t largest = 0;
  for (const auto& [off, len] : free_) largest = std::max(largest, len);
  throw_runtime("CUDA device arena on cuda:", device_, " cannot hold ", what, " (", format_bytes(double(need), true),
                "): ", format_bytes(double(in_use_), true), " of ", format_bytes(double(capacity_), true),
                " in use, largest free block ", format_bytes(double(largest), true),
                " (lower the batch size, or raise DL_CUDA_ARENA)");
}

void DeviceArena::release(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto a = by_address_.find(reinterpret_cast<uintptr_t>(p));
  if (a == by_address_.end()) return;  // not ours: nothing to give back (a bug elsewhere, never a crash here)
  const size_t off = a->second;
  by_address_.erase(a);
  auto u = used_.find(off);
  size_t len = u->second.need;
  if (backing_ == Backing::fenced) (void)cudaFree(u->second.memory);  // a fault would show at the next sync
  used_.erase(u);
  in_use_ -= len;
  size_t start = off;
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = len;
}

CudaArenaStats DeviceArena::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CudaArenaStats s;
  s.capacity = capacity_;
  s.in_use = in_use_;
  s.peak = peak_;
  s.live_blocks = static_cast<int64_t>(used_.size());
  s.fenced = backing_ == Backing::fenced;
  return s;
}

std::string DeviceArena::describe(const void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = by_address_.upper_bound(at);
  if (it == by_address_.begin()) return {};
  --it;
  const Block& b = used_.at(it->second);
  const uintptr_t start = it->first;
  // Past the block's own arena bytes (packed) the address belongs to a neighbour or free space.
  if (at - start >= (backing_ == Backing::packed ? b.need : b.need + kAlignment)) return {};
  const std::string size = " (" + std::to_string(b.bytes) + " bytes)";
  if (at - start < b.bytes) return "inside " + b.what + " at byte " + std::to_string(at - start) + size;
  return std::to_string(at - start - b.bytes) + " bytes after the end of " + b.what + size;
}

}  // namespace dl::cuda
