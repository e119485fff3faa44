// PEP 440 versions and specifier sets (dl-envlock, python.* keys): a parsed version's normal
// form parses to an equal version; a specifier set parses or is refused with dl::Error.
#include "dl/env/pep440.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = dl::fuzz::as_text(data, size);
  const size_t bar = text.find('|');  // "version|specifiers"
  std::string_view version = text.substr(0, bar);
  dl::fuzz::expect_parse_or_usage_error([&] {
    auto v = dl::parse_pep440(version);
    if (!v) return;
    auto again = dl::parse_pep440(v->str());
    dl::fuzz::require(again && dl::pep440_compare(*v, *again) == 0, "str() of a version parses to an equal one");
    dl::fuzz::require(dl::pep440_compare(*v, *v) == 0, "a version equals itself");
    if (bar != std::string_view::npos) {
      dl::Pep440SpecifierSet set = dl::parse_pep440_specifiers(text.substr(bar + 1));
      (void)set.contains(*v);
      (void)set.contains(*v, true);
      (void)set.str();
    }
  });
  return 0;
}
