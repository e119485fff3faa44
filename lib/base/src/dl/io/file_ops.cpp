#include "dl/io/file_ops.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace dl::fileio {

namespace detail {

bool g_hooked = false;

int real_open(const char* real, int flags, mode_t mode) { return ::open(real, flags, mode); }
ssize_t real_write(int fd, const void* data, size_t n) { return ::write(fd, data, n); }
int real_fsync(int fd) { return ::fsync(fd); }
int real_rename(const std::filesystem::path& from, const std::filesystem::path& to, bool no_replace) {
  if (!no_replace) return ::rename(from.c_str(), to.c_str());
  return ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
}

namespace {

// What DL_FAULT asks for.
struct FaultSpec {
  std::string op;
  std::string file = "*";
  long nth = 1;
  int err = 0;          // errno to fail with
  bool short_write = false;
  int signal = 0;       // raised before the call
};

struct HookState {
  std::mutex mu;
  bool armed = false;
  FaultSpec spec;
  long seen = 0;          // matching calls so far
  int short_fd = -1;      // the fd whose next write fails with ENOSPC (after a short write)
  int trace_fd = -1;
};

HookState& state() {
  static HookState s;
  return s;
}

// A test-only variable with a typo must not silently test nothing.
[[noreturn]] void bad_spec(const char* spec, const std::string& why) {
  std::fprintf(stderr, "DL_FAULT=%s: %s (expected op=open|write|fsync|rename,file=GLOB,nth=N,"
               "err=ENOSPC|EIO|short|TERM|KILL)\n", spec, why.c_str());
  std::_Exit(2);
}

FaultSpec parse_spec(const char* text) {
  FaultSpec s;
  std::string rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) bad_spec(text, "'" + item + "' is not key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "op") {
      if (value != "open" && value != "write" && value != "fsync" && value != "rename")
        bad_spec(text, "unknown op '" + value + "'");
      s.op = value;
    } else if (key == "file") {
      s.file = value;
    } else if (key == "nth") {
      char* end = nullptr;
      s.nth = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || s.nth < 1) bad_spec(text, "nth must be a positive integer");
    } else if (key == "err") {
      if (value == "ENOSPC") s.err = ENOSPC;
      else if (value == "EIO") s.err = EIO;
      else if (value == "short") s.short_write = true;
      else if (value == "TERM") s.signal = SIGTERM;
      else if (value == "KILL") s.signal = SIGKILL;
      else bad_spec(text, "unknown err '" + value + "'");
    } else {
      bad_spec(text, "unknown key '" + key + "'");
    }
  }
  if (s.op.empty()) bad_spec(text, "op is missing");
  if (s.err == 0 && !s.short_write && s.signal == 0) bad_spec(text, "err is missing");
  if (s.short_write && s.op != "write") bad_spec(text, "err=short needs op=write");
  return s;
}

// Read once, before main: the hot path then only tests g_hooked.
struct ReadEnvironment {
  ReadEnvironment() {
    const char* spec = std::getenv("DL_FAULT");
    const char* trace = std::getenv("DL_FAULT_TRACE");
    HookState& s = state();
    if (spec && *spec) {
      s.spec = parse_spec(spec);
      s.armed = true;
    }
    if (trace && *trace) {
      s.trace_fd = ::open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (s.trace_fd < 0) {
        std::fprintf(stderr, "DL_FAULT_TRACE=%s: %s\n", trace, std::strerror(errno));
        std::_Exit(2);
      }
    }
    g_hooked = s.armed || s.trace_fd >= 0;
  }
} read_environment;

enum class Action { proceed, fail, short_write };

// Records the call and decides its fate. Sets errno for Action::fail.
Action decide(const char* op, const std::filesystem::path& path, int fd) {
  HookState& s = state();
  int sig = 0;
  Action action = Action::proceed;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.trace_fd >= 0) {
      const std::string line = std::string(op) + " " + path.string() + "\n";
      (void)!::write(s.trace_fd, line.data(), line.size());
    }
    if (fd >= 0 && fd == s.short_fd) {
      s.short_fd = -1;
      errno = ENOSPC;
      return Action::fail;
    }
    if (!s.armed || s.spec.op != op || ::fnmatch(s.spec.file.c_str(), path.c_str(), 0) != 0) return action;
    if (++s.seen != s.spec.nth) return action;
    if (s.spec.signal) {
      sig = s.spec.signal;
    } else if (s.spec.short_write) {
      s.short_fd = fd;
      action = Action::short_write;
    } else {
      errno = s.spec.err;
      action = Action::fail;
    }
  }
  if (sig) ::raise(sig);  // outside the lock: a handler may write files
  return action;
}

}  // namespace

int hooked_open(const char* real, int flags, mode_t mode, const std::filesystem::path& path) {
  if (decide("open", path, -1) == Action::fail) return -1;
  return real_open(real, flags, mode);
}

ssize_t hooked_write(int fd, const void* data, size_t n, const std::filesystem::path& path) {
  switch (decide("write", path, fd)) {
    case Action::fail: return -1;
    case Action::short_write: return real_write(fd, data, n / 2);
    case Action::proceed: break;
  }
  return real_write(fd, data, n);
}

int hooked_fsync(int fd, const std::filesystem::path& path) {
  if (decide("fsync", path, -1) == Action::fail) return -1;
  return real_fsync(fd);
}

int hooked_rename(const std::filesystem::path& from, const std::filesystem::path& to, bool no_replace) {
  if (decide("rename", to, -1) == Action::fail) return -1;
  return real_rename(from, to, no_replace);
}

}  // namespace detail

const char* file_type_name(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return "not a plain file";
}

}  // namespace dl::fileio
