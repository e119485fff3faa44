#include "dl/cli/units.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"

namespace dl {

namespace {

struct Split {
  double value = 0;
  std::string suffix;  // trimmed, as written
};

// "1.5 GiB" -> {1.5, "GiB"}; commas and underscores between digits are allowed ("1,000,000").
Split split_number(const std::string& text, const std::string& what, const char* example) {
  std::string digits;
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+') {
      digits += c;
    } else if ((c == 'e' || c == 'E') && i + 1 < text.size() &&
               (std::isdigit(static_cast<unsigned char>(text[i + 1])) || text[i + 1] == '-' || text[i + 1] == '+')) {
      digits += c;
    } else if ((c == ',' || c == '_') && !digits.empty()) {
      continue;
    } else {
      break;
    }
  }
  std::string suffix = trim(std::string_view(text).substr(i), kIsSpace);
  char* end = nullptr;
  double v = digits.empty() ? NAN : std::strtod(digits.c_str(), &end);
  if (digits.empty() || end != digits.c_str() + digits.size() || !std::isfinite(v))
    throw_usage(what, ": '", text, "' is not a number (e.g. ", example, ")");
  return {v, suffix};
}

}  // namespace

double parse_size(const std::string& text, const std::string& what, bool binary_bare) {
  Split s = split_number(text, what, "80GB, 80GiB, 512MiB");
  if (s.value < 0) throw_usage(what, ": size '", text, "' is negative");
  // Forms: "" or "B"; a prefix letter k/M/G/T alone (decimal, or binary when binary_bare), with
  // "B" (always decimal: "GB"), or with "i"/"iB" (always binary: "GiB").
  std::string l = to_lower(s.suffix);
  // A memory size without a unit is a slip ("--gpu-mem 80" meant 80 GB, not 80 bytes). Message
  // sizes keep nccl-tests' bare bytes ("-b 8").
  if (l.empty() && !binary_bare)
    throw_usage(what, ": '", text, "' has no unit: write ", text, "GB or ", text, "GiB (", text,
                "B if bytes are meant)");
  if (l.empty() || l == "b") return s.value;
  const std::string prefixes = "kmgt";
  size_t p = prefixes.find(l[0]);
  std::string rest = l.substr(1);
  if (p != std::string::npos && (rest.empty() || rest == "b" || rest == "i" || rest == "ib")) {
    bool binary = rest == "i" || rest == "ib" || (rest.empty() && binary_bare);
    return s.value * std::pow(binary ? 1024.0 : 1000.0, static_cast<double>(p + 1));
  }
  throw_usage(what, ": unknown size unit '", s.suffix, "' in '", text,
              "' (use B, kB, MB, GB, TB or KiB, MiB, GiB, TiB)");
}

double parse_count(const std::string& text, const std::string& what) {
  Split s = split_number(text, what, "7.5e9, 1.5B, 124M");
  std::string l = to_lower(s.suffix);
  double mult = 0;
  if (l.empty()) mult = 1;
  else if (l == "k") mult = 1e3;
  else if (l == "m") mult = 1e6;
  else if (l == "b" || l == "g") mult = 1e9;
  else if (l == "t") mult = 1e12;
  if (mult == 0) throw_usage(what, ": unknown suffix '", s.suffix, "' in '", text, "' (use k, M, B or T)");
  return s.value * mult;
}

double parse_hours(const std::string& text, const std::string& what) {
  Split s = split_number(text, what, "36, 36h, 90m, 2d");
  std::string l = to_lower(s.suffix);
  double h = 0;
  if (l.empty() || l == "h") h = s.value;
  else if (l == "m" || l == "min") h = s.value / 60.0;
  else if (l == "s") h = s.value / 3600.0;
  else if (l == "d") h = s.value * 24.0;
  else throw_usage(what, ": unknown time unit '", s.suffix, "' in '", text, "' (use s, m, h or d)");
  if (h < 0) throw_usage(what, ": duration '", text, "' is negative");
  return h;
}

}  // namespace dl
