#include "dl/bench/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dl/bench/cuda_bench.hpp"
#include "dl/bench/peaks.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/parallel.hpp"
#include "dl/core/rng.hpp"

namespace dl::bench {

namespace {

// One row of the memory benchmark (schema dlkit-bench/1), for every device and direction.
struct CopyMeasurement {
  std::string direction;
  int64_t bytes = 0;
  Timing time;
  double bytes_per_s = 0;
  int checked = 0, wrong = 0, pairs = 1;
};
Row memory_row(const DeviceInfo& dev, const CopyMeasurement& m, const Peak& peak, int repeat, int warmup) {
  Row r = common_row("memory", dev, repeat, warmup);
  r["direction"] = m.direction;
  r["bytes"] = m.bytes;
  r["time_s"] = m.time.median;
  r["time_min_s"] = m.time.min;
  r["time_max_s"] = m.time.max;
  r["bytes_per_s"] = m.bytes_per_s;
  r["peak_bytes_per_s"] = peak.value ? Row(*peak.value) : Row(nullptr);
  auto pct = percent_of(m.bytes_per_s, peak);
  r["pct_peak"] = pct ? Row(*pct) : Row(nullptr);
  r["peak_source"] = peak.source;
  r["checked"] = m.checked;
  r["wrong"] = m.wrong;
  r["buffer_pairs"] = m.pairs;
  return r;
}

}  // namespace

#ifdef DL_HAVE_CUDA
namespace {

// Device-to-device (read + write counted, as for the host copy), then host-to-device and
// device-to-host over pinned memory (bytes over the bus per second: one direction of PCIe or
// NVLink-C2C, as nvbandwidth and bandwidthTest count them).
Report run_memory_cuda(const MemoryOptions& o, const CommonOptions& common) {
  const CudaBenchDevice gpu = cuda_bench_device();
  DeviceInfo dev = gpu.info;
  dev.library = "CUDA runtime cudaMemcpyAsync";
  const double bytes_d = o.bytes > 0 ? o.bytes : is_emulated(dev) ? 16.0 * 1024 * 1024 : 1024.0 * 1024 * 1024;
  if (bytes_d < 4096) throw_option_error("{bytes} ", bytes_d, ": copy at least 4 KiB");
  if (gpu.free_bytes > 0 && 2 * bytes_d > 0.5 * gpu.free_bytes)
    throw_option_error("{bytes} ", format_bytes(bytes_d), ": source and destination need ", format_bytes(2 * bytes_d),
                       ", more than half of the GPU's free memory (", format_bytes(gpu.free_bytes), "); choose a smaller size");
  const int64_t bytes = static_cast<int64_t>(bytes_d / sizeof(float)) * static_cast<int64_t>(sizeof(float));
  const int repeat = repeat_or(common, 10), warmup = warmup_or(common, 2);
  const int max_pairs = gpu.free_bytes > 0 ? static_cast<int>(std::max(1.0, 0.25 * gpu.free_bytes / (2.0 * static_cast<double>(bytes)))) : 1;
  const int pairs = std::min(rotation_count(2 * bytes, gpu.l2_bytes, std::min(max_pairs, 256)), warmup + repeat);

  Report report;
  for (const plan::CopyDirection d : {plan::CopyDirection::d2d, plan::CopyDirection::h2d, plan::CopyDirection::d2h}) {
    const bool local = d == plan::CopyDirection::d2d;
    const std::string direction(choice_name(d));
    CudaCopyResult c = time_cuda_copy(d, bytes, local ? pairs : 1, warmup, repeat);
    const Timing t = summarize(c.seconds);
    if (c.wrong)
      report.failures.push_back(str("memory ", direction, " copy: ", c.wrong, " of ", c.checked,
                                    " sampled positions differ from the source"));
    const double rate = (local ? copy_traffic_bytes(static_cast<double>(bytes)) : static_cast<double>(bytes)) / t.median;
    const Peak peak = local ? memory_peak(dev) : host_link_peak(dev);
    Row r = memory_row(dev, {direction, bytes, t, rate, c.checked, c.wrong, local ? pairs : 1}, peak, repeat, warmup);
    report.rows.push_back(std::move(r));
    log_info(str("memory ", direction, " copy of ", format_bytes(static_cast<double>(bytes)), ": ", rate_text(dev, rate, "B/s")));
  }
  report.notes.push_back("memory: d2d = (bytes read + bytes written) / median time = 2 x size / time; h2d and d2h "
                         "(pinned host memory) = size / time, one direction of the host link; each copy timed by CUDA events");
  return report;
}

}  // namespace
#endif

Report run_memory(const MemoryOptions& o, const CommonOptions& common) {
  const DeviceKind kind = select_device(common.device);
#ifdef DL_HAVE_CUDA
  if (kind == DeviceKind::cuda) return run_memory_cuda(o, common);
#endif
  DL_CHECK(kind == DeviceKind::cpu, "memory benchmark reached without a CPU device");
  DeviceInfo dev = cpu_device_info();
  dev.library = "glibc memcpy";
  const double bytes_d = o.bytes > 0 ? o.bytes : 256.0 * 1024 * 1024;
  if (bytes_d < 4096) throw_option_error("{bytes} ", bytes_d, ": copy at least 4 KiB");
  const double memory = physical_memory_bytes();
  if (memory > 0 && 2 * bytes_d > 0.5 * memory)
    throw_option_error("{bytes} ", format_bytes(bytes_d), ": source and destination need ", format_bytes(2 * bytes_d),
                       ", more than half of this machine's ", format_bytes(memory), "; choose a smaller size");
  const int64_t n = static_cast<int64_t>(bytes_d / sizeof(float));
  const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
  const int repeat = repeat_or(common, 10), warmup = warmup_or(common, 2);
  // Small copies rotate over several source/destination pairs so the cache does not serve them.
  int max_pairs = memory > 0 ? static_cast<int>(std::max(1.0, 0.25 * memory / (2.0 * static_cast<double>(bytes)))) : 1;
  const int pairs = std::min(rotation_count(2 * bytes, last_level_cache_bytes(), std::min(max_pairs, 256)), warmup + repeat);
  std::vector<std::vector<float>> src(static_cast<size_t>(pairs)), dst(static_cast<size_t>(pairs));
  for (int p = 0; p < pairs; ++p) {
    src[static_cast<size_t>(p)].resize(static_cast<size_t>(n));
    dst[static_cast<size_t>(p)].resize(static_cast<size_t>(n));
    fill_uniform(src[static_cast<size_t>(p)].data(), n, mix64(0x3e3, static_cast<uint64_t>(p)));
    // Destinations hold other values, so a copy that did not happen shows.
    fill_uniform(dst[static_cast<size_t>(p)].data(), n, mix64(0xd57, static_cast<uint64_t>(p)));
  }
  // Every thread copies its own contiguous part (one memcpy each), as a parallel STREAM copy does.
  const int threads = num_threads();
  const int64_t grain = std::max<int64_t>(1024, (n + threads - 1) / threads);
  int next = 0;
  Timing t = time_runs(warmup, repeat, [&] {
    const float* s = src[static_cast<size_t>(next)].data();
    float* d = dst[static_cast<size_t>(next)].data();
    parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
      if (o.copy) o.copy(d + lo, s + lo, hi - lo);
      else std::memcpy(d + lo, s + lo, static_cast<size_t>(hi - lo) * sizeof(float));
    });
    next = (next + 1) % pairs;
  });

  Report report;
  // 64 sampled positions of every destination written (docs/BENCH.md).
  const int written = std::min(pairs, warmup + repeat);
  const int samples = 64 * written;
  int wrong = 0;
  for (int q = 0; q < samples; ++q) {
    const size_t p = static_cast<size_t>(q % written);
    const size_t i = static_cast<size_t>(mix64(0x5a3, static_cast<uint64_t>(q)) % static_cast<uint64_t>(n));
    if (std::memcmp(&dst[p][i], &src[p][i], sizeof(float)) != 0) ++wrong;
  }
  if (wrong) report.failures.push_back(str("memory copy: ", wrong, " of ", samples, " sampled positions differ from the source"));

  const Peak peak = memory_peak(dev);
  const double rate = copy_traffic_bytes(static_cast<double>(bytes)) / t.median;
  Row r = memory_row(dev, {"host", bytes, t, rate, samples, wrong, pairs}, peak, repeat, warmup);
  report.rows.push_back(std::move(r));
  report.notes.push_back("memory: bandwidth = (bytes read + bytes written) / median time = 2 x size / time; peak: " +
                         peak.source);
  log_info(str("memory host copy of ", format_bytes(static_cast<double>(bytes)), ": ", format_si(rate, "B/s")));
  return report;
}

}  // namespace dl::bench
