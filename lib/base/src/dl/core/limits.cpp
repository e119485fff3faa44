#include "dl/core/limits.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <iomanip>
#include <limits>
#include <sstream>
#include <thread>

#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"

namespace dl {

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// "MemAvailable:   123456 kB" -> bytes, from a /proc file of such lines.
std::optional<double> kib_field(const std::optional<std::string>& text, const std::string& field) {
  if (!text) return std::nullopt;
  const std::string key = field + ":";
  size_t pos = text->rfind(key, 0) == 0 ? 0 : text->find("\n" + key);
  if (pos == std::string::npos) return std::nullopt;
  if (pos != 0) ++pos;
  return std::strtod(text->c_str() + pos + key.size(), nullptr) * 1024.0;
}

// A cgroup file holding one number ("max", or v1's page-rounded 2^63, means no limit).
std::optional<double> cgroup_number(const std::string& path) {
  const auto text = read_text(path);
  if (!text || text->rfind("max", 0) == 0) return std::nullopt;
  const double v = std::strtod(text->c_str(), nullptr);
  return v > 0 && v < 4.0e18 ? std::optional<double>(v) : std::nullopt;
}

std::optional<double> rlimit(int which) {
  struct rlimit r {};
  if (getrlimit(which, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<double>(r.rlim_cur);
}

void read_cgroup(MemoryLimits& m) {
  // cgroup v2: "0::/path"; v1: "N:memory:/path" (or "N:...,memory,...:/path").
  std::istringstream lines(read_text("/proc/self/cgroup").value_or(""));
  for (std::string line; std::getline(lines, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      for (const std::string& dir : {"/sys/fs/cgroup" + path, std::string("/sys/fs/cgroup")}) {
        if (auto max = cgroup_number(dir + "/memory.max")) {
          m.cgroup_max = max;
          m.cgroup_current = cgroup_number(dir + "/memory.current");
          return;
        }
      }
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      for (const std::string& dir : {"/sys/fs/cgroup/memory" + path, std::string("/sys/fs/cgroup/memory")}) {
        if (auto max = cgroup_number(dir + "/memory.limit_in_bytes")) {
          m.cgroup_max = max;
          m.cgroup_current = cgroup_number(dir + "/memory.usage_in_bytes");
          return;
        }
      }
    }
  }
}

// "3.91 GB", "768 TB", "3.23e+05 EB": three digits in decimal units.
std::string decimal_bytes(double bytes) {
  static const char* const units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  size_t u = 0;
  for (; bytes >= 1000 && u + 1 < std::size(units); ++u) bytes /= 1000;
  std::ostringstream s;
  s << std::setprecision(3) << bytes << " " << units[u];
  return s.str();
}

}  // namespace

MemoryLimits read_memory_limits() {
  MemoryLimits m;
  m.mem_available = kib_field(read_text("/proc/meminfo"), "MemAvailable");
  const auto status = read_text("/proc/self/status");
  m.rlimit_as = rlimit(RLIMIT_AS);
  m.vm_size = kib_field(status, "VmSize");
  m.rlimit_data = rlimit(RLIMIT_DATA);
  m.vm_data = kib_field(status, "VmData");
  read_cgroup(m);
  return m;
}

AvailableMemory available_memory(const MemoryLimits& m) {
  AvailableMemory a{std::numeric_limits<double>::infinity(), "no known limit"};
  auto consider = [&a](const std::optional<double>& limit, const std::optional<double>& used, const char* source) {
    if (!limit) return;
    const double left = std::max(0.0, *limit - used.value_or(0.0));
    if (left < a.bytes) a = AvailableMemory{left, source};
  };
  consider(m.mem_available, std::nullopt, "MemAvailable in /proc/meminfo");
  consider(m.rlimit_as, m.vm_size, "RLIMIT_AS (ulimit -v)");
  consider(m.rlimit_data, m.vm_data, "RLIMIT_DATA (ulimit -d)");
  consider(m.cgroup_max, m.cgroup_current, "the cgroup's memory limit");
  return a;
}

AvailableMemory available_memory() { return available_memory(read_memory_limits()); }

std::string AvailableMemory::describe() const {
  return std::isfinite(bytes) ? decimal_bytes(bytes) + " (" + source + ")" : "unlimited";
}

void check_memory_fits(double bytes, std::string_view what, std::string_view fix) {
  const AvailableMemory a = available_memory();
  if (!(bytes <= a.bytes))
    throw OptionError(str(what, " needs about ", decimal_bytes(bytes), ", but this process can use at most ", a.describe(),
                          "; ", fix));
}

int max_threads() {
  return std::max(kMinThreadCap, 4 * static_cast<int>(std::thread::hardware_concurrency()));
}

int check_thread_count(int64_t n, std::string_view what) {
  if (n < 0 || n > max_threads())
    throw_usage(what, " = ", n, " is beyond the thread cap of ", max_threads(), " (4 x the ",
                std::thread::hardware_concurrency(), " cores, at least ", kMinThreadCap,
                "): give at most that, or 0 for one thread per core");
  return static_cast<int>(n);
}

int env_thread_count() {
  const char* v = std::getenv("DL_NUM_THREADS");
  if (!v || !*v) return 0;
  const long long n = std::strtoll(v, nullptr, 10);
  if (n <= 0) return 0;  // not a positive number: one thread per core, as before
  return check_thread_count(n, "DL_NUM_THREADS");
}

std::optional<int64_t> example_cap(const char* var) {
  const char* v = std::getenv(var);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (*end || errno || n < 1) throw_usage(var, " = '", v, "': give a positive whole number, or unset it");
  return static_cast<int64_t>(n);
}

}  // namespace dl
