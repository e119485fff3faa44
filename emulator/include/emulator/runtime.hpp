// The emulated CUDA runtime's hooks for the rest of the emulator (kernel launches): errors a
// launch produces, and the dynamic shared memory a kernel was allowed by cudaFuncSetAttribute.
#pragma once
#include <driver_types.h>

#include <cstddef>

namespace dl::cuda_emu {

// A launch's error, as cudaGetLastError / cudaPeekAtLastError report it. A sticky one
// (cudaErrorIllegalAddress, cudaErrorLaunchFailure, ... : the context is lost on a GPU) is
// returned by every later runtime call of the process, as on a GPU.
void record_launch_error(cudaError_t e, bool sticky);
// The first sticky error recorded, or cudaSuccess.
cudaError_t sticky_error();
// cudaFuncAttributeMaxDynamicSharedMemorySize as last set for `func` (48 KiB unless raised).
size_t max_dynamic_shared_bytes(const void* func);

constexpr size_t kDefaultDynamicSharedBytes = 48 << 10;
constexpr size_t kMaxDynamicSharedBytes = 227 << 10;  // sm_90's opt-in limit per block

}  // namespace dl::cuda_emu
