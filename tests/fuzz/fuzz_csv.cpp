// CSV (RFC 4180) as every CSV user reads it: parse_csv under the first byte's options (data files
// use trim + single-line quotes, catalogs and dl-bench rows the defaults), then csv_column.
#include "dl/io/csv.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  dl::CsvOptions opt;
  opt.trim = data[0] & 1;
  opt.multiline_quotes = data[0] & 2;
  std::string_view text = dl::fuzz::as_text(data + 1, size - 1);
  dl::fuzz::expect_parse_or_usage_error([&] {
    auto records = dl::parse_csv(text, "fuzz.csv", opt);
    int64_t last_line = 0;
    for (const auto& r : records) {
      dl::fuzz::require(r.line > last_line, "records start on increasing lines");
      last_line = r.line;
    }
    if (!records.empty()) (void)dl::csv_column(records.front(), "gpu");
    // A cell written by csv_field reads back as itself (as the second cell of a record: a
    // byte-order mark at the very start of a file is skipped by design).
    for (const auto& r : records)
      for (const auto& cell : r.cells) {
        auto back = dl::parse_csv("a," + dl::csv_field(cell) + "\n", "roundtrip.csv");
        dl::fuzz::require(back.size() == 1 && back[0].cells.size() == 2 && back[0].cells[1] == cell,
                          "csv_field(cell) parses back to the cell");
      }
  });
  return 0;
}
