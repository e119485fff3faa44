// The emulated cuBLASLt (lib/emulator/cublaslt.cpp) against an f64 reference on
// random data: every transpose, order, batch, epilogue and dtype combination, C != D with beta,
// workspace limits, and the documented statuses of invalid arguments.
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emulator/float_formats.hpp"
#include "emulator/runtime.hpp"

namespace {

using namespace dl::cuda_emu;

size_t width(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
const char* type_name(cudaDataType t) { return t == CUDA_R_32F ? "f32" : t == CUDA_R_16BF ? "bf16" : "f16"; }

double decode(const unsigned char* p, cudaDataType t) {
  if (t == CUDA_R_32F) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return t == CUDA_R_16BF ? decode_bf16(h) : decode_f16(h);
}
void encode(unsigned char* p, cudaDataType t, double v) {
  if (t == CUDA_R_32F) {
    const float f = static_cast<float>(v);
    std::memcpy(p, &f, 4);
    return;
  }
  const uint16_t h = t == CUDA_R_16BF ? encode_bf16(v) : encode_f16(v);
  std::memcpy(p, &h, 2);
}

// TF32 rounding written independently of the emulator's: round the f32 bits to 10 fraction bits,
// nearest, ties to even.
double tf32(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&f, &u, 4);
  return f;
}

double gelu_ref(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
// d/dx of gelu_ref by a central difference on the double function (a different route from the
// emulator's closed form).
double gelu_grad_ref(double x) {
  const double h = 1e-6;
  return (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
}

// Rounding once to the output type: half an ulp, relative.
double tolerance(cudaDataType t) { return t == CUDA_R_32F ? 1.2e-7 : t == CUDA_R_16BF ? 4.0e-3 : 5.0e-4; }
double floor_of(cudaDataType t) { return t == CUDA_R_16F ? 6e-8 : 1e-12; }

// One device buffer and its host mirror; the device copy starts poisoned (0xFF bytes).
struct Buffer {
  void* dev = nullptr;
  cudaDataType type = CUDA_R_32F;
  std::vector<unsigned char> host;
  Buffer(cudaDataType t, int64_t elements) : type(t), host(static_cast<size_t>(elements) * width(t), 0xFF) {
    REQUIRE(cudaMalloc(&dev, host.size()) == cudaSuccess);
  }
  ~Buffer() { (void)cudaFree(dev); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  double at(int64_t i) const { return decode(&host[static_cast<size_t>(i) * width(type)], type); }
  void set(int64_t i, double v) { encode(&host[static_cast<size_t>(i) * width(type)], type, v); }
  void upload() { REQUIRE(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice) == cudaSuccess); }
  void download() { REQUIRE(cudaMemcpy(host.data(), dev, host.size(), cudaMemcpyDeviceToHost) == cudaSuccess); }
};

struct Shape {
  int64_t rows, cols, ld, batch = 1, stride = 0;
  cublasLtOrder_t order = CUBLASLT_ORDER_COL;
  int64_t at(int64_t r, int64_t c, int64_t b) const {
    return (order == CUBLASLT_ORDER_COL ? r + c * ld : r * ld + c) + b * stride;
  }
  int64_t elements() const { return at(rows - 1, cols - 1, batch - 1) + 1; }
};
Shape shape(int64_t rows, int64_t cols, cublasLtOrder_t order, int64_t pad, int64_t batch) {
  Shape s{rows, cols, (order == CUBLASLT_ORDER_COL ? rows : cols) + pad, batch, 0, order};
  s.stride = batch > 1 ? s.at(rows - 1, cols - 1, 0) + 1 + 5 : 0;
  return s;
}

cublasLtMatrixLayout_t layout(cudaDataType t, const Shape& s) {
  cublasLtMatrixLayout_t l = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(s.rows), static_cast<uint64_t>(s.cols), s.ld) ==
          CUBLAS_STATUS_SUCCESS);
  const int32_t order = s.order, batch = static_cast<int32_t>(s.batch);
  REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order) ==
          CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch) ==
          CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s.stride,
                                           sizeof s.stride) == CUBLAS_STATUS_SUCCESS);
  return l;
}

struct Lt {
  cublasLtHandle_t h = nullptr;
  Lt() { REQUIRE(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~Lt() { (void)cublasLtDestroy(h); }
};

bool adds_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool gelu_out(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool aux_out(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool aux_in(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }
bool bias_out(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}

struct Case {
  cudaDataType in = CUDA_R_32F, out = CUDA_R_32F;
  bool ta = false, tb = false;
  cublasLtOrder_t order = CUBLASLT_ORDER_COL;
  int64_t batch = 1;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  float alpha = 1, beta = 0;
  bool c_is_d = true;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  int64_t m = 12, n = 8, k = 10;
  std::string name() const {
    return std::string(type_name(in)) + "->" + type_name(out) + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") +
           (order == CUBLASLT_ORDER_ROW ? " row" : " col") + " batch " + std::to_string(batch) + " epilogue " +
           std::to_string(epilogue) + " alpha " + std::to_string(alpha) + " beta " + std::to_string(beta) +
           (c_is_d ? " C==D" : " C!=D") + (compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? " tf32" : "");
  }
};

// Runs one case through heuristic + matmul and compares D (and the aux matrix, the bias
// gradient) with the f64 reference; D's padding must still be poison. Returns the largest
// error in tolerances.
double run_case(const Case& c, uint64_t seed) {
  INFO(c.name());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  const int64_t m = c.m, n = c.n, k = c.k, nb = c.batch;
  const Shape sa = shape(c.ta ? k : m, c.ta ? m : k, c.order, 3, nb), sb = shape(c.tb ? n : k, c.tb ? k : n, c.order, 2, nb);
  const Shape sd = shape(m, n, c.order, 2, nb), sc = c.c_is_d ? sd : shape(m, n, c.order, 1, nb);
  Buffer A(c.in, sa.elements()), B(c.in, sb.elements()), D(c.out, sd.elements());
  Buffer Cbuf(c.out, c.c_is_d ? 1 : sc.elements());
  Buffer& C = c.c_is_d ? D : Cbuf;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t r = 0; r < sa.rows; ++r)
      for (int64_t q = 0; q < sa.cols; ++q) A.set(sa.at(r, q, b), uni(rng));
    for (int64_t r = 0; r < sb.rows; ++r)
      for (int64_t q = 0; q < sb.cols; ++q) B.set(sb.at(r, q, b), uni(rng));
    if (c.beta != 0)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t q = 0; q < n; ++q) C.set(sc.at(r, q, b), uni(rng));
  }
  const int64_t bias_len = c.epilogue == CUBLASLT_EPILOGUE_BGRADB ? n : m, bias_stride = nb > 1 ? bias_len + 3 : 0;
  const int64_t aux_ld = 16, aux_stride = nb > 1 ? aux_ld * n : 0;
  Buffer bias(c.out, bias_len + (nb - 1) * bias_stride), aux(c.out, aux_ld * n + (nb - 1) * aux_stride);
  if (adds_bias(c.epilogue))
    for (size_t i = 0; i < bias.host.size() / width(c.out); ++i) bias.set(static_cast<int64_t>(i), uni(rng));
  if (aux_in(c.epilogue))
    for (size_t i = 0; i < aux.host.size() / width(c.out); ++i) aux.set(static_cast<int64_t>(i), 3 * uni(rng));
  A.upload();
  B.upload();
  C.upload();
  bias.upload();
  aux.upload();
  const std::vector<unsigned char> c_before = C.host;

  Lt lt;
  cublasLtMatmulDesc_t desc = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&desc, c.compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const int32_t opa = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const uint32_t epi = c.epilogue;
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS);
  if (adds_bias(c.epilogue) || bias_out(c.epilogue)) {
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.dev, sizeof bias.dev) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride,
                                           sizeof bias_stride) == CUBLAS_STATUS_SUCCESS);
  }
  if (aux_in(c.epilogue) || aux_out(c.epilogue)) {
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux.dev, sizeof aux.dev) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_stride,
                                           sizeof aux_stride) == CUBLAS_STATUS_SUCCESS);
  }
  cublasLtMatrixLayout_t la = layout(c.in, sa), lb = layout(c.in, sb), lc = layout(c.out, sc), ld = layout(c.out, sd);
  cublasLtMatmulPreference_t pref = nullptr;
  REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  const uint64_t ws_max = 1 << 20;
  REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_max,
                                               sizeof ws_max) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  REQUIRE(cublasLtMatmulAlgoGetHeuristic(lt.h, desc, la, lb, lc, ld, pref, 1, &result, &found) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(found == 1);
  Buffer workspace(CUDA_R_32F, static_cast<int64_t>(std::max<size_t>(result.workspaceSize, 4) / 4));
  REQUIRE(cublasLtMatmul(lt.h, desc, &c.alpha, A.dev, la, B.dev, lb, &c.beta, C.dev, lc, D.dev, ld, &result.algo,
                         workspace.dev, result.workspaceSize, nullptr) == CUBLAS_STATUS_SUCCESS);
  for (auto l : {la, lb, lc, ld}) CHECK(cublasLtMatrixLayoutDestroy(l) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmulPreferenceDestroy(pref) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmulDescDestroy(desc) == CUBLAS_STATUS_SUCCESS);

  const std::vector<unsigned char> d_before = D.host;
  const Buffer* aux_in_values = &aux;
  std::vector<unsigned char> aux_before = aux.host;
  D.download();
  bias.download();
  aux.download();
  if (!c.c_is_d) {
    Cbuf.download();
    CHECK_MESSAGE(Cbuf.host == c_before, "C was written");
  }
  (void)aux_in_values;

  auto input = [&](const Buffer& X, int64_t i) { return c.compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? tf32(X.at(i)) : X.at(i); };
  auto decode_before = [&](const std::vector<unsigned char>& bytes, int64_t i) {
    return decode(&bytes[static_cast<size_t>(i) * width(c.out)], c.out);
  };
  double worst = 0;
  auto compare = [&](const char* what, double got, double want) {
    const double err = std::fabs(got - want) / (tolerance(c.out) * std::fabs(want) + floor_of(c.out));
    worst = std::max(worst, std::isnan(err) ? 1e30 : err);
    if (!(err <= 1)) {
      FAIL_CHECK(what << ": got " << got << ", want " << want);
      return false;
    }
    return true;
  };
  bool ok = true;
  std::vector<double> colsum(static_cast<size_t>(m), 0.0);
  for (int64_t b = 0; b < nb && ok; ++b) {
    std::fill(colsum.begin(), colsum.end(), 0.0);
    for (int64_t j = 0; j < n && ok; ++j)
      for (int64_t i = 0; i < m && ok; ++i) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q)
          acc += input(A, c.ta ? sa.at(q, i, b) : sa.at(i, q, b)) * input(B, c.tb ? sb.at(j, q, b) : sb.at(q, j, b));
        double x = c.alpha * acc;
        if (c.beta != 0) x += c.beta * decode(&c_before[static_cast<size_t>(sc.at(i, j, b)) * width(c.out)], c.out);
        if (adds_bias(c.epilogue)) x += bias.at(b * bias_stride + i);
        const int64_t ai = b * aux_stride + i + j * aux_ld;
        if (aux_out(c.epilogue)) ok = ok && compare("aux", aux.at(ai), x);
        if (aux_in(c.epilogue)) x *= gelu_grad_ref(decode_before(aux_before, ai));
        if (gelu_out(c.epilogue)) x = gelu_ref(x);
        if (c.epilogue == CUBLASLT_EPILOGUE_RELU || c.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) x = std::max(x, 0.0);
        colsum[static_cast<size_t>(i)] += x;
        ok = ok && compare("D", D.at(sd.at(i, j, b)), x);
      }
    if (c.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD)
      for (int64_t i = 0; i < m && ok; ++i) ok = compare("bias gradient", bias.at(b * bias_stride + i), colsum[static_cast<size_t>(i)]);
    if (c.epilogue == CUBLASLT_EPILOGUE_BGRADA)
      for (int64_t i = 0; i < m && ok; ++i) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += input(A, c.ta ? sa.at(q, i, b) : sa.at(i, q, b));
        ok = compare("bias gradient of A", bias.at(b * bias_stride + i), s);
      }
    if (c.epilogue == CUBLASLT_EPILOGUE_BGRADB)
      for (int64_t j = 0; j < n && ok; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += input(B, c.tb ? sb.at(j, q, b) : sb.at(q, j, b));
        ok = compare("bias gradient of B", bias.at(b * bias_stride + j), s);
      }
  }
  // Nothing outside D's elements was written (the padding between columns and batches).
  std::vector<bool> inside(static_cast<size_t>(sd.elements()), false);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) inside[static_cast<size_t>(sd.at(i, j, b))] = true;
  size_t stray = 0;
  for (size_t e = 0; e < inside.size(); ++e)
    if (!inside[e] && std::memcmp(&D.host[e * width(c.out)], &d_before[e * width(c.out)], width(c.out)) != 0) ++stray;
  CHECK_MESSAGE(stray == 0, stray << " elements of D's padding written");
  return worst;
}

const cudaDataType kTypes[] = {CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F};

}  // namespace

TEST_CASE("emulated cuBLASLt: every transpose, order and batch in f32, bf16 and f16 matches the f64 reference") {
  uint64_t seed = 1;
  int cases = 0;
  for (cudaDataType in : kTypes)
    for (int wide = 0; wide < 2; ++wide) {
      if (in == CUDA_R_32F && wide) continue;  // f32 in: f32 out only
      const cudaDataType out = wide ? CUDA_R_32F : in;
      for (int t = 0; t < 4; ++t)
        for (cublasLtOrder_t order : {CUBLASLT_ORDER_COL, CUBLASLT_ORDER_ROW})
          for (int64_t batch : {1, 3}) {
            Case c;
            c.in = in;
            c.out = out;
            c.ta = t & 1;
            c.tb = t & 2;
            c.order = order;
            c.batch = batch;
            CHECK(run_case(c, seed++) <= 1.0);
            ++cases;
          }
    }
  CHECK(cases == 5 * 4 * 2 * 2);
}

TEST_CASE("emulated cuBLASLt: every epilogue, transposed or not, batched or not, in every dtype") {
  uint64_t seed = 100;
  for (cudaDataType t : kTypes)
    for (cublasLtEpilogue_t e :
         {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_RELU_BIAS,
          CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
          CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD,
          CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB})
      for (int variant = 0; variant < 3; ++variant) {
        Case c;
        c.in = c.out = t;
        c.epilogue = e;
        c.ta = variant == 1;
        c.tb = variant != 0;
        c.batch = variant == 2 ? 2 : 1;
        CHECK(run_case(c, seed++) <= 1.0);
      }
}

TEST_CASE("emulated cuBLASLt: alpha and beta, in place and with C != D (another ld), and TF32 inputs") {
  uint64_t seed = 500;
  for (cudaDataType t : kTypes)
    for (bool c_is_d : {true, false})
      for (cublasLtOrder_t order : {CUBLASLT_ORDER_COL, CUBLASLT_ORDER_ROW}) {
        Case c;
        c.in = c.out = t;
        c.alpha = 0.75f;
        c.beta = -1.5f;
        c.c_is_d = c_is_d;
        c.order = order;
        c.batch = 2;
        c.epilogue = order == CUBLASLT_ORDER_COL ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        c.tb = true;
        CHECK(run_case(c, seed++) <= 1.0);
      }
  Case c;
  c.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  c.k = 40;
  CHECK(run_case(c, seed++) <= 1.0);
}

namespace {

// A small f32 GEMM's descriptors, for the status checks.
struct Small {
  Lt lt;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  int64_t m, n, k;
  Small(int64_t m_, int64_t n_, int64_t k_, int64_t lda, cudaDataType t = CUDA_R_32F) : m(m_), n(n_), k(k_) {
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&la, t, m, k, lda) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&lb, t, k, n, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&ld, t, m, n, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  }
  ~Small() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(desc);
  }
  cublasStatus_t heuristic(cublasLtMatmulHeuristicResult_t& r, int& found) {
    return cublasLtMatmulAlgoGetHeuristic(lt.h, desc, la, lb, ld, ld, pref, 1, &r, &found);
  }
  void max_workspace(uint64_t bytes) {
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes) ==
            CUBLAS_STATUS_SUCCESS);
  }
};

}  // namespace

TEST_CASE("emulated cuBLASLt: the heuristic honours MAX_WORKSPACE_BYTES and the matmul its workspace") {
  const int64_t m = 8, n = 8, k = 64;  // k >= 2 max(m, n): the emulated split-K wants m n 4 bytes
  Small s(m, n, k, m);
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  REQUIRE(s.heuristic(r, found) == CUBLAS_STATUS_SUCCESS);  // default preference: no workspace
  CHECK(found == 1);
  CHECK(r.workspaceSize == 0);
  s.max_workspace(100);
  REQUIRE(s.heuristic(r, found) == CUBLAS_STATUS_SUCCESS);
  CHECK(r.workspaceSize <= 100);
  s.max_workspace(1 << 20);
  REQUIRE(s.heuristic(r, found) == CUBLAS_STATUS_SUCCESS);
  CHECK(r.workspaceSize == m * n * 4);
  CHECK(r.state == CUBLAS_STATUS_SUCCESS);

  Buffer A(CUDA_R_32F, m * k), B(CUDA_R_32F, k * n), D(CUDA_R_32F, m * n), ws(CUDA_R_32F, 2 * m * n);
  for (int64_t i = 0; i < m * k; ++i) A.set(i, 0.5);
  for (int64_t i = 0; i < k * n; ++i) B.set(i, 0.25);
  A.upload();
  B.upload();
  const float alpha = 1, beta = 0;
  // Less workspace than the algorithm wants: INVALID_VALUE ("workspaceSizeInBytes is less than
  // the workspace the configured algo requires").
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, &r.algo,
                       ws.dev, r.workspaceSize - 1, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  // A workspace that is not device memory fails as an illegal address would; one that is not
  // 256-byte aligned as a misaligned address.
  alignas(256) static float host_ws[m * n];
  (void)cudaGetLastError();
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, &r.algo,
                       host_ws, r.workspaceSize, nullptr) == CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, &r.algo,
                       static_cast<char*>(ws.dev) + 128, r.workspaceSize, nullptr) == CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(cudaGetLastError() == cudaErrorMisalignedAddress);
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, &r.algo,
                       ws.dev, r.workspaceSize, nullptr) == CUBLAS_STATUS_SUCCESS);
  D.download();
  for (int64_t i = 0; i < m * n; ++i) CHECK(D.at(i) == 0.5 * 0.25 * k);
  // algo NULL: an implicit heuristic query within the workspace given.
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("emulated cuBLASLt: invalid arguments return the documented status") {
  const int64_t m = 8, n = 4, k = 6;
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  {
    Small s(m, n, k, m - 1);  // ld < rows
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(found == 0);
  }
  {
    // Row order needs ld >= cols (k = 6), not rows: ld 7 is fine there, ld 5 is not.
    Small s(m, n, k, m - 1);
    const int32_t row = CUBLASLT_ORDER_ROW;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row) == CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_SUCCESS);
    const int64_t ld = k - 1;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld) == CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_INVALID_VALUE);
  }
  {
    Small s(m, n, k, m);
    // Dimensions that do not chain: op(A) is m x k, but B claims k + 1 rows.
    const uint64_t rows = k + 1;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(s.lb, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows) == CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_INVALID_VALUE);
  }
  {
    Small s(m, n, k, m);
    const int32_t batch = 2;  // A batched, B and D not
    REQUIRE(cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_INVALID_VALUE);
  }
  {
    Small s(m, n, k, m);
    // Attribute buffers of the wrong size, unknown attributes, NULL and destroyed handles.
    const int64_t wide = CUBLAS_OP_T;
    CHECK(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4) == CUBLAS_STATUS_INVALID_VALUE);
    const uint32_t ws32 = 1024;
    CHECK(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws32, sizeof ws32) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasLtMatrixLayoutSetAttribute(s.la, static_cast<cublasLtMatrixLayoutAttribute_t>(99), &ws32, 4) ==
          CUBLAS_STATUS_INVALID_VALUE);
    int32_t got = -1;
    size_t written = 0;
    const int32_t opt = CUBLAS_OP_T;
    REQUIRE(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opt, sizeof opt) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmulDescGetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSB, &got, sizeof got, &written) ==
          CUBLAS_STATUS_SUCCESS);
    CHECK(got == CUBLAS_OP_T);
    CHECK(written == sizeof got);
    CHECK(cublasLtMatmulAlgoGetHeuristic(nullptr, s.desc, s.la, s.lb, s.ld, s.ld, s.pref, 1, &r, &found) ==
          CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(cublasLtMatmulAlgoGetHeuristic(s.lt.h, s.desc, s.la, s.lb, s.ld, s.ld, s.pref, 0, &r, &found) ==
          CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatmulDesc_t gone = nullptr;
    REQUIRE(cublasLtMatmulDescCreate(&gone, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescDestroy(gone) == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasLtMatmulAlgoGetHeuristic(s.lt.h, gone, s.la, s.lb, s.ld, s.ld, s.pref, 1, &r, &found) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(cublasLtMatmulDescDestroy(gone) == CUBLAS_STATUS_INVALID_VALUE);
  }
}

TEST_CASE("emulated cuBLASLt: in place (C == D) needs one layout for both; missing scalars and operands are INVALID_VALUE") {
  const int64_t m = 8, n = 4, k = 6;
  Small s(m, n, k, m);
  Buffer A(CUDA_R_32F, m * k), B(CUDA_R_32F, k * n), D(CUDA_R_32F, (m + 8) * n);
  A.upload();
  B.upload();
  cublasLtMatrixLayout_t wide = nullptr;  // m x n with ld m + 8: another layout of the same matrix
  REQUIRE(cublasLtMatrixLayoutCreate(&wide, CUDA_R_32F, m, n, m + 8) == CUBLAS_STATUS_SUCCESS);
  const float alpha = 1, beta = 1, zero = 0;
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, D.dev, wide, D.dev, s.ld, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, nullptr, s.ld, D.dev, s.ld, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);  // beta != 0 reads C
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &zero, nullptr, s.ld, D.dev, s.ld, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS);  // beta == 0 does not
  CHECK(cublasLtMatmul(s.lt.h, s.desc, nullptr, A.dev, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, nullptr, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtMatrixLayoutDestroy(wide) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("emulated cuBLASLt: combinations the library refuses are NOT_SUPPORTED, which the backend falls back on") {
  const int64_t m = 8, n = 4, k = 6;
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  {
    Small s(m, n, k, m);
    const uint32_t one = 1;  // an f32 operand only 1-byte aligned
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &one, sizeof one) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(found == 0);
    const uint32_t four = 4;
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four,
                                                 sizeof four) == CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_SUCCESS);
  }
  {
    Small s(m, n, k, m);
    const int32_t bf16 = CUDA_R_16BF;  // A and B of different types
    REQUIRE(cublasLtMatrixLayoutSetAttribute(s.lb, CUBLASLT_MATRIX_LAYOUT_TYPE, &bf16, sizeof bf16) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    Small s(m, n, k, m);
    const int32_t compute = CUBLAS_COMPUTE_16F;
    REQUIRE(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute, sizeof compute) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    Small s(m, n, k, m, CUDA_R_16BF);  // a bias of another type than D's
    const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    const int32_t f32 = CUDA_R_32F;
    REQUIRE(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f32, sizeof f32) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    Small s(m, n, k, m);
    const uint32_t epi = CUBLASLT_EPILOGUE_RELU_AUX;  // the bit-mask aux is not emulated
    REQUIRE(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {
    Small s(m, n, k, m);
    const uint32_t epi = CUBLASLT_EPILOGUE_GELU_AUX;
    const int64_t aux_ld = 12;  // >= m but not divisible by 8
    REQUIRE(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_INVALID_VALUE);
  }
}

TEST_CASE("emulated cuBLASLt: an algorithm chosen for aligned pointers refuses misaligned ones; operands past their allocation fail") {
  const int64_t m = 8, n = 4, k = 6;
  Small s(m, n, k, m);
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  const uint32_t sixteen = 16;
  for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(s.pref, a, &sixteen, sizeof sixteen) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(s.heuristic(r, found) == CUBLAS_STATUS_SUCCESS);
  Buffer A(CUDA_R_32F, m * k + 1), B(CUDA_R_32F, k * n), D(CUDA_R_32F, m * n);
  A.upload();
  B.upload();
  const float alpha = 1, beta = 0;
  auto* a4 = static_cast<float*>(A.dev) + 1;  // 4-byte aligned only
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, a4, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, &r.algo, nullptr,
                       0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  // B's m x k elements from one element before its end: they leave the allocation.
  (void)cudaGetLastError();
  auto* b_late = static_cast<float*>(B.dev) + 4;
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, b_late, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, &r.algo,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
  std::vector<float> host_d(static_cast<size_t>(m * n));
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, host_d.data(), s.ld, host_d.data(),
                       s.ld, &r.algo, nullptr, 0, nullptr) == CUBLAS_STATUS_EXECUTION_FAILED);
  (void)cudaGetLastError();
}

TEST_CASE("emulated cuBLAS: cublasGemmEx (the backend's fallback) matches the reference at any alignment") {
  const int m = 5, n = 3, k = 7;
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate_v2(&h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream_v2(h, nullptr) == CUBLAS_STATUS_SUCCESS);
  for (cudaDataType t : kTypes) {
    INFO(type_name(t));
    Buffer A(t, k * m + 1), B(t, n * k), C(t, m * n + 1);  // A^T stored k x m, B^T stored n x k
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> uni(-1, 1);
    for (int i = 0; i < k * m + 1; ++i) A.set(i, uni(rng));
    for (int i = 0; i < n * k; ++i) B.set(i, uni(rng));
    A.upload();
    B.upload();
    const float alpha = 2, beta = 0;
    auto* a_odd = static_cast<unsigned char*>(A.dev) + width(t);  // one element in: odd alignment for 16-bit types
    auto* c_odd = static_cast<unsigned char*>(C.dev) + width(t);
    REQUIRE(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_T, m, n, k, &alpha, a_odd, t, k, B.dev, t, n, &beta, c_odd, t, m,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    C.download();
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double want = 0;
        for (int q = 0; q < k; ++q) want += A.at(1 + q + i * k) * B.at(j + q * n);
        want *= alpha;
        const double got = C.at(1 + i + j * m);
        CHECK(std::fabs(got - want) <= tolerance(t) * std::fabs(want) + floor_of(t));
      }
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A.dev, t, m - 1, B.dev, t, k, &beta, C.dev, t, m,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  }
  CHECK(cublasDestroy_v2(h) == CUBLAS_STATUS_SUCCESS);
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
}

TEST_CASE("emulated number formats: bf16 and f16 round once to nearest even, f16 subnormals and overflow included") {
  CHECK(encode_bf16(1.0) == 0x3f80);
  CHECK(encode_f16(1.0) == 0x3c00);
  CHECK(encode_f16(65504.0) == 0x7bff);
  CHECK(encode_f16(65519.0) == 0x7bff);
  CHECK(encode_f16(65520.0) == 0x7c00);  // the tie rounds to even: infinity
  CHECK(encode_f16(std::ldexp(1.0, -24)) == 0x0001);
  CHECK(encode_f16(std::ldexp(1.0, -25)) == 0x0000);  // a tie with 0: even
  CHECK(encode_f16(std::ldexp(3.0, -26)) == 0x0001);
  CHECK(encode_f16(-2.0) == 0xc000);
  CHECK(encode_bf16(1.0 + std::ldexp(1.0, -8)) == 0x3f80);   // tie: to even
  CHECK(encode_bf16(1.0 + std::ldexp(3.0, -8)) == 0x3f82);   // tie: to even (up)
  // Once from double, not twice through f32: 1 + 2^-8 + 2^-30 rounds up, though its f32 rounding is
  // the tie 1 + 2^-8 that would round down.
  CHECK(encode_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)) == 0x3f81);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double f = decode_f16(static_cast<uint16_t>(h)), b = decode_bf16(static_cast<uint16_t>(h));
    if (!std::isnan(f)) REQUIRE(encode_f16(f) == h);
    if (!std::isnan(b)) REQUIRE(encode_bf16(b) == h);
  }
  CHECK(round_tf32(1.0f + std::ldexp(1.0f, -11)) == 1.0f);
  CHECK(round_tf32(1.0f + std::ldexp(3.0f, -11)) == 1.0f + std::ldexp(1.0f, -9));
}

TEST_CASE("emulated cuBLASLt: a bias under 16-byte alignment is declined by the heuristic and faults in the matmul") {
  const int64_t m = 8, n = 4, k = 6;
  Small s(m, n, k, m);
  Buffer A(CUDA_R_32F, m * k), B(CUDA_R_32F, k * n), D(CUDA_R_32F, m * n), bias(CUDA_R_32F, m + 2);
  A.upload();
  B.upload();
  const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
  REQUIRE(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS);
  auto set_bias = [&](void* p) {
    REQUIRE(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p) ==
            CUBLAS_STATUS_SUCCESS);
  };
  void* aligned16 = bias.dev;
  void* aligned8 = static_cast<char*>(bias.dev) + 8;
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  set_bias(aligned8);
  CHECK(s.heuristic(r, found) == CUBLAS_STATUS_NOT_SUPPORTED);
  set_bias(aligned16);
  REQUIRE(s.heuristic(r, found) == CUBLAS_STATUS_SUCCESS);
  const float alpha = 1, beta = 0;
  (void)cudaGetLastError();
  set_bias(aligned8);  // the algorithm chosen for the aligned bias, run with the other
  CHECK(cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, &r.algo,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(cudaGetLastError() == cudaErrorMisalignedAddress);
}

TEST_CASE("emulated cuBLASLt: DL_CUDA_EMU_LT_MIN_ALIGNMENT=16 declines less aligned operands" * doctest::skip()) {
  // Run by the next case in a child process with the variable set.
  const int64_t m = 8, n = 4, k = 6;
  Small s(m, n, k, m);
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    const uint32_t four = 4, sixteen = 16;
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(s.pref, a, &four, sizeof four) == CUBLAS_STATUS_SUCCESS);
    CHECK(s.heuristic(r, found) == CUBLAS_STATUS_NOT_SUPPORTED);
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(s.pref, a, &sixteen, sizeof sixteen) == CUBLAS_STATUS_SUCCESS);
  }
  CHECK(s.heuristic(r, found) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("emulated cuBLASLt: DL_CUDA_EMU_LT_MIN_ALIGNMENT raises the alignment the heuristic asks for") {
  auto run_child_case = [](const char* value) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("DL_CUDA_EMU_LT_MIN_ALIGNMENT", value, 1);
      if (!std::freopen("/dev/null", "w", stdout) || !std::freopen("/dev/null", "w", stderr)) _exit(126);
      execl("/proc/self/exe", "test_cuda_emulator", "--no-skip", "-tc=emulated cuBLASLt: DL_CUDA_EMU_LT_MIN_ALIGNMENT=16*",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  CHECK(run_child_case("16") == 0);
  CHECK(run_child_case("4") != 0);  // the child's checks do fail without it
}

TEST_CASE("emulated cuBLASLt: after a sticky launch error (a lost context) every matmul fails") {
  const pid_t pid = fork();
  if (pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);
    Small s(8, 4, 6, 8);
    Buffer A(CUDA_R_32F, 48), B(CUDA_R_32F, 24), D(CUDA_R_32F, 32);
    const float alpha = 1, beta = 0;
    auto matmul = [&] {
      return cublasLtMatmul(s.lt.h, s.desc, &alpha, A.dev, s.la, B.dev, s.lb, &beta, D.dev, s.ld, D.dev, s.ld, nullptr,
                            nullptr, 0, nullptr);
    };
    const bool before = matmul() == CUBLAS_STATUS_SUCCESS;
    record_launch_error(cudaErrorIllegalAddress, true);
    const bool after = matmul() == CUBLAS_STATUS_EXECUTION_FAILED;
    _exit(before && after ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}
