// dl-cost's CSV price catalogs (Full Stack Deep Learning's tables): parse_fsdl_csv, lenient and
// strict (first byte).
#include "dl/cost/catalog.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  dl::cost::CatalogOptions opt;
  opt.strict = data[0] & 1;
  const std::string text(dl::fuzz::as_text(data + 1, size - 1));
  dl::fuzz::expect_parse_or_usage_error([&] {
    dl::cost::Catalog c = dl::cost::parse_fsdl_csv(text, "fuzz.csv", opt);
    for (const auto& o : c.offers) (void)o.why_unusable(false);
  });
  return 0;
}
