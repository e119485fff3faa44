// DeviceArena: one cudaMalloc per process, reserved up front, from which every device tensor is
// carved (first fit by address, neighbours merged on release). Allocation never calls the
// driver, so a step allocates nothing from CUDA, and running out of memory is reported with the
// request and the arena's state instead of surfacing deep inside a kernel launch.
//
// Reuse is safe because every op of the backend runs on one stream: memory released by the host
// and handed out again is only touched by work queued after the work that used it before.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "dl/backend/cuda/cuda_backend.hpp"

namespace dl::cuda {

class DeviceArena {
 public:
  static constexpr size_t kAlignment = 256;  // what cuBLASLt's fastest kernels want
  DeviceArena(int device, size_t capacity);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Throws Error(runtime) naming `what`, the request and the arena's use when it does not fit.
  void* allocate(size_t bytes, const std::string& what);
  void release(void* p);
  CudaArenaStats stats() const;

 private:
  int device_;
  char* base_ = nullptr;
  size_t capacity_ = 0;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> bytes, no two adjacent
  std::map<size_t, size_t> used_;  // offset -> bytes
  size_t in_use_ = 0, peak_ = 0;
};

}  // namespace dl::cuda
