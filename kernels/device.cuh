// The seam between the kernels and the machine that runs them. Every kernel in kernels/ is
// written against this header and launched through dl::cuda::launch, so one source serves both
// builds:
// - with nvcc (the GPU build): the CUDA keywords, intrinsics and `kernel<<<...>>>` themselves;
//   nothing here adds a branch or an indirection to a kernel;
// - with DL_CUDA_EMULATION (tests/kernels, and the emulated-device build of docs/CUDA.md): the
//   host compiler builds the kernels as C++ and every thread of a block is a fiber of the warp
//   emulator (lib/emulator/warp_emulator.hpp), which checks the launch like a
//   GPU does and fails where a GPU would fault or hang.
// Kernels use threadIdx/blockIdx/blockDim/gridDim, __syncthreads(), the *_sync shuffles with the
// full mask (every lane of the warp must reach them), atomics, the f32 math functions and
// intrinsics below, DL_SHARED_ARRAY for static shared arrays and DL_DYNAMIC_SHARED for the
// launch's dynamic shared memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#ifdef DL_CUDA_EMULATION
#include <cmath>
#include <cstring>
#include <type_traits>

#include "emulator/warp_emulator.hpp"

// The host compiler sees kernels and device functions as ordinary C++.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define threadIdx (::dl::emu::thread_idx())
#define blockIdx (::dl::emu::block_idx())
#define blockDim (::dl::emu::block_dim())
#define gridDim (::dl::emu::grid_dim())
#define DL_EMU_STR2(x) #x
#define DL_EMU_STR(x) DL_EMU_STR2(x)
// Each __syncthreads() is known by its place: every thread of a block must wait at the same one.
#define __syncthreads() ::dl::emu::sync_block(__FILE__ ":" DL_EMU_STR(__LINE__))
#define __syncwarp(...) ::dl::emu::sync_warp()
// `dims` is the array's extent(s) in brackets: DL_SHARED_ARRAY(float, acc, [8][33]). Under the
// emulator one block-shared array per declaration, poisoned, ending at a guard page.
#define DL_SHARED_ARRAY(type, name, dims)                                                     \
  static const char name##_declaration = 0;                                                   \
  using name##_array = type dims;                                                             \
  name##_array& name = *static_cast<name##_array*>(                                           \
      ::dl::emu::static_shared(&name##_declaration, sizeof(name##_array), #name))
#define DL_DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(::dl::emu::shared_memory())

// CUDA's device functions live in the global namespace; so do these.
namespace dl::emu::detail {
template <class T>
T shuffle(unsigned mask, T v, int src_lane, const char* op) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8), "4- or 8-byte shuffles");
  if (mask != 0xffffffffu) ::dl::emu::fault(std::string(op) + " with a partial mask: the kernels use the full warp");
  if constexpr (sizeof(T) == 4) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    u = ::dl::emu::exchange(u, src_lane);
    std::memcpy(&v, &u, 4);
  } else {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    u = ::dl::emu::exchange64(u, src_lane);
    std::memcpy(&v, &u, 8);
  }
  return v;
}
template <class T, class F>
T read_modify_write(T* address, F&& next) {
  const T old = *address;
  *address = next(old);
  return old;
}
}  // namespace dl::emu::detail

// Warp shuffles (width 32): every lane of the warp must reach them.
template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane) {
  return ::dl::emu::detail::shuffle(mask, v, src_lane, "__shfl_sync");
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  return ::dl::emu::detail::shuffle(mask, v, ::dl::emu::lane() ^ lane_mask, "__shfl_xor_sync");
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta) {
  const int src = ::dl::emu::lane() + static_cast<int>(delta);
  const T got = ::dl::emu::detail::shuffle(mask, v, src < 32 ? src : ::dl::emu::lane(), "__shfl_down_sync");
  return src < 32 ? got : v;
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta) {
  const int src = ::dl::emu::lane() - static_cast<int>(delta);
  const T got = ::dl::emu::detail::shuffle(mask, v, src >= 0 ? src : ::dl::emu::lane(), "__shfl_up_sync");
  return src >= 0 ? got : v;
}

// Atomics: a block's threads are fibers of one host thread and blocks run one after another, so
// a plain read-modify-write is atomic here.
template <class T>
T atomicAdd(T* address, T v) {
  return ::dl::emu::detail::read_modify_write(address, [v](T old) { return old + v; });
}
template <class T>
T atomicMax(T* address, T v) {
  return ::dl::emu::detail::read_modify_write(address, [v](T old) { return old < v ? v : old; });
}
template <class T>
T atomicMin(T* address, T v) {
  return ::dl::emu::detail::read_modify_write(address, [v](T old) { return v < old ? v : old; });
}
template <class T>
T atomicExch(T* address, T v) {
  return ::dl::emu::detail::read_modify_write(address, [v](T) { return v; });
}
template <class T>
T atomicCAS(T* address, T compare, T v) {
  return ::dl::emu::detail::read_modify_write(address, [&](T old) { return old == compare ? v : old; });
}

// CUDA's integer and float min/max overloads, and the fast-math intrinsics (computed exactly
// here: the GPU's approximations are what only a GPU shows).
template <class A, class B>
constexpr std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <class A, class B>
constexpr std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
[[noreturn]] inline void __trap() { ::dl::emu::fault("__trap()"); }

#else  // the GPU build

#define DL_SHARED_ARRAY(type, name, dims) __shared__ type name dims
#define DL_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]

#endif

namespace dl::cuda {

// kernel<<<grid, block, shared_bytes, stream>>>(args...); under the emulator the grid runs on the
// CPU before this returns (stream order is then trivially kept). `name` names the kernel in a
// refused launch and in a fault.
template <class... Params, class Stream, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, Stream stream,
            Args&&... args) {
#ifdef DL_CUDA_EMULATION
  (void)stream;
  ::dl::emu::launch(name, ::dl::emu::kernel_key(kernel), grid, block, shared_bytes,
                    [&] { kernel(static_cast<Params>(args)...); });
#else
  (void)name;
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#endif
}

// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
template <class... Params>
cudaError_t set_max_dynamic_shared(void (*kernel)(Params...), int bytes) {
#ifdef DL_CUDA_EMULATION
  ::dl::emu::func_set_max_dynamic_shared(::dl::emu::kernel_key(kernel), static_cast<size_t>(bytes));
  return cudaSuccess;
#else
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
#endif
}

}  // namespace dl::cuda
