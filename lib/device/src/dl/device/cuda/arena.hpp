// DeviceArena: one cudaMalloc per process, reserved up front, from which every device tensor is
// carved (first fit by address, neighbours merged on release). Allocation never calls the
// driver, so a step allocates nothing from CUDA, and running out of memory is reported with the
// request and the arena's state instead of surfacing deep inside a kernel launch.
//
// Reuse is safe because every op of the backend runs on one stream: memory released by the host
// and handed out again is only touched by work queued after the work that used it before.
//
// Fenced backing (for finding bugs, never for speed): the same first fit over the same offsets,
// the same peak and the same out-of-memory error, but each block is a cudaMalloc of exactly the
// bytes asked for, freed on release. compute-sanitizer (on a GPU) or the emulated device's guard
// pages then see every tensor's ends, so a kernel running past one tensor into its neighbour,
// or using a released one, faults instead of corrupting the neighbour silently.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "dl/device/cuda/cuda_backend.hpp"

namespace dl::cuda {

class DeviceArena {
 public:
  static constexpr size_t kAlignment = 256;  // what cuBLASLt's fastest kernels want
  enum class Backing { packed, fenced };
  DeviceArena(int device, size_t capacity, Backing backing = Backing::packed);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Throws Error(runtime) naming `what`, the request and the arena's use when it does not fit.
  void* allocate(size_t bytes, const std::string& what);
  void release(void* p);
  CudaArenaStats stats() const;
  Backing backing() const { return backing_; }
  // Which tensor an address belongs to or lies just past: "inside the cuBLASLt workspace (byte 8
  // of 33554432)", "4 bytes after the end of <what> (1024 bytes)"; empty when no block is near.
  std::string describe(const void* p) const;

 private:
  struct Block {
    size_t need = 0;   // bytes of the arena it takes (rounded up to kAlignment)
    size_t bytes = 0;  // bytes asked for
    std::string what;
    char* memory = nullptr;  // where it is: base_ + offset, or its own cudaMalloc (fenced)
  };
  int device_;
  Backing backing_;
  char* base_ = nullptr;  // packed only
  size_t capacity_ = 0;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;           // offset -> bytes, no two adjacent
  std::map<size_t, Block> used_;            // offset -> block
  std::map<uintptr_t, size_t> by_address_;  // block memory -> offset
  size_t in_use_ = 0, peak_ = 0;
};

}  // namespace dl::cuda
