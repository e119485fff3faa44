// main() of test_cuda, whose every case needs a GPU: without a usable one (or with fewer than
// --min-gpus=N) it prints why and exits 77 before running any case, which ctest reports as
// "Skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt) instead of a pass. Queries (--help,
// --list-*, --count, --version) run anywhere. What runs without a GPU is in test_cuda_host.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/device/select.hpp"

namespace {

constexpr int kSkipped = 77;

// doctest's options that only print something (with or without its dt- prefix).
bool is_query(std::string a) {
  a.erase(0, a.find_first_not_of('-'));
  if (a.rfind("dt-", 0) == 0) a.erase(0, 3);
  for (const char* q : {"?", "h", "help", "v", "version", "c", "count", "ltc", "list-test-cases", "lts",
                        "list-test-suites", "lr", "list-reporters"})
    if (a == q) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int min_gpus = 1;
  bool query = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--min-gpus=", 0) == 0) {
      min_gpus = std::atoi(a.c_str() + 11);
      continue;
    }
    query = query || (i > 0 && is_query(a));
    args.push_back(argv[i]);
  }
  // The emulated device has no NCCL (docs/CUDA.md): its collective cases cannot run there. Its
  // own suite (tests/cuda_emulated) runs dl-train's steps there, to its tighter fp32 bar.
  static char not_emulated[] = "-tce=*NCCL*,dl-train on the GPU:*";
  if (!query && dl::cuda_device_is_emulated()) {
    std::printf("skipped: the NCCL cases (the emulated device has no NCCL; they run on a GPU) and dl-train's "
                "(tests/cuda_emulated runs them there)\n");
    args.push_back(not_emulated);
  }
  if (!query) {
    dl::prepare_cuda_process();  // the GPU, arena and notice the tools get (DL_CUDA_ARENA, DL_CUDA_SYNC)
    const dl::CudaDeviceInfo info = dl::cuda_probe();
    if (!info.usable) {
      std::printf("skipped: no CUDA device (%s): test_cuda needs a usable GPU\n", info.reason.c_str());
      return kSkipped;
    }
    if (info.device_count < min_gpus) {
      std::printf("skipped: these cases need %d GPUs; this machine has %d\n", min_gpus, info.device_count);
      return kSkipped;
    }
  }
  doctest::Context context(static_cast<int>(args.size()), args.data());
  return context.run();
}
