// cuBLAS and cuBLASLt's functions on a GPU build (dl_device; the emulated device links the
// emulator's): each forwards to the library's own, which the first call loads (cublas_loader.cpp).
// The names are the headers' own, so the compiler checks every definition against its
// declaration; hidden, so that nothing else in the process binds to them.
#include "cublas_functions.hpp"

#define DL_CUBLAS_FORWARD(library, ret, name, params, args)                                         \
  extern "C" __attribute__((visibility("hidden"))) ret name params {                                \
    using Function = ret(*) params;                                                                 \
    static const auto fn =                                                                          \
        reinterpret_cast<Function>(::dl::cuda::cublas_symbol(::dl::cuda::CublasLibrary::library, #name)); \
    return fn args;                                                                                 \
  }
DL_CUBLAS_FUNCTIONS(DL_CUBLAS_FORWARD)
#undef DL_CUBLAS_FORWARD
