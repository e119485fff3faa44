// dl-bench rows as dl-cost and dl-shard read them (--bench): plan::parse_bench_output in the
// first byte's format, then the summary they plan with.
#include <nlohmann/json.hpp>

#include "dl/plan/bench_input.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto format = static_cast<dl::plan::BenchRowsFormat>(data[0] % 4);
  const std::string text(dl::fuzz::as_text(data + 1, size - 1));
  dl::fuzz::expect_parse_or_usage_error([&] { (void)dl::plan::parse_bench_output(text, "fuzz.json", format); });
  dl::fuzz::expect_parse_or_usage_error([&] {
    auto rows = dl::plan::parse_bench_rows(text, "fuzz.json");
    for (dl::Precision precision : {dl::Precision::bf16, dl::Precision::fp16, dl::Precision::fp32}) (void)dl::plan::summarize_bench(rows, precision);
  });
  return 0;
}
