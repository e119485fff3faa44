// TOML configs and --set overrides: parse_config (dl-train, dl-shard, dl-cost, dl-bench).
// Input: the TOML text, then optionally a NUL byte and one "--set" override per line.
#include "dl/config/config.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in = dl::fuzz::as_text(data, size);
  std::vector<std::string> overrides;
  const size_t nul = in.find('\0');
  std::string_view toml = in.substr(0, nul);
  if (nul != std::string_view::npos) {
    std::string_view rest = in.substr(nul + 1);
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      overrides.emplace_back(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  dl::fuzz::expect_parse_or_usage_error([&] {
    dl::Config c = dl::parse_config(toml, "fuzz.toml", "/nonexistent-fuzz-base", overrides);
    // The resolved dump of an accepted config reads back as the same config.
    const std::string dump = dl::config_to_toml(c);
    dl::fuzz::require(dl::parse_config(dump, "dump.toml", "/nonexistent-fuzz-base") == c,
                      "config_to_toml(parse_config(x)) reads back as the same config");
  });
  return 0;
}
