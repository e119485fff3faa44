// The cuBLAS and cuBLASLt functions dlkit calls (the CUDA backend and dl-bench), as one list:
// cublas_loader.cpp checks that each resolves, cublas_forward.cpp defines each on the GPU build.
// X(LIBRARY, RETURN, NAME, (PARAMETERS), (ARGUMENTS)); cublas_v2.h's names are macros for the _v2 ones.
#pragma once
#include <cublasLt.h>
#include <cublas_api.h>

#define DL_CUBLAS_FUNCTIONS(X)                                                                              \
  X(lt, size_t, cublasLtGetVersion, (void), ())                                                             \
  X(lt, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle))                              \
  X(lt, cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle), (handle))                               \
  X(lt, cublasStatus_t, cublasLtMatrixLayoutCreate,                                                         \
    (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),         \
    (layout, type, rows, cols, ld))                                                                         \
  X(lt, cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))             \
  X(lt, cublasStatus_t, cublasLtMatmulDescCreate,                                                           \
    (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale), (desc, compute, scale)) \
  X(lt, cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))                     \
  X(lt, cublasStatus_t, cublasLtMatmulDescSetAttribute,                                                     \
    (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes),        \
    (desc, attr, buf, bytes))                                                                               \
  X(lt, cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))        \
  X(lt, cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))         \
  X(lt, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                                               \
    (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,           \
     size_t bytes),                                                                                         \
    (pref, attr, buf, bytes))                                                                               \
  X(lt, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                                     \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,  \
     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,    \
     cublasLtMatmulHeuristicResult_t results[], int* returned),                                             \
    (handle, op, a, b, c, d, pref, requested, results, returned))                                           \
  X(lt, cublasStatus_t, cublasLtMatmul,                                                                     \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,                    \
     cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta, const void* C,  \
     cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t* algo,       \
     void* workspace, size_t workspace_bytes, cudaStream_t stream),                                         \
    (handle, op, alpha, A, la, B, lb, beta, C, lc, D, ld, algo, workspace, workspace_bytes, stream))        \
  X(blas, cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))                             \
  X(blas, cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle))                              \
  X(blas, cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream)) \
  X(blas, cublasStatus_t, cublasGemmEx,                                                                     \
    (cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,                \
     const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb,   \
     const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo), \
    (handle, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute, algo))              \
  X(blas, const char*, cublasGetStatusName, (cublasStatus_t status), (status))                              \
  X(blas, const char*, cublasGetStatusString, (cublasStatus_t status), (status))

namespace dl::cuda {

// Function NAME of cuBLAS (blas) or cuBLASLt (lt), loading the library on the first call; throws
// a runtime error naming the library, why it could not be loaded and what to do.
enum class CublasLibrary { lt, blas };
void* cublas_symbol(CublasLibrary library, const char* name);

}  // namespace dl::cuda
