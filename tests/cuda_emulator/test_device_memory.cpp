// The emulated CUDA runtime (emulator/): device memory poisoned and fenced,
// frees and copies checked against the registry, the memory total, streams, events and errors.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "emulator/device_memory.hpp"
#include "emulator/float_formats.hpp"
#include "emulator/runtime.hpp"

namespace {

using namespace dl::cuda_emu;

// Runs `body` in a child process; returns its wait status. The child dies of a fault the plain
// way (doctest's handler, inherited, would report it as this test's crash).
int in_child(const std::function<void()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);
    std::signal(SIGBUS, SIG_DFL);
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

bool died_of_segv(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV; }

}  // namespace

TEST_CASE("emulated memory: a fresh block reads 0xFF, NaN in every float type, and starts 256-byte aligned") {
  for (size_t bytes : {size_t{1}, size_t{1000}, size_t{4096}, size_t{3} << 20}) {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess);
    CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
    std::vector<unsigned char> host(bytes, 0);
    REQUIRE(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t poisoned = 0;
    for (unsigned char c : host) poisoned += c == 0xFF;
    CHECK(poisoned == bytes);
    if (bytes >= 4) {
      float f;
      std::memcpy(&f, host.data(), 4);
      uint16_t h;
      std::memcpy(&h, host.data(), 2);
      CHECK(std::isnan(f));
      CHECK(std::isnan(decode_bf16(h)));
      CHECK(std::isnan(decode_f16(h)));
    }
    REQUIRE(cudaFree(p) == cudaSuccess);
  }
  // cudaMalloc of 0 bytes succeeds with NULL, and cudaFree(NULL) is a no-op.
  void* none = reinterpret_cast<void*>(1);
  CHECK(cudaMalloc(&none, 0) == cudaSuccess);
  CHECK(none == nullptr);
  CHECK(cudaFree(nullptr) == cudaSuccess);
}

TEST_CASE("emulated memory: reading or writing past either end of a block faults") {
  // A page-sized block ends exactly at the guard page and starts right after the leading one.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  CHECK(died_of_segv(in_child([&] {
    void* p = nullptr;
    if (cudaMalloc(&p, page) != cudaSuccess) _exit(3);
    static_cast<volatile unsigned char*>(p)[page] = 1;
  })));
  CHECK(died_of_segv(in_child([&] {
    void* p = nullptr;
    if (cudaMalloc(&p, page) != cudaSuccess) _exit(3);
    (void)static_cast<volatile unsigned char*>(p)[-1];
  })));
  // Any size: the first byte past the 256-byte-rounded end faults.
  CHECK(died_of_segv(in_child([&] {
    void* p = nullptr;
    if (cudaMalloc(&p, 1000) != cudaSuccess) _exit(3);
    (void)static_cast<volatile float*>(p)[1024 / 4];
  })));
  // The last byte itself is fine (the child exits 0).
  const int ok = in_child([&] {
    void* p = nullptr;
    if (cudaMalloc(&p, 1000) != cudaSuccess) _exit(3);
    static_cast<volatile unsigned char*>(p)[999] = 7;
  });
  CHECK((WIFEXITED(ok) && WEXITSTATUS(ok) == 0));
}

TEST_CASE("emulated memory: the registry names the block an address is in, or the one it ran past") {
  void *a = nullptr, *b = nullptr;
  REQUIRE(cudaMalloc(&a, 1000) == cudaSuccess);
  REQUIRE(cudaMalloc(&b, 64) == cudaSuccess);
  auto* pa = static_cast<unsigned char*>(a);
  auto in = find_allocation(pa + 999);
  REQUIRE(in);
  CHECK(in->base == pa);
  CHECK(in->size == 1000);
  CHECK(in->describe().find("1000 bytes") != std::string::npos);
  CHECK_FALSE(find_allocation(pa + 1000));  // slack after the end: not inside ...
  auto near = find_allocation(pa + 1000, true);
  REQUIRE(near);  // ... but next to it
  CHECK(near->base == pa);
  CHECK(find_allocation(b)->serial != in->serial);
  CHECK(is_device_range(pa, 1000));
  CHECK_FALSE(is_device_range(pa + 1, 1000));
  int on_stack = 0;
  CHECK_FALSE(find_allocation(&on_stack, true));
  CHECK(cudaFree(a) == cudaSuccess);
  CHECK(cudaFree(b) == cudaSuccess);
  CHECK_FALSE(find_allocation(pa));
}

TEST_CASE("emulated memory: a freed block stays reserved and inaccessible, named as freed") {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1000) == cudaSuccess);
  auto* bytes = static_cast<unsigned char*>(p);
  const uint64_t serial = find_allocation(bytes)->serial;
  const size_t quarantined = quarantined_allocations();
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(quarantined_allocations() == quarantined + 1);
  CHECK_FALSE(find_allocation(bytes + 10));  // not a live block ...
  auto freed = find_allocation(bytes + 10, true);
  REQUIRE(freed);  // ... but the report of a fault there names the block it was
  CHECK(freed->freed);
  CHECK(freed->serial == serial);
  CHECK(freed->describe().rfind("freed device allocation #", 0) == 0);
  // A use after free faults instead of reading a newer block's bytes.
  CHECK(died_of_segv(in_child([&] { (void)static_cast<volatile unsigned char*>(p)[10]; })));
  void* q = nullptr;
  REQUIRE(cudaMalloc(&q, 1000) == cudaSuccess);
  CHECK(q != p);  // its addresses are not handed out again while quarantined
  CHECK(cudaFree(q) == cudaSuccess);
}

TEST_CASE("emulated memory: a byte written outside a block's own bytes but inside its pages is found") {
  REQUIRE(first_stray_write() == nullptr);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1000) == cudaSuccess);  // 24 bytes of slack to 1024, and a lead before it
  auto* bytes = static_cast<unsigned char*>(p);
  bytes[0] = 1, bytes[999] = 2;  // its own bytes: fine
  CHECK(first_stray_write() == nullptr);
  bytes[1000 + 5] = 0;  // in the slack after the end
  CHECK(first_stray_write() == bytes + 1005);
  bytes[1005] = 0xFF;
  CHECK(first_stray_write() == nullptr);
  bytes[-3] = 7;  // in the lead before the start (the block does not start at its page)
  CHECK(first_stray_write() == bytes - 3);
  bytes[-3] = 0xFF;
  CHECK(first_stray_write() == nullptr);
  CHECK(cudaFree(p) == cudaSuccess);
}

TEST_CASE("emulated memory: freeing a pointer that is not a live block is cudaErrorInvalidValue, not a crash") {
  (void)cudaGetLastError();
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 256) == cudaSuccess);
  CHECK(cudaFree(static_cast<char*>(p) + 16) == cudaErrorInvalidValue);  // inside, not its start
  CHECK(cudaFree(p) == cudaSuccess);
  CHECK(cudaFree(p) == cudaErrorInvalidValue);  // double free
  int host = 0;
  CHECK(cudaFree(&host) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);  // left for cudaGetLastError, which clears it
  CHECK(cudaGetLastError() == cudaSuccess);
  void* pinned = nullptr;
  REQUIRE(cudaMallocHost(&pinned, 100) == cudaSuccess);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  CHECK(cudaFreeHost(pinned) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("emulated memory: copies and memsets check their kind and range against the registry") {
  (void)cudaGetLastError();
  const size_t n = 1024;
  void *d = nullptr, *d2 = nullptr;
  REQUIRE(cudaMalloc(&d, n) == cudaSuccess);
  REQUIRE(cudaMalloc(&d2, n) == cudaSuccess);
  std::vector<unsigned char> h(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<unsigned char>(i * 7 + 3);

  CHECK(cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(d2, d, n, cudaMemcpyDeviceToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(back.data(), d2, n, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == h);
  std::vector<unsigned char> unified(n, 0);
  CHECK(cudaMemcpyAsync(unified.data(), d, n, cudaMemcpyDefault, nullptr) == cudaSuccess);
  CHECK(unified == h);

  // Kinds that do not match where the pointers are.
  CHECK(cudaMemcpy(back.data(), h.data(), n, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);  // host as device
  CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);            // both swapped
  CHECK(cudaMemcpy(d, back.data(), n, cudaMemcpyDeviceToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d, d2, n, cudaMemcpyHostToHost) == cudaErrorInvalidValue);
  // A range that runs past the block, even by one byte.
  CHECK(cudaMemcpy(static_cast<char*>(d) + 1, h.data(), n, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(back.data(), d, n + 1, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemset(d, 0, n + 1) == cudaErrorInvalidValue);
  // Just past a block (its alignment slack) is no host memory either, whatever the kind says.
  void* odd = nullptr;
  REQUIRE(cudaMalloc(&odd, 1000) == cudaSuccess);
  CHECK(cudaMemcpy(static_cast<char*>(odd) + 1000, h.data(), 8, cudaMemcpyDefault) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(h.data(), static_cast<char*>(odd) + 1000, 8, cudaMemcpyHostToHost) == cudaErrorInvalidValue);
  CHECK(cudaFree(odd) == cudaSuccess);
  CHECK(cudaMemset(back.data(), 0, n) == cudaErrorInvalidValue);  // memset of host memory
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);

  CHECK(cudaMemsetAsync(d, 0x5a, n, nullptr) == cudaSuccess);
  CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == std::vector<unsigned char>(n, 0x5a));
  CHECK(cudaFree(d) == cudaSuccess);
  CHECK(cudaFree(d2) == cudaSuccess);
}

TEST_CASE("emulated memory: cudaMemGetInfo counts what is allocated; beyond the total is out of memory") {
  size_t free0 = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free0, &total) == cudaSuccess);
  if (!std::getenv("DL_CUDA_EMU_MEMORY")) CHECK(total == (size_t{80} << 30));
  // 60 GiB reserved costs no RAM until written: the poison is mapped copy-on-write.
  const size_t big = size_t{60} << 30;
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, big) == cudaSuccess);
  size_t free1 = 0;
  REQUIRE(cudaMemGetInfo(&free1, &total) == cudaSuccess);
  CHECK(free0 - free1 == big);
  auto* bytes = static_cast<volatile unsigned char*>(p);
  CHECK(bytes[big - 1] == 0xFF);
  bytes[big - 1] = 1;
  CHECK(bytes[big - 1] == 1);
  void* q = nullptr;
  CHECK(cudaMalloc(&q, free1 + 1) == cudaErrorMemoryAllocation);
  CHECK(q == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaFree(p) == cudaSuccess);
  size_t free2 = 0;
  REQUIRE(cudaMemGetInfo(&free2, &total) == cudaSuccess);
  CHECK(free2 == free0);
}

TEST_CASE("emulated memory: DL_CUDA_EMU_MEMORY sets the total" * doctest::skip()) {
  // Run by the next case in a child process with DL_CUDA_EMU_MEMORY=1M.
  size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  CHECK(total == (size_t{1} << 20));
  void* p = nullptr;
  CHECK(cudaMalloc(&p, (size_t{1} << 20) + 1) == cudaErrorMemoryAllocation);
  CHECK(cudaMalloc(&p, size_t{1} << 20) == cudaSuccess);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(prop.totalGlobalMem == (size_t{1} << 20));
}

TEST_CASE("emulated memory: DL_CUDA_EMU_MEMORY is read, and a value that is no byte count is refused") {
  CHECK(parse_byte_count("85899345920") == size_t{80} << 30);
  CHECK(parse_byte_count("80G") == size_t{80} << 30);
  CHECK(parse_byte_count("512m") == size_t{512} << 20);
  CHECK(parse_byte_count("1T") == size_t{1} << 40);
  for (const char* bad : {"", "G", "-1", "0", "12GB", "1.5G", "99999999999999999999", "20000000T"})
    CHECK_MESSAGE(!parse_byte_count(bad), bad);
  auto run_child_case = [](const char* memory) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("DL_CUDA_EMU_MEMORY", memory, 1);
      if (!std::freopen("/dev/null", "w", stdout) || !std::freopen("/dev/null", "w", stderr)) _exit(126);
      execl("/proc/self/exe", "test_cuda_emulator", "--no-skip", "-tc=emulated memory: DL_CUDA_EMU_MEMORY sets*",
            "--no-version", "--minimal", static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  CHECK(run_child_case("1M") == 0);
  CHECK(run_child_case("2M") != 0);  // the child's checks do fail when the total is another
  CHECK(run_child_case("lots") != 0);
}

TEST_CASE("emulated runtime: one sm_90 device marked emulated; other ordinals are invalid") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK(count == 1);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(std::string(prop.name).find("(emulated)") != std::string::npos);
  CHECK(prop.major == 9);
  CHECK(prop.minor == 0);
  CHECK(prop.warpSize == 32);
  CHECK(prop.sharedMemPerBlockOptin == kMaxDynamicSharedBytes);
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0) == cudaSuccess);
  CHECK(l2 == prop.l2CacheSize);
  CHECK(cudaSetDevice(0) == cudaSuccess);
  CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
  CHECK(cudaGetDeviceProperties(&prop, 1) == cudaErrorInvalidDevice);
  int dev = -1;
  CHECK(cudaGetDevice(&dev) == cudaSuccess);
  CHECK(dev == 0);
  char bus[32] = {};
  CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0) == cudaSuccess);
  CHECK(std::string(bus).size() == 12);
  int rt = 0, drv = 0;
  CHECK(cudaRuntimeGetVersion(&rt) == cudaSuccess);
  CHECK(cudaDriverGetVersion(&drv) == cudaSuccess);
  CHECK(rt == CUDART_VERSION);
  CHECK(drv >= rt);
  CHECK(std::string(cudaGetErrorName(cudaErrorMemoryAllocation)) == "cudaErrorMemoryAllocation");
  CHECK(std::string(cudaGetErrorString(cudaErrorInvalidValue)) == "invalid argument");
  (void)cudaGetLastError();
}

TEST_CASE("emulated runtime: streams and events; elapsed time is the host clock's") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t a = nullptr, b = nullptr, never = nullptr;
  REQUIRE(cudaEventCreate(&a) == cudaSuccess);
  REQUIRE(cudaEventCreate(&b) == cudaSuccess);
  REQUIRE(cudaEventCreate(&never) == cudaSuccess);
  CHECK(cudaEventRecord(a, s) == cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cudaEventRecord(b, s) == cudaSuccess);
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b) == cudaSuccess);
  CHECK(ms >= 19.0f);
  CHECK(ms < 2000.0f);
  CHECK(cudaEventElapsedTime(&ms, a, never) == cudaErrorInvalidResourceHandle);  // never recorded
  CHECK(cudaStreamQuery(s) == cudaSuccess);  // synchronous: always idle
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(s, a, 0) == cudaSuccess);
  CHECK(cudaEventDestroy(never) == cudaSuccess);
  CHECK(cudaEventDestroy(never) == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventDestroy(a) == cudaSuccess);
  CHECK(cudaEventDestroy(b) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
  CHECK(cudaStreamDestroy(s) == cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}

TEST_CASE("emulated runtime: a sticky launch error fails every later call; a plain one is read once") {
  (void)cudaGetLastError();
  record_launch_error(cudaErrorInvalidConfiguration, false);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaSuccess);
  const int status = in_child([] {
    record_launch_error(cudaErrorIllegalAddress, true);
    void* p = nullptr;
    const bool failed = cudaMalloc(&p, 16) == cudaErrorIllegalAddress && cudaDeviceSynchronize() == cudaErrorIllegalAddress &&
                        cudaGetLastError() == cudaErrorIllegalAddress && cudaGetLastError() == cudaErrorIllegalAddress;
    _exit(failed ? 0 : 1);
  });
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

TEST_CASE("emulated runtime: cudaFuncSetAttribute raises a kernel's dynamic shared memory up to sm_90's limit") {
  static int kernel_a, kernel_b;
  CHECK(max_dynamic_shared_bytes(&kernel_a) == kDefaultDynamicSharedBytes);
  CHECK(cudaFuncSetAttribute(&kernel_a, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10) == cudaSuccess);
  CHECK(max_dynamic_shared_bytes(&kernel_a) == size_t{100} << 10);
  CHECK(max_dynamic_shared_bytes(&kernel_b) == kDefaultDynamicSharedBytes);
  CHECK(cudaFuncSetAttribute(&kernel_b, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kMaxDynamicSharedBytes) + 1) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}
