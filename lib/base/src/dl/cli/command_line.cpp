#include "dl/cli/command_line.hpp"

#include <cstdlib>
#include <iostream>
#include <vector>

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"

namespace dl {

std::string command_line_suggestion(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    if (word.rfind("--", 0) == 0) {
      const std::string name = word.substr(2, word.find('=') - 2);
      std::vector<std::string> flags;
      bool known = false;
      for (const CLI::App* a = at; a; a = a->get_parent())
        for (const CLI::Option* o : a->get_options()) {
          for (const auto& l : o->get_lnames()) {
            flags.push_back(l);
            known = known || l == name;
          }
        }
      if (known) continue;
      const auto best = closest_name(name, flags);
      return best ? " (did you mean '--" + *best + "'?)" : "";
    }
    if (word.empty() || word[0] == '-') continue;
    const auto subs = at->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) continue;  // an option's value or a positional
    std::vector<std::string> names;
    const CLI::App* next = nullptr;
    for (const CLI::App* s : subs) {
      names.push_back(s->get_name());
      if (s->get_name() == word) next = s;
    }
    if (next) {
      at = next;
      continue;
    }
    if (const auto best = closest_name(word, names)) return " (did you mean '" + *best + "'?)";
  }
  return "";
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const std::string& tool) {
  try {
    app.parse(argc, argv);
    // A test hook (tests/docs: the examples that need a GPU, a download or another machine are
    // checked this far): the command line is one the tool accepts, and nothing more is done.
    if (const char* v = std::getenv("DL_EXAMPLE_PARSE_ONLY"); v && std::string(v) == "1") {
      std::cerr << tool << ": DL_EXAMPLE_PARSE_ONLY=1: the command line parses; not running it\n";
      return kExitOk;
    }
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kExitOk : kExitUsage;  // --help, --version
    std::cerr << tool << ": error: " << printable(e.what()) << command_line_suggestion(app, argc, argv)
              << "; run " << tool << " --help\n";
    return kExitUsage;
  }
}

}  // namespace dl
