// dl-envlock constraint files (env.toml) and `apt-cache policy` output: parse_constraints,
// parse_apt_policy (the first byte picks).
#include "dl/env/resolve.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text = dl::fuzz::as_text(data + 1, size - 1);
  dl::fuzz::expect_parse_or_usage_error([&] {
    if (data[0] & 1) {
      for (const auto& p : dl::parse_apt_policy(text)) (void)p.package;
    } else {
      dl::Constraints c = dl::parse_constraints(text, "fuzz-env.toml");
      for (const auto& e : c.entries) (void)c.where(e);
    }
  });
  return 0;
}
