// Number formatting shared by dl-cost's tables and notes (money, hours, counts).
#pragma once
#include <string>

namespace dl::cost {

std::string format_usd(double v);    // "$1,234.56", "$0.69", "$0.0042"; "-" when not finite
std::string format_hours(double h);  // "12.5 s", "4.2 min", "0.52 h", "31.3 h", "1,234 h (51.4 d)"; "never" when infinite
std::string format_count(double v);  // "124.4M", "9.96B", "1.2T", "512"
std::string format_flop(double v);   // "744 PFLOP", "8.57 EFLOP", "3.1e+23 FLOP"

}  // namespace dl::cost
