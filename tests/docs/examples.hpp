// The documented examples as a test sees them (issue 32, "every example stays true"): every
// command of the tools' and subcommands' --help "Examples:", README.md's and docs/*.md's command
// blocks, collected from the text as it is today and run in scratch folders (test_examples.cpp).
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace dl::test::examples {

namespace fs = std::filesystem;

struct Example {
  std::string where;    // "README.md:106" or "dl-train sweep --help"
  std::string group;    // the help or the Markdown block it is in (a continued line joins within it)
  std::string command;  // as written, continuation lines joined
  // A usage line ("dl-train --resume DIR [--steps N]"): not run; each flag it names must be one
  // the tool (or subcommand) lists in its --help.
  bool synopsis = false;
};

// The examples of every tool's and subcommand's --help, run live from `bin_dir`; `helps` gets
// each help text by "tool" or "tool sub".
std::vector<Example> help_examples(const fs::path& bin_dir, std::map<std::string, std::string>* helps);
// The command lines of a Markdown text's shell blocks: fenced sh/bash/shell/console (or bare)
// blocks, and indented blocks' lines that start with a known program; `name` labels them.
std::vector<Example> markdown_examples(const std::string& text, const std::string& name);

struct Outcome {
  bool ok = false;
  std::string how;     // "ran", "parse only: needs a GPU", "synopsis", ...
  std::string report;  // on failure: where, the command, the exit code and stderr's tail
  double seconds = 0;  // wall time, fixtures included
};

// Runs examples, each on its own as a reader would, in its own scratch folder under
// `scratch_root` (a copy of the repository's configs/ and the fixtures the command names),
// `jobs` at a time.
class Runner {
 public:
  Runner(fs::path source_dir, fs::path bin_dir, fs::path scratch_root, std::map<std::string, std::string> helps);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;
  std::vector<Outcome> run(const std::vector<Example>& examples, int jobs);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace dl::test::examples
