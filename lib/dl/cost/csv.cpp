#include "dl/cost/csv.hpp"

#include "dl/core/error.hpp"

namespace dl::cost {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

bool blank(const CsvRecord& r) {
  for (const auto& c : r.cells)
    if (!trim(c).empty()) return false;
  return true;
}

}  // namespace

std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& source) {
  std::vector<CsvRecord> out;
  int64_t line = 1;
  size_t i = 0;
  // A UTF-8 byte-order mark is not part of the first header cell.
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") i = 3;
  while (i < text.size()) {
    CsvRecord rec;
    rec.line = line;
    std::string cell;
    bool quoted = false, after_quote = false;
    int64_t quote_line = line;
    for (;;) {
      if (i >= text.size()) {
        if (quoted) throw_usage(source, ":", quote_line, ": unterminated quoted field");
        rec.cells.push_back(std::move(cell));
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
          if (c == '\n') ++line;
          cell += c;
          ++i;
        }
        continue;
      }
      if (c == ',') {
        rec.cells.push_back(std::move(cell));
        cell.clear();
        after_quote = false;
        ++i;
        continue;
      }
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (c == '\n' || c == '\r') {
        ++i;
        ++line;
        rec.cells.push_back(std::move(cell));
        break;
      }
      if (c == '"' && !after_quote && trim(cell).empty()) {
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
        throw_usage(source, ":", line, ": text after a closing quote in a quoted field");
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
    if (trim(header.cells[i]) == name) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace dl::cost
