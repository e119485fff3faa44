#include "dl/io/csv.hpp"

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"

namespace dl {

namespace {

bool blank(const CsvRecord& r) {
  for (const auto& c : r.cells)
    if (!trim(c, kBlank).empty()) return false;
  return true;
}

}  // namespace

std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& source, const CsvOptions& options) {
  std::vector<CsvRecord> out;
  int64_t line = 1;
  size_t i = 0;
  // A UTF-8 byte-order mark is not part of the first header cell.
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") i = 3;
  auto unterminated = [&](int64_t at) {
    if (options.multiline_quotes) throw_usage(source, ":", at, ": unterminated quoted field");
    throw_usage(source, ":", at, ": unterminated quoted cell (a quoted cell closes on the line it opens on)");
  };
  while (i < text.size()) {
    CsvRecord rec;
    rec.line = line;
    std::string cell;
    bool quoted = false, after_quote = false;
    int64_t quote_line = line;
    // A finished cell: unquoted cells trimmed when asked.
    auto push = [&] {
      rec.cells.push_back(options.trim && !after_quote ? trim(cell, kBlank) : std::move(cell));
      cell.clear();
      after_quote = false;
    };
    for (;;) {
      if (i >= text.size()) {
        if (quoted) unterminated(quote_line);
        push();
        break;
      }
      char c = text[i];
      if (quoted) {
        if (c == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            cell += '"';
            i += 2;
          } else {
            quoted = false;
            after_quote = true;
            ++i;
          }
        } else {
          if (c == '\n' || c == '\r') {
            if (!options.multiline_quotes) unterminated(quote_line);
            if (c == '\n') ++line;
          }
          cell += c;
          ++i;
        }
        continue;
      }
      if (c == ',') {
        push();
        ++i;
        continue;
      }
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (c == '\n' || c == '\r') {
        ++i;
        ++line;
        push();
        break;
      }
      if (c == '"' && !after_quote && trim(cell, kBlank).empty()) {
        quoted = true;
        quote_line = line;
        cell.clear();
        ++i;
        continue;
      }
      if (after_quote) {
        if (c == ' ' || c == '\t') {
          ++i;
          continue;
        }
        throw_usage(source, ":", line, ": text after a closing quote in column ", rec.cells.size() + 1);
      }
      cell += c;
      ++i;
    }
    if (!blank(rec)) out.push_back(std::move(rec));
  }
  return out;
}

int64_t csv_column(const CsvRecord& header, const std::string& name) {
  for (size_t i = 0; i < header.cells.size(); ++i)
    if (trim(header.cells[i], kBlank) == name) return static_cast<int64_t>(i);
  return -1;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace dl
