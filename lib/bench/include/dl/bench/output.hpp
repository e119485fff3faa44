// dl-bench's output: one set of rows (schema dlkit-bench/1, docs/FORMATS.md), five renderings.
// json / jsonl / csv print every key of every row (csv: the union of keys in first-seen order;
// a key a row lacks, null or an empty string is an empty cell); table and md show each
// benchmark's own columns with units, collectives in nccl-tests' layout, and the notes.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "dl/bench/common.hpp"
#include "dl/cli/table.hpp"

namespace dl::bench {

std::string render_report(const Report& report, OutputFormat format);

// Collective rows printed as each size is measured, flushed, so a terminal or a pipe sees every
// row when it is ready (nccl-tests prints a line per size). table (nccl-tests' layout: fixed
// column widths, so the header goes first), jsonl and csv (the header from the first row's keys:
// a sweep's rows share them) stream; json and md are documents and print at finish(). Together
// the output is render_report's.
class RowStream {
 public:
  RowStream(std::ostream& out, OutputFormat format) : out_(out), format_(format) {}
  void add(const Row& row);
  // What is left: the table's footer and notes, or the whole json/md document.
  void finish(const Report& report);

 private:
  std::ostream& out_;
  OutputFormat format_;
  std::vector<std::string> keys_;  // csv: the first row's keys
  size_t added_ = 0;
};

// Rows read back from a rendering: json (an array), jsonl (an object a line) or csv (numbers
// become numbers, empty cells are left out), by plan::parse_bench_output, the one reader of
// dlkit-bench/1 rows. Usage error naming `source` when malformed or not dl-bench rows.
std::vector<Row> parse_rows(const std::string& text, OutputFormat format, const std::string& source = "input");

}  // namespace dl::bench
