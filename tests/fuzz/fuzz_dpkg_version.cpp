// Debian package versions (dl-envlock, deb.* keys): parse_dpkg_version; an accepted version
// equals itself and its printed form.
#include "dl/env/dpkg_version.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = dl::fuzz::as_text(data, size);
  const size_t bar = text.find('|');  // "a|b": also compare two versions
  dl::fuzz::expect_parse_or_usage_error([&] {
    dl::DpkgVersion v = dl::parse_dpkg_version(text.substr(0, bar));
    dl::fuzz::require(dl::dpkg_compare(v, v) == 0, "a version equals itself");
    dl::fuzz::require(dl::dpkg_compare(dl::parse_dpkg_version(v.str()), v) == 0, "str() parses to an equal version");
    if (bar != std::string_view::npos) {
      dl::DpkgVersion w = dl::parse_dpkg_version(text.substr(bar + 1));
      auto sign = [](int x) { return (x > 0) - (x < 0); };
      dl::fuzz::require(sign(dl::dpkg_compare(v, w)) == -sign(dl::dpkg_compare(w, v)), "comparison is antisymmetric");
    }
  });
  return 0;
}
