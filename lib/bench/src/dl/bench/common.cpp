#include "dl/bench/common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "dl/bench/cuda_bench.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/limits.hpp"
#include "dl/core/parallel.hpp"
#include "dl/core/rng.hpp"
#include "dl/core/version.hpp"
#include "dl/env/lock.hpp"
#include "dl/env/native.hpp"
#include "dl/env/snapshot.hpp"

namespace dl::bench {

namespace fs = std::filesystem;

namespace {

// The GPU this process would measure (detail: its name), or why there is none.
GpuCheck bench_gpu_check() {
#ifdef DL_HAVE_CUDA
  const CudaBenchDevice gpu = cuda_bench_device();
  if (gpu.usable) return {GpuBlock::none, gpu.info.device};
  return {GpuBlock::no_gpu, "no usable CUDA GPU: " + gpu.why};
#else
  return {GpuBlock::no_backend, "this build has no CUDA backend (it is CPU only)"};
#endif
}

}  // namespace

bool gpu_usable(std::string* why) {
  const GpuCheck g = bench_gpu_check();
  if (why) *why = g.detail;
  return g.block == GpuBlock::none;
}

DeviceKind select_device(DeviceChoice device) {
  static const DeviceWords words{
      [](const GpuCheck& g) { return "{device} cuda: " + g.detail + "; use {device} cpu, or {device} auto to fall back to the CPU"; },
      [](const GpuCheck& g) {
        return g.block == GpuBlock::none ? "device auto: measuring the GPU, " + g.detail
                                         : "device auto: " + g.detail + "; measuring the CPU";
      }};
  return choose_device(device, bench_gpu_check, words, true);
}

std::pair<std::string, std::string> openblas_library() {
  static const std::pair<std::string, std::string> lib = [] {
    OpenblasProbe p = probe_openblas();
    std::string name = p.version.empty() ? std::string("OpenBLAS") : "OpenBLAS " + p.version;
    return std::make_pair(name, p.config);
  }();
  return lib;
}

DeviceInfo cpu_device_info() {
  static const std::string model = [] {
    std::ifstream f("/proc/cpuinfo");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string m = parse_cpuinfo(ss.str()).model;
    return m.empty() ? std::string("CPU") : m;
  }();
  DeviceInfo d;
  d.device = model;
  d.num_devices = 1;
  d.threads = num_threads();
  return d;
}

void apply_common(const CommonOptions& c) {
  if (c.repeat != -1 && (c.repeat < 1 || c.repeat > 1000000))
    throw_option_error("{repeat} ", c.repeat, ": need at least 1 timed run");
  if (c.warmup != -1 && (c.warmup < 0 || c.warmup > 1000000)) throw_option_error("{warmup} ", c.warmup, ": need 0 or more");
  set_num_threads(check_thread_count(c.threads, "--threads"));  // the cap train.threads has
  set_log_quiet(c.quiet);
}

int max_local_ranks() { return static_cast<int>(std::max(2u, std::thread::hardware_concurrency())); }

int example_capped(int n) {
  const auto cap = example_cap("DL_EXAMPLE_MAX_STEPS");
  return cap ? static_cast<int>(std::min<int64_t>(n, *cap)) : n;
}

int repeat_or(const CommonOptions& c, int fallback) { return example_capped(c.repeat > 0 ? c.repeat : fallback); }
int warmup_or(const CommonOptions& c, int fallback) { return example_capped(c.warmup >= 0 ? c.warmup : fallback); }

void Report::append(const Report& o) {
  rows.insert(rows.end(), o.rows.begin(), o.rows.end());
  notes.insert(notes.end(), o.notes.begin(), o.notes.end());
  failures.insert(failures.end(), o.failures.begin(), o.failures.end());
}

Report with_emulation_marked(const Report& report) {
  if (!cuda_device_is_emulated()) return report;
  static const char* const kRates[] = {"flops", "bytes_per_s", "tokens_per_sec", "samples_per_sec", "pct_peak", "mfu"};
  Report marked = report;
  bool any = false;
  for (Row& r : marked.rows) {
    if (!r.is_object() || r.value("device_type", "") != "cuda") continue;
    r["emulated"] = true;
    for (const char* key : kRates)
      if (r.contains(key)) r[key] = nullptr;
    any = true;
  }
  static bool said = false;
  if (any && !said) {
    std::fprintf(stderr, "dl-bench: the CUDA rows come from the emulated device (docs/CUDA.md): "
                         "\"emulated\": true, rates left empty; their times are the CPU's emulation, not a GPU's speed\n");
    said = true;
  }
  return marked;
}

bool is_emulated(const DeviceInfo& dev) { return dev.device_type == DeviceKind::cuda && cuda_device_is_emulated(); }

std::string rate_text(const DeviceInfo& dev, double rate, const char* unit) {
  if (is_emulated(dev)) return "ran on the emulated device (no speed)";
  return format_si(rate, unit);
}

Row common_row(const std::string& benchmark, const DeviceInfo& dev, int repeat, int warmup) {
  Row r;
  r["schema"] = kSchema;
  r["benchmark"] = benchmark;
  r["time"] = utc_timestamp();
  r["host"] = host_name();
  r["device_type"] = std::string(dev.device_type.name());
  r["device"] = dev.device;
  r["gpu_model"] = dev.gpu_model;
  r["num_devices"] = dev.num_devices;
  r["driver"] = dev.driver;
  r["cuda_runtime"] = dev.cuda_runtime;
  r["library"] = dev.library;
  r["library_config"] = dev.library_config;
  r["threads"] = dev.threads;
  r["dlkit_version"] = version_string();
  r["repeat"] = repeat;
  r["warmup"] = warmup;
  return r;
}

Timing summarize(std::vector<double> samples) {
  DL_CHECK(!samples.empty(), "no timed runs to summarize");
  Timing t;
  t.samples = samples;
  std::sort(samples.begin(), samples.end());
  t.median = samples[samples.size() / 2];
  t.min = samples.front();
  t.max = samples.back();
  return t;
}

Timing time_runs(int warmup, int repeat, const std::function<void()>& run) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> s;
  s.reserve(static_cast<size_t>(repeat));
  for (int i = 0; i < repeat; ++i) {
    const double t0 = monotonic_seconds();
    run();
    s.push_back(monotonic_seconds() - t0);
  }
  return summarize(std::move(s));
}

int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    int64_t best = 0;
    int best_level = -1;
    std::error_code ec;
    const fs::path base = "/sys/devices/system/cpu/cpu0/cache";
    for (const auto& e : fs::directory_iterator(base, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("index", 0) != 0) continue;
      std::ifstream lf(e.path() / "level"), sf(e.path() / "size"), tf(e.path() / "type");
      int level = 0;
      std::string size, type;
      if (!(lf >> level) || !(sf >> size)) continue;
      tf >> type;
      if (type == "Instruction") continue;
      int64_t v = std::atoll(size.c_str());
      char unit = size.empty() ? 'B' : size.back();
      if (unit == 'K') v *= 1024;
      else if (unit == 'M') v *= 1024 * 1024;
      else if (unit == 'G') v *= int64_t{1024} * 1024 * 1024;
      if (level > best_level || (level == best_level && v > best)) {
        best_level = level;
        best = v;
      }
    }
    if (best <= 0) {
      long s = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
      if (s <= 0) s = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
      best = s > 0 ? s : int64_t{32} << 20;
    }
    return best;
  }();
  return bytes;
}

int rotation_count(int64_t bytes_per_set, int64_t llc_bytes, int max_sets) {
  if (bytes_per_set <= 0) return 1;
  int64_t want = (2 * llc_bytes + bytes_per_set - 1) / bytes_per_set;
  return static_cast<int>(std::clamp<int64_t>(want, 1, std::max(1, max_sets)));
}

float uniform_value(uint64_t seed, int64_t index) {
  uint64_t h = mix64(seed, static_cast<uint64_t>(index));
  // 24 random bits -> [-1, 1) exactly representable in float.
  return static_cast<float>(static_cast<double>(h >> 40) * (2.0 / 16777216.0) - 1.0);
}

void fill_uniform(float* p, int64_t n, uint64_t seed) {
  parallel_for(n, 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) p[i] = uniform_value(seed, i);
  });
}

double physical_memory_bytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

}  // namespace dl::bench
