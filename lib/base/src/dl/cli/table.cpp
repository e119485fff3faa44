#include "dl/cli/table.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"
#include "dl/io/csv.hpp"

namespace dl {

OutputFormat parse_output_format(const std::string& s) {
  if (auto f = parse_choice<OutputFormat>(s)) return *f;
  throw_usage("unknown output format '", s, "' (use table, json, jsonl, csv or md)");
}

std::string format_name(OutputFormat f) { return std::string(choice_name(f)); }

Cell Cell::str(std::string s) { return Cell{s, s}; }
Cell Cell::num(double v, std::string text) {
  return Cell{std::isfinite(v) ? CellValue(v) : CellValue(), std::move(text)};
}
Cell Cell::integer(int64_t v) { return Cell{v, std::to_string(v)}; }
Cell Cell::boolean(bool v, std::string yes, std::string no) { return Cell{v, v ? yes : no}; }
Cell Cell::null(std::string text) { return Cell{std::monostate{}, std::move(text)}; }
Cell Cell::checksum(uint32_t v) { return str("0x" + hex32(v)); }

void Table::add_row(std::vector<Cell> row) {
  DL_CHECK(row.size() == columns_.size(), "row has ", row.size(), " cells for ", columns_.size(), " columns");
  rows_.push_back(std::move(row));
}

namespace {

nlohmann::ordered_json json_of(const CellValue& v) {
  return std::visit([](const auto& x) -> nlohmann::ordered_json {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) return nullptr;
    else return x;
  }, v);
}

// A csv cell: "" for null, true/false, integers in full, numbers to 10 significant digits,
// lists as JSON ([64,128]).
std::string raw_text(const CellValue& v) {
  if (std::holds_alternative<std::vector<int64_t>>(v)) return json_of(v).dump();
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.10g", *d);
    return buf;
  }
  return "";
}

// Display width in terminal cells: UTF-8 continuation bytes take no cell.
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string pad(const std::string& s, size_t width, bool right) {
  size_t w = display_width(s);
  std::string fill(width > w ? width - w : 0, ' ');
  return right ? fill + s : s + fill;
}

}  // namespace

// JSON carries text as UTF-8: a byte that is not (a byte-level model's sample) becomes U+FFFD
// instead of aborting the output.
std::string Table::render(OutputFormat f) const {
  std::ostringstream os;
  switch (f) {
    case OutputFormat::json: {
      // Keep column order: build each object in order with ordered_json.
      nlohmann::ordered_json arr = nlohmann::ordered_json::array();
      for (const auto& r : rows_) {
        nlohmann::ordered_json obj;
        for (size_t i = 0; i < columns_.size(); ++i) obj[columns_[i].key] = json_of(r[i].value);
        arr.push_back(std::move(obj));
      }
      os << arr.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
      break;
    }
    case OutputFormat::jsonl:
      for (const auto& r : rows_) {
        nlohmann::ordered_json obj;
        for (size_t i = 0; i < columns_.size(); ++i) obj[columns_[i].key] = json_of(r[i].value);
        os << obj.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
      }
      break;
    case OutputFormat::csv: {
      for (size_t i = 0; i < columns_.size(); ++i) os << (i ? "," : "") << csv_field(columns_[i].key);
      os << "\n";
      for (const auto& r : rows_) {
        for (size_t i = 0; i < columns_.size(); ++i) os << (i ? "," : "") << csv_field(raw_text(r[i].value));
        os << "\n";
      }
      break;
    }
    case OutputFormat::md: {
      os << "|";
      for (const auto& c : columns_) os << " " << c.header << " |";
      os << "\n|";
      for (const auto& c : columns_) os << (c.right ? " ---: |" : " --- |");
      os << "\n";
      for (const auto& r : rows_) {
        os << "|";
        for (const auto& cell : r) os << " " << printable(cell.text) << " |";
        os << "\n";
      }
      for (const auto& n : notes_) os << "\n" << printable(n) << "\n";
      break;
    }
    case OutputFormat::table: {
      // What a terminal shows: cells from files are made printable before they are measured.
      std::vector<std::vector<std::string>> text(rows_.size());
      for (size_t k = 0; k < rows_.size(); ++k)
        for (const auto& cell : rows_[k]) text[k].push_back(printable(cell.text));
      std::vector<size_t> width(columns_.size());
      for (size_t i = 0; i < columns_.size(); ++i) {
        width[i] = display_width(columns_[i].header);
        for (const auto& r : text) width[i] = std::max(width[i], display_width(r[i]));
      }
      // A key-value table (no headers, dl-train's summary) starts with its first row, not a
      // line of spaces.
      const bool headed = std::any_of(columns_.begin(), columns_.end(), [](const auto& c) { return !c.header.empty(); });
      if (headed) {
        std::string line;
        for (size_t i = 0; i < columns_.size(); ++i) line += (i ? "  " : "") + pad(columns_[i].header, width[i], columns_[i].right);
        while (!line.empty() && line.back() == ' ') line.pop_back();
        os << line << "\n";
      }
      for (const auto& r : text) {
        std::string line;
        for (size_t i = 0; i < columns_.size(); ++i) line += (i ? "  " : "") + pad(r[i], width[i], columns_[i].right);
        while (!line.empty() && line.back() == ' ') line.pop_back();
        os << line << "\n";
      }
      for (const auto& n : notes_) os << printable(n) << "\n";
      break;
    }
  }
  return os.str();
}

std::string format_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string format_bytes(double bytes, bool binary) {
  const char* dec[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  const char* bin[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double base = binary ? 1024.0 : 1000.0;
  int i = 0;
  double v = bytes;
  while (std::fabs(v) >= base && i < 5) {
    v /= base;
    ++i;
  }
  return (i == 0 ? format_fixed(v, 0) : format_fixed(v, std::fabs(v) < 10 ? 2 : (std::fabs(v) < 100 ? 1 : 0))) + " " +
         (binary ? bin[i] : dec[i]);
}

std::string format_si(double v, const std::string& unit, int precision) {
  if (!std::isfinite(v)) return "-";
  const char* pre[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  double x = v;
  while (std::fabs(x) >= 1000.0 && i < 6) {
    x /= 1000.0;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, x);
  return std::string(buf) + " " + pre[i] + unit;
}

std::string format_duration(double s) {
  if (!std::isfinite(s)) return "-";
  if (s < 1e-6) return format_fixed(s * 1e9, 0) + " ns";
  if (s < 1e-3) return format_fixed(s * 1e6, s < 1e-5 ? 2 : 1) + " us";
  if (s < 1.0) return format_fixed(s * 1e3, s < 1e-2 ? 2 : 1) + " ms";
  if (s < 120.0) return format_fixed(s, 1) + " s";
  int64_t total = static_cast<int64_t>(std::llround(s));
  int64_t h = total / 3600, m = (total % 3600) / 60, sec = total % 60;
  char buf[64];
  if (h > 0) std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(h), static_cast<long long>(m));
  else std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(m), static_cast<long long>(sec));
  return buf;
}

bool stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }
bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

}  // namespace dl
