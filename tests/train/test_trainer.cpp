// The trainer's promises end to end (dl/train/trainer.cpp through dl-train): gradient
// accumulation and parallel.dp = "auto" (the default) give the single-process batch's losses and
// gradient norms, a layout that contradicts the process count is refused once, and
// `eval --data SPEC` evaluates exactly the data it names.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "dl/train/trainer.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

struct Curve {
  std::map<int64_t, double> loss, grad_norm;
};

Curve train(const TempDir& d, const std::string& name, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {(d / "c.toml").string(), "--run-dir", (d / name).string(), "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  RunResult r = run(tool("dl-train"), args, "", {}, 120);
  INFO(name << ": " << r.err);
  REQUIRE(r.exit_code == 0);
  Curve c;
  for (const auto& l : lines(r.out)) {
    if (l.empty() || l[0] != '{') continue;
    json j = json::parse(l);
    if (!j.contains("loss")) continue;
    c.loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
    c.grad_norm[j["step"].get<int64_t>()] = j["grad_norm"].get<double>();
  }
  REQUIRE(c.loss.size() == 6);
  return c;
}

// Per step, loss and gradient norm within fp32 summation-order differences of the reference.
// The gradient norm is what a mis-scaled gradient changes (AdamW would normalise it away from
// the losses).
void check_same_curve(const Curve& got, const Curve& want) {
  for (const auto& [step, v] : want.loss) {
    const auto s = step;  // clang 14: a structured binding cannot be captured (CAPTURE)
    CAPTURE(s);
    CHECK(std::fabs(got.loss.at(s) - v) <= 1e-5 * std::fabs(v));
    CHECK(std::fabs(got.grad_norm.at(s) - want.grad_norm.at(s)) <= 1e-5 * want.grad_norm.at(s));
  }
}

json eval(const fs::path& run_dir, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"eval", "--run-dir", run_dir.string(), "--format", "json"};
  args.insert(args.end(), extra.begin(), extra.end());
  RunResult r = run(tool("dl-train"), args, "", {}, 120);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("train.grad_accum = 2 at batch 4 and parallel.dp = \"auto\" over 2 ranks give batch 8's losses and gradient norms") {
  TempDir d("accum");
  write_file(d / "c.toml", kTinyGpt);
  const Curve ref = train(d, "ref", {});
  check_same_curve(train(d, "accum", {"--set", "train.batch_size=4", "--set", "train.grad_accum=2"}), ref);

  // A config without [parallel], as torchrun + DDP users write it: "auto", the default, fills dp
  // from the process count, so 2 ranks of batch 4 are the same global batch of 8 (main exited 2).
  check_same_curve(train(d, "auto", {"--set", "train.batch_size=4", "--nproc-per-node", "2"}), ref);
  json summary = json::parse(read_file(d / "auto" / "summary.json"));
  CHECK(summary["layout"]["dp"] == 2);
  json memory = json::parse(read_file(d / "auto" / "memory.json"));
  CHECK(memory["layout"]["dp"] == 2);
  CHECK(memory["ranks"].size() == 2);
}

TEST_CASE("an explicit parallel.dp that contradicts --nproc-per-node exits 2 with one message naming the keys") {
  TempDir d("dp-contradiction");
  write_file(d / "c.toml", kTinyGpt);
  RunResult r = run(tool("dl-train"), {(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--nproc-per-node",
                                       "2", "--set", "parallel.dp=3"},
                    "", {}, 120);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  const std::string message = "parallel.dp x parallel.tp x parallel.pp = 3 x 1 x 1 = 3 ranks, but 2 processes were started";
  // Said once, by the launcher (main printed it once per rank, behind "[rank N]").
  const size_t first = r.err.find(message);
  REQUIRE(first != std::string::npos);
  CHECK(r.err.find(message, first + 1) == std::string::npos);
  CHECK(r.err.rfind("dl-train: error: " + message, 0) == 0);
  CHECK_FALSE(fs::exists(d / "run"));
  // The same under an outside launcher: each rank decides alone, and only rank 0 says why.
  RunResult rank1 = run(tool("dl-train"), {(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--set",
                                           "parallel.dp=3"},
                        "", {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"}, 60);
  CHECK(rank1.exit_code == 2);
  CHECK(rank1.err.find(message) == std::string::npos);
  CHECK(rank1.err.find("rank 1 of 2: the config's [parallel] layout is refused (rank 0 says why)") !=
        std::string::npos);
}

TEST_CASE("dl-train eval --data evaluates the data it names; a bad spec exits 2") {
  TempDir d("evaldata");
  // 964 bytes with val_fraction 0.25: the last 241 = 20 x 12 + 1 bytes are the validation split,
  // exactly 20 windows of block_size + 1.
  std::string text;
  for (int i = 0; text.size() < 964; ++i) text += "the " + std::to_string(i * 37 % 101) + " quick brown foxes\n";
  text.resize(964);
  text.back() = text[964 - 241];  // the split ends with the byte it starts with, so it tiles
  write_file(d / "all.txt", text);
  const std::string val = text.substr(964 - 241);
  write_file(d / "val.txt", val);
  // The validation bytes twice, sharing the boundary byte: 40 windows, the same 20 twice over.
  write_file(d / "twice.txt", val.substr(0, 240) + val);
  std::string other;
  for (int i = 0; other.size() < 301; ++i) other += "ZYX" + std::to_string(i * i) + "|";
  other.resize(301);  // 25 windows
  write_file(d / "other.txt", other);

  std::string cfg = kTinyGpt;
  cfg.replace(cfg.find("synthetic:addition"), 18, "text:" + (d / "all.txt").string());
  write_file(d / "c.toml", cfg);
  REQUIRE(run(tool("dl-train"), {(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--steps", "2",
                                 "--set", "data.val_fraction=0.25", "--set", "train.batch_size=4", "--quiet"})
              .exit_code == 0);

  json split = eval(d / "run", {});
  CHECK(split["targets"] == 20 * 12);
  CHECK(split["data"].get<std::string>().find("validation split") != std::string::npos);
  const double loss = split["loss"].get<double>();
  CHECK(loss > 0);

  // The same bytes named by --data: the same windows, so the same number to the last bit.
  json same = eval(d / "run", {"--data", "text:" + (d / "val.txt").string()});
  CHECK(same["data"] == "text:" + (d / "val.txt").string());
  CHECK(same["targets"] == 20 * 12);
  CHECK(same["loss"].get<double>() == loss);
  // Twice the windows, in batches of 4 that are each one of the validation split's: twice the
  // targets, the same mean.
  json twice = eval(d / "run", {"--data", "text:" + (d / "twice.txt").string()});
  CHECK(twice["targets"] == 40 * 12);
  CHECK(twice["loss"].get<double>() == doctest::Approx(loss).epsilon(1e-12));
  // Other text: its own 25 windows and another loss.
  json diff = eval(d / "run", {"--data", "text:" + (d / "other.txt").string()});
  CHECK(diff["targets"] == 25 * 12);
  CHECK(std::fabs(diff["loss"].get<double>() - loss) > 1e-3);

  for (const std::string& spec : {"text:" + (d / "missing.txt").string(), std::string("nosuch:x"), std::string("text")}) {
    CAPTURE(spec);
    RunResult r = run(tool("dl-train"), {"eval", "--run-dir", (d / "run").string(), "--data", spec});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("error") != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("the default run directory: the Slurm job and step when there is one (shared by every rank), else the time") {
  CHECK(dl::default_run_dir("configs/c.toml", {{"SLURM_JOB_ID", "42"}, {"SLURM_STEP_ID", "3"}}) == "runs/c-slurm-42.3");
  CHECK(dl::default_run_dir("c.toml", {{"SLURM_JOB_ID", "42"}}) == "runs/c-slurm-42");
  CHECK(dl::default_run_dir_is_shared({{"SLURM_JOB_ID", "42"}}));
  CHECK_FALSE(dl::default_run_dir_is_shared({{"SLURM_JOB_ID", ""}}));
  CHECK_FALSE(dl::default_run_dir_is_shared({{"RANK", "0"}}));
  const std::string local = dl::default_run_dir("configs/c.toml", {}).string();
  REQUIRE(local.size() == std::string("runs/c-20261125-120000").size());
  CHECK(local.rfind("runs/c-20", 0) == 0);
  CHECK(local[15] == '-');
}
