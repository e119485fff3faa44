#include "dl/cost/format.hpp"

#include <cmath>
#include <cstdio>

namespace dl::cost {

namespace {

// "1234567.891" with 2 decimals -> "1,234,567.89".
std::string grouped(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::fabs(v));
  std::string s = buf;
  size_t dot = s.find('.');
  std::string whole = s.substr(0, dot), frac = dot == std::string::npos ? "" : s.substr(dot);
  std::string out;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (i > 0 && (whole.size() - i) % 3 == 0) out += ',';
    out += whole[i];
  }
  return (v < 0 ? "-" : "") + out + frac;
}

}  // namespace

std::string format_usd(double v) {
  if (!std::isfinite(v)) return "-";
  if (v != 0 && std::fabs(v) < 0.01) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "$%.2g", v);
    return buf;
  }
  return (v < 0 ? "-$" : "$") + grouped(std::fabs(v), 2);
}

std::string format_flop(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  if (v >= 1e21) {
    std::snprintf(buf, sizeof buf, "%.3g FLOP", v);
    return buf;
  }
  const char* pre[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  double x = v;
  while (x >= 1000.0 && i < 6) x /= 1000.0, ++i;
  std::snprintf(buf, sizeof buf, "%.3g %sFLOP", x, pre[i]);
  return buf;
}

std::string format_hours(double h) {
  if (!std::isfinite(h)) return "never";
  // Short experiments in minutes or seconds: "0.00 h" said nothing.
  if (h * 60 < 1) return grouped(h * 3600, 1) + " s";
  if (h < 0.1) return grouped(h * 60, 1) + " min";
  if (h < 10) return grouped(h, 2) + " h";
  if (h < 1000) return grouped(h, 1) + " h";
  return grouped(h, 0) + " h (" + grouped(h / 24.0, 1) + " d)";
}

std::string format_count(double v) {
  const char* suffix[] = {"", "k", "M", "B", "T", "P"};
  int i = 0;
  double x = v;
  while (std::fabs(x) >= 1000.0 && i < 5) {
    x /= 1000.0;
    ++i;
  }
  char buf[32];
  if (i == 0) std::snprintf(buf, sizeof buf, "%.0f", x);
  else std::snprintf(buf, sizeof buf, "%.3g%s", x, suffix[i]);
  return buf;
}

}  // namespace dl::cost
