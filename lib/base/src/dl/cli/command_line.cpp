#include "dl/cli/command_line.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <vector>

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"

namespace dl {

namespace {

// The first word of argv that `app` does not know, when it is a near miss of a subcommand or flag.
struct NearMiss {
  std::string word;        // "chek", "--stpes"
  std::string best;        // "check", "--steps"
  bool subcommand = false;
};

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(s->get_name());
  return names;
}

std::optional<NearMiss> near_miss(const CLI::App& app, int argc, char** argv) {
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
      if (!best) return std::nullopt;
      return NearMiss{word, "--" + *best, false};
    }
    if (word.empty() || word[0] == '-') continue;
    const std::vector<std::string> names = subcommand_names(*at);
    if (names.empty()) continue;  // an option's value or a positional
    if (std::find(names.begin(), names.end(), word) != names.end()) {
      at = at->get_subcommand(word);
      continue;
    }
    if (const auto best = closest_name(word, names)) return NearMiss{word, *best, true};
  }
  return std::nullopt;
}

}  // namespace

std::string command_line_suggestion(const CLI::App& app, int argc, char** argv) {
  const auto miss = near_miss(app, argc, argv);
  return miss ? " (did you mean '" + miss->best + "'?)" : "";
}

void refuse_near_subcommand(const CLI::App& app, const std::string& word) {
  std::error_code ec;
  if (word.empty() || std::filesystem::exists(word, ec)) return;
  if (const auto best = closest_name(word, subcommand_names(app)))
    throw_usage("unknown subcommand ", word, " (did you mean '", *best, "'?); no file of that name exists either");
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
    // A mistyped subcommand is named as such ("A subcommand is required" hid it).
    const auto miss = near_miss(app, argc, argv);
    const std::string what = miss && miss->subcommand ? "unknown subcommand " + printable(miss->word) : printable(e.what());
    std::cerr << tool << ": error: " << what << (miss ? " (did you mean '" + miss->best + "'?)" : "") << "; run "
              << tool << " --help\n";
    return kExitUsage;
  }
}

}  // namespace dl
