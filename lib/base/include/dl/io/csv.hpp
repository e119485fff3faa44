// CSV, read and written one way for every file dlkit reads or prints (RFC 4180): quoted fields
// (with "" for a quote and commas or newlines inside), CRLF, LF or CR line ends, empty cells
// kept, a UTF-8 byte-order mark skipped. dl-cost's catalogs and benchmark tables, dl-bench's csv
// rows, the csv:PATH data source and every --format csv table use it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dl {

struct CsvRecord {
  int64_t line = 0;                // 1-based line where the record starts
  std::vector<std::string> cells;  // unquoted
};

struct CsvOptions {
  // Spaces and tabs around an unquoted cell are dropped (a quoted cell keeps its content).
  bool trim = false;
  // A quoted cell may hold line breaks (RFC 4180); false: it must close on the line it opens on.
  bool multiline_quotes = true;
};

// Every non-blank record of `text` (a record whose cells are all spaces is skipped). Throws a
// usage error naming `source` and the line of an unterminated quoted cell or of text after a
// closing quote.
std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& source, const CsvOptions& options = {});

// The index of a header cell (exact match after trimming spaces), or -1.
int64_t csv_column(const CsvRecord& header, const std::string& name);

// One cell as written: quoted (quotes doubled) when it holds a comma, quote or line break.
std::string csv_field(const std::string& s);

}  // namespace dl
