// The CUDA backend: the front's checked ops (backend.cpp) on one GPU, index tensors staged from
// the host, GEMMs through cuBLASLt, and dispatch to the kernels of kernels/*.cu.
#include "dl/device/cuda/cuda_backend.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "dl/device/cuda/arena.hpp"
#include "dl/device/cuda/cuda_check.hpp"
#include "dl/device/cuda/kernels.hpp"
#include "dl/core/half.hpp"
#include "dl/device/cuda/emulation.hpp"

namespace dl {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt workspace (32 MiB suits Hopper)

std::string desc(const Tensor& t) { return t.defined() ? t.describe() + " on " + t.device().name() : "-"; }

// Largest power of two (at most 256) dividing the address: what cuBLASLt is told to expect.
uint32_t alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al >>= 1;
  return al;
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: throw_runtime("matmul: the CUDA backend takes f32, bf16 or f16, got ", dtype_name(dt));
  }
}

size_t arena_bytes_for(const CudaDeviceInfo& info, const CudaProcessOptions& process) {
  if (process.arena_bytes) return *process.arena_bytes;
  // Ranks of this node that land on this GPU share it (cuda_device_for_this_process).
  const int n = std::max(1, info.device_count);
  const int sharers = std::max(1, (process.local_world + n - 1 - info.device) / n);
  // Leave room for the CUDA context's own growth, cuBLAS, cuDNN and NCCL.
  const double headroom = 1.5 * (1u << 30);
  double usable = std::max(0.0, 0.9 * static_cast<double>(info.free_bytes) - headroom);
  return static_cast<size_t>(usable / sharers);
}

CudaProcessOptions& process_options() {
  static CudaProcessOptions options;
  return options;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct CudaBackend::Impl {
  CudaDeviceInfo info;
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;  // fallback GEMM for operands cuBLASLt declines (odd alignment)
  std::shared_ptr<cuda::DeviceArena> arena;
  void* workspace = nullptr;
  double* sum_result = nullptr;   // [1]
  double* sum_partial = nullptr;  // [kSumBlocks]
  size_t own_bytes = 0;            // the arena's bytes the three above take
  bool sync_each_op = false;
  // Heuristic choices per GEMM shape (cuBLASLt's heuristic query costs more than the GEMM for
  // small shapes).
  using AlgoKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, bool,
                             uint32_t, uint32_t, uint32_t>;
  std::map<AlgoKey, cublasLtMatmulHeuristicResult_t> algos;
  std::mutex algo_mu;

  Tensor alloc(Shape shape, DType dtype, const char* what) {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    void* p = arena->allocate(bytes, str(what, " ", dtype_name(dtype), shape_str(shape)));
    std::shared_ptr<cuda::DeviceArena> a = arena;
    auto storage = std::make_shared<Storage>(p, bytes, Device::cuda(device), [a](void* q) { a->release(q); });
    return Tensor(std::move(storage), 0, std::move(shape), dtype);
  }

  void after(const char* op) {
    if (sync_each_op) DL_CUDA_CALL(cudaStreamSynchronize(stream), op, " (DL_CUDA_SYNC=1)");
  }

  // cuBLASLt: D[m,n] = op(A)[m,k] op(B)[k,n] (+ beta D) (+ bias[m]), column-major.
  void gemm(const char* op, DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda,
            const void* B, int64_t ldb, void* D, int64_t ldd, float beta, const void* bias);
};

void CudaBackend::Impl::gemm(const char* op, DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                             const void* A, int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd, float beta,
                             const void* bias) {
  if (m == 0 || n == 0) return;
  const float alpha = 1.0f;
  auto ctx = [&] {
    return str(op, " (GEMM m=", m, " n=", n, " k=", k, ", ", dtype_name(dt), ta ? ", A transposed" : "",
               tb ? ", B transposed" : "", bias ? ", bias epilogue" : "", ")");
  };
  if (k == 0) {  // an empty sum: D = beta D (+ bias), which cuBLASLt may refuse
    throw_runtime(ctx(), ": inner dimension 0 is not supported");
  }
  const cudaDataType_t t = cuda_type(dt);
  const uint32_t al_a = alignment_of(A), al_b = alignment_of(B), al_d = alignment_of(D);
  // The bias epilogue wants an aligned vector; an unaligned one is added by a kernel afterwards.
  const bool bias_epilogue = bias && alignment_of(bias) >= 16;

  cublasLtMatmulDesc_t op_desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  struct Cleanup {
    cublasLtMatmulDesc_t& o;
    cublasLtMatrixLayout_t &a, &b, &d;
    cublasLtMatmulPreference_t& p;
    ~Cleanup() {
      if (p) cublasLtMatmulPreferenceDestroy(p);
      if (d) cublasLtMatrixLayoutDestroy(d);
      if (b) cublasLtMatrixLayoutDestroy(b);
      if (a) cublasLtMatrixLayoutDestroy(a);
      if (o) cublasLtMatmulDescDestroy(o);
    }
  } cleanup{op_desc, la, lb, ld, pref};

  DL_CUBLAS_CALL(cublasLtMatmulDescCreate(&op_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), ctx());
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  DL_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), ctx());
  DL_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), ctx());
  if (bias_epilogue) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    DL_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), ctx());
    DL_CUBLAS_CALL(
        cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), ctx());
    const cudaDataType_t bt = t;
    DL_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(op_desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
                   ctx());
  }
  // Stored shapes (before the op): A is m x k, or k x m when transposed; B likewise.
  DL_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&la, t, ta ? k : m, ta ? m : k, lda), ctx());
  DL_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&lb, t, tb ? n : k, tb ? k : n, ldb), ctx());
  DL_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&ld, t, m, n, ldd), ctx());

  AlgoKey key{ta, tb, m, n, k, lda, ldb, ldd, static_cast<int>(dt), bias_epilogue, beta != 0.0f, al_a, al_b, al_d};
  cublasLtMatmulHeuristicResult_t chosen{};
  bool have = false;
  {
    std::lock_guard<std::mutex> lock(algo_mu);
    auto it = algos.find(key);
    if (it != algos.end()) {
      chosen = it->second;
      have = true;
    }
  }
  if (!have) {
    DL_CUBLAS_CALL(cublasLtMatmulPreferenceCreate(&pref), ctx());
    const uint64_t ws = kWorkspaceBytes;
    DL_CUBLAS_CALL(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), ctx());
    DL_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                        sizeof al_a),
                   ctx());
    DL_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                        sizeof al_b),
                   ctx());
    DL_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                        sizeof al_d),
                   ctx());
    DL_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                        sizeof al_d),
                   ctx());
    int found = 0;
    // NOT_SUPPORTED (or no result) means no cuBLASLt kernel fits: the cuBLAS fallback below.
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op_desc, la, lb, ld, ld, pref, 1, &chosen, &found);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
      cuda::fail_cublas(st, "cublasLtMatmulAlgoGetHeuristic", ctx());
    have = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (have) {
      std::lock_guard<std::mutex> lock(algo_mu);
      algos[key] = chosen;
    }
  }

  if (have) {
    DL_CUBLAS_CALL(cublasLtMatmul(lt, op_desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &chosen.algo, workspace,
                                  kWorkspaceBytes, stream),
                   ctx());
  } else {
    // No cuBLASLt kernel for these alignments: plain cuBLAS takes any.
    DL_CUBLAS_CALL(cublasGemmEx(blas, opa, opb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha,
                                A, t, static_cast<int>(lda), B, t, static_cast<int>(ldb), &beta, D, t,
                                static_cast<int>(ldd), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   ctx(), " (cuBLAS fallback: alignments A ", al_a, ", B ", al_b, ", D ", al_d, ")");
  }
  // The bias goes in by itself where the epilogue was not asked for or cuBLASLt declined the
  // GEMM and cublasGemmEx (no epilogue) ran instead.
  if (bias && (!bias_epilogue || !have)) cuda::bias_add(dt, D, bias, n, m, stream);
}

// ---------------------------------------------------------------------------------------------


void set_cuda_process_options(CudaProcessOptions options) { process_options() = std::move(options); }
const CudaProcessOptions& cuda_process_options() { return process_options(); }

CudaBackend::CudaBackend(int device, const CudaProcessOptions& options)
    : Backend({DType::f32, DType::bf16, DType::f16}), impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.info = cuda_probe();
  if (!I.info.usable) throw_usage("no usable CUDA GPU: ", I.info.reason);
  if (device < 0 || device >= I.info.device_count)
    throw_usage("CUDA device ", device, " does not exist (", I.info.device_count, " found)");
  I.device = device;
  I.info.device = device;
  I.sync_each_op = options.sync_each_op;
  DL_CUDA_CALL(cudaSetDevice(device), "selecting cuda:", device);
  cudaDeviceProp prop{};
  DL_CUDA_CALL(cudaGetDeviceProperties(&prop, device), "reading the properties of cuda:", device);
  I.info.name = prop.name;
  I.info.cc_major = prop.major;
  I.info.cc_minor = prop.minor;
  I.info.multiprocessors = prop.multiProcessorCount;
  DL_CUDA_CALL(cudaMemGetInfo(&I.info.free_bytes, &I.info.total_bytes), "reading free memory of cuda:", device);
  if (prop.major < 8)
    throw_usage("cuda:", device, " (", prop.name, ", sm_", prop.major, prop.minor,
                ") is too old for the bf16 kernels: the CUDA backend needs compute capability 8.0 or newer");
  DL_CUDA_CALL(cudaStreamCreateWithFlags(&I.stream, cudaStreamNonBlocking), "creating the CUDA stream");
  DL_CUBLAS_CALL(cublasLtCreate(&I.lt), "creating the cuBLASLt handle");
  DL_CUBLAS_CALL(cublasCreate(&I.blas), "creating the cuBLAS handle");
  DL_CUBLAS_CALL(cublasSetStream(I.blas, I.stream), "binding the cuBLAS handle to the stream");
  const size_t capacity = arena_bytes_for(I.info, options);
  I.arena = std::make_shared<cuda::DeviceArena>(
      device, capacity, options.fenced_arena ? cuda::DeviceArena::Backing::fenced : cuda::DeviceArena::Backing::packed);
  cuda::describe_faults_with(I.arena.get());
  I.workspace = I.arena->allocate(kWorkspaceBytes, "the cuBLASLt workspace");
  I.sum_result = static_cast<double*>(I.arena->allocate(sizeof(double), "the sum result"));
  I.sum_partial = static_cast<double*>(I.arena->allocate(sizeof(double) * cuda::kSumBlocks, "the sum partials"));
  I.own_bytes = I.arena->stats().in_use;
}

CudaBackend::~CudaBackend() {
  Impl& I = *impl_;
  // Errors are ignored: at process exit the runtime may be going away first.
  if (I.stream) (void)cudaStreamSynchronize(I.stream);
  cuda::describe_faults_with(nullptr);
  if (I.arena) {
    I.arena->release(I.workspace);
    I.arena->release(I.sum_result);
    I.arena->release(I.sum_partial);
  }
  if (I.blas) (void)cublasDestroy(I.blas);
  if (I.lt) (void)cublasLtDestroy(I.lt);
  if (I.stream) (void)cudaStreamDestroy(I.stream);
}

Device CudaBackend::device() const { return Device::cuda(impl_->device); }
std::string CudaBackend::name() const { return "cuda"; }
const CudaDeviceInfo& CudaBackend::info() const { return impl_->info; }
bool CudaBackend::syncs_each_op() const { return impl_->sync_each_op; }
CudaArenaStats CudaBackend::arena_stats() const {
  CudaArenaStats s = impl_->arena->stats();
  s.backend_own = impl_->own_bytes;
  return s;
}

void CudaBackend::synchronize(const char* what) {
  DL_CUDA_CALL(cudaStreamSynchronize(impl_->stream), what);
}

Tensor CudaBackend::empty(Shape shape, DType dtype) { return impl_->alloc(std::move(shape), dtype, "tensor"); }

void CudaBackend::zero(Tensor& t) {
  if (!t.defined() || t.numel() == 0) return;
  if (t.device().is_cpu()) {
    t.zero_();
    return;
  }
  DL_CUDA_CALL(cudaMemsetAsync(t.raw(), 0, t.nbytes(), impl_->stream), "zero ", desc(t));
  impl_->after("zero");
}

void CudaBackend::copy_impl(Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    dst.copy_from(src);
    return;
  }
  // Pageable host memory: a host-to-device copy returns once the source is staged; a
  // device-to-host copy is waited for, so the host can read the result at once.
  DL_CUDA_CALL(cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), cudaMemcpyDefault, impl_->stream), "copy ",
               desc(dst), " <- ", desc(src));
  if (dst.device().is_cpu()) DL_CUDA_CALL(cudaStreamSynchronize(impl_->stream), "copy ", desc(dst), " <- ", desc(src));
  impl_->after("copy");
}

void* CudaBackend::native_stream() const { return impl_->stream; }

void CudaBackend::convert_impl(Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) {
    copy_impl(dst, src);
    return;
  }
  cuda::convert(dst.dtype(), dst.raw(), src.dtype(), src.raw(), src.numel(), impl_->stream);
  impl_->after("convert");
}

// ---------------------------------------------------------------------------------------------
// Index tensors.

namespace {

// An i32 index tensor (tokens, targets) on the device: uploaded when it is on the host. `host`
// gets a host copy either way (for the value checks, Backend::check_token_ids and check_targets).
struct Index {
  Tensor host;
  Tensor dev;
  const int32_t* ptr() const { return static_cast<const int32_t*>(dev.raw()); }
};

}  // namespace

// Stages index tensors; a free function would need the Impl, so these live here.
static Index stage_index(CudaBackend::Impl& I, CudaBackend& be, const Tensor& t, const char* op) {
  Index ix;
  if (t.device().is_cpu()) {
    ix.host = t;
    ix.dev = I.alloc(t.shape(), DType::i32, op);
    if (t.numel() > 0)
      DL_CUDA_CALL(cudaMemcpyAsync(ix.dev.raw(), t.raw(), t.nbytes(), cudaMemcpyHostToDevice, I.stream), op,
                   ": uploading ", desc(t));
  } else {
    ix.dev = t;
    ix.host = Tensor::empty(t.shape(), DType::i32);
    be.copy(ix.host, t);
  }
  return ix;
}

// An i32 output (correct, argmax): written on the device, then copied to the host tensor if
// that is where the caller keeps it.
static Tensor index_output(CudaBackend::Impl& I, const Tensor& t, const char* op) {
  return t.device().is_cpu() ? I.alloc(t.shape(), DType::i32, op) : t;
}
static void finish_index_output(CudaBackend::Impl& I, Tensor& t, const Tensor& dev, const char* op) {
  if (!t.device().is_cpu() || t.numel() == 0) return;
  DL_CUDA_CALL(cudaMemcpyAsync(t.raw(), dev.raw(), t.nbytes(), cudaMemcpyDeviceToHost, I.stream), op,
               ": downloading ", desc(t));
  DL_CUDA_CALL(cudaStreamSynchronize(I.stream), op, ": downloading ", desc(t));
}

// ---------------------------------------------------------------------------------------------
// Encoder.

void CudaBackend::encoder_forward_impl(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                       int64_t vocab_start, int64_t vocab_size) {
  const char* op = "encoder_forward";
  const int64_t B = tokens.size(0), T = tokens.size(1), C = wte.size(1);
  Index ix = stage_index(*impl_, *this, tokens, op);
  check_token_ids(ix.host, vocab_size);
  cuda::encoder_forward(out.dtype(), out.raw(), ix.ptr(), wte.raw(), wpe.defined() ? wpe.raw() : nullptr, B, T, C,
                        vocab_start, wte.size(0), impl_->stream);
  impl_->after(op);
}

void CudaBackend::encoder_backward_impl(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                        int64_t vocab_start) {
  const char* op = "encoder_backward";
  const int64_t B = tokens.size(0), T = tokens.size(1), C = dwte.size(1), rows = dwte.size(0);
  Index ix = stage_index(*impl_, *this, tokens, op);
  // Group the batch rows by token row (counting sort, rows ascending within a token), so one
  // block per distinct token adds its rows in a fixed order.
  const int32_t* t = ix.host.data<int32_t>();
  const int64_t BT = B * T;
  std::vector<int32_t> row_ids, offsets, rows_of(static_cast<size_t>(BT));
  {
    std::map<int64_t, int32_t> per_row;  // token row -> number of batch rows
    for (int64_t i = 0; i < BT; ++i) {
      const int64_t r = static_cast<int64_t>(t[i]) - vocab_start;
      if (r >= 0 && r < rows) ++per_row[r];
    }
    std::map<int64_t, int32_t> start;
    int32_t off = 0;
    for (const auto& [r, n] : per_row) {
      row_ids.push_back(static_cast<int32_t>(r));
      offsets.push_back(off);
      start[r] = off;
      off += n;
    }
    offsets.push_back(off);
    rows_of.resize(static_cast<size_t>(off));
    for (int64_t i = 0; i < BT; ++i) {
      const int64_t r = static_cast<int64_t>(t[i]) - vocab_start;
      if (r >= 0 && r < rows) rows_of[static_cast<size_t>(start[r]++)] = static_cast<int32_t>(i);
    }
  }
  const int64_t n_unique = static_cast<int64_t>(row_ids.size());
  if (n_unique > 0) {
    // One upload: row_ids | offsets | rows_of.
    std::vector<int32_t> packed;
    packed.reserve(row_ids.size() + offsets.size() + rows_of.size());
    packed.insert(packed.end(), row_ids.begin(), row_ids.end());
    packed.insert(packed.end(), offsets.begin(), offsets.end());
    packed.insert(packed.end(), rows_of.begin(), rows_of.end());
    Tensor groups = impl_->alloc({static_cast<int64_t>(packed.size())}, DType::i32, "encoder_backward groups");
    DL_CUDA_CALL(cudaMemcpyAsync(groups.raw(), packed.data(), packed.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                 impl_->stream),
                 op, ": uploading the token groups of ", desc(tokens));
    // The upload reads `packed` from pageable memory, staged before the call returns.
    const int32_t* g = static_cast<const int32_t*>(groups.raw());
    cuda::encoder_backward_wte(dout.dtype(), dwte.raw(), dout.raw(), g, g + n_unique, g + 2 * n_unique + 1, n_unique,
                               C, impl_->stream);
  }
  if (dwpe.defined()) cuda::encoder_backward_wpe(dout.dtype(), dwpe.raw(), dout.raw(), B, T, C, impl_->stream);
  impl_->after(op);
}

// ---------------------------------------------------------------------------------------------
// LayerNorm.

void CudaBackend::layernorm_forward_impl(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                                         const Tensor& weight, const Tensor& bias) {
  const char* op = "layernorm_forward";
  const int64_t C = inp.size(-1), N = inp.numel() / C;
  cuda::layernorm_forward(inp.dtype(), out.raw(), mean.raw(), rstd.raw(), inp.raw(), weight.raw(), bias.raw(), N, C,
                          impl_->stream);
  impl_->after(op);
}

void CudaBackend::layernorm_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                          const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                          const Tensor& rstd, bool accumulate) {
  const char* op = "layernorm_backward";
  const int64_t C = inp.size(-1), N = inp.numel() / C;
  const DType dt = inp.dtype();
  Tensor stats = impl_->alloc({2 * N}, DType::f32, "layernorm_backward statistics");
  const int64_t chunks = cuda::column_chunks(N);
  Tensor partial = impl_->alloc({chunks * 2 * C}, DType::f32, "layernorm_backward partial sums");
  float* mean32 = static_cast<float*>(stats.raw());
  float* rstd32 = mean32 + N;
  cuda::layernorm_backward_input(dt, dinp.raw(), mean32, rstd32, dout.raw(), inp.raw(), weight.raw(), mean.raw(),
                                 rstd.raw(), /*recompute_stats=*/dt != DType::f32, N, C, accumulate, impl_->stream);
  float* p = static_cast<float*>(partial.raw());
  cuda::layernorm_backward_params_partial(dt, p, dout.raw(), inp.raw(), mean32, rstd32, N, C, impl_->stream);
  cuda::column_sum_finish(dt, dweight.raw(), p, chunks, C, 2 * C, impl_->stream);
  cuda::column_sum_finish(dt, dbias.raw(), p + C, chunks, C, 2 * C, impl_->stream);
  impl_->after(op);
}

// ---------------------------------------------------------------------------------------------
// Matmul. Row-major X[N,IC] is column-major X^T with ld IC, so out^T[OC,N] = W' inp^T where W'
// is the weight read column-major: [OC,IC] for in_out ([IC,OC] row-major), or the transpose of
// [IC,OC] for out_in ([OC,IC] row-major).

static void matmul_dims(const Tensor& inp, const Tensor& weight, WeightLayout layout, int64_t& N, int64_t& IC,
                        int64_t& OC) {
  IC = inp.size(-1);
  N = inp.numel() / IC;
  OC = layout == WeightLayout::in_out ? weight.size(1) : weight.size(0);
}

void CudaBackend::matmul_forward_impl(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                      WeightLayout layout) {
  const char* op = "matmul_forward";
  int64_t N, IC, OC;
  matmul_dims(inp, weight, layout, N, IC, OC);
  const bool in_out = layout == WeightLayout::in_out;
  impl_->gemm(op, inp.dtype(), /*ta=*/!in_out, /*tb=*/false, OC, N, IC, weight.raw(), in_out ? OC : IC, inp.raw(), IC,
              out.raw(), OC, 0.0f, bias.defined() ? bias.raw() : nullptr);
  impl_->after(op);
}

void CudaBackend::matmul_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                       const Tensor& inp, const Tensor& weight, WeightLayout layout,
                                       bool accumulate) {
  const char* op = "matmul_backward";
  int64_t N, IC, OC;
  matmul_dims(inp, weight, layout, N, IC, OC);
  const DType dt = inp.dtype();
  const bool in_out = layout == WeightLayout::in_out;
  if (dinp.defined()) {
    // dinp^T[IC,N] = W'^T dout^T
    impl_->gemm("matmul_backward (input gradient)", dt, /*ta=*/in_out, false, IC, N, OC, weight.raw(),
                in_out ? OC : IC, dout.raw(), OC, dinp.raw(), IC, accumulate ? 1.0f : 0.0f, nullptr);
  }
  if (in_out) {
    // dW as column-major [OC,IC] += dout^T[OC,N] inp[N,IC]
    impl_->gemm("matmul_backward (weight gradient)", dt, false, true, OC, IC, N, dout.raw(), OC, inp.raw(), IC,
                dweight.raw(), OC, 1.0f, nullptr);
  } else {
    // dW as column-major [IC,OC] += inp^T[IC,N] dout[N,OC]
    impl_->gemm("matmul_backward (weight gradient)", dt, false, true, IC, OC, N, inp.raw(), IC, dout.raw(), OC,
                dweight.raw(), IC, 1.0f, nullptr);
  }
  if (dbias.defined()) {
    const int64_t chunks = cuda::column_chunks(N);
    Tensor partial = impl_->alloc({chunks * OC}, DType::f32, "matmul_backward bias partial sums");
    cuda::column_sum_partial(dt, static_cast<float*>(partial.raw()), dout.raw(), N, OC, impl_->stream);
    cuda::column_sum_finish(dt, dbias.raw(), static_cast<const float*>(partial.raw()), chunks, OC, OC, impl_->stream);
  }
  impl_->after(op);
}

// ---------------------------------------------------------------------------------------------
// Attention.

Shape CudaBackend::attention_state_shape(int64_t B, int64_t T, int64_t C, int n_head) const {
  return {B, n_head, 2 * T};
}

static void attention_dims(const Tensor& qkv, int64_t& B, int64_t& T, int64_t& C) {
  B = qkv.size(0);
  T = qkv.size(1);
  C = qkv.size(2) / 3;
}

void CudaBackend::attention_forward_impl(Tensor& out, Tensor& state, const Tensor& qkv, int n_head) {
  const char* op = "attention_forward";
  int64_t B, T, C;
  attention_dims(qkv, B, T, C);
  cuda::attention_forward(qkv.dtype(), out.raw(), static_cast<float*>(state.raw()), qkv.raw(), B, T, C, n_head,
                          impl_->stream);
  impl_->after(op);
}

void CudaBackend::attention_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                          const Tensor& state, int n_head) {
  const char* op = "attention_backward";
  int64_t B, T, C;
  attention_dims(qkv, B, T, C);
  Tensor delta = impl_->alloc({B * n_head * T}, DType::f32, "attention_backward delta");
  cuda::attention_backward(qkv.dtype(), dqkv.raw(), static_cast<float*>(delta.raw()), dout.raw(), qkv.raw(), out.raw(),
                           static_cast<const float*>(state.raw()), B, T, C, n_head, impl_->stream);
  impl_->after(op);
}

// ---------------------------------------------------------------------------------------------
// The Llama ops (kernels/llama.cu).

void CudaBackend::rmsnorm_forward_impl(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                       double eps) {
  const int64_t C = inp.size(-1), N = inp.numel() / C;
  cuda::rmsnorm_forward(inp.dtype(), out.raw(), rstd.raw(), inp.raw(), weight.raw(), N, C, static_cast<float>(eps),
                        impl_->stream);
  impl_->after("rmsnorm_forward");
}

void CudaBackend::rmsnorm_backward_impl(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                                        const Tensor& weight, const Tensor& rstd, bool accumulate) {
  const int64_t C = inp.size(-1), N = inp.numel() / C;
  Tensor partial = impl_->alloc({cuda::column_chunks(N) * C}, DType::f32, "rmsnorm_backward partial sums");
  cuda::rmsnorm_backward(inp.dtype(), dinp.raw(), static_cast<float*>(partial.raw()), dweight.raw(), dout.raw(),
                         inp.raw(), weight.raw(), rstd.raw(), N, C, accumulate, impl_->stream);
  impl_->after("rmsnorm_backward");
}

void CudaBackend::rope_forward_impl(Tensor& out, const Tensor& inp, const Tensor& inv_freq, int n_head) {
  cuda::rope(inp.dtype(), out.raw(), inp.raw(), static_cast<const float*>(inv_freq.raw()), inp.size(0), inp.size(1),
             n_head, inp.size(2) / n_head, +1, impl_->stream);
  impl_->after("rope_forward");
}

void CudaBackend::rope_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inv_freq, int n_head) {
  cuda::rope(dout.dtype(), dinp.raw(), dout.raw(), static_cast<const float*>(inv_freq.raw()), dout.size(0),
             dout.size(1), n_head, dout.size(2) / n_head, -1, impl_->stream);
  impl_->after("rope_backward");
}

void CudaBackend::swiglu_forward_impl(Tensor& out, const Tensor& gate, const Tensor& up) {
  cuda::swiglu_forward(gate.dtype(), out.raw(), gate.raw(), up.raw(), gate.numel(), impl_->stream);
  impl_->after("swiglu_forward");
}

void CudaBackend::swiglu_backward_impl(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                                       const Tensor& up) {
  cuda::swiglu_backward(gate.dtype(), dgate.raw(), dup.raw(), dout.raw(), gate.raw(), up.raw(), gate.numel(),
                        impl_->stream);
  impl_->after("swiglu_backward");
}

void CudaBackend::qkv_pack_impl(Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head,
                                int n_kv_head) {
  cuda::qkv_pack(q.dtype(), qkv.raw(), q.raw(), k.raw(), v.raw(), q.size(0) * q.size(1), n_head, n_kv_head,
                 q.size(2) / n_head, impl_->stream);
  impl_->after("qkv_pack");
}

void CudaBackend::qkv_unpack_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dqkv, int n_head, int n_kv_head) {
  cuda::qkv_unpack(dq.dtype(), dq.raw(), dk.raw(), dv.raw(), dqkv.raw(), dq.size(0) * dq.size(1), n_head, n_kv_head,
                   dq.size(2) / n_head, impl_->stream);
  impl_->after("qkv_unpack");
}

// ---------------------------------------------------------------------------------------------
// Element-wise.

void CudaBackend::gelu_forward_impl(Tensor& out, const Tensor& inp) {
  cuda::gelu_forward(inp.dtype(), out.raw(), inp.raw(), inp.numel(), impl_->stream);
  impl_->after("gelu_forward");
}

void CudaBackend::gelu_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) {
  cuda::gelu_backward(inp.dtype(), dinp.raw(), dout.raw(), inp.raw(), inp.numel(), accumulate, impl_->stream);
  impl_->after("gelu_backward");
}

void CudaBackend::relu_forward_impl(Tensor& out, const Tensor& inp) {
  cuda::relu_forward(inp.dtype(), out.raw(), inp.raw(), inp.numel(), impl_->stream);
  impl_->after("relu_forward");
}

void CudaBackend::relu_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) {
  cuda::relu_backward(inp.dtype(), dinp.raw(), dout.raw(), inp.raw(), inp.numel(), accumulate, impl_->stream);
  impl_->after("relu_backward");
}

void CudaBackend::add_impl(Tensor& out, const Tensor& a, const Tensor& b) {
  cuda::add(a.dtype(), out.raw(), a.raw(), b.raw(), a.numel(), impl_->stream);
  impl_->after("add");
}

void CudaBackend::bias_add_impl(Tensor& out, const Tensor& bias) {
  const int64_t C = bias.numel();
  cuda::bias_add(out.dtype(), out.raw(), bias.raw(), out.numel() / C, C, impl_->stream);
  impl_->after("bias_add");
}

void CudaBackend::scale_impl(Tensor& x, double s) {
  cuda::scale(x.dtype(), x.raw(), static_cast<float>(s), x.numel(), impl_->stream);
  impl_->after("scale");
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy.

void CudaBackend::crossentropy_forward_impl(Tensor& losses, Tensor& correct, const Tensor& logits,
                                            const Tensor& targets) {
  const char* op = "crossentropy_forward";
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  Index ix = stage_index(*impl_, *this, targets, op);
  check_targets(op, ix.host, V);
  Tensor correct_dev = correct.defined() ? index_output(*impl_, correct, op) : Tensor();
  cuda::crossentropy_forward(logits.dtype(), losses.dtype(), losses.raw(),
                             correct.defined() ? static_cast<int32_t*>(correct_dev.raw()) : nullptr, logits.raw(),
                             ix.ptr(), N, V, impl_->stream);
  if (correct.defined()) finish_index_output(*impl_, correct, correct_dev, op);
  impl_->after(op);
}

void CudaBackend::crossentropy_backward_impl(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                             double dloss) {
  const char* op = "crossentropy_backward";
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  Index ix = stage_index(*impl_, *this, targets, op);
  check_targets(op, ix.host, V);
  cuda::crossentropy_backward(logits.dtype(), dlogits.raw(), logits.raw(), ix.ptr(), N, V, static_cast<float>(dloss),
                              impl_->stream);
  impl_->after(op);
}

void CudaBackend::argmax_impl(Tensor& out, const Tensor& logits) {
  const char* op = "argmax";
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  Tensor dev = index_output(*impl_, out, op);
  cuda::argmax(logits.dtype(), static_cast<int32_t*>(dev.raw()), logits.raw(), N, V, impl_->stream);
  finish_index_output(*impl_, out, dev, op);
  impl_->after(op);
}

void CudaBackend::logits_row_max_impl(Tensor& row_max, const Tensor& logits) {
  const char* op = "logits_row_max";
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  cuda::logits_row_max(logits.dtype(), row_max.raw(), logits.raw(), N, V, impl_->stream);
  impl_->after(op);
}

void CudaBackend::logits_sum_exp_impl(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max) {
  const char* op = "logits_sum_exp";
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  cuda::logits_sum_exp(logits.dtype(), sum_exp.raw(), logits.raw(), row_max.raw(), N, V, impl_->stream);
  impl_->after(op);
}

void CudaBackend::logits_pick_impl(Tensor& picked, const Tensor& logits, const Tensor& targets, int64_t vocab_start) {
  const char* op = "logits_pick";
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  Index ix = stage_index(*impl_, *this, targets, op);
  cuda::logits_pick(logits.dtype(), picked.raw(), logits.raw(), ix.ptr(), N, V, vocab_start, impl_->stream);
  impl_->after(op);
}

void CudaBackend::crossentropy_backward_sharded_impl(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                                     const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start,
                                                     double dloss) {
  const char* op = "crossentropy_backward_sharded";
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  Index ix = stage_index(*impl_, *this, targets, op);
  cuda::crossentropy_backward_sharded(logits.dtype(), dlogits.raw(), logits.raw(), ix.ptr(), row_max.raw(),
                                      sum_exp.raw(), N, V, vocab_start, static_cast<float>(dloss), impl_->stream);
  impl_->after(op);
}

// ---------------------------------------------------------------------------------------------
// Optimizers and reductions.

void CudaBackend::adamw_step_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
  const char* op = "adamw_step";
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
  cuda::AdamWConsts k{};
  k.decay = static_cast<float>(1.0 - p.lr * p.weight_decay);
  k.step_size = static_cast<float>(p.lr / bc1);
  k.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  k.one_minus_beta1 = static_cast<float>(1.0 - p.beta1);
  k.beta2 = static_cast<float>(p.beta2);
  k.one_minus_beta2 = static_cast<float>(1.0 - p.beta2);
  k.eps = static_cast<float>(p.eps);
  k.grad_scale = static_cast<float>(p.grad_scale);
  cuda::adamw_step(param.dtype(), grad.dtype(), param.raw(), grad.raw(), m.raw(), v.raw(), param.numel(), k,
                   impl_->stream);
  impl_->after(op);
}

void CudaBackend::sgd_step_impl(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p) {
  const char* op = "sgd_step";
  cuda::SgdConsts k{};
  k.lr = static_cast<float>(p.lr);
  k.momentum = static_cast<float>(p.momentum);
  k.one_minus_dampening = static_cast<float>(1.0 - p.dampening);
  k.weight_decay = static_cast<float>(p.weight_decay);
  k.grad_scale = static_cast<float>(p.grad_scale);
  k.nesterov = p.nesterov;
  k.first_step = p.first_step;
  cuda::sgd_step(param.dtype(), grad.dtype(), param.raw(), grad.raw(), momentum.defined() ? momentum.raw() : nullptr,
                 param.numel(), k, impl_->stream);
  impl_->after(op);
}

static double reduce_to_double(CudaBackend::Impl& I, const Tensor& x, bool squares, const char* op) {
  if (x.numel() == 0) return 0.0;
  cuda::sum_to_double(x.dtype(), I.sum_result, I.sum_partial, x.raw(), x.numel(), squares, I.stream);
  double out = 0.0;
  DL_CUDA_CALL(cudaMemcpyAsync(&out, I.sum_result, sizeof out, cudaMemcpyDeviceToHost, I.stream), op, " of ",
               desc(x));
  DL_CUDA_CALL(cudaStreamSynchronize(I.stream), op, " of ", desc(x));
  return out;
}

double CudaBackend::sum_impl(const Tensor& x) {
  return reduce_to_double(*impl_, x, false, "sum");
}

double CudaBackend::sum_squares_impl(const Tensor& x) {
  return reduce_to_double(*impl_, x, true, "sum_squares");
}

// ---------------------------------------------------------------------------------------------

CudaBackend& cuda_backend() {
  static std::mutex mu;
  static std::unique_ptr<CudaBackend> backend;
  std::lock_guard<std::mutex> lock(mu);
  if (!backend) {
    CudaDeviceInfo info = cuda_probe();
    if (!info.usable) throw_usage("no usable CUDA GPU: ", info.reason);
    backend = std::make_unique<CudaBackend>(info.device, process_options());
    if (process_options().on_open) process_options().on_open(*backend);
  }
  return *backend;
}

}  // namespace dl
