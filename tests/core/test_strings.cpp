// dl/core/strings: the helpers that replaced each file's private trim, join and lower.
#include <doctest/doctest.h>

#include <span>
#include <string>
#include <vector>

#include "dl/core/strings.hpp"

using namespace dl;

TEST_CASE("trim: spaces, tabs and line ends by default; another set when given") {
  CHECK(trim("") == "");
  CHECK(trim(" \t\r\n \n") == "");
  CHECK(trim("  a b\t\r\n") == "a b");
  CHECK(trim("x") == "x");
  CHECK(trim("\v x \f") == "\v x \f");  // not in the default set
  // kBlank (CSV cells): line ends stay.
  CHECK(trim(" \tcell\r\n", kBlank) == "cell\r\n");
  CHECK(trim("\r\n", kBlank) == "\r\n");
  CHECK(trim(" \t ", kBlank) == "");
  CHECK(trim("\v x \f\n", kIsSpace) == "x");
  CHECK(trim("--a-b--", "-") == "a-b");
}

TEST_CASE("to_lower and to_upper change ASCII letters only") {
  CHECK(to_lower("") == "");
  CHECK(to_lower("GiB 80GB H100-SXM") == "gib 80gb h100-sxm");
  CHECK(to_upper("gib 80gb h100-sxm") == "GIB 80GB H100-SXM");
  // UTF-8 bytes (above 0x7f) are left as they are: "ÄÖ" and "é" stay.
  CHECK(to_lower("\xC3\x84\xC3\x96 A") == "\xC3\x84\xC3\x96 a");
  CHECK(to_upper("caf\xC3\xA9") == "CAF\xC3\xA9");
  const std::string high = "\x80\xBF\xC0\xDF\xFF";
  CHECK(to_lower(high) == high);
  CHECK(to_upper(high) == high);
}

TEST_CASE("lower_alnum keeps lowered ASCII letters and digits") {
  CHECK(lower_alnum("H100 (80 GB)") == "h10080gb");
  CHECK(lower_alnum("all_reduce-Ring") == "allreducering");
  CHECK(lower_alnum(" -_() ") == "");
  CHECK(lower_alnum("caf\xC3\xA9 1") == "caf1");
}

TEST_CASE("join: the separator between each two parts, a span from an offset") {
  const std::vector<std::string> none, one = {"a"}, three = {"a", "b", "c"};
  CHECK(join(none, ", ") == "");
  CHECK(join(one, ", ") == "a");
  CHECK(join(three, ", ") == "a, b, c");
  CHECK(join(three, "") == "abc");
  CHECK(join(std::vector<std::string>{"", "x", ""}, "+") == "+x+");  // empty parts keep their separators
  CHECK(join(std::span(three).subspan(1), " ") == "b c");
  CHECK(join(std::span(three).subspan(3), " ") == "");
}

TEST_CASE("split_words: the words between runs of whitespace, as >> reads them") {
  CHECK(split_words("").empty());
  CHECK(split_words(" \t\r\n\v\f").empty());
  CHECK(split_words("one") == std::vector<std::string>{"one"});
  CHECK(split_words("  fpu vme\tde\n pse  ") == std::vector<std::string>{"fpu", "vme", "de", "pse"});
  CHECK(split_words("ccache g++") == std::vector<std::string>{"ccache", "g++"});
}

TEST_CASE("printable: control bytes but line feed and tab become \\xNN, other bytes stay") {
  CHECK(printable("plain text, é and ✓") == "plain text, é and ✓");
  CHECK(printable("two\nlines\tand a tab") == "two\nlines\tand a tab");
  CHECK(printable("\x1b[31mred\x1b]0;title\x07") == "\\x1b[31mred\\x1b]0;title\\x07");
  CHECK(printable(std::string("nul\0cr\rdel\x7f", 11)) == "nul\\x00cr\\x0ddel\\x7f");
}
