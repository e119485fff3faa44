// The one command-line grammar of the five tools: CLI11 parses, and what it refuses is printed
// as every other error is ("TOOL: error: ..."), with a "did you mean" for a mistyped subcommand
// or flag.
#pragma once
#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "dl/cli/app.hpp"

namespace dl {

// Parses argv into `app`. nullopt: go on. Otherwise the exit code to return: 0 after --help or
// --version (printed on stdout by CLI11), 2 after a usage error.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const std::string& tool);

// For a usage error: " (did you mean 'check'?)" when the first word `app` does not know in argv is
// a near miss of one of its subcommands or flags (of the subcommand it is under); "" otherwise.
std::string command_line_suggestion(const CLI::App& app, int argc, char** argv);

// For a tool whose first positional is a file (dl-train CONFIG): a `word` that is no file but a
// near miss of one of `app`'s subcommands is a mistyped subcommand. Throws a usage error
// "unknown subcommand evl (did you mean 'eval'?)"; returns when `word` exists or is near none.
void refuse_near_subcommand(const CLI::App& app, const std::string& word);

// A renamed flag's old name keeps working, hidden from --help, with a warning naming the new one
// (README.md's table has one name per concept).
template <typename T>
void add_old_flag_name(CLI::App* app, const std::string& old_name, const std::string& new_name, T& target) {
  app->add_option(old_name, target)->group("")->each([old_name, new_name](const std::string&) {
    log_warn(old_name + " is deprecated: it is " + new_name + " (one flag name per concept, README.md)");
  });
}

}  // namespace dl
