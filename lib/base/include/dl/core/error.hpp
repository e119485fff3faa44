// dl::Error: the one exception type the library throws. Its kind decides the tool's exit code.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dl {

enum class ErrorKind {
  runtime,      // something failed while running: I/O, a peer, a device (exit 1)
  usage,        // bad flags, config, data or checkpoint given by the user (exit 2)
  diverged,     // training produced NaN/Inf (exit 3)
  interrupted,  // SIGINT/SIGTERM after a clean checkpoint (exit 130)
};

// Exit codes shared by every tool (docs/ARCHITECTURE.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitDiverged = 3;
inline constexpr int kExitInterrupted = 130;

int exit_code(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Concatenates anything streamable: dl::str("tensor ", name, " has ", n, " elements").
template <class... Args>
std::string str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <class... Args>
[[noreturn]] void throw_usage(Args&&... args) {
  throw Error(ErrorKind::usage, str(std::forward<Args>(args)...));
}
template <class... Args>
[[noreturn]] void throw_runtime(Args&&... args) {
  throw Error(ErrorKind::runtime, str(std::forward<Args>(args)...));
}

// Internal invariant: a failure here is a bug in dlkit, reported as a runtime error.
#define DL_CHECK(cond, ...)                                                                  \
  do {                                                                                       \
    if (!(cond)) ::dl::throw_runtime("internal check failed (", #cond, ") at ", __FILE__, ":", \
                                     __LINE__, ": ", __VA_ARGS__);                           \
  } while (0)

}  // namespace dl
