// Money, hours, counts and FLOPs as dl-cost prints them.
#include <doctest/doctest.h>

#include <limits>

#include "dl/cost/format.hpp"

using namespace dl::cost;

TEST_CASE("format: dollars, hours, counts, FLOPs") {
  CHECK(format_usd(0.69) == "$0.69");
  CHECK(format_usd(1234567.891) == "$1,234,567.89");
  CHECK(format_usd(-2529.49) == "-$2,529.49");
  CHECK(format_usd(0.0042) == "$0.0042");
  CHECK(format_usd(0) == "$0.00");
  CHECK(format_usd(std::numeric_limits<double>::infinity()) == "-");
  CHECK(format_hours(0.5222) == "0.52 h");
  CHECK(format_hours(0.07) == "4.2 min");  // was "0.07 h"; shorter ones were "0.00 h"
  CHECK(format_hours(12.5 / 3600) == "12.5 s");
  CHECK(format_hours(0) == "0.0 s");
  CHECK(format_hours(31.27) == "31.3 h");
  CHECK(format_hours(1234) == "1,234 h (51.4 d)");
  CHECK(format_hours(std::numeric_limits<double>::infinity()) == "never");
  CHECK(format_count(512) == "512");
  CHECK(format_count(124.4e6) == "124M");
  CHECK(format_count(9.96e9) == "9.96B");
  CHECK(format_count(1.2e12) == "1.2T");
  CHECK(format_flop(7.44e17) == "744 PFLOP");
  CHECK(format_flop(8.57e18) == "8.57 EFLOP");
  CHECK(format_flop(3.1e23) == "3.1e+23 FLOP");
}
