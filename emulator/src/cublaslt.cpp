// The cuBLASLt (and cuBLAS GemmEx) calls dlkit makes, computed on the CPU from the semantics of
// NVIDIA's cuBLAS documentation (DL_CUDA_EMULATION builds), with the signatures of cublasLt.h and
// cublas_api.h.
//
// D = epilogue(alpha op(A) op(B) + beta C), per batch, for A/B in f32, bf16 or f16 and C/D in the
// same type (or f32 for 16-bit inputs), compute type CUBLAS_COMPUTE_32F (or _FAST_TF32, whose f32
// inputs are first cut to TF32), scale type f32. Inputs are decoded exactly, products summed in
// double and every output (D, the GELU aux matrix, a bias gradient) rounded once, to nearest even,
// to its type: more accurate than a GPU's f32 accumulation, which the tolerances of the tests that
// compare the two allow for. beta == 0 reads no C (NaN there does not leak), as BLAS specifies.
//
// Epilogues: DEFAULT, BIAS, RELU, RELU_BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS (GELU is
// the tanh form), DGELU, DGELU_BGRAD, BGRADA, BGRADB. The ReLU bit-mask ones (RELU_AUX*,
// DRELU*) are CUBLAS_STATUS_NOT_SUPPORTED here. Non-default epilogues need a column-major D.
//
// Statuses as documented: an unknown handle is NOT_INITIALIZED; a null or destroyed descriptor,
// an attribute buffer of the wrong size, ld smaller than the rows (columns for row order),
// dimensions that do not chain (op(A) m x k, op(B) k x n, C and D m x n), unequal batch counts,
// a GELU aux ld not divisible by 8, or too small a workspace for the algorithm are INVALID_VALUE;
// types, compute types and modes outside the list above are NOT_SUPPORTED. An operand whose
// elements leave its device allocation (or are not device memory) is reported on stderr, naming
// the operand and the allocation, and fails the call with EXECUTION_FAILED and
// cudaErrorIllegalAddress for cudaGetLastError, as compute-sanitizer would.
//
// Heuristics return one algorithm when every MIN_ALIGNMENT preference is at least its matrix's
// element size and DL_CUDA_EMU_LT_MIN_ALIGNMENT (bytes, a power of two; 1 unless set: set it to
// 16 to make the heuristic decline operands a GPU's fast kernels would, and so exercise a
// caller's fallback), and a bias or aux pointer is 16-byte aligned (kernels read those vectors in
// 16-byte pieces; the heuristic reads their pointers for that), else NOT_SUPPORTED. The
// algorithm wants a workspace (4 bytes per element of D: a split-K's partial sums) when
// k >= 2 max(m, n), the epilogue is DEFAULT and MAX_WORKSPACE_BYTES allows it, none otherwise;
// cublasLtMatmul fills the bytes it wants with 0xFF, so a workspace that is not there faults. A
// workspace not 256-byte aligned, or a bias or aux pointer under 16 bytes, fails as a misaligned
// address (EXECUTION_FAILED, cudaErrorMisalignedAddress), as such launches do on a GPU.
#include <cublasLt.h>
#include <cublas_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emulator/device_memory.hpp"
#include "emulator/float_formats.hpp"
#include "emulator/runtime.hpp"

namespace dl::cuda_emu {
namespace {

constexpr uint64_t kAlgoMagic = 0x646c2d656d752d31;  // "dl-emu-1"

struct Layout {
  uint32_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
  int64_t plane_offset = 0;
  uint32_t batch_mode = 0;
};

struct Desc {
  int32_t compute = CUBLAS_COMPUTE_32F;
  int32_t scale = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  int32_t fill_mode = CUBLAS_FILL_MODE_FULL;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int64_t bias_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0, aux_stride = 0;
  int32_t bias_type = -1, aux_type = -1;
  int8_t fast_accum = 0;
};

struct Pref {
  uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t max_workspace = 0;
  uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  uint32_t align_a = 256, align_b = 256, align_c = 256, align_d = 256;
  float max_waves = 0;
  uint64_t impl_mask = ~uint64_t{0};
};

struct Live {
  std::mutex mu;
  std::set<const void*> handles, descs, layouts, prefs;
};
Live& live() {
  static Live* l = new Live;
  return *l;
}
bool is_live(std::set<const void*> Live::*which, const void* p) {
  Live& l = live();
  std::lock_guard<std::mutex> lock(l.mu);
  return p && (l.*which).count(p) > 0;
}
template <class T>
cublasStatus_t create(std::set<const void*> Live::*which, T** out) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  T* p = new T;
  Live& l = live();
  std::lock_guard<std::mutex> lock(l.mu);
  (l.*which).insert(p);
  *out = p;
  return CUBLAS_STATUS_SUCCESS;
}
template <class T>
cublasStatus_t destroy(std::set<const void*> Live::*which, const void* p) {
  if (!p) return CUBLAS_STATUS_SUCCESS;  // destroying NULL is documented as a success
  Live& l = live();
  std::lock_guard<std::mutex> lock(l.mu);
  if (!(l.*which).erase(p)) return CUBLAS_STATUS_INVALID_VALUE;
  delete static_cast<const T*>(p);
  return CUBLAS_STATUS_SUCCESS;
}

// Attribute buffers must have exactly the attribute's size (cublasLt*SetAttribute's contract).
template <class T>
cublasStatus_t put(T& field, const void* buf, size_t size) {
  if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}
// GetAttribute: size 0 with sizeWritten asks for the size; otherwise buf must hold it.
template <class T>
cublasStatus_t get(const T& field, void* buf, size_t size, size_t* written) {
  if (size == 0 && written) {
    *written = sizeof(T);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf || size < sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &field, sizeof(T));
  if (written) *written = sizeof(T);
  return CUBLAS_STATUS_SUCCESS;
}

size_t type_bytes(int32_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F: return 2;
    default: return 0;
  }
}

double load(const void* base, int32_t t, int64_t i) {
  const auto* p = static_cast<const unsigned char*>(base);
  if (t == CUDA_R_32F) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return t == CUDA_R_16BF ? decode_bf16(h) : decode_f16(h);
}

void store(void* base, int32_t t, int64_t i, double v) {
  auto* p = static_cast<unsigned char*>(base);
  if (t == CUDA_R_32F) {
    const float f = encode_f32(v);
    std::memcpy(p + 4 * i, &f, 4);
    return;
  }
  const uint16_t h = t == CUDA_R_16BF ? encode_bf16(v) : encode_f16(v);
  std::memcpy(p + 2 * i, &h, 2);
}

// Element (r, c) of matrix `batch` of a layout, in elements from its pointer.
int64_t offset(const Layout& l, int64_t r, int64_t c, int64_t batch) {
  const int64_t in = l.order == CUBLASLT_ORDER_COL ? r + c * l.ld : r * l.ld + c;
  return in + batch * l.stride;
}

// Elements from the pointer to one past the last element any batch touches.
int64_t extent(const Layout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const auto r = static_cast<int64_t>(l.rows), c = static_cast<int64_t>(l.cols);
  int64_t last = offset(l, r - 1, c - 1, 0);
  if (l.batch > 1) last += (l.batch - 1) * std::max<int64_t>(l.stride, 0);
  return last + 1;
}

double gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double gelu_grad(double x) {
  const double k = std::sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

bool supported_epilogue(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB: return true;
    default: return false;
  }
}
bool known_epilogue(uint32_t e) {
  return supported_epilogue(e) || e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DRELU || e == CUBLASLT_EPILOGUE_DRELU_BGRAD;
}
bool adds_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool writes_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
bool applies_gelu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool uses_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

// One GEMM problem, checked: what the heuristic and the matmul agree on.
struct Problem {
  const Desc* d = nullptr;
  const Layout *a = nullptr, *b = nullptr, *c = nullptr, *out = nullptr;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool ta = false, tb = false;
  int32_t bias_type = -1, aux_type = -1;
  size_t workspace = 0;  // what the algorithm for it wants, given the preference
};

bool ld_ok(const Layout& l) {
  const auto need = static_cast<int64_t>(l.order == CUBLASLT_ORDER_COL ? l.rows : l.cols);
  return l.ld >= std::max<int64_t>(1, need);
}

cublasStatus_t check(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                     cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, Problem& p) {
  if (!is_live(&Live::handles, handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!is_live(&Live::descs, desc)) return CUBLAS_STATUS_INVALID_VALUE;
  for (auto l : {A, B, C, D})
    if (!is_live(&Live::layouts, l)) return CUBLAS_STATUS_INVALID_VALUE;
  p.d = reinterpret_cast<const Desc*>(desc);
  p.a = reinterpret_cast<const Layout*>(A);
  p.b = reinterpret_cast<const Layout*>(B);
  p.c = reinterpret_cast<const Layout*>(C);
  p.out = reinterpret_cast<const Layout*>(D);
  const Desc& d = *p.d;
  auto op_ok = [](int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  if (!op_ok(d.transa) || !op_ok(d.transb) || !op_ok(d.transc)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!known_epilogue(d.epilogue)) return CUBLAS_STATUS_INVALID_VALUE;
  for (const Layout* l : {p.a, p.b, p.c, p.out}) {
    if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (l->plane_offset != 0 || l->batch_mode != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!ld_ok(*l) || l->batch < 1 || l->stride < 0) return CUBLAS_STATUS_INVALID_VALUE;
  }
  p.ta = d.transa != CUBLAS_OP_N;
  p.tb = d.transb != CUBLAS_OP_N;
  p.m = static_cast<int64_t>(p.out->rows);
  p.n = static_cast<int64_t>(p.out->cols);
  p.k = static_cast<int64_t>(p.ta ? p.a->rows : p.a->cols);
  const auto a_m = static_cast<int64_t>(p.ta ? p.a->cols : p.a->rows);
  const auto b_k = static_cast<int64_t>(p.tb ? p.b->cols : p.b->rows);
  const auto b_n = static_cast<int64_t>(p.tb ? p.b->rows : p.b->cols);
  if (a_m != p.m || b_k != p.k || b_n != p.n || p.c->rows != p.out->rows || p.c->cols != p.out->cols)
    return CUBLAS_STATUS_INVALID_VALUE;
  p.batch = p.out->batch;
  if (p.a->batch != p.batch || p.b->batch != p.batch || p.c->batch != p.batch) return CUBLAS_STATUS_INVALID_VALUE;

  // What is computed: f32 math, f32 scalars, host pointers.
  if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_FAST_TF32) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.scale != CUDA_R_32F || d.pointer_mode != CUBLASLT_POINTER_MODE_HOST) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.transc != CUBLAS_OP_N || d.fill_mode != CUBLAS_FILL_MODE_FULL) return CUBLAS_STATUS_NOT_SUPPORTED;
  const uint32_t in = p.a->type, outt = p.out->type;
  if (!type_bytes(static_cast<int32_t>(in)) || p.b->type != in || p.c->type != outt) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (outt != in && !(outt == CUDA_R_32F && type_bytes(static_cast<int32_t>(in)) == 2)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && in != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;

  if (!supported_epilogue(d.epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && p.out->order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
  p.bias_type = d.bias_type == -1 ? static_cast<int32_t>(outt) : d.bias_type;
  p.aux_type = d.aux_type == -1 ? static_cast<int32_t>(outt) : d.aux_type;
  // Bias and aux vectors are D's type (the documented exceptions are IMMA and fp8 kernels).
  if ((adds_bias(d.epilogue) || writes_bias(d.epilogue)) && p.bias_type != static_cast<int32_t>(outt))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (uses_aux(d.epilogue)) {
    if (p.aux_type != static_cast<int32_t>(outt)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d.aux_ld < p.m || d.aux_ld % 8 != 0 || d.aux_stride % 8 != 0 || d.aux_stride < 0)
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

bool aligned(const void* p, size_t to) { return to <= 1 || reinterpret_cast<uintptr_t>(p) % to == 0; }

constexpr size_t kVectorAlignment = 16, kWorkspaceAlignment = 256;

size_t lt_min_alignment() {
  static const size_t bytes = [] {
    const char* env = std::getenv("DL_CUDA_EMU_LT_MIN_ALIGNMENT");
    if (!env || !*env) return size_t{1};
    char* end = nullptr;
    const unsigned long v = std::strtoul(env, &end, 10);
    if (*end || v == 0 || v > 256 || (v & (v - 1))) {
      std::fprintf(stderr, "DL_CUDA_EMU_LT_MIN_ALIGNMENT=%s is not a power of two from 1 to 256 (bytes): ignored\n",
                   env);
      return size_t{1};
    }
    return static_cast<size_t>(v);
  }();
  return bytes;
}

// A GPU fault inside the call: said on stderr, left for cudaGetLastError, EXECUTION_FAILED.
cublasStatus_t fault(cudaError_t e, const std::string& what) {
  std::fprintf(stderr, "dl cuda emulator: cublasLtMatmul: %s (%s)\n", what.c_str(), cudaGetErrorName(e));
  record_launch_error(e, false);
  return CUBLAS_STATUS_EXECUTION_FAILED;
}

// The emulated algorithm's demands on a checked problem under a preference.
cublasStatus_t fit(Problem& p, const Pref& pref) {
  if (pref.search_mode != CUBLASLT_SEARCH_BEST_FIT) return CUBLAS_STATUS_NOT_SUPPORTED;
  const size_t in = type_bytes(static_cast<int32_t>(p.a->type)), out = type_bytes(static_cast<int32_t>(p.out->type));
  const size_t floor = lt_min_alignment();
  auto enough = [&](uint32_t promised, size_t element) { return promised >= std::max(element, floor); };
  if (!enough(pref.align_a, in) || !enough(pref.align_b, in) || !enough(pref.align_c, out) ||
      !enough(pref.align_d, out))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // The heuristic reads the bias and aux pointers' values for their alignment.
  if (p.d->bias && !aligned(p.d->bias, kVectorAlignment)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (p.d->aux && !aligned(p.d->aux, kVectorAlignment)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const auto split_k = static_cast<uint64_t>(p.m * p.n) * 4;
  p.workspace = p.d->epilogue == CUBLASLT_EPILOGUE_DEFAULT && p.k >= 2 * std::max(p.m, p.n) &&
                        split_k <= pref.max_workspace
                    ? split_k
                    : 0;
  return CUBLAS_STATUS_SUCCESS;
}

void encode_algo(const Problem& p, const Pref& pref, cublasLtMatmulAlgo_t& algo) {
  algo = cublasLtMatmulAlgo_t{};
  algo.data[0] = kAlgoMagic;
  algo.data[1] = p.workspace;
  algo.data[2] = pref.align_a;
  algo.data[3] = pref.align_b;
  algo.data[4] = pref.align_c;
  algo.data[5] = pref.align_d;
}

// Empty when [p, p + elements) of type t is device memory; else what is wrong with the operand.
std::string outside(const char* what, const void* p, int64_t elements, int32_t t) {
  if (elements == 0) return {};
  const size_t bytes = static_cast<size_t>(elements) * type_bytes(t);
  if (is_device_range(p, bytes)) return {};
  char text[160];
  std::snprintf(text, sizeof text, "%s (%zu bytes at %p) is not inside one device allocation", what, bytes, p);
  auto a = find_allocation(p, true);
  return a ? std::string(text) + ": it starts in or next to " + a->describe() : std::string(text);
}

// Four running sums, not one: the additions overlap (about 4x faster), and in double the order
// changes nothing an f32 (or narrower) output can show.
double dot(const double* a, const double* b, int64_t k) {
  double s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= k; i += 4)
    for (int j = 0; j < 4; ++j) s[j] += a[i + j] * b[i + j];
  for (; i < k; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

cublasStatus_t run(const Problem& p, const void* alpha_p, const void* A, const void* B, const void* beta_p,
                   const void* C, void* D) {
  const Desc& d = *p.d;
  const float alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
  const auto in = static_cast<int32_t>(p.a->type), outt = static_cast<int32_t>(p.out->type);
  const bool tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const int64_t m = p.m, n = p.n, k = p.k;
  const int64_t bias_len = d.epilogue == CUBLASLT_EPILOGUE_BGRADB ? n : m;
  const int64_t bias_extent = bias_len + (p.batch - 1) * d.bias_stride;
  const int64_t aux_extent = n == 0 ? 0 : (n - 1) * d.aux_ld + m + (p.batch - 1) * d.aux_stride;

  std::string wrong = outside("A", A, extent(*p.a), in);
  if (wrong.empty()) wrong = outside("B", B, extent(*p.b), in);
  if (wrong.empty()) wrong = outside("D", D, extent(*p.out), outt);
  if (wrong.empty() && beta != 0) wrong = outside("C", C, extent(*p.c), outt);
  if (wrong.empty() && (adds_bias(d.epilogue) || writes_bias(d.epilogue)))
    wrong = outside("the bias", d.bias, bias_extent, p.bias_type);
  if (wrong.empty() && uses_aux(d.epilogue)) wrong = outside("the epilogue aux", d.aux, aux_extent, p.aux_type);
  if (!wrong.empty()) return fault(cudaErrorIllegalAddress, wrong);

  std::vector<double> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(n * k)), v(static_cast<size_t>(m * n));
  auto input = [&](const void* base, int64_t i) {
    double x = load(base, in, i);
    return tf32 ? double(round_tf32(static_cast<float>(x))) : x;
  };
  for (int64_t bt = 0; bt < p.batch; ++bt) {
    // op(A) as rows of k, op(B) as columns of k: each output is one contiguous dot product.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t kk = 0; kk < k; ++kk)
        a[static_cast<size_t>(i * k + kk)] = input(A, p.ta ? offset(*p.a, kk, i, bt) : offset(*p.a, i, kk, bt));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk)
        b[static_cast<size_t>(j * k + kk)] = input(B, p.tb ? offset(*p.b, j, kk, bt) : offset(*p.b, kk, j, bt));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        const double* ar = &a[static_cast<size_t>(i * k)];
        const double* bc = &b[static_cast<size_t>(j * k)];
        double x = double(alpha) * dot(ar, bc, k);
        if (beta != 0) x += double(beta) * load(C, outt, offset(*p.c, i, j, bt));
        v[static_cast<size_t>(j * m + i)] = x;
      }
    void* bias = d.bias;
    const int64_t bias0 = bt * d.bias_stride, aux0 = bt * d.aux_stride;
    const uint32_t e = d.epilogue;
    if (e == CUBLASLT_EPILOGUE_BGRADA)
      for (int64_t i = 0; i < m; ++i) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) s += a[static_cast<size_t>(i * k + kk)];
        store(bias, p.bias_type, bias0 + i, s);
      }
    if (e == CUBLASLT_EPILOGUE_BGRADB)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) s += b[static_cast<size_t>(j * k + kk)];
        store(bias, p.bias_type, bias0 + j, s);
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        double& x = v[static_cast<size_t>(j * m + i)];
        if (adds_bias(e)) x += load(bias, p.bias_type, bias0 + i);
        if (e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
          store(d.aux, p.aux_type, aux0 + i + j * d.aux_ld, x);
        if (e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
          x *= gelu_grad(load(d.aux, p.aux_type, aux0 + i + j * d.aux_ld));
        if (applies_gelu(e)) x = gelu(x);
        if (e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS) x = std::max(x, 0.0);
        store(D, outt, offset(*p.out, i, j, bt), x);
      }
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
      for (int64_t i = 0; i < m; ++i) {
        double s = 0;
        for (int64_t j = 0; j < n; ++j) s += v[static_cast<size_t>(j * m + i)];
        store(bias, p.bias_type, bias0 + i, s);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}

struct BlasHandle {
  cudaStream_t stream = nullptr;
};

}  // namespace
}  // namespace dl::cuda_emu

using namespace dl::cuda_emu;

size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  int* h = nullptr;
  const cublasStatus_t st = create(&Live::handles, &h);
  if (st == CUBLAS_STATUS_SUCCESS) *lightHandle = reinterpret_cast<cublasLtHandle_t>(h);
  return st;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  return destroy<int>(&Live::handles, lightHandle) == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_SUCCESS
                                                                            : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  Layout* l = nullptr;
  const cublasStatus_t st = create(&Live::layouts, &l);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  l->type = static_cast<uint32_t>(type);
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t matLayout) {
  return destroy<Layout>(&Live::layouts, matLayout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  if (!is_live(&Live::layouts, matLayout)) return CUBLAS_STATUS_INVALID_VALUE;
  Layout& l = *reinterpret_cast<Layout*>(matLayout);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return put(l.type, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return put(l.order, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return put(l.rows, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return put(l.cols, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_LD: return put(l.ld, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return put(l.batch, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return put(l.stride, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return put(l.plane_offset, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return put(l.batch_mode, buf, sizeInBytes);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  if (!is_live(&Live::layouts, matLayout)) return CUBLAS_STATUS_INVALID_VALUE;
  const Layout& l = *reinterpret_cast<const Layout*>(matLayout);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return get(l.type, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return get(l.order, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return get(l.rows, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return get(l.cols, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_LD: return get(l.ld, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return get(l.batch, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return get(l.stride, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return get(l.plane_offset, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return get(l.batch_mode, buf, sizeInBytes, sizeWritten);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  Desc* d = nullptr;
  const cublasStatus_t st = create(&Live::descs, &d);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  d->compute = computeType;
  d->scale = scaleType;
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(const cublasLtMatmulDesc_t matmulDesc) {
  return destroy<Desc>(&Live::descs, matmulDesc);
}

#define DL_EMU_DESC_FIELDS(X)                                   \
  X(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute)                 \
  X(CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale)                     \
  X(CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode)            \
  X(CUBLASLT_MATMUL_DESC_TRANSA, transa)                        \
  X(CUBLASLT_MATMUL_DESC_TRANSB, transb)                        \
  X(CUBLASLT_MATMUL_DESC_TRANSC, transc)                        \
  X(CUBLASLT_MATMUL_DESC_FILL_MODE, fill_mode)                  \
  X(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue)                    \
  X(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias)                    \
  X(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_stride)        \
  X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux)             \
  X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld)               \
  X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_stride) \
  X(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type)      \
  X(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type)             \
  X(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum)

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  if (!is_live(&Live::descs, matmulDesc)) return CUBLAS_STATUS_INVALID_VALUE;
  Desc& d = *reinterpret_cast<Desc*>(matmulDesc);
  switch (attr) {
#define DL_EMU_PUT(attr_name, field) \
  case attr_name: return put(d.field, buf, sizeInBytes);
    DL_EMU_DESC_FIELDS(DL_EMU_PUT)
#undef DL_EMU_PUT
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  if (!is_live(&Live::descs, matmulDesc)) return CUBLAS_STATUS_INVALID_VALUE;
  const Desc& d = *reinterpret_cast<const Desc*>(matmulDesc);
  switch (attr) {
#define DL_EMU_GET(attr_name, field) \
  case attr_name: return get(d.field, buf, sizeInBytes, sizeWritten);
    DL_EMU_DESC_FIELDS(DL_EMU_GET)
#undef DL_EMU_GET
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  Pref* p = nullptr;
  const cublasStatus_t st = create(&Live::prefs, &p);
  if (st == CUBLAS_STATUS_SUCCESS) *pref = reinterpret_cast<cublasLtMatmulPreference_t>(p);
  return st;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(const cublasLtMatmulPreference_t pref) {
  return destroy<Pref>(&Live::prefs, pref);
}

#define DL_EMU_PREF_FIELDS(X)                                 \
  X(CUBLASLT_MATMUL_PREF_SEARCH_MODE, search_mode)            \
  X(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_workspace)  \
  X(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction_mask) \
  X(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a)      \
  X(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b)      \
  X(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c)      \
  X(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d)      \
  X(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, max_waves)          \
  X(CUBLASLT_MATMUL_PREF_IMPL_MASK, impl_mask)

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  if (!is_live(&Live::prefs, pref)) return CUBLAS_STATUS_INVALID_VALUE;
  Pref& p = *reinterpret_cast<Pref*>(pref);
  switch (attr) {
#define DL_EMU_PUT(attr_name, field) \
  case attr_name: return put(p.field, buf, sizeInBytes);
    DL_EMU_PREF_FIELDS(DL_EMU_PUT)
#undef DL_EMU_PUT
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  if (!is_live(&Live::prefs, pref)) return CUBLAS_STATUS_INVALID_VALUE;
  const Pref& p = *reinterpret_cast<const Pref*>(pref);
  switch (attr) {
#define DL_EMU_GET(attr_name, field) \
  case attr_name: return get(p.field, buf, sizeInBytes, sizeWritten);
    DL_EMU_PREF_FIELDS(DL_EMU_GET)
#undef DL_EMU_GET
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount) return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  if (!is_live(&Live::prefs, preference)) return CUBLAS_STATUS_INVALID_VALUE;
  Problem p;
  cublasStatus_t st = check(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, p);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const Pref& pref = *reinterpret_cast<const Pref*>(preference);
  st = fit(p, pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  r = cublasLtMatmulHeuristicResult_t{};
  encode_algo(p, pref, r.algo);
  r.workspaceSize = p.workspace;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  if (sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;  // the context is lost
  Problem p;
  cublasStatus_t st = check(lightHandle, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, p);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!alpha || !beta || !A || !B || !D) return CUBLAS_STATUS_INVALID_VALUE;
  if (*static_cast<const float*>(beta) != 0 && !C) return CUBLAS_STATUS_INVALID_VALUE;
  // In place (C == D) needs C's layout to be D's.
  if (C == D && (p.c->ld != p.out->ld || p.c->order != p.out->order || p.c->stride != p.out->stride))
    return CUBLAS_STATUS_INVALID_VALUE;
  if ((adds_bias(p.d->epilogue) || writes_bias(p.d->epilogue)) && !p.d->bias) return CUBLAS_STATUS_INVALID_VALUE;
  if (uses_aux(p.d->epilogue) && !p.d->aux) return CUBLAS_STATUS_INVALID_VALUE;
  Pref implied;  // algo NULL: an implicit heuristic query with default preferences
  implied.max_workspace = workspaceSizeInBytes;
  const auto in = type_bytes(static_cast<int32_t>(p.a->type)), out = type_bytes(static_cast<int32_t>(p.out->type));
  if (algo) {
    if (algo->data[0] != kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;
    p.workspace = algo->data[1];
    // The algorithm was chosen for pointers aligned so; others are a conflict.
    if (!aligned(A, algo->data[2]) || !aligned(B, algo->data[3]) || (C && !aligned(C, algo->data[4])) ||
        !aligned(D, algo->data[5]))
      return CUBLAS_STATUS_INVALID_VALUE;
    if (algo->data[2] < in || algo->data[3] < in || algo->data[4] < out || algo->data[5] < out)
      return CUBLAS_STATUS_INVALID_VALUE;
  } else {
    implied.align_a = implied.align_b = implied.align_c = implied.align_d = 256;
    auto al = [](const void* q) {
      uint32_t a = 256;
      while (a > 1 && reinterpret_cast<uintptr_t>(q) % a) a >>= 1;
      return a;
    };
    implied.align_a = al(A);
    implied.align_b = al(B);
    implied.align_c = C ? al(C) : 256;
    implied.align_d = al(D);
    st = fit(p, implied);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  if (workspaceSizeInBytes < p.workspace || (p.workspace && !workspace)) return CUBLAS_STATUS_INVALID_VALUE;
  const uint32_t e = p.d->epilogue;
  if ((adds_bias(e) || writes_bias(e)) && !aligned(p.d->bias, kVectorAlignment))
    return fault(cudaErrorMisalignedAddress, "the bias vector is not 16-byte aligned");
  if (uses_aux(e) && !aligned(p.d->aux, kVectorAlignment))
    return fault(cudaErrorMisalignedAddress, "the epilogue aux matrix is not 16-byte aligned");
  if (p.workspace) {
    if (!aligned(workspace, kWorkspaceAlignment))
      return fault(cudaErrorMisalignedAddress, "the workspace is not 256-byte aligned");
    const std::string wrong = outside("the workspace", workspace, static_cast<int64_t>(p.workspace / 4), CUDA_R_32F);
    if (!wrong.empty()) return fault(cudaErrorIllegalAddress, wrong);
    std::memset(workspace, 0xFF, p.workspace);
  }
  (void)stream;  // synchronous: done when this returns
  return run(p, alpha, A, B, beta, C, D);
}

// --- cuBLAS (the backend's fallback for operands cuBLASLt declines) -----------------------

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasHandle_t>(new BlasHandle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete reinterpret_cast<BlasHandle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  reinterpret_cast<BlasHandle*>(handle)->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

// Column-major C = alpha op(A) op(B) + beta C, through the cuBLASLt path with no epilogue.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) ||
      ldc < std::max(1, m) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasStatus_t st = cublasLtCreate(&lt);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescCreate(&desc, computeType, CUDA_R_32F);
  const int32_t opa = transa, opb = transb;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, 4);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, 4);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&la, Atype, ta ? k : m, ta ? m : k, lda);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&lb, Btype, tb ? n : k, tb ? k : n, ldb);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&lc, Ctype, m, n, ldc);
  if (st == CUBLAS_STATUS_SUCCESS) {
    Problem p;
    st = check(lt, desc, la, lb, lc, lc, p);
    if (st == CUBLAS_STATUS_SUCCESS) st = run(p, alpha, A, B, beta, C, C);  // any alignment, no workspace
  }
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
  (void)algo;
  return st;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
#define DL_EMU_NAME(s) \
  case s: return #s;
    DL_EMU_NAME(CUBLAS_STATUS_SUCCESS)
    DL_EMU_NAME(CUBLAS_STATUS_NOT_INITIALIZED)
    DL_EMU_NAME(CUBLAS_STATUS_ALLOC_FAILED)
    DL_EMU_NAME(CUBLAS_STATUS_INVALID_VALUE)
    DL_EMU_NAME(CUBLAS_STATUS_ARCH_MISMATCH)
    DL_EMU_NAME(CUBLAS_STATUS_MAPPING_ERROR)
    DL_EMU_NAME(CUBLAS_STATUS_EXECUTION_FAILED)
    DL_EMU_NAME(CUBLAS_STATUS_INTERNAL_ERROR)
    DL_EMU_NAME(CUBLAS_STATUS_NOT_SUPPORTED)
    DL_EMU_NAME(CUBLAS_STATUS_LICENSE_ERROR)
#undef DL_EMU_NAME
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
    default: return "unknown error";
  }
}
