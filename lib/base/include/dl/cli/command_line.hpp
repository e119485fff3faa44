// The one command-line grammar of the five tools: CLI11 parses, and what it refuses is printed
// as every other error is ("TOOL: error: ..."), with a "did you mean" for a mistyped subcommand
// or flag.
#pragma once
#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace dl {

// Parses argv into `app`. nullopt: go on. Otherwise the exit code to return: 0 after --help or
// --version (printed on stdout by CLI11), 2 after a usage error.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const std::string& tool);

// For a usage error: " (did you mean 'check'?)" when the first word `app` does not know in argv is
// a near miss of one of its subcommands or flags (of the subcommand it is under); "" otherwise.
std::string command_line_suggestion(const CLI::App& app, int argc, char** argv);

}  // namespace dl
