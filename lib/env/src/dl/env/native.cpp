#include "dl/env/native.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "dl/core/strings.hpp"

namespace dl {

namespace fs = std::filesystem;

namespace {

std::string real_path(const std::string& p) {
  std::error_code ec;
  fs::path c = fs::canonical(p, ec);
  return ec ? p : c.string();
}

std::string handle_path(void* handle, const std::string& fallback) {
  struct link_map* lm = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0]) return real_path(lm->l_name);
  return real_path(fallback);
}

// Symbols stay resolvable while the library is loaded; we never dlclose.
struct Handle {
  void* h = nullptr;
  template <class Fn>
  Fn sym(const char* name) const {
    return h ? reinterpret_cast<Fn>(dlsym(h, name)) : nullptr;
  }
};

LoadedLibrary load_impl(const std::vector<std::string>& names, const std::vector<std::string>& dirs, void** handle) {
  LoadedLibrary lib;
  std::vector<std::string> tries = names;
  for (const auto& d : dirs)
    for (const auto& n : names)
      if (n.find('/') == std::string::npos) tries.push_back(d + "/" + n);
  for (const auto& n : tries) {
    void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      dlerror();
      continue;
    }
    lib.found = true;
    lib.name = n;
    lib.path = handle_path(h, n);
    if (handle) *handle = h;
    return lib;
  }
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
      if (i) list += ", ";
      list += names[i];
    }
  lib.error = "not found: " + list + (dirs.empty() ? " (loader search path)" : " (loader search path and CUDA dirs)");
  return lib;
}

Handle open_lib(LoadedLibrary& lib, const std::vector<std::string>& names, const std::vector<std::string>& dirs) {
  Handle h;
  lib = load_impl(names, dirs, &h.h);
  return h;
}

}  // namespace

std::vector<std::string> cuda_library_dirs() {
  std::vector<std::string> roots;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) roots.emplace_back(v);
  roots.emplace_back("/usr/local/cuda");
  std::vector<std::string> dirs;
  for (const auto& r : roots)
    for (const char* sub : {"lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"}) {
      std::string d = r + "/" + sub;
      std::error_code ec;
      if (fs::is_directory(d, ec) && std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
    }
  return dirs;
}

LoadedLibrary load_library(const std::vector<std::string>& names, const std::vector<std::string>& dirs) {
  return load_impl(names, dirs, nullptr);
}

CudaRuntimeProbe probe_cuda_runtime() {
  CudaRuntimeProbe p;
  Handle h = open_lib(p.lib, {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}, cuda_library_dirs());
  if (!p.lib.found) {
    p.error = p.lib.error;
    return p;
  }
  using VersionFn = int (*)(int*);
  auto rt = h.sym<VersionFn>("cudaRuntimeGetVersion");
  auto drv = h.sym<VersionFn>("cudaDriverGetVersion");
  if (!rt) {
    p.error = "cudaRuntimeGetVersion not found in " + p.lib.path;
    return p;
  }
  int v = 0;
  if (rt(&v) == 0) p.runtime_code = v;
  else p.error = "cudaRuntimeGetVersion failed";
  int d = 0;
  // Returns 0 (and possibly an error) when no driver is installed: that is "none", not a failure.
  if (drv) {
    drv(&d);
    p.driver_code = d;
  }
  return p;
}

CudnnProbe probe_cudnn() {
  CudnnProbe p;
  Handle h = open_lib(p.lib, {"libcudnn.so", "libcudnn.so.9", "libcudnn.so.8"}, cuda_library_dirs());
  if (!p.lib.found) {
    p.error = p.lib.error;
    return p;
  }
  using SizeFn = size_t (*)();
  auto ver = h.sym<SizeFn>("cudnnGetVersion");
  auto rt = h.sym<SizeFn>("cudnnGetCudartVersion");
  if (!ver) {
    p.error = "cudnnGetVersion not found in " + p.lib.path;
    return p;
  }
  p.code = static_cast<int64_t>(ver());
  if (rt) p.cudart_code = static_cast<int64_t>(rt());
  return p;
}

CublasProbe probe_cublas() {
  CublasProbe p;
  Handle h = open_lib(p.lib, {"libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}, cuda_library_dirs());
  if (!p.lib.found) {
    p.error = p.lib.error;
    return p;
  }
  // cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value); MAJOR_VERSION = 0,
  // MINOR_VERSION = 1, PATCH_LEVEL = 2 (library_types.h).
  using PropFn = int (*)(int, int*);
  auto prop = h.sym<PropFn>("cublasGetProperty");
  if (!prop) {
    p.error = "cublasGetProperty not found in " + p.lib.path;
    return p;
  }
  int a = -1, b = -1, c = -1;
  if (prop(0, &a) != 0 || prop(1, &b) != 0 || prop(2, &c) != 0) {
    p.error = "cublasGetProperty failed";
    return p;
  }
  p.major = a;
  p.minor = b;
  p.patch = c;
  return p;
}

NcclProbe probe_nccl() {
  NcclProbe p;
  Handle h = open_lib(p.lib, {"libnccl.so", "libnccl.so.2"}, cuda_library_dirs());
  if (!p.lib.found) {
    p.error = p.lib.error;
    return p;
  }
  using VersionFn = int (*)(int*);  // ncclResult_t ncclGetVersion(int* version)
  auto ver = h.sym<VersionFn>("ncclGetVersion");
  if (!ver) {
    p.error = "ncclGetVersion not found in " + p.lib.path;
    return p;
  }
  int v = 0;
  if (ver(&v) != 0) {
    p.error = "ncclGetVersion failed";
    return p;
  }
  p.code = v;
  return p;
}

NvmlProbe probe_nvml() {
  NvmlProbe p;
  Handle h = open_lib(p.lib, {"libnvidia-ml.so.1", "libnvidia-ml.so"}, {});
  if (!p.lib.found) {
    p.error = p.lib.error;
    return p;
  }
  // nvml.h: nvmlReturn_t is an int enum (0 = success), nvmlDevice_t an opaque pointer,
  // nvmlMemory_t {unsigned long long total, free, used}.
  using Dev = void*;
  struct Memory {
    unsigned long long total, free, used;
  };
  auto init = h.sym<int (*)()>("nvmlInit_v2");
  auto shutdown = h.sym<int (*)()>("nvmlShutdown");
  auto driver = h.sym<int (*)(char*, unsigned)>("nvmlSystemGetDriverVersion");
  auto count = h.sym<int (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  auto handle = h.sym<int (*)(unsigned, Dev*)>("nvmlDeviceGetHandleByIndex_v2");
  auto name = h.sym<int (*)(Dev, char*, unsigned)>("nvmlDeviceGetName");
  auto memory = h.sym<int (*)(Dev, Memory*)>("nvmlDeviceGetMemoryInfo");
  auto cc = h.sym<int (*)(Dev, int*, int*)>("nvmlDeviceGetCudaComputeCapability");
  if (!init || !driver || !count || !handle) {
    p.error = "NVML symbols missing in " + p.lib.path;
    return p;
  }
  if (int rc = init(); rc != 0) {
    p.error = "nvmlInit failed (NVML error " + std::to_string(rc) + ")";
    return p;
  }
  char buf[96] = {0};
  if (driver(buf, sizeof buf) == 0) p.driver = buf;
  unsigned n = 0;
  if (count(&n) == 0) {
    for (unsigned i = 0; i < n; ++i) {
      Dev d = nullptr;
      GpuInfo g;
      if (handle(i, &d) == 0) {
        char nb[96] = {0};
        if (name && name(d, nb, sizeof nb) == 0) g.name = nb;
        Memory m{};
        if (memory && memory(d, &m) == 0) g.memory_mib = static_cast<int64_t>(m.total / (1024 * 1024));
        int maj = -1, min = -1;
        if (cc && cc(d, &maj, &min) == 0) g.compute_capability = std::to_string(maj) + "." + std::to_string(min);
      }
      p.gpus.push_back(g);
    }
  }
  if (shutdown) shutdown();
  p.ok = !p.driver.empty();
  if (!p.ok) p.error = "nvmlSystemGetDriverVersion failed";
  return p;
}

OpenblasProbe probe_openblas() {
  OpenblasProbe p;
  using ConfigFn = char* (*)();
  // Linked into this program (dlkit's CPU backend) or loadable.
  auto fn = reinterpret_cast<ConfigFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  if (fn) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(fn), &info) && info.dli_fname) {
      p.lib.found = true;
      p.lib.name = info.dli_fname;
      p.lib.path = real_path(info.dli_fname);
    }
  } else {
    Handle h = open_lib(p.lib, {"libopenblas.so.0", "libopenblas.so"}, {});
    fn = h.sym<ConfigFn>("openblas_get_config");
  }
  if (!fn) {
    p.error = p.lib.found ? "openblas_get_config not found in " + p.lib.path : p.lib.error;
    return p;
  }
  p.config = fn() ? fn() : "";
  while (!p.config.empty() && p.config.back() == ' ') p.config.pop_back();
  static const std::regex re(R"(OpenBLAS\s+([0-9]+(?:\.[0-9]+)*))");
  std::smatch m;
  if (std::regex_search(p.config, m, re)) p.version = m[1].str();
  else p.version = version_from_library_name(p.lib.path);
  if (p.version.empty()) p.error = "no version in openblas_get_config(): " + p.config;
  return p;
}

namespace {

// e_ident's class and byte order and e_machine: what makes an ELF object loadable by this
// program; "" for a file that is not ELF.
std::string elf_kind(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char h[20] = {};
  if (!f.read(h, sizeof h) || std::string_view(h, 4) != "\x7f" "ELF") return "";
  return {h[4], h[5], h[18], h[19]};
}

bool loadable_here(const std::string& path) {
  static const std::string self = elf_kind("/proc/self/exe");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const std::string kind = elf_kind(path);
  return !kind.empty() && (self.empty() || kind == self);
}

}  // namespace

LibraryCache parse_ldconfig_cache(std::string_view text) {
  LibraryCache out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string_view line = text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    at = end == std::string_view::npos ? text.size() : end + 1;
    const size_t arrow = line.find(" => ");
    if (arrow == std::string_view::npos) continue;
    std::string name = trim(line.substr(0, std::min(arrow, line.find(" ("))));
    std::string path = trim(line.substr(arrow + 4));
    if (!name.empty() && !path.empty()) out.emplace_back(std::move(name), std::move(path));
  }
  return out;
}

std::string find_library_file(const std::string& name, const LibraryCache& cache) {
  std::vector<std::string> tries;
  if (name.find('/') != std::string::npos) {
    tries.push_back(name);
  } else if (!name.empty()) {
    if (const char* paths = std::getenv("LD_LIBRARY_PATH"))
      for (std::string_view rest = paths; !rest.empty();) {
        const size_t sep = rest.find_first_of(":;");
        const std::string_view dir = rest.substr(0, sep);
        if (!dir.empty()) tries.push_back(std::string(dir) + "/" + name);
        rest = sep == std::string_view::npos ? std::string_view() : rest.substr(sep + 1);
      }
    for (const auto& [soname, path] : cache)
      if (soname == name) tries.push_back(path);
    for (const char* dir : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"}) tries.push_back(std::string(dir) + "/" + name);
  }
  for (const auto& t : tries)
    if (loadable_here(t)) return real_path(t);
  return "";
}

std::vector<std::string> loaded_library_paths() {
  std::set<std::string> names;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) -> int {
        if (info->dlpi_name && info->dlpi_name[0] == '/') static_cast<std::set<std::string>*>(data)->insert(info->dlpi_name);
        return 0;
      },
      &names);
  std::set<std::string> real;
  for (const auto& n : names) {
    std::error_code ec;
    if (fs::is_regular_file(n, ec)) real.insert(real_path(n));
  }
  return {real.begin(), real.end()};
}

std::string version_from_library_name(const std::string& path) {
  std::string file = fs::path(path).filename().string();
  size_t so = file.find(".so.");
  if (so != std::string::npos) {
    std::string tail = file.substr(so + 4);
    static const std::regex num(R"(^[0-9]+(\.[0-9]+)*$)");
    if (std::regex_match(tail, num)) return tail;
  }
  static const std::regex dotted(R"([0-9]+(\.[0-9]+)+)");
  std::string last;
  for (auto it = std::sregex_iterator(file.begin(), file.end(), dotted); it != std::sregex_iterator(); ++it)
    last = it->str();
  return last;
}

}  // namespace dl
