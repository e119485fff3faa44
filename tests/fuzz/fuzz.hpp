// Shared by the libFuzzer targets (one per parser of outside input; docs/RELIABILITY.md).
// The contract every parser keeps: any input either parses or throws dl::Error (exit 2 in the
// tools, naming the file and field). Anything else escaping — a std:: or JSON exception, a
// crash, an out-of-bounds read that ASan sees, undefined behaviour that UBSan sees — is a bug, and
// libFuzzer stops with the input that caused it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <string_view>

#include "dl/core/error.hpp"

namespace dl::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs one parse; a dl::Error is the expected refusal of bad input.
template <class F>
void expect_parse_or_usage_error(F&& parse) {
  try {
    parse();
  } catch (const Error&) {
  }
}

// A property the parser promises on input it accepted (a round trip, a self-comparison).
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace dl::fuzz
