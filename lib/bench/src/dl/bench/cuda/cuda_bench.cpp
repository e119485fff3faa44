// dl-bench on a GPU (CUDA builds only): device description, cuBLASLt GEMM runner, device copies.
// Every call is checked (cuda_check.hpp); timings are CUDA events around each call on one stream,
// so back-to-back calls are timed as the GPU ran them, without host launch gaps in between.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/device/cuda/cuda_check.hpp"
#include "dl/bench/cuda_bench.hpp"
#include "dl/bench/gemm_runner.hpp"
#include "dl/core/error.hpp"
#include "dl/core/half.hpp"
#include "dl/core/rng.hpp"
#include "dl/env/native.hpp"
#include "dl/plan/gpus.hpp"
#include "dl/device/select.hpp"

namespace dl::bench {

namespace {

// A device buffer released with the object.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n, const char* what) : bytes(n) {
    DL_CUDA_CALL(cudaMalloc(&p, std::max<size_t>(n, 1)), "dl-bench: allocating ", n, " bytes of GPU memory for ", what);
  }
  ~DeviceBuffer() {
    if (p) (void)cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Pinned host memory (so host<->device copies run at bus speed and asynchronously).
struct PinnedBuffer {
  void* p = nullptr;
  explicit PinnedBuffer(size_t n) {
    DL_CUDA_CALL(cudaMallocHost(&p, std::max<size_t>(n, 1)), "dl-bench: allocating ", n, " bytes of pinned host memory");
  }
  ~PinnedBuffer() {
    if (p) (void)cudaFreeHost(p);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { DL_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "dl-bench: creating a stream"); }
  ~Stream() {
    if (s) (void)cudaStreamDestroy(s);
  }
};

// Times `calls` launches of run(i) with one event pair each; returns seconds per call. wait()
// runs before the stream is synchronized.
template <class F, class W = void (*)()>
std::vector<double> time_with_events(cudaStream_t stream, int warmup, int repeat, F&& run, W wait = [] {}) {
  for (int i = 0; i < warmup; ++i) run(i);
  std::vector<cudaEvent_t> ev(static_cast<size_t>(2 * repeat));
  for (auto& e : ev) DL_CUDA_CALL(cudaEventCreate(&e), "dl-bench: creating timing events");
  for (int i = 0; i < repeat; ++i) {
    DL_CUDA_CALL(cudaEventRecord(ev[static_cast<size_t>(2 * i)], stream), "dl-bench: recording a start event");
    run(warmup + i);
    DL_CUDA_CALL(cudaEventRecord(ev[static_cast<size_t>(2 * i + 1)], stream), "dl-bench: recording a stop event");
  }
  wait();
  DL_CUDA_CALL(cudaStreamSynchronize(stream), "dl-bench: waiting for the timed calls");
  std::vector<double> seconds;
  for (int i = 0; i < repeat; ++i) {
    float ms = 0;
    DL_CUDA_CALL(cudaEventElapsedTime(&ms, ev[static_cast<size_t>(2 * i)], ev[static_cast<size_t>(2 * i + 1)]),
                 "dl-bench: reading a timing event");
    seconds.push_back(static_cast<double>(ms) * 1e-3);
  }
  for (auto& e : ev) (void)cudaEventDestroy(e);
  return seconds;
}

cudaDataType_t data_type(MathPrecision dtype) {
  if (dtype == MathPrecision::bf16) return CUDA_R_16BF;
  if (dtype == MathPrecision::fp16) return CUDA_R_16F;
  return CUDA_R_32F;
}

size_t type_bytes(MathPrecision dtype) { return dtype == MathPrecision::bf16 || dtype == MathPrecision::fp16 ? 2 : 4; }

// Host values rounded to the dtype the device holds, and the bytes to upload.
void encode(const std::vector<float>& values, MathPrecision dtype, std::vector<float>& rounded,
            std::vector<unsigned char>& bytes) {
  const size_t n = values.size(), w = type_bytes(dtype);
  rounded.resize(n);
  bytes.resize(n * w);
  for (size_t i = 0; i < n; ++i) {
    float v = values[i];
    if (dtype == MathPrecision::bf16) {
      uint16_t h = float_to_bf16(v);
      v = bf16_to_float(h);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else if (dtype == MathPrecision::fp16) {
      uint16_t h = float_to_f16(v);
      v = f16_to_float(h);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      std::memcpy(&bytes[i * 4], &v, 4);
    }
    rounded[i] = v;
  }
}

class CudaGemm final : public GemmRunner {
 public:
  CudaGemm(const GemmShape& s, MathPrecision dtype, int sets, uint64_t seed) : s_(s), dtype_(dtype) {
    const size_t w = type_bytes(dtype);
    const auto mk = static_cast<size_t>(s.m * s.k), kn = static_cast<size_t>(s.k * s.n), mn = static_cast<size_t>(s.m * s.n);
    for (int i = 0; i < sets; ++i) {
      std::vector<float> values(std::max(mk, kn));
      std::vector<unsigned char> bytes;
      a_host_.emplace_back();
      b_host_.emplace_back();
      values.resize(mk);
      fill_uniform(values.data(), static_cast<int64_t>(mk), mix64(seed, 2 * static_cast<uint64_t>(i)));
      encode(values, dtype, a_host_.back(), bytes);
      a_.push_back(std::make_unique<DeviceBuffer>(mk * w, "gemm operand A"));
      DL_CUDA_CALL(cudaMemcpy(a_.back()->p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "dl-bench: uploading A");
      values.resize(kn);
      fill_uniform(values.data(), static_cast<int64_t>(kn), mix64(seed, 2 * static_cast<uint64_t>(i) + 1));
      encode(values, dtype, b_host_.back(), bytes);
      b_.push_back(std::make_unique<DeviceBuffer>(kn * w, "gemm operand B"));
      DL_CUDA_CALL(cudaMemcpy(b_.back()->p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "dl-bench: uploading B");
      c_.push_back(std::make_unique<DeviceBuffer>(mn * w, "gemm result C"));
      // NaN bytes first: an entry the GEMM did not write fails the check.
      DL_CUDA_CALL(cudaMemset(c_.back()->p, 0xff, mn * w), "dl-bench: poisoning C");
    }
    workspace_ = std::make_unique<DeviceBuffer>(kWorkspace, "the cuBLASLt workspace");
    DL_CUBLAS_CALL(cublasLtCreate(&lt_), "dl-bench: cublasLtCreate");
    setup();
  }
  ~CudaGemm() override {
    if (pref_) (void)cublasLtMatmulPreferenceDestroy(pref_);
    for (auto l : {la_, lb_, lc_})
      if (l) (void)cublasLtMatrixLayoutDestroy(l);
    if (op_) (void)cublasLtMatmulDescDestroy(op_);
    if (lt_) (void)cublasLtDestroy(lt_);
  }

  std::string library() const override {
    const size_t v = cublasLtGetVersion();
    return str("cuBLASLt ", v / 10000, ".", (v % 10000) / 100, ".", v % 100, " cublasLtMatmul");
  }

  std::vector<double> time_calls(int warmup, int repeat) override {
    const int sets = static_cast<int>(a_.size());
    auto secs = time_with_events(stream_.s, warmup, repeat, [&](int i) { run(i % sets); });
    return secs;
  }
  std::vector<double> a_row(int set, int64_t i) const override {
    const float* p = a_host_[static_cast<size_t>(set)].data() + i * s_.k;
    return std::vector<double>(p, p + s_.k);
  }
  std::vector<double> b_col(int set, int64_t j) const override {
    std::vector<double> col(static_cast<size_t>(s_.k));
    const float* b = b_host_[static_cast<size_t>(set)].data();
    for (int64_t p = 0; p < s_.k; ++p) col[static_cast<size_t>(p)] = b[p * s_.n + j];
    return col;
  }
  double c_at(int set, int64_t i, int64_t j) const override {
    const size_t w = type_bytes(dtype_);
    unsigned char raw[4] = {};
    const auto* base = static_cast<const unsigned char*>(c_[static_cast<size_t>(set)]->p);
    DL_CUDA_CALL(cudaMemcpy(raw, base + static_cast<size_t>(i * s_.n + j) * w, w, cudaMemcpyDeviceToHost),
                 "dl-bench: reading C[", i, ", ", j, "]");
    uint16_t h;
    std::memcpy(&h, raw, 2);
    if (dtype_ == MathPrecision::bf16) return bf16_to_float(h);
    if (dtype_ == MathPrecision::fp16) return f16_to_float(h);
    float f;
    std::memcpy(&f, raw, 4);
    return f;
  }

 private:
  static constexpr size_t kWorkspace = size_t{32} << 20;  // what PyTorch gives cuBLASLt on Hopper

  // Row-major C[m,n] = A[m,k] B[k,n] is column-major C^T[n,m] = B^T[n,k] A^T[k,m]: cuBLASLt's "A"
  // is our B (n x k, ld n) and its "B" is our A (k x m, ld k), neither transposed - the NN call
  // torch.matmul makes for contiguous row-major operands.
  void setup() {
    const cudaDataType_t t = data_type(dtype_);
    const cublasComputeType_t compute = dtype_ == MathPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const std::string sizes = str(s_.m, "x", s_.n, "x", s_.k, " ", dtype_);
    DL_CUBLAS_CALL(cublasLtMatmulDescCreate(&op_, compute, CUDA_R_32F), "dl-bench gemm ", sizes);
    DL_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&la_, t, static_cast<uint64_t>(s_.n), static_cast<uint64_t>(s_.k), s_.n),
                   "dl-bench gemm ", sizes);
    DL_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&lb_, t, static_cast<uint64_t>(s_.k), static_cast<uint64_t>(s_.m), s_.k),
                   "dl-bench gemm ", sizes);
    DL_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&lc_, t, static_cast<uint64_t>(s_.n), static_cast<uint64_t>(s_.m), s_.n),
                   "dl-bench gemm ", sizes);
    DL_CUBLAS_CALL(cublasLtMatmulPreferenceCreate(&pref_), "dl-bench gemm ", sizes);
    size_t ws = kWorkspace;
    DL_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                   "dl-bench gemm ", sizes);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    DL_CUBLAS_CALL(cublasLtMatmulAlgoGetHeuristic(lt_, op_, la_, lb_, lc_, lc_, pref_, 1, &result, &found),
                   "dl-bench gemm ", sizes);
    if (found < 1) throw_runtime("dl-bench gemm ", sizes, ": cuBLASLt offers no algorithm for this shape and type");
    algo_ = result.algo;
  }

  void run(int set) {
    const float alpha = 1.0f, beta = 0.0f;
    const auto u = static_cast<size_t>(set);
    DL_CUBLAS_CALL(cublasLtMatmul(lt_, op_, &alpha, b_[u]->p, la_, a_[u]->p, lb_, &beta, c_[u]->p, lc_, c_[u]->p, lc_,
                                  &algo_, workspace_->p, kWorkspace, stream_.s),
                   "dl-bench gemm ", s_.m, "x", s_.n, "x", s_.k, " ", dtype_);
  }

  GemmShape s_;
  MathPrecision dtype_;
  Stream stream_;
  std::vector<std::unique_ptr<DeviceBuffer>> a_, b_, c_;
  std::vector<std::vector<float>> a_host_, b_host_;
  std::unique_ptr<DeviceBuffer> workspace_;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace

CudaBenchDevice cuda_bench_device() {
  CudaBenchDevice d;
  prepare_cuda_process();
  const CudaDeviceInfo probe = cuda_probe();
  if (!probe.usable) {
    d.why = probe.reason;
    return d;
  }
  d.usable = true;
  d.info.device_type = DeviceKind::cuda;
  d.info.device = probe.name;
  if (auto spec = plan::gpu_spec(probe.name)) d.info.gpu_model = spec->model;
  d.info.num_devices = 1;
  int runtime = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  d.info.cuda_runtime = str(runtime / 1000, ".", (runtime % 1000) / 10);
  const NvmlProbe nvml = probe_nvml();
  if (nvml.ok) {
    d.info.driver = nvml.driver;
  } else {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess) d.info.driver = str("CUDA ", driver / 1000, ".", (driver % 1000) / 10);
    (void)cudaGetLastError();
  }
  int l2 = 0;
  if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, probe.device) == cudaSuccess) d.l2_bytes = l2;
  (void)cudaGetLastError();
  d.total_bytes = static_cast<double>(probe.total_bytes);
  d.free_bytes = static_cast<double>(probe.free_bytes);
  d.device_count = probe.device_count;
  return d;
}

std::vector<double> time_on_backend_stream(int warmup, int repeat, const std::function<void(int)>& run,
                                           const std::function<void()>& wait) {
  auto stream = static_cast<cudaStream_t>(open_cuda_backend().native_stream());
  return time_with_events(stream, warmup, repeat, run, wait);
}

std::unique_ptr<GemmRunner> make_cuda_gemm(const GemmShape& shape, MathPrecision dtype, int sets, uint64_t seed) {
  return std::make_unique<CudaGemm>(shape, dtype, sets, seed);
}

CudaCopyResult time_cuda_copy(plan::CopyDirection direction, int64_t bytes, int pairs, int warmup, int repeat) {
  using enum plan::CopyDirection;
  const auto n = static_cast<size_t>(bytes);
  Stream stream;
  // Sources filled with non-zero values; destinations with others, so a copy that did not happen shows.
  std::vector<float> fill(n / sizeof(float));
  std::vector<std::unique_ptr<DeviceBuffer>> dev_src, dev_dst;
  std::vector<std::unique_ptr<PinnedBuffer>> host_src, host_dst;
  for (int p = 0; p < pairs; ++p) {
    fill_uniform(fill.data(), static_cast<int64_t>(fill.size()), mix64(0x3e3, static_cast<uint64_t>(p)));
    if (direction == h2d) {
      host_src.push_back(std::make_unique<PinnedBuffer>(n));
      std::memcpy(host_src.back()->p, fill.data(), n);
    } else {
      dev_src.push_back(std::make_unique<DeviceBuffer>(n, "copy source"));
      DL_CUDA_CALL(cudaMemcpy(dev_src.back()->p, fill.data(), n, cudaMemcpyHostToDevice), "dl-bench: filling a source");
    }
    fill_uniform(fill.data(), static_cast<int64_t>(fill.size()), mix64(0xd57, static_cast<uint64_t>(p)));
    if (direction == d2h) {
      host_dst.push_back(std::make_unique<PinnedBuffer>(n));
      std::memcpy(host_dst.back()->p, fill.data(), n);
    } else {
      dev_dst.push_back(std::make_unique<DeviceBuffer>(n, "copy destination"));
      DL_CUDA_CALL(cudaMemcpy(dev_dst.back()->p, fill.data(), n, cudaMemcpyHostToDevice), "dl-bench: filling a destination");
    }
  }
  auto src = [&](int p) -> const void* {
    return direction == h2d ? host_src[static_cast<size_t>(p)]->p : dev_src[static_cast<size_t>(p)]->p;
  };
  auto dst = [&](int p) -> void* {
    return direction == d2h ? host_dst[static_cast<size_t>(p)]->p : dev_dst[static_cast<size_t>(p)]->p;
  };
  const cudaMemcpyKind kind = direction == d2d ? cudaMemcpyDeviceToDevice
                              : direction == h2d  ? cudaMemcpyHostToDevice
                                                    : cudaMemcpyDeviceToHost;
  CudaCopyResult r;
  r.seconds = time_with_events(stream.s, warmup, repeat, [&](int i) {
    const int p = i % pairs;
    DL_CUDA_CALL(cudaMemcpyAsync(dst(p), src(p), n, kind, stream.s), "dl-bench memory: ", choice_name(direction), " copy of ", n,
                 " bytes");
  });
  // 64 sampled positions of every pair that was written (docs/BENCH.md), compared byte for byte
  // with the source.
  const int written = std::min(pairs, warmup + repeat);
  r.checked = 64 * written;
  for (int q = 0; q < r.checked; ++q) {
    const int p = q % written;
    const size_t i = static_cast<size_t>(mix64(0x5a3, static_cast<uint64_t>(q)) % static_cast<uint64_t>(n / 4)) * 4;
    float a = 0, b = 0;
    const auto* s = static_cast<const unsigned char*>(src(p));
    const auto* d = static_cast<const unsigned char*>(dst(p));
    DL_CUDA_CALL(cudaMemcpy(&a, s + i, 4, cudaMemcpyDefault), "dl-bench memory: reading back a source value");
    DL_CUDA_CALL(cudaMemcpy(&b, d + i, 4, cudaMemcpyDefault), "dl-bench memory: reading back a copied value");
    if (std::memcmp(&a, &b, 4) != 0) ++r.wrong;
  }
  return r;
}

}  // namespace dl::bench
