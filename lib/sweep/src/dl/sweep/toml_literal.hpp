// A TOML value as the literal text --set takes ("0.001", "\"sgd\"", "[64, 64]"); internal to
// dl/sweep (it includes toml++).
#pragma once
#include <toml++/toml.h>

#include <optional>
#include <string>

#include "dl/config/config.hpp"

namespace dl::sweep {

// nullopt for a table or a date (no config key holds one).
inline std::optional<std::string> toml_literal(const toml::node& n) {
  if (auto v = n.value_exact<int64_t>()) return std::to_string(*v);
  if (auto v = n.value_exact<double>()) return toml_float(*v);
  if (auto v = n.value_exact<bool>()) return *v ? "true" : "false";
  if (auto v = n.value_exact<std::string>()) return toml_quote(*v);
  if (auto a = n.as_array()) {
    std::string s = "[";
    for (size_t i = 0; i < a->size(); ++i) {
      auto e = toml_literal(*a->get(i));
      if (!e) return std::nullopt;
      s += (i ? ", " : "") + *e;
    }
    return s + "]";
  }
  return std::nullopt;
}

}  // namespace dl::sweep
