// dl/core/limits: the memory this process can still allocate and the thread cap, the one place
// every size a user gives is checked against (docs/RELIABILITY.md, "Bounded resources").
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "dl/core/error.hpp"
#include "dl/core/limits.hpp"
#include "dl/core/option_error.hpp"
#include "support/support.hpp"

using namespace dl;
using dl::test::has;
using dl::test::usage_error_of;

TEST_CASE("available memory is the smallest limit less what the process already uses") {
  MemoryLimits m;
  CHECK(std::isinf(available_memory(m).bytes));
  m.mem_available = 8e9;
  CHECK(available_memory(m).bytes == 8e9);
  CHECK(has(available_memory(m).source, "MemAvailable"));
  m.rlimit_as = 4e9;  // ulimit -v, with 1 GB already mapped
  m.vm_size = 1e9;
  CHECK(available_memory(m).bytes == 3e9);
  CHECK(has(available_memory(m).source, "RLIMIT_AS"));
  m.rlimit_data = 2.5e9;
  m.vm_data = 0.5e9;
  CHECK(available_memory(m).bytes == 2e9);
  CHECK(has(available_memory(m).source, "RLIMIT_DATA"));
  m.cgroup_max = 1.5e9;
  m.cgroup_current = 0.5e9;
  CHECK(available_memory(m).bytes == 1e9);
  CHECK(has(available_memory(m).source, "cgroup"));
  m.cgroup_current = 9e9;  // over its limit already: nothing left, never negative
  CHECK(available_memory(m).bytes == 0);
  CHECK(has(available_memory(m).describe(), "0 B (the cgroup's memory limit)"));
}

TEST_CASE("this machine's probe reads MemAvailable and the process's own limits") {
  const MemoryLimits m = read_memory_limits();
  REQUIRE(m.mem_available);  // Linux: /proc/meminfo
  CHECK(*m.mem_available > 0);
  REQUIRE(m.vm_size);
  CHECK(*m.vm_size > 0);
  const AvailableMemory a = available_memory();
  CHECK(a.bytes > 0);
  CHECK(a.bytes <= *m.mem_available * 1.5);  // MemAvailable moves between the two reads
}

TEST_CASE("a size beyond available memory is a usage error saying what, how much and what to do") {
  CHECK(usage_error_of([] { check_memory_fits(1e6, "a megabyte", "never"); }).empty());
  const std::string e = usage_error_of([] { check_memory_fits(1e30, "{max_bytes} 1e30", "lower {max_bytes}"); });
  CHECK(has(e, "max_bytes 1e30 needs about 1e+12 EB, but this process can use at most "));
  CHECK(has(e, "; lower max_bytes"));
  try {
    check_memory_fits(1e30, "{max_bytes} 1e30", "lower {max_bytes}");
  } catch (const OptionError& o) {
    CHECK(has(o.named({{"max_bytes", "-e"}}), "lower -e"));
  }
}

TEST_CASE("thread counts beyond the cap are usage errors naming the key or variable") {
  CHECK(max_threads() >= kMinThreadCap);
  CHECK(check_thread_count(0, "train.threads") == 0);
  CHECK(check_thread_count(max_threads(), "train.threads") == max_threads());
  const std::string e = usage_error_of([] { check_thread_count(100000, "train.threads"); });
  CHECK(has(e, "train.threads = 100000 is beyond the thread cap of " + std::to_string(max_threads())));

  const char* before = std::getenv("DL_NUM_THREADS");
  const std::string saved = before ? before : "";
  setenv("DL_NUM_THREADS", "100000", 1);
  CHECK(has(usage_error_of([] { env_thread_count(); }), "DL_NUM_THREADS = 100000 is beyond the thread cap"));
  setenv("DL_NUM_THREADS", "3", 1);
  CHECK(env_thread_count() == 3);
  setenv("DL_NUM_THREADS", "0", 1);
  CHECK(env_thread_count() == 0);  // not a positive number: one thread per core
  if (before) setenv("DL_NUM_THREADS", saved.c_str(), 1);
  else unsetenv("DL_NUM_THREADS");
}
