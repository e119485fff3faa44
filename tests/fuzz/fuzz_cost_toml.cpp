// dl-cost's catalog TOML (schema dlkit-catalog/1): parse_catalog_toml.
#include "dl/cost/catalog.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(dl::fuzz::as_text(data, size));
  dl::fuzz::expect_parse_or_usage_error([&] {
    dl::cost::Catalog c = dl::cost::parse_catalog_toml(text, "fuzz.toml");
    for (const auto& o : c.offers) (void)o.why_unusable(true);
  });
  return 0;
}
