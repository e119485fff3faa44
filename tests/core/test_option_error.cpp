// dl/core/option_error: the library names an option, the tool its flag.
#include <doctest/doctest.h>

#include "dl/core/option_error.hpp"

using namespace dl;

TEST_CASE("option errors: {option} becomes the tool's flag, or the bare option without one") {
  const OptionNames flags = {{"min_bytes", "-b"}, {"max_bytes", "-e"}};
  CHECK(name_options("{min_bytes} 9 is larger than {max_bytes} 8 (give {min_bytes} MIN)", flags) ==
        "-b 9 is larger than -e 8 (give -b MIN)");
  CHECK(name_options("{factor} 0: at least 1", flags) == "factor 0: at least 1");
  CHECK(name_options("no option, an open { brace", flags) == "no option, an open { brace");
  try {
    throw_option_error("{max_bytes} ", -1, ": must not be negative");
  } catch (const OptionError& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()) == "max_bytes -1: must not be negative");
    CHECK(e.named(flags) == "-e -1: must not be negative");
  }
}
