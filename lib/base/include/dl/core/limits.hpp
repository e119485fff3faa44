// What the machine lets this process use, so that a size a user gives is checked before anything
// is allocated or created (docs/RELIABILITY.md, "Bounded resources"): the memory it can still
// allocate and the most CPU threads a thread count may ask for.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dl {

// The raw numbers available_memory() combines, in bytes; nullopt when a limit is not set or not
// readable.
struct MemoryLimits {
  std::optional<double> mem_available;           // /proc/meminfo MemAvailable
  std::optional<double> rlimit_as, vm_size;      // RLIMIT_AS (ulimit -v) and the address space mapped now
  std::optional<double> rlimit_data, vm_data;    // RLIMIT_DATA (ulimit -d) and the data segment now
  std::optional<double> cgroup_max, cgroup_current;  // the cgroup's memory.max and memory.current
};
MemoryLimits read_memory_limits();

struct AvailableMemory {
  double bytes = 0;    // +infinity when no limit is known
  std::string source;  // which limit is the smallest: "MemAvailable", "RLIMIT_AS (ulimit -v)", ...
  std::string describe() const;  // "3.91 GB (RLIMIT_AS (ulimit -v))"
};
// The memory this process can still allocate: the smallest of MemAvailable, RLIMIT_AS less the
// address space already mapped, RLIMIT_DATA less the data segment already used, and the cgroup's
// memory.max less its memory.current, each where it is set.
AvailableMemory available_memory(const MemoryLimits& limits);
AvailableMemory available_memory();

// Throws a usage error (an OptionError: `what` and `fix` may name options as {option}) when
// `bytes` exceed available_memory(): "<what> needs about X, but this process can use at most Y
// (source); <fix>".
void check_memory_fits(double bytes, std::string_view what, std::string_view fix);

// The most CPU threads any thread count (train.threads, DL_NUM_THREADS, --threads) may ask for:
// 4 x the cores this machine has, and at least kMinThreadCap. More threads than cores only slow
// the loops; tens of thousands exhaust the process limit.
inline constexpr int kMinThreadCap = 256;
int max_threads();
// `n` when 0 <= n <= max_threads(); otherwise a usage error naming `what` and the cap.
int check_thread_count(int64_t n, std::string_view what);
// DL_NUM_THREADS when it is set to a positive number (checked by check_thread_count); 0 otherwise.
int env_thread_count();

// Test hooks that shorten the documented examples (tests/docs runs every one of them in seconds;
// docs/RELIABILITY.md, "Examples"): the positive count the environment variable `var` holds
// (DL_EXAMPLE_MAX_STEPS: steps each training process runs; DL_EXAMPLE_MAX_TRIALS: a sweep's
// sampled trials), nullopt when it is unset or empty. Anything else is a usage error naming it,
// rather than a run that silently goes the whole way.
std::optional<int64_t> example_cap(const char* var);

}  // namespace dl
