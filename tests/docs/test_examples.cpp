// Every example stays true (issue 32): each command of the tools' and subcommands' --help
// "Examples:", README.md's and docs/*.md's command blocks runs in a scratch folder and must exit
// 0. Training is shortened, not skipped: DL_EXAMPLE_MAX_STEPS=1 (each dl-train process trains at
// most one step; dl-bench times one iteration), DL_EXAMPLE_MAX_TRIALS=2 (a sweep samples two
// trials). What needs a GPU, a download, Slurm or another machine is listed in examples.cpp
// (kNotRun, with the reason) and only parsed: the tool's own parser with DL_EXAMPLE_PARSE_ONLY=1,
// so a mistyped flag still fails. Usage lines ("[--steps N]") must name flags their --help lists.
#include <doctest/doctest.h>

#include <chrono>
#include <iostream>

#include "docs/examples.hpp"
#include "support/support.hpp"

using namespace dl::test;
using namespace dl::test::examples;

namespace {

fs::path bin_dir() { return fs::path(tool("dl-train")).parent_path(); }

std::vector<Example> every_example(std::map<std::string, std::string>* helps) {
  std::vector<Example> all = help_examples(bin_dir(), helps);
  std::vector<fs::path> docs{source_path("README.md")};
  std::vector<fs::path> more;
  for (const auto& e : fs::directory_iterator(source_path("docs")))
    if (e.path().extension() == ".md") more.push_back(e.path());
  std::sort(more.begin(), more.end());
  docs.insert(docs.end(), more.begin(), more.end());
  for (const auto& d : docs) {
    const auto found = markdown_examples(read_file(d), fs::relative(d, source_path("")).string());
    all.insert(all.end(), found.begin(), found.end());
  }
  return all;
}

// The failures' reports, one paragraph each.
std::string failures(const std::vector<Outcome>& outcomes) {
  std::string out;
  for (const auto& o : outcomes)
    if (!o.ok) out += o.report + "\n";
  return out;
}

}  // namespace

TEST_CASE("every example of the --help texts, README.md and docs/*.md runs, or parses where it cannot run here") {
  std::map<std::string, std::string> helps;
  auto examples = every_example(&helps);
  REQUIRE(examples.size() > 50);
  // DL_EXAMPLES_ONLY=README.md (or "dl-shard"): only the examples whose source names it.
  if (const char* only = std::getenv("DL_EXAMPLES_ONLY"); only && *only)
    std::erase_if(examples, [&](const Example& e) { return !has(e.where, only); });
  TempDir scratch("examples");
  Runner runner(source_path(""), bin_dir(), scratch.path(), helps);
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = runner.run(examples, 2);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::map<std::string, int> how;
  for (const auto& o : outcomes) {
    const std::string kind = o.how.substr(0, o.how.find_first_of(":("));
    ++how[kind.substr(0, kind.find_last_not_of(' ') + 1)];
  }
  std::cerr << "examples: " << examples.size() << " in " << seconds << " s:";
  for (const auto& [k, n] : how) std::cerr << " " << k << " " << n << ";";
  std::cerr << "\n";
  if (std::getenv("DL_EXAMPLES_LIST"))
    for (size_t i = 0; i < examples.size(); ++i)
      std::cerr << examples[i].where << " [" << outcomes[i].how << ", " << outcomes[i].seconds << " s] "
                << examples[i].command << "\n";
  const std::string failed = failures(outcomes);
  CHECK_MESSAGE(failed.empty(), "examples that fail:\n" << failed);
}

TEST_CASE("the collectors take commands, join continued lines and tell usage lines from examples") {
  const std::string md =
      "Text.\n\n"
      "    dl-cost offers --gpu H100     # a comment\n"
      "    step = compute / (1 - bubble)\n"
      "    dl-train --resume DIR [--steps N]\n"
      "                          [--json]\n\n"
      "```toml\nsteps = 5\n```\n"
      "```sh\ndl-shard plan --params 124M \\\n  --gpus 8 --gpu-mem 80GB\n# a comment line\nls | wc -l\n```\n";
  const auto found = markdown_examples(md, "X.md");
  REQUIRE(found.size() == 4);
  CHECK(found[0].where == "X.md:3");
  CHECK(found[0].command == "dl-cost offers --gpu H100     # a comment");
  CHECK_FALSE(found[0].synopsis);
  CHECK(found[1].command == "dl-train --resume DIR [--steps N] [--json]");
  CHECK(found[1].synopsis);
  CHECK(found[2].where == "X.md:12");
  CHECK(found[2].command == "dl-shard plan --params 124M --gpus 8 --gpu-mem 80GB");
  CHECK(found[3].command == "ls | wc -l");
  CHECK(found[0].group != found[2].group);

  std::map<std::string, std::string> helps;
  const auto from_help = help_examples(bin_dir(), &helps);
  // Each subcommand shows examples; a tool shows its own or points at its subcommands' helps.
  for (const auto& [name, help] : helps) {
    const bool shows = std::any_of(from_help.begin(), from_help.end(),
                                   [&](const Example& e) { return e.where == name + " --help"; });
    const bool points = name.find(' ') == std::string::npos && has(help, name + " SUBCOMMAND --help` for examples");
    CHECK_MESSAGE((shows || points), name << " --help shows no Examples:");
  }
  CHECK(helps.size() > 20);
}

TEST_CASE("a broken example fails, naming its source, its command and why") {
  // Planted: a mistyped flag in an example that runs, in one only parsed (Slurm), in a usage
  // line, a missing make target, and a pipe whose first half fails; one good example beside them.
  const std::string md =
      "    dl-cost offers --gpu H100 --format csv\n\n"
      "    dl-cost offers --gpuu H100\n\n"
      "    srun -N2 dl-train configs/addition.toml --nproc-per-nod 8\n\n"
      "    dl-train --resume DIR [--stepz N]\n\n"
      "    make demoo\n\n"
      "    dl-cost offers --gpu NoSuchGPU | head -1\n\n"
      // Parsed only (Slurm): each dlkit command of the pipe alone, not the program it pipes into.
      "    srun -N2 dl-cost offers --gpu H100 --format json | no-such-program-here .rows\n";
  const auto examples = markdown_examples(md, "PLANTED.md");
  REQUIRE(examples.size() == 7);
  std::map<std::string, std::string> helps;
  (void)help_examples(bin_dir(), &helps);
  TempDir scratch("examples-planted");
  Runner runner(source_path(""), bin_dir(), scratch.path(), helps);
  const auto outcomes = runner.run(examples, 2);
  CHECK(outcomes[0].ok);
  CHECK_MESSAGE(outcomes[6].ok, outcomes[6].report);
  CHECK(has(outcomes[6].how, "needs Slurm"));
  for (size_t i = 1; i < 6; ++i) {
    INFO(examples[i].command);
    CHECK_FALSE(outcomes[i].ok);
    CHECK(has(outcomes[i].report, examples[i].where + ": " + examples[i].command));
  }
  CHECK(has(outcomes[1].report, "--gpuu"));  // stderr's tail: dl-cost's own error
  CHECK(has(outcomes[2].how, "needs Slurm"));
  CHECK(has(outcomes[2].report, "does not parse"));
  CHECK(has(outcomes[3].report, "flags not in its --help: --stepz"));
  CHECK(has(outcomes[4].report, "no target 'demoo'"));
}
