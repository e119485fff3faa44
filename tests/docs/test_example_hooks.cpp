// The test hooks the examples' test shortens and parses with (core/limits.hpp's example_cap,
// cli/command_line.cpp): DL_EXAMPLE_MAX_STEPS, DL_EXAMPLE_MAX_TRIALS, DL_EXAMPLE_PARSE_ONLY.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "support/support.hpp"

using namespace dl::test;

namespace {

// step -> (loss, lr) of a run's metrics.jsonl.
std::map<int64_t, std::pair<double, double>> curve(const fs::path& run) {
  std::map<int64_t, std::pair<double, double>> out;
  for (const auto& line : lines(read_file(run / "metrics.jsonl"))) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j.at("step").get<int64_t>()] = {j.at("loss").get<double>(), j.at("lr").get<double>()};
  }
  return out;
}

const std::vector<std::string> kSmallRun = {"--set", "train.steps=5",          "--set", "train.batch_size=16",
                                            "--set", "log.every=1",            "--set", "log.samples=0",
                                            "--set", "train.eval_every=0",     "--quiet"};

std::vector<std::string> small_run(const std::string& config, std::vector<std::string> args) {
  args.insert(args.begin(), config);
  args.insert(args.end(), kSmallRun.begin(), kSmallRun.end());
  return args;
}

}  // namespace

TEST_CASE("DL_EXAMPLE_MAX_STEPS stops each dl-train process after that many steps, on the run's own schedule") {
  TempDir d("hooks");
  const std::string config = source_path("configs/addition.toml").string();
  const auto whole = run(tool("dl-train"), small_run(config, {"--run-dir", (d / "whole").string()}));
  REQUIRE_MESSAGE(whole.exit_code == 0, whole.err);
  const std::vector<std::string> cap = {"DL_EXAMPLE_MAX_STEPS=2"};
  const auto first = run(tool("dl-train"), small_run(config, {"--run-dir", (d / "capped").string()}), "", cap);
  REQUIRE_MESSAGE(first.exit_code == 0, first.err);
  CHECK(fs::exists(d / "capped/checkpoints/step_00000002"));
  CHECK(curve(d / "capped").rbegin()->first == 2);
  // A resume trains two more steps, with the losses and learning rates of the uninterrupted run.
  const auto second = run(tool("dl-train"), {"--resume", (d / "capped").string(), "--quiet"}, "", cap);
  REQUIRE_MESSAGE(second.exit_code == 0, second.err);
  const auto w = curve(d / "whole"), c = curve(d / "capped");
  REQUIRE(c.size() == 4);
  for (const auto& entry : c) {  // not a structured binding: INFO's lambda captures it (clang 15)
    const auto step = entry.first;
    const auto& v = entry.second;
    INFO("step " << step);
    CHECK(v.first == w.at(step).first);
    CHECK(v.second == w.at(step).second);
  }
  CHECK(w.size() == 5);

  const auto bad = run(tool("dl-train"), small_run(config, {"--run-dir", (d / "bad").string()}), "",
                       {"DL_EXAMPLE_MAX_STEPS=two"});
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "DL_EXAMPLE_MAX_STEPS = 'two': give a positive whole number"));
  CHECK_FALSE(fs::exists(d / "bad"));
}

TEST_CASE("DL_EXAMPLE_MAX_STEPS caps dl-bench's timed and warm-up iterations; a sweep samples DL_EXAMPLE_MAX_TRIALS trials") {
  const auto bench = run(tool("dl-bench"), {"gemm", "--sizes", "64", "--repeat", "7", "--format", "json"}, "",
                         {"DL_EXAMPLE_MAX_STEPS=1"});
  REQUIRE_MESSAGE(bench.exit_code == 0, bench.err);
  const auto rows = nlohmann::json::parse(bench.out);
  CHECK(rows.at(0).at("repeat") == 1);
  CHECK(rows.at(0).at("warmup") == 1);

  TempDir d("hooks-sweep");
  const auto sweep = run(tool("dl-train"),
                         {"sweep", source_path("configs/lr.sweep.toml").string(), "--dir", (d / "s").string(), "-q",
                          "--format", "json"},
                         "", {"DL_EXAMPLE_MAX_STEPS=1", "DL_EXAMPLE_MAX_TRIALS=2", "DL_NUM_THREADS=1"});
  REQUIRE_MESSAGE(sweep.exit_code == 0, sweep.err);
  const auto state = nlohmann::json::parse(read_file(d / "s/sweep.json"));
  CHECK(state.at("trials").size() == 2);  // the file asks for 6
}

TEST_CASE("DL_EXAMPLE_PARSE_ONLY=1: a command line the tool accepts exits 0 doing nothing; a mistyped one still fails") {
  TempDir d("hooks-parse");
  const std::vector<std::string> parse_only = {"DL_EXAMPLE_PARSE_ONLY=1"};
  const auto ok = run(tool("dl-train"), {source_path("configs/addition.toml").string(), "--run-dir", (d / "r").string(),
                                         "--nproc-per-node", "8", "--nnodes", "2", "--node-rank", "0"},
                      "", parse_only);
  CHECK_MESSAGE(ok.exit_code == 0, ok.err);
  CHECK(ok.out.empty());
  CHECK(has(ok.err, "dl-train: DL_EXAMPLE_PARSE_ONLY=1: the command line parses"));
  CHECK_FALSE(fs::exists(d / "r"));

  const auto typo = run(tool("dl-cost"), {"offers", "--gpuu", "H100"}, "", parse_only);
  CHECK(typo.exit_code == 2);
  CHECK(has(typo.err, "did you mean '--gpu'"));
  const auto sub = run(tool("dl-shard"), {"plann", "--params", "7e9"}, "", parse_only);
  CHECK(sub.exit_code == 2);
  // Only "1" turns it on.
  const auto off = run(tool("dl-cost"), {"offers", "--gpu", "H100", "--format", "csv"}, "", {"DL_EXAMPLE_PARSE_ONLY=0"});
  CHECK(off.exit_code == 0);
  CHECK(has(off.out, "H100"));
}
