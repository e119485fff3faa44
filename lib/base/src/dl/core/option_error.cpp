#include "dl/core/option_error.hpp"

namespace dl {

std::string name_options(const std::string& message, const OptionNames& names) {
  std::string out;
  size_t i = 0;
  for (;;) {
    const size_t open = message.find('{', i), close = open == std::string::npos ? open : message.find('}', open);
    if (close == std::string::npos) break;
    const std::string option = message.substr(open + 1, close - open - 1);
    auto it = names.find(option);
    out += message.substr(i, open - i) + (it == names.end() ? option : it->second);
    i = close + 1;
  }
  return out + message.substr(i);
}

std::string named_message(const Error& e, const OptionNames& names) {
  if (const auto* option_error = dynamic_cast<const OptionError*>(&e)) return option_error->named(names);
  return e.what();
}

std::string option_flag(const OptionNames& names, const std::string& option) {
  auto it = names.find(option);
  return it == names.end() ? option : it->second;
}

}  // namespace dl
