// Tabular output shared by every tool: one Table, five renderings. Human formats (table, md)
// print each cell's display text; machine formats (json, jsonl, csv) print raw values under
// stable keys, so files from different runs and machines concatenate and compare.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "dl/config/choice.hpp"

namespace dl {

enum class OutputFormat { table, json, jsonl, csv, md };
inline constexpr std::string_view kOutputFormatNames[] = {"table", "json", "jsonl", "csv", "md"};
constexpr std::span<const std::string_view> choice_names(OutputFormat) { return kOutputFormatNames; }

// "table" | "json" | "jsonl" | "csv" | "md"; throws a usage error listing the choices.
OutputFormat parse_output_format(const std::string& s);
std::string format_name(OutputFormat f);

// A cell's raw value for machine formats: null, bool, integer, number, text or a list of
// integers (a tensor's shape).
using CellValue = std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>>;

struct Cell {
  CellValue value;       // raw value for machine formats
  std::string text;      // display text for human formats ("80.0 GB", "1.23 ms")
  static Cell str(std::string s);
  static Cell num(double v, std::string text);  // text shown to people, v written to files
  static Cell integer(int64_t v);
  static Cell boolean(bool v, std::string yes = "yes", std::string no = "no");
  static Cell null(std::string text = "-");
  // A CRC-32C: "0x1a2b3c4d" in every format, so a table and a json file show the same text.
  static Cell checksum(uint32_t v);
};

struct Column {
  std::string key;     // machine key: "busbw_gbps"
  std::string header;  // human header: "busbw (GB/s)"
  bool right = false;  // right-align in human formats (numbers)
};

class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add_row(std::vector<Cell> row);
  // Footer lines shown under human formats ("# Avg bus bandwidth : 12.3"); not in json/csv.
  void add_note(std::string line) { notes_.push_back(std::move(line)); }
  const std::vector<Column>& columns() const { return columns_; }
  const std::vector<std::vector<Cell>>& rows() const { return rows_; }
  const std::vector<std::string>& notes() const { return notes_; }

  std::string render(OutputFormat f) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<Cell>> rows_;
  std::vector<std::string> notes_;
};

// Human-readable numbers with units.
std::string format_bytes(double bytes, bool binary = false);  // "1.50 GB" / "1.40 GiB"
std::string format_si(double v, const std::string& unit, int precision = 3);  // "12.3 GFLOP/s"
std::string format_duration(double seconds);  // "1.23 ms", "4.5 s", "1h02m"
std::string format_fixed(double v, int decimals);

bool stdout_is_terminal();
bool stderr_is_terminal();

}  // namespace dl
