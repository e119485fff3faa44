// In-process probes through dlopen()/dlsym(): the CUDA runtime, cuDNN, cuBLAS, NCCL and NVML are
// never linked, so dlkit builds and runs where they are absent (the probe then says "not found").
// Libraries stay loaded after a probe (unloading CUDA libraries is not reliably safe), which is
// also what makes them part of "the shared libraries actually loaded".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dl {

struct LoadedLibrary {
  bool found = false;
  std::string name;   // the name that loaded ("libcudart.so.13" or a full path)
  std::string path;   // the file the loader resolved, symlinks resolved
  std::string error;  // when !found: the names tried and the loader's last message
};

// Directories searched after the loader's own path: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, each
// with lib64, lib and targets/<arch>-linux/lib.
std::vector<std::string> cuda_library_dirs();

// Tries each name with the loader's search (LD_LIBRARY_PATH, ld.so.cache), then in each dir.
LoadedLibrary load_library(const std::vector<std::string>& names, const std::vector<std::string>& dirs = {});

struct CudaRuntimeProbe {
  LoadedLibrary lib;
  int64_t runtime_code = -1;  // cudaRuntimeGetVersion: 1000*major + 10*minor
  int64_t driver_code = -1;   // cudaDriverGetVersion: 0 without a driver
  std::string error;
};
CudaRuntimeProbe probe_cuda_runtime();

struct CudnnProbe {
  LoadedLibrary lib;
  int64_t code = -1;         // cudnnGetVersion
  int64_t cudart_code = -1;  // cudnnGetCudartVersion: the CUDA runtime it was built with
  std::string error;
};
CudnnProbe probe_cudnn();

struct CublasProbe {
  LoadedLibrary lib;
  int major = -1, minor = -1, patch = -1;  // cublasGetProperty (needs no GPU and no handle)
  std::string error;
};
CublasProbe probe_cublas();

struct NcclProbe {
  LoadedLibrary lib;
  int64_t code = -1;  // ncclGetVersion
  std::string error;
};
NcclProbe probe_nccl();

struct GpuInfo {
  std::string name;
  int64_t memory_mib = -1;
  std::string compute_capability;  // "9.0"
};
struct NvmlProbe {
  LoadedLibrary lib;
  bool ok = false;
  std::string driver;  // "580.95.05"
  std::vector<GpuInfo> gpus;
  std::string error;
};
NvmlProbe probe_nvml();

struct OpenblasProbe {
  LoadedLibrary lib;
  std::string config;   // openblas_get_config(): "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
  std::string version;  // "0.3.21"
  std::string error;
};
OpenblasProbe probe_openblas();

// ---- a library found as a file, never loaded: how check looks up the [lib] entries of a lock ----
// (loading runs the library's constructors, and a lock is shared like a requirements file)

// `ldconfig -p` -> (name, path) per cache entry, in the cache's order:
// "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1" -> ("libz.so.1", "/lib/...").
using LibraryCache = std::vector<std::pair<std::string, std::string>>;
LibraryCache parse_ldconfig_cache(std::string_view text);

// The file the loader would map for `name`, found by looking, not loading: a name with a '/' is
// that file; another is looked up in LD_LIBRARY_PATH's folders, then `cache`, then /lib64,
// /usr/lib64, /lib, /usr/lib. Only an ELF object of this program's class and machine counts
// (a 32-bit libz or a linker script is skipped, as the loader skips it). Symlinks resolved; ""
// when there is none.
std::string find_library_file(const std::string& name, const LibraryCache& cache);

// Real paths of every shared object mapped into this process (dl_iterate_phdr), sorted, without
// the executable itself and the vDSO.
std::vector<std::string> loaded_library_paths();

// A version from a library file name: "libgloo.so.0.5.0" -> "0.5.0",
// "libopenblasp-r0.3.21.so" -> "0.3.21", "libcudart.so.13" -> "13"; "" when there is none.
std::string version_from_library_name(const std::string& path);

}  // namespace dl
