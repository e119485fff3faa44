// README's "One flag per concept" table holds: every tool and subcommand it names lists the flag
// in its --help, and the old names it says were renamed are no longer shown.
#include <doctest/doctest.h>

#include <cctype>
#include <map>
#include <regex>

#include "support/support.hpp"

using namespace dl::test;

namespace {

// Whether `help` lists `flag` as a whole word ("--gpus" is not "--gpus-per-node").
bool lists_flag(const std::string& help, const std::string& flag) {
  for (size_t at = help.find(flag); at != std::string::npos; at = help.find(flag, at + 1)) {
    const size_t end = at + flag.size();
    const bool word_end = end == help.size() || !(std::isalnum(static_cast<unsigned char>(help[end])) || help[end] == '-');
    const bool word_start = at == 0 || help[at - 1] == ' ' || help[at - 1] == ',';
    if (word_end && word_start) return true;
  }
  return false;
}

struct FlagRow {
  std::string concept_name, flag;
  std::vector<std::vector<std::string>> commands;  // {"dl-shard", "plan"}, {"dl-train"}
};

// The table's rows: its first --flag, and "dl-shard plan/recommend, dl-train" as commands.
std::vector<FlagRow> readme_flag_rows() {
  const std::vector<std::string> readme = lines(read_file(source_path("README.md")));
  std::vector<FlagRow> rows;
  bool in_table = false;
  for (const auto& line : readme) {
    if (line == "| concept | flag | accepted by |") {
      in_table = true;
      continue;
    }
    if (!in_table || line.rfind("| ---", 0) == 0) continue;
    if (line.rfind("| ", 0) != 0) break;
    std::string text = std::regex_replace(line, std::regex(R"(\\\|)"), "/");  // escaped pipes in a cell
    std::vector<std::string> cells;
    for (size_t a = 2, b; (b = text.find(" |", a)) != std::string::npos; a = b + 3) cells.push_back(text.substr(a, b - a));
    REQUIRE_MESSAGE(cells.size() == 3, line);
    FlagRow row;
    row.concept_name = cells[0];
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_search(cells[1], m, std::regex("--[a-z][a-z-]*")), line);
    row.flag = m[0];
    for (size_t a = 0; a < cells[2].size();) {
      size_t b = cells[2].find(", ", a);
      const std::string entry = cells[2].substr(a, b == std::string::npos ? std::string::npos : b - a);
      a = b == std::string::npos ? cells[2].size() : b + 2;
      const size_t space = entry.find(' ');
      if (space == std::string::npos) {
        row.commands.push_back({entry});
        continue;
      }
      const std::string tool_name = entry.substr(0, space);
      std::string subs = entry.substr(space + 1);
      for (size_t s = 0, e; s <= subs.size(); s = e + 1) {
        e = subs.find('/', s);
        if (e == std::string::npos) e = subs.size();
        row.commands.push_back({tool_name, subs.substr(s, e - s)});
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

TEST_CASE("README's one flag per concept: each tool and subcommand named takes the flag") {
  const std::vector<FlagRow> rows = readme_flag_rows();
  REQUIRE(rows.size() >= 20);
  std::map<std::vector<std::string>, std::string> helps;
  auto help_of = [&](const std::vector<std::string>& command) -> const std::string& {
    auto it = helps.find(command);
    if (it != helps.end()) return it->second;
    std::vector<std::string> args(command.begin() + 1, command.end());
    args.push_back("--help");
    RunResult r = run(tool(command[0]), args);
    CHECK_MESSAGE(r.exit_code == 0, command[0], " ", args.front(), ": ", r.err);
    return helps[command] = r.out;
  };
  for (const auto& row : rows) {
    for (const auto& command : row.commands) {
      CAPTURE(row.concept_name);
      INFO(command[0], command.size() > 1 ? " " + command[1] : std::string(), " --help lists ", row.flag);
      CHECK(lists_flag(help_of(command), row.flag));
    }
  }
  // The renamed spellings are hidden (they still parse, with a warning).
  CHECK(!lists_flag(help_of({"dl-shard", "plan"}), "--flops"));
  CHECK(!lists_flag(help_of({"dl-bench", "collective"}), "--nproc"));
  CHECK(!lists_flag(help_of({"dl-train", "tokenize"}), "--out"));
  RunResult old = run(tool("dl-train"), {"tokenize", "/nonexistent/x.txt", "--tokenizer", "/nonexistent", "--out", "/nonexistent/o"});
  CHECK(has(old.err, "--out is deprecated: it is --output"));
}
