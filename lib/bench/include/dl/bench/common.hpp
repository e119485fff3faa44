// What every dl-bench benchmark shares: the device choice, the machine description each row
// carries (schema dlkit-bench/1, docs/FORMATS.md), the timing discipline (warm-up, repeats,
// median and spread) and inputs that are neither zeros nor cache-resident. Methods: docs/BENCH.md.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dl/device/select.hpp"

namespace dl::bench {

using Row = nlohmann::ordered_json;

inline constexpr const char* kSchema = "dlkit-bench/1";

// ---- device ----------------------------------------------------------------------------------

using dl::DeviceKind;  // cpu | cuda

// Whether this process can measure a GPU; *why gets the GPU's name, or the reason it cannot
// ("this build has no CUDA backend ...", "no usable CUDA GPU: cudaGetDeviceCount: ...").
bool gpu_usable(std::string* why = nullptr);

// The device option (cpu | cuda | auto), decided by choose_device() (train/device_select.hpp).
// cuda without a usable GPU is a usage error ({device}: dl/core/option_error) giving the reason;
// auto takes the GPU when there is one, else the CPU, logging which.
DeviceKind select_device(DeviceChoice device);

// The machine description every row carries (the common keys of dlkit-bench/1).
struct DeviceInfo {
  Choice<DeviceKind> device_type = DeviceKind::cpu;
  std::string device;       // CPU model string or the GPU's name as reported
  std::string gpu_model;    // canonical GPU model ("" for the CPU)
  int64_t num_devices = 1;
  std::string driver, cuda_runtime;  // "" on the CPU
  std::string library;               // "OpenBLAS 0.3.21", "Gloo", "glibc 2.36 memcpy", ...
  std::string library_config;        // openblas_get_config(), ... ("" when there is none)
  int threads = 0;                   // CPU threads each process used
};

// This CPU ("model name" of /proc/cpuinfo, read by env's parser) with the current thread count.
DeviceInfo cpu_device_info();

// OpenBLAS as loaded in this process: {"OpenBLAS 0.3.21", openblas_get_config()}.
std::pair<std::string, std::string> openblas_library();

// ---- options and results ---------------------------------------------------------------------

struct CommonOptions {
  Choice<DeviceChoice> device = DeviceChoice::cpu;
  int repeat = -1;             // timed runs; -1: the benchmark's default
  int warmup = -1;             // untimed runs first; -1: the benchmark's default
  int threads = 0;             // CPU threads (BLAS and dlkit's pool); 0: all cores
  bool quiet = false;          // no progress logs on stderr
};

// The most ranks a collective benchmark starts on this machine: one per CPU core (at least 2).
int max_local_ranks();

// Checks --repeat/--warmup/--threads (usage errors) and applies --threads and --quiet.
void apply_common(const CommonOptions& c);
// --repeat and --warmup, or the benchmark's default; at most DL_EXAMPLE_MAX_STEPS (example_capped).
int repeat_or(const CommonOptions& c, int fallback);
int warmup_or(const CommonOptions& c, int fallback);
// `n` timed (or warm-up) iterations, at most DL_EXAMPLE_MAX_STEPS where that test hook is set
// (core/limits.hpp: the documented examples' test runs every benchmark in about a second).
int example_capped(int n);

// What a benchmark returns: rows in dlkit-bench/1, human notes (shown under tables, and as
// "# ..." comments only in human formats), and failures (a wrong result: the rows are still
// printed, then the tool exits 1 naming each failure).
struct Report {
  std::vector<Row> rows;
  std::vector<std::string> notes;
  std::vector<std::string> failures;
  void append(const Report& other);
};

// In a program linked to the emulated device (cuda_device_is_emulated()), the rows measured on
// its CUDA device get "emulated": true and their rates (FLOP/s, bytes/s, tokens/s, samples/s, %
// of peak, MFU) null: the emulator's times are the CPU's, never a GPU's speed. Says so once on
// stderr. Otherwise: the report as given.
Report with_emulation_marked(const Report& report);
// Whether rows measured on `dev` come from the emulated CUDA device:
// no peak applies, and the default sizes are the emulator's (it runs a GPU thread as a fiber).
bool is_emulated(const DeviceInfo& dev);
inline constexpr const char* kEmulatedPeak = "none: the emulated device has no speed";
// A measured rate for the progress log: format_si(rate, unit), or no number for the emulated device.
std::string rate_text(const DeviceInfo& dev, double rate, const char* unit);

// The common keys, in schema order, for a row of `benchmark` measured now.
Row common_row(const std::string& benchmark, const DeviceInfo& dev, int repeat, int warmup);

// ---- timing ----------------------------------------------------------------------------------

struct Timing {
  double median = 0, min = 0, max = 0;  // seconds
  std::vector<double> samples;
};
// Median (the upper middle for an even count), min and max; empty input is a runtime error.
Timing summarize(std::vector<double> samples);

// Runs `run` warmup times untimed, then repeat times timed, each timed run measured alone.
Timing time_runs(int warmup, int repeat, const std::function<void()>& run);

// ---- inputs ----------------------------------------------------------------------------------

// Bytes of the last-level cache (sysfs cache/index*/size, the largest level; 32 MiB if unknown).
int64_t last_level_cache_bytes();

// How many distinct sets of `bytes_per_set` to rotate through so that together they exceed
// twice the last-level cache (at least 1, at most `max_sets`).
int rotation_count(int64_t bytes_per_set, int64_t llc_bytes, int max_sets);

// Values in [-1, 1) that depend on (seed, index) only: never all zeros, cheap to make (a
// SplitMix64 hash per element), filled in parallel.
void fill_uniform(float* p, int64_t n, uint64_t seed);
float uniform_value(uint64_t seed, int64_t index);

// Bytes of physical memory (sysconf), for refusing benchmarks that cannot fit.
double physical_memory_bytes();

}  // namespace dl::bench
