// dl/io/csv: the one CSV reader and writer (RFC 4180 by default; trimmed, one-line cells for data files).
#include <doctest/doctest.h>

#include "dl/core/error.hpp"
#include "dl/io/csv.hpp"

using namespace dl;

namespace {

std::string error_of(std::string_view text, const CsvOptions& o = {}) {
  try {
    parse_csv(text, "f.csv", o);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("csv: quoted cells, line ends, blank records, a byte-order mark and lines") {
  auto r = parse_csv("\xEF\xBB\xBFx, y\r\n\"a,\"\"b\"\"\" ,2\n,\n\"two\nlines\",3\r4,5", "f.csv");
  REQUIRE(r.size() == 4);
  CHECK(r[0].cells == std::vector<std::string>{"x", " y"});
  CHECK(r[1].cells == std::vector<std::string>{"a,\"b\"", "2"});
  CHECK(r[2].line == 4);  // the blank record "," on line 3 is skipped
  CHECK(r[2].cells == std::vector<std::string>{"two\nlines", "3"});
  CHECK(r[3].line == 6);  // a lone CR ends a line too
  CHECK(r[3].cells == std::vector<std::string>{"4", "5"});
  CHECK(csv_column(r[0], "y") == 1);
}

TEST_CASE("csv: trimmed unquoted cells and quotes that close on their line") {
  const CsvOptions data{.trim = true, .multiline_quotes = false};
  auto r = parse_csv(" 1 ,\" 2 \", x\t\n", "f.csv", data);
  REQUIRE(r.size() == 1);
  CHECK(r[0].cells == std::vector<std::string>{"1", " 2 ", "x"});
  CHECK(error_of("1,\"2\n3\"\n", data).find("f.csv:1: unterminated quoted cell") != std::string::npos);
  CHECK(error_of("1,\"2\n3\"\n").empty());  // RFC 4180: the cell holds the line break
  CHECK(error_of("a\n1,\"2").find("f.csv:2: unterminated quoted field") != std::string::npos);
  CHECK(error_of("a,\"b\"c\n").find("f.csv:1: text after a closing quote in column 2") != std::string::npos);
}

TEST_CASE("csv: a field is quoted only when it holds a comma, quote or line break") {
  CHECK(csv_field("plain text") == "plain text");
  CHECK(csv_field("a,b") == "\"a,b\"");
  CHECK(csv_field("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(csv_field("two\nlines") == "\"two\nlines\"");
  CHECK(parse_csv(csv_field("x, \"y\"\r\n") + ",z\n", "f.csv")[0].cells == std::vector<std::string>{"x, \"y\"\r\n", "z"});
}
