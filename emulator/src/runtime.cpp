// The CUDA runtime calls dlkit makes, served on the CPU (DL_CUDA_EMULATION builds), with the
// signatures of NVIDIA's cuda_runtime_api.h. One emulated device: an sm_90 (H100-like) GPU whose
// name says "(emulated)". Work is synchronous: every copy and memset has finished when its call
// returns, so a stream is always idle and an event records the host clock at cudaEventRecord.
// Errors follow the runtime's documented contract: a failing call returns its error and leaves
// it for cudaGetLastError (per host thread, cleared on reading); a sticky launch error
// (record_launch_error) is returned by every later call, as a lost context's is on a GPU.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "emulator/device_memory.hpp"
#include "emulator/runtime.hpp"

namespace dl::cuda_emu {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
std::atomic<int> g_sticky{cudaSuccess};
thread_local int t_device = 0;

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

struct EmuStream {
  unsigned flags = 0;
};
struct EmuEvent {
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point at;
};

struct Handles {
  std::mutex mu;
  std::set<const void*> streams, events;
  std::map<const void*, size_t> dynamic_shared;
};
Handles& handles() {
  static Handles* h = new Handles;
  return *h;
}

// A new handle of type T, registered in `set`.
template <class T, class Handle>
cudaError_t create_handle(std::set<const void*> Handles::*set, Handle* out, T value) {
  auto* p = new T(value);
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  (h.*set).insert(p);
  *out = reinterpret_cast<Handle>(p);
  return cudaSuccess;
}

template <class T>
cudaError_t destroy_handle(std::set<const void*> Handles::*set, const void* handle) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  if (!(h.*set).erase(handle)) return fail(cudaErrorInvalidResourceHandle);
  delete static_cast<const T*>(handle);
  return cudaSuccess;
}

bool stream_valid(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  return h.streams.count(s) > 0;
}

EmuEvent* event_of(cudaEvent_t e) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  return h.events.count(e) ? reinterpret_cast<EmuEvent*>(e) : nullptr;
}

// Where each side of a copy lies. A pointer inside an allocation whose range runs past the
// allocation's end is an invalid copy, not a host pointer.
enum class Side { host, device, overrun };
Side side_of(const void* p, size_t bytes) {
  auto a = find_allocation(p, true);  // its guard pages and slack are no host memory either
  if (!a) return Side::host;
  return a->contains(p, bytes) ? Side::device : Side::overrun;
}

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  const Side d = side_of(dst, n), s = side_of(src, n);
  if (d == Side::overrun || s == Side::overrun) return fail(cudaErrorInvalidValue);
  bool ok = false;
  switch (kind) {
    case cudaMemcpyHostToHost: ok = d == Side::host && s == Side::host; break;
    case cudaMemcpyHostToDevice: ok = d == Side::device && s == Side::host; break;
    case cudaMemcpyDeviceToHost: ok = d == Side::host && s == Side::device; break;
    case cudaMemcpyDeviceToDevice: ok = d == Side::device && s == Side::device; break;
    case cudaMemcpyDefault: ok = true; break;  // unified addressing: the pointers say where
    default: return fail(cudaErrorInvalidMemcpyDirection);
  }
  if (!ok) return fail(cudaErrorInvalidValue);
  std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t set(void* p, int value, size_t n) {
  if (n == 0) return cudaSuccess;
  if (!p || side_of(p, n) != Side::device) return fail(cudaErrorInvalidValue);
  std::memset(p, value, n);
  return cudaSuccess;
}

}  // namespace

void record_launch_error(cudaError_t e, bool sticky) {
  t_last_error = e;
  int none = cudaSuccess;
  if (sticky) g_sticky.compare_exchange_strong(none, e);
}

cudaError_t sticky_error() { return static_cast<cudaError_t>(g_sticky.load()); }

size_t max_dynamic_shared_bytes(const void* func) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.dynamic_shared.find(func);
  return it == h.dynamic_shared.end() ? kDefaultDynamicSharedBytes : it->second;
}

}  // namespace dl::cuda_emu

using namespace dl::cuda_emu;

#define DL_EMU_STICKY                                   \
  do {                                                  \
    if (cudaError_t s_ = sticky_error(); s_ != cudaSuccess) \
      return fail(s_);                                  \
  } while (0)

cudaError_t cudaGetLastError(void) {
  cudaError_t e = sticky_error() != cudaSuccess ? sticky_error() : t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return sticky_error() != cudaSuccess ? sticky_error() : t_last_error; }

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  DL_EMU_STICKY;
  return fail(allocate(devPtr, size));
}

cudaError_t cudaFree(void* devPtr) {
  DL_EMU_STICKY;
  return fail(release(devPtr));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  DL_EMU_STICKY;
  return fail(allocate_host(ptr, size));
}

cudaError_t cudaFreeHost(void* ptr) {
  DL_EMU_STICKY;
  return fail(release_host(ptr));
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  DL_EMU_STICKY;
  return copy(dst, src, count, kind);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  DL_EMU_STICKY;
  if (!stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
  return copy(dst, src, count, kind);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  DL_EMU_STICKY;
  return set(devPtr, value, count);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  DL_EMU_STICKY;
  if (!stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
  return set(devPtr, value, count);
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  DL_EMU_STICKY;
  if (!free || !total) return fail(cudaErrorInvalidValue);
  const size_t t = memory_total();
  if (t == 0) return fail(cudaErrorInvalidValue);  // DL_CUDA_EMU_MEMORY unreadable (said on stderr)
  *total = t;
  *free = t - memory_allocated();
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  DL_EMU_STICKY;
  if (!pStream || (flags & ~1u)) return fail(cudaErrorInvalidValue);
  return create_handle(&Handles::streams, pStream, EmuStream{flags});
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return cudaStreamCreateWithFlags(pStream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  DL_EMU_STICKY;
  return destroy_handle<EmuStream>(&Handles::streams, stream);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  DL_EMU_STICKY;
  return stream_valid(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  DL_EMU_STICKY;
  return stream_valid(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  DL_EMU_STICKY;
  if (!stream_valid(stream) || !event_of(event)) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  DL_EMU_STICKY;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  DL_EMU_STICKY;
  if (!event || (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)))
    return fail(cudaErrorInvalidValue);
  return create_handle(&Handles::events, event, EmuEvent{flags, false, {}});
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  DL_EMU_STICKY;
  return destroy_handle<EmuEvent>(&Handles::events, event);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  DL_EMU_STICKY;
  EmuEvent* e = event_of(event);
  if (!e || !stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
  e->recorded = true;
  e->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  DL_EMU_STICKY;
  return event_of(event) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  DL_EMU_STICKY;
  return event_of(event) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  DL_EMU_STICKY;
  if (!ms) return fail(cudaErrorInvalidValue);
  EmuEvent *a = event_of(start), *b = event_of(end);
  // The runtime's contract: an event never recorded, or created without timing, is an
  // invalid handle for timing.
  if (!a || !b || !a->recorded || !b->recorded || ((a->flags | b->flags) & cudaEventDisableTiming))
    return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  DL_EMU_STICKY;
  if (device != 0) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  DL_EMU_STICKY;
  if (!device) return fail(cudaErrorInvalidValue);
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "NVIDIA H100 80GB HBM3 (emulated)");
  prop->totalGlobalMem = memory_total();
  prop->sharedMemPerBlock = kDefaultDynamicSharedBytes;
  prop->sharedMemPerBlockOptin = kMaxDynamicSharedBytes;
  prop->sharedMemPerMultiprocessor = 228 << 10;
  prop->reservedSharedMemPerBlock = 1 << 10;
  prop->regsPerBlock = prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->memPitch = ~size_t{0} >> 1;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 64 << 10;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->l2CacheSize = 50 << 20;
  prop->memoryBusWidth = 5120;
  prop->concurrentKernels = 1;
  prop->unifiedAddressing = 1;
  prop->asyncEngineCount = 3;
  prop->pciBusID = 1;
  prop->canMapHostMemory = 1;
  prop->managedMemory = 1;
  prop->cooperativeLaunch = 1;
  prop->clusterLaunch = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, device);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    case cudaDevAttrPciBusId: *value = p.pciBusID; break;
    case cudaDevAttrUnifiedAddressing: *value = p.unifiedAddressing; break;
    default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (!pciBusId || len <= 0) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  std::snprintf(pciBusId, static_cast<size_t>(len), "0000:01:00.0");
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (!runtimeVersion) return fail(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return fail(cudaErrorInvalidValue);
  *driverVersion = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  DL_EMU_STICKY;
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<size_t>(value) > kMaxDynamicSharedBytes) return fail(cudaErrorInvalidValue);
    Handles& h = handles();
    std::lock_guard<std::mutex> lock(h.mu);
    h.dynamic_shared[func] = static_cast<size_t>(value);
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define DL_EMU_NAME(e) \
  case e: return #e;
    DL_EMU_NAME(cudaSuccess)
    DL_EMU_NAME(cudaErrorInvalidValue)
    DL_EMU_NAME(cudaErrorMemoryAllocation)
    DL_EMU_NAME(cudaErrorInvalidDevice)
    DL_EMU_NAME(cudaErrorInvalidResourceHandle)
    DL_EMU_NAME(cudaErrorInvalidMemcpyDirection)
    DL_EMU_NAME(cudaErrorInvalidDeviceFunction)
    DL_EMU_NAME(cudaErrorInvalidConfiguration)
    DL_EMU_NAME(cudaErrorLaunchOutOfResources)
    DL_EMU_NAME(cudaErrorNotReady)
    DL_EMU_NAME(cudaErrorIllegalAddress)
    DL_EMU_NAME(cudaErrorMisalignedAddress)
    DL_EMU_NAME(cudaErrorLaunchFailure)
    DL_EMU_NAME(cudaErrorAssert)
    DL_EMU_NAME(cudaErrorNoDevice)
    DL_EMU_NAME(cudaErrorUnknown)
#undef DL_EMU_NAME
    default: return "unrecognized error code";
  }
}

// The runtime's own wording for each.
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorUnknown: return "unknown error";
    default: return "unrecognized error code";
  }
}
