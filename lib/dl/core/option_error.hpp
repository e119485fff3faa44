// Errors about a library call's options, named by the option rather than by a tool's flag: the
// library writes `{min_bytes}` where the option belongs, and the tool, which knows its flag for
// it (-b), rewrites the message, so flag spellings live in the tools.
#pragma once
#include <map>
#include <string>
#include <utility>

#include "dl/core/error.hpp"

namespace dl {

using OptionNames = std::map<std::string, std::string>;  // option -> the tool's flag

// `message` with each {option} replaced by its flag in `names` (the bare option when absent).
std::string name_options(const std::string& message, const OptionNames& names);

// A usage error whose what() names each option bare ("min_bytes 9 is larger than max_bytes 8").
class OptionError : public Error {
 public:
  explicit OptionError(const std::string& message)
      : Error(ErrorKind::usage, name_options(message, {})), message_(message) {}
  std::string named(const OptionNames& names) const { return name_options(message_, names); }

 private:
  std::string message_;
};

template <class... Args>
[[noreturn]] void throw_option_error(Args&&... args) {
  throw OptionError(str(std::forward<Args>(args)...));
}

}  // namespace dl
