// dl-bench's output: one set of rows (schema dlkit-bench/1, docs/FORMATS.md), five renderings.
// json / jsonl / csv print every key of every row (csv: the union of keys in first-seen order;
// a key a row lacks, null or an empty string is an empty cell); table and md show each
// benchmark's own columns with units, collectives in nccl-tests' layout, and the notes.
#pragma once
#include <string>
#include <vector>

#include "dl/bench/common.hpp"
#include "dl/cli/table.hpp"

namespace dl::bench {

std::string render_report(const Report& report, OutputFormat format);

// Rows read back from a rendering: json (an array), jsonl (an object a line) or csv (numbers
// become numbers, empty cells are left out), by plan::parse_bench_output, the one reader of
// dlkit-bench/1 rows. Usage error naming `source` when malformed or not dl-bench rows.
std::vector<Row> parse_rows(const std::string& text, OutputFormat format, const std::string& source = "input");

}  // namespace dl::bench
