// Loading cuBLAS and cuBLASLt on first use (both device flavours; on the emulated device only the
// checks below load them, since the emulator serves the calls).
//
// Why not link them: libcublasLt's static initializers run at every start of a program linked
// to it, GPU or not: an empty program linked to it takes 0.1 s of system time, 25,000 page faults
// and 210 MB of resident memory here (CUDA 13.0; docs/PERFORMANCE.md). dl-train on the CPU never
// calls cuBLAS, and the test suites start it hundreds of times.
//
// The libraries are found as the dynamic loader finds any library (LD_LIBRARY_PATH, the program's
// RUNPATH, ld.so.cache), then in the folder CMake found the toolkit's cuBLAS in (DL_CUBLAS_DIR).
// The sonames are fixed at compile time: no name from an input file reaches dlopen.
#include <dlfcn.h>

#include "cublas_functions.hpp"
#include "dl/core/error.hpp"
#include "dl/device/cuda/cublas_loader.hpp"

#define DL_CUBLAS_STR2(x) #x
#define DL_CUBLAS_STR(x) DL_CUBLAS_STR2(x)

namespace dl::cuda {

namespace {

const char* soname(CublasLibrary library) {
  return library == CublasLibrary::lt ? "libcublasLt.so." DL_CUBLAS_STR(CUBLAS_VER_MAJOR)
                                      : "libcublas.so." DL_CUBLAS_STR(CUBLAS_VER_MAJOR);
}

struct LoadedLibrary {
  void* handle = nullptr;
  std::string error;  // dlerror's words when it could not be loaded
};

LoadedLibrary load(CublasLibrary library) {
  LoadedLibrary lib;
  if ((lib.handle = dlopen(soname(library), RTLD_NOW | RTLD_LOCAL))) return lib;
  lib.error = dlerror();
#ifdef DL_CUBLAS_DIR
  const std::string beside_toolkit = std::string(DL_CUBLAS_DIR) + "/" + soname(library);
  if ((lib.handle = dlopen(beside_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL))) return {lib.handle, {}};
  lib.error += std::string("; ") + dlerror();
#endif
  return lib;
}

const LoadedLibrary& loaded(CublasLibrary library) {
  // Each loaded at most once, on its first use (function-local statics: thread-safe).
  if (library == CublasLibrary::lt) {
    static const LoadedLibrary lt = load(CublasLibrary::lt);
    return lt;
  }
  static const LoadedLibrary blas = load(CublasLibrary::blas);
  return blas;
}

bool in_process(CublasLibrary library) {
  void* h = dlopen(soname(library), RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != nullptr;
}

}  // namespace

void* cublas_symbol(CublasLibrary library, const char* name) {
  const LoadedLibrary& lib = loaded(library);
  if (!lib.handle)
    throw_runtime("the CUDA backend needs ", soname(library), " (cuBLAS of CUDA ", CUBLAS_VER_MAJOR,
                  ") and could not load it: ", lib.error,
                  ". Install the CUDA toolkit's cuBLAS, or add the folder that holds it to LD_LIBRARY_PATH");
  dlerror();
  if (void* fn = dlsym(lib.handle, name)) return fn;
  const char* why = dlerror();
  throw_runtime(soname(library), " has no function ", name, " (", why ? why : "null symbol",
                "): dlkit was built against cuBLAS ", CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR,
                "; install that version or rebuild dlkit against the installed one");
}

bool cublas_lt_is_loaded() { return in_process(CublasLibrary::lt); }
bool cublas_is_loaded() { return in_process(CublasLibrary::blas); }

std::vector<std::string> cublas_missing_functions() {
  std::vector<std::string> missing;
  auto look_up = [&](CublasLibrary library, const char* name) {
    try {
      (void)cublas_symbol(library, name);
    } catch (const Error& e) {
      missing.push_back(e.what());
    }
  };
#define DL_CUBLAS_LOOK_UP(library, ret, name, params, args) look_up(CublasLibrary::library, #name);
  DL_CUBLAS_FUNCTIONS(DL_CUBLAS_LOOK_UP)
#undef DL_CUBLAS_LOOK_UP
  return missing;
}

}  // namespace dl::cuda
