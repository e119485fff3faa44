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

// The tool's flag for `option` (the bare option when `names` has none), for text that is not an
// error: notes and hints that tell the user which flag to give.
std::string option_flag(const OptionNames& names, const std::string& option);

// An error (usage unless said otherwise) whose what() names each option bare ("min_bytes 9 is
// larger than max_bytes 8").
class OptionError : public Error {
 public:
  // `literal` follows the message as it is: text such as a path, where braces are not options.
  explicit OptionError(const std::string& message, ErrorKind kind = ErrorKind::usage, const std::string& literal = "")
      : Error(kind, name_options(message, {}) + literal), message_(message), literal_(literal) {}
  std::string named(const OptionNames& names) const { return name_options(message_, names) + literal_; }

 private:
  std::string message_, literal_;
};

// What `e` says with its options named by `names` when it is an OptionError, else e.what().
std::string named_message(const Error& e, const OptionNames& names);

template <class... Args>
[[noreturn]] void throw_option_error(Args&&... args) {
  throw OptionError(str(std::forward<Args>(args)...));
}

// read(what): a reader such as read_input_file whose dl::Error messages begin with `what`, which
// names an option ("{bench}: cannot read"); its errors become OptionErrors of the same kind.
template <class Read>
auto read_naming_option(const std::string& what, Read&& read) -> decltype(read(what)) {
  try {
    return read(what);
  } catch (const OptionError&) {
    throw;
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.rfind(what, 0) != 0) throw;
    throw OptionError(what, e.kind(), message.substr(what.size()));
  }
}

}  // namespace dl
