#include "dl/bench/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "dl/backend/backend.hpp"
#include "dl/bench/cuda_bench.hpp"
#include "dl/bench/gemm_runner.hpp"
#include "dl/bench/peaks.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/parallel.hpp"
#include "dl/core/rng.hpp"

namespace dl::bench {

namespace {

int64_t parse_dim(const std::string& text, const std::string& item) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 9)
    throw_option_error("{sizes}: '", item, "' is not a size (use N for N x N x N, or MxNxK, e.g. {sizes} 1024,4096x4096x1024)");
  int64_t v = std::stoll(text);
  if (v < 1) throw_option_error("{sizes}: '", item, "' has a zero dimension; every dimension must be at least 1");
  return v;
}

class CpuSgemm final : public GemmRunner {
 public:
  CpuSgemm(const GemmShape& s, int sets, uint64_t seed) : s_(s) {
    for (int i = 0; i < sets; ++i) {
      a_.push_back(Tensor::empty({s.m, s.k}, DType::f32));
      b_.push_back(Tensor::empty({s.k, s.n}, DType::f32));
      c_.push_back(Tensor::empty({s.m, s.n}, DType::f32));
      fill_uniform(a_.back().data<float>(), s.m * s.k, mix64(seed, 2 * static_cast<uint64_t>(i)));
      fill_uniform(b_.back().data<float>(), s.k * s.n, mix64(seed, 2 * static_cast<uint64_t>(i) + 1));
      // Touch C now so page faults stay out of the timed calls.
      std::fill_n(c_.back().data<float>(), s.m * s.n, 1.0f);
    }
  }
  // The CPU backend's matmul, what dl-train runs: cblas_sgemm on one BLAS thread per strip of C,
  // the strips on dlkit's threads (so the same bits on any thread count).
  std::string library() const override { return openblas_library().first + " cblas_sgemm (dlkit strips)"; }
  std::vector<double> time_calls(int warmup, int repeat) override {
    int next = 0;
    Timing t = time_runs(warmup, repeat, [&] {
      run(next);
      next = (next + 1) % static_cast<int>(a_.size());
    });
    return t.samples;
  }
  std::vector<double> a_row(int set, int64_t i) const override {
    const float* p = a_[static_cast<size_t>(set)].data<float>() + i * s_.k;
    return std::vector<double>(p, p + s_.k);
  }
  std::vector<double> b_col(int set, int64_t j) const override {
    std::vector<double> col(static_cast<size_t>(s_.k));
    const float* b = b_[static_cast<size_t>(set)].data<float>();
    for (int64_t p = 0; p < s_.k; ++p) col[static_cast<size_t>(p)] = b[p * s_.n + j];
    return col;
  }
  double c_at(int set, int64_t i, int64_t j) const override { return c_[static_cast<size_t>(set)].data<float>()[i * s_.n + j]; }

 private:
  void run(int set) {
    const auto u = static_cast<size_t>(set);
    cpu_backend().matmul_forward(c_[u], a_[u], b_[u], Tensor(), WeightLayout::in_out);
  }
  GemmShape s_;
  std::vector<Tensor> a_, b_, c_;
};

std::unique_ptr<GemmRunner> make_runner(const DeviceInfo& dev, MathPrecision dtype, const GemmShape& s, int sets,
                                        uint64_t seed) {
#ifdef DL_HAVE_CUDA
  if (dev.device_type == DeviceKind::cuda) return make_cuda_gemm(s, dtype, sets, seed);
#endif
  DL_CHECK(dev.device_type == DeviceKind::cpu, "gemm reached on ", dev.device_type, " in a build without it");
  if (dtype != MathPrecision::fp32)
    throw_option_error("{dtype} ", dtype, ": the CPU benchmark measures fp32 (OpenBLAS sgemm); ", dtype,
                       " needs {device} cuda. Use {dtype} fp32");
  return std::make_unique<CpuSgemm>(s, sets, seed);
}

double element_bytes(MathPrecision dtype) { return dtype == MathPrecision::bf16 || dtype == MathPrecision::fp16 ? 2.0 : 4.0; }

}  // namespace

double gemm_set_bytes(const GemmShape& s, MathPrecision dtype, bool device) {
  const double in = element_bytes(dtype), out = device ? element_bytes(dtype) : 4.0;
  return in * static_cast<double>(s.m * s.k + s.k * s.n) + out * static_cast<double>(s.m * s.n);
}

std::vector<GemmShape> parse_gemm_sizes(const std::string& text) {
  std::vector<GemmShape> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) throw_option_error("{sizes} '", text, "': empty item (use e.g. {sizes} 1024,4096 or 4096x4096x1024)");
    std::vector<std::string> dims;
    size_t p = 0;
    for (;;) {
      size_t x = item.find_first_of("xX", p);
      dims.push_back(item.substr(p, x == std::string::npos ? std::string::npos : x - p));
      if (x == std::string::npos) break;
      p = x + 1;
    }
    if (dims.size() == 1) {
      int64_t n = parse_dim(dims[0], item);
      out.push_back({n, n, n});
    } else if (dims.size() == 3) {
      out.push_back({parse_dim(dims[0], item), parse_dim(dims[1], item), parse_dim(dims[2], item)});
    } else {
      throw_option_error("{sizes}: '", item, "' is neither N nor MxNxK (e.g. 4096 or 4096x4096x1024)");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

MathPrecision parse_gemm_dtype(const std::string& text) {
  // fp8 peaks are planned (dl-cost/dl-shard), not measured: the cuBLAS runner has no FP8 GEMM.
  if (auto d = parse_choice<MathPrecision>(text); d && *d != MathPrecision::fp8) return *d;
  throw_option_error("{dtype} ", text, ": unknown (use fp32, tf32, bf16 or fp16)");
}

double gemm_flops(const GemmShape& s) {
  return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
}

double gemm_error_bound(int64_t k, MathPrecision dtype) {
  const double u = std::ldexp(1.0, -24);  // fp32 accumulation on every device dlkit targets
  const double ku = static_cast<double>(k) * u;
  const double gamma = ku < 1 ? ku / (1 - ku) : 1.0;
  // Inputs rounded to the dtype change each product by up to (1 + r)^2 - 1 ~ 2r.
  double r = 0;
  if (dtype == MathPrecision::tf32 || dtype == MathPrecision::fp16) r = std::ldexp(1.0, -11);
  else if (dtype == MathPrecision::bf16) r = std::ldexp(1.0, -8);
  return gamma + 2 * r + r * r;
}

namespace {

// The fastest fp32 GEMM rate seen in this process, per thread count.
struct CpuPeakState {
  bool calibrated = false;
  double best = 0;
};
std::map<int, CpuPeakState>& cpu_peaks() {
  static std::map<int, CpuPeakState> peaks;
  return peaks;
}

}  // namespace

void note_cpu_sgemm_rate(double flops) {
  CpuPeakState& s = cpu_peaks()[num_threads()];
  s.best = std::max(s.best, flops);
}

MeasuredPeak cpu_sgemm_peak() {
  const int threads = num_threads();
  CpuPeakState& s = cpu_peaks()[threads];
  const int runs = example_capped(5);
  if (!s.calibrated) {
    // The fastest single run: a peak is what the machine can do, and on a shared machine the
    // fastest run is the one least disturbed by others.
    for (int64_t n : {1024, 2048}) {
      CpuSgemm g({n, n, n}, 1, 0x5eed);
      Timing t = summarize(g.time_calls(1, runs));
      s.best = std::max(s.best, gemm_flops({n, n, n}) / t.min);
    }
    s.calibrated = true;
  }
  return {s.best, str("measured: fastest sgemm run (the backend's matmul) in this process (", runs, " runs each at 1024^3 and 2048^3, "
                      "and the gemm benchmark's own), ", threads, " thread", threads == 1 ? "" : "s")};
}

Report run_gemm(const GemmOptions& o, const CommonOptions& common) {
  const DeviceKind kind = select_device(common.device);
  const MathPrecision dtype = o.dtype;
  if (o.samples < 1) throw_usage("gemm: at least one entry must be checked");
  const bool gpu = kind == DeviceKind::cuda;
  DeviceInfo dev = cpu_device_info();
  // The cache rotation must beat, and the memory the operand sets may take.
  int64_t cache_bytes = last_level_cache_bytes();
  double memory = physical_memory_bytes();
#ifdef DL_HAVE_CUDA
  if (gpu) {
    const CudaBenchDevice d = cuda_bench_device();
    dev = d.info;
    cache_bytes = d.l2_bytes;
    memory = d.free_bytes;
  }
#endif
  std::vector<GemmShape> sizes = o.sizes;
  if (sizes.empty())
    sizes = is_emulated(dev) ? std::vector<GemmShape>{{64, 64, 64}, {128, 128, 128}, {256, 256, 256}}
            : gpu            ? std::vector<GemmShape>{{1024, 1024, 1024}, {4096, 4096, 4096}, {8192, 8192, 8192}}
                             : std::vector<GemmShape>{{512, 512, 512}, {1024, 1024, 1024}, {2048, 2048, 2048}};
  const int repeat = repeat_or(common, 10), warmup = warmup_or(common, 2);

  Report report;
  for (const GemmShape& s : sizes) {
    if (s.m > std::numeric_limits<int>::max() || s.n > std::numeric_limits<int>::max() ||
        s.k > std::numeric_limits<int>::max())
      throw_option_error("{sizes} ", s.m, "x", s.n, "x", s.k, ": a dimension exceeds the BLAS limit of 2^31 - 1");
    const double set_bytes = gemm_set_bytes(s, dtype, gpu);
    if (memory > 0 && set_bytes > 0.5 * memory)
      throw_option_error("{sizes} ", s.m, "x", s.n, "x", s.k, " needs ", format_bytes(set_bytes), " of operands, more than half of ",
                  gpu ? "the GPU's free memory, " : "this machine's memory, ", format_bytes(memory), "; choose smaller sizes");
    // Enough operand sets that they cannot all sit in the last-level cache (but at most a quarter of memory).
    int max_sets = memory > 0 ? static_cast<int>(std::max(1.0, 0.25 * memory / set_bytes)) : 1;
    int sets = rotation_count(static_cast<int64_t>(set_bytes), cache_bytes, std::min(max_sets, 64));
    sets = std::min(sets, warmup + repeat);
    const uint64_t seed = mix64(0xbe7c4, static_cast<uint64_t>(s.m * 1000003 + s.n * 1009 + s.k));
    auto runner = make_runner(dev, dtype, s, sets, seed);
    dev.library = runner->library();
    dev.library_config = gpu ? std::string() : openblas_library().second;
    Timing t = summarize(runner->time_calls(warmup, repeat));

    // Check sampled entries of every set the timed and warm-up calls wrote.
    const int written = std::min(sets, warmup + repeat);
    const double bound = gemm_error_bound(s.k, dtype);
    double max_err = 0;
    int bad = 0;
    for (int q = 0; q < o.samples; ++q) {
      const int set = q % written;
      const uint64_t h = mix64(seed ^ 0xc4ec4, static_cast<uint64_t>(q));
      const int64_t i = static_cast<int64_t>(h % static_cast<uint64_t>(s.m));
      const int64_t j = static_cast<int64_t>((h >> 32) % static_cast<uint64_t>(s.n));
      std::vector<double> a = runner->a_row(set, i), b = runner->b_col(set, j);
      double ref = 0, scale = 0;
      for (size_t p = 0; p < a.size(); ++p) {
        ref += a[p] * b[p];
        scale += std::fabs(a[p] * b[p]);
      }
      const double got = runner->c_at(set, i, j);
      const double err = scale > 0 ? std::fabs(got - ref) / scale : std::fabs(got - ref);
      if (!(err <= bound)) ++bad;  // NaN counts as wrong
      max_err = std::isfinite(err) ? std::max(max_err, err) : std::numeric_limits<double>::infinity();
    }
    if (bad)
      report.failures.push_back(str("gemm ", s.m, "x", s.n, "x", s.k, " ", dtype, ": ", bad, " of ", o.samples,
                                    " sampled entries are off by more than the bound ", bound,
                                    " (relative to sum |a b|); largest ", max_err));

    const double achieved = gemm_flops(s) / t.median;
    Row r = common_row("gemm", dev, repeat, warmup);
    r["dtype"] = std::string(choice_name(dtype));
    r["m"] = s.m;
    r["n"] = s.n;
    r["k"] = s.k;
    r["time_s"] = t.median;
    r["time_min_s"] = t.min;
    r["time_max_s"] = t.max;
    r["flops"] = achieved;
    r["peak_flops"] = nullptr;  // filled in below, once every size has run
    r["pct_peak"] = nullptr;
    r["peak_source"] = "";
    r["checked"] = o.samples;
    r["wrong"] = bad;
    r["max_rel_error"] = std::isfinite(max_err) ? Row(max_err) : Row(nullptr);
    r["error_bound"] = bound;
    r["operand_sets"] = sets;
    report.rows.push_back(std::move(r));
    if (dev.device_type == DeviceKind::cpu) note_cpu_sgemm_rate(gemm_flops(s) / t.min);
    log_info(str("gemm ", s.m, "x", s.n, "x", s.k, " ", dtype, ": ", rate_text(dev, achieved, "FLOP/s"), " (median of ", repeat,
                 ")"));
  }
  // The CPU's peak estimate includes the runs above, so no row exceeds it.
  const Peak peak = compute_peak(dev, dtype);
  for (Row& r : report.rows) {
    r["peak_flops"] = peak.value ? Row(*peak.value) : Row(nullptr);
    auto pct = percent_of(r["flops"].get<double>(), peak);
    r["pct_peak"] = pct ? Row(*pct) : Row(nullptr);
    r["peak_source"] = peak.source;
  }
  report.notes.push_back(str("gemm: FLOPs = 2 M N K per call; C = A B row-major with A, B uniform in [-1, 1), ",
                             "rotated over enough operand sets to exceed twice the last-level cache",
                             gpu ? " (the GPU's L2); each call timed by CUDA events" : "", "; peak: ", peak.source));
  return report;
}

}  // namespace dl::bench
