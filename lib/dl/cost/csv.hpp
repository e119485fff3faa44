// A small RFC 4180 CSV reader for the catalogs and benchmark tables dl-cost reads: quoted fields
// (with "" for a quote and commas or newlines inside), CRLF or LF line ends, empty cells kept.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dl::cost {

struct CsvRecord {
  int64_t line = 0;                // 1-based line where the record starts
  std::vector<std::string> cells;  // unquoted
};

// Every non-blank record of `text`. Throws a usage error naming `source` and the line of an
// unterminated quoted field or text after a closing quote.
std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& source);

// The index of a header cell (exact match after trimming spaces), or -1.
int64_t csv_column(const CsvRecord& header, const std::string& name);

}  // namespace dl::cost
