// Every parallel layout against the single-process run: the same seed and global batch give the
// same loss and gradient norm at every step (fp32, 1e-5 relative; the norm catches a gradient
// scaled uniformly, which AdamW's update would hide from the loss), under AdamW and under SGD.
// Plus per-rank memory against the ZeRO formulas, impossible layouts, and bf16 under every ZeRO
// stage. dl-train runs each layout (tests/support/layout_runs.hpp); its checkpoints:
// tests/checkpoint/test_layout_checkpoints.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "dl/plan/plan.hpp"
#include "support/layout_runs.hpp"
#include "support/support.hpp"

using namespace dl::test;
using nlohmann::json;

// Every layout, at global batch 8 sequences everywhere: batch_size x microbatches x dp.
const std::vector<Layout> kLayouts = {
    {"dp=2", 2, {"parallel.dp=2", "train.batch_size=4"}},
    {"dp=2 zero=1", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=1"}},
    {"dp=2 zero=2", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=2"}},
    {"dp=2 zero=3", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3"}},
    {"dp=2 zero=3 offload", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3", "parallel.offload=cpu"}},
    {"tp=2", 2, {"parallel.tp=2"}},
    {"pp=2 gpipe m=4", 2, {"parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4", "parallel.schedule=gpipe"}},
    {"pp=2 1f1b m=4", 2, {"parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4", "parallel.schedule=1f1b"}},
    {"dp=2 x tp=2", 4, {"parallel.dp=2", "parallel.tp=2", "train.batch_size=4"}},
    {"dp=2 x pp=2", 4, {"parallel.dp=2", "parallel.pp=2", "train.batch_size=2", "parallel.microbatches=2"}},
    {"tp=2 x pp=2", 4, {"parallel.tp=2", "parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4"}},
    {"dp=2 x tp=2 x pp=2", 8,
     {"parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "train.batch_size=2", "parallel.microbatches=2"}},
    {"activation checkpointing", 1, {"parallel.activation_checkpointing=true"}},
    {"dp=2 zero=1 activation checkpointing", 2,
     {"parallel.dp=2", "train.batch_size=4", "parallel.zero=1", "parallel.activation_checkpointing=true"}},
};

TEST_CASE("every parallel layout gives the single-process losses and gradient norms") {
  const auto& ref = reference();
  TempDir dir("layouts");
  write_file(dir / "c.toml", kLayoutGpt);
  check_layouts(dir / "c.toml", dir.path(), kLayouts, ref, 20);
}

TEST_CASE("SGD without clipping: dp=2 zero=2 and tp=2 give the single-process losses and gradient norms") {
  // SGD moves the weights by the gradient as it is and clipping is off, so a gradient off by a
  // uniform factor (e.g. summed instead of averaged over ranks) changes the losses too.
  TempDir dir("layouts-sgd");
  write_file(dir / "c.toml", kLayoutGpt);
  const std::vector<std::string> sgd = {"optim.name=sgd", "optim.lr=0.1", "optim.grad_clip=0", "train.steps=6"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), sgd.begin(), sgd.end());
    return sets;
  };
  Run single = train(dir / "c.toml", dir / "single", 1, with({}));
  INFO(single.err);
  REQUIRE(single.code == 0);
  REQUIRE(single.loss.size() == 6);
  CHECK(single.loss.rbegin()->second < single.loss.begin()->second);  // the steps were taken
  const std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
      {"sgd dp=2 zero=2", {"parallel.dp=2", "train.batch_size=4", "parallel.zero=2"}}, {"sgd tp=2", {"parallel.tp=2"}}};
  int i = 0;
  for (const auto& [layout_name, sets] : layouts) {
    const auto& name = layout_name;  // clang 14: a structured binding cannot be captured (CAPTURE)
    CAPTURE(name);
    Run r = train(dir / "c.toml", dir / ("run" + std::to_string(i++)), 2, with(sets));
    INFO(r.err);
    REQUIRE(r.code == 0);
    REQUIRE(r.loss.size() == 6);
    check_curves(name, r, single, 1e-5);
  }
}

TEST_CASE("per-rank memory agrees with the ZeRO formulas (fp32 Adam)") {
  // memory.json counts the storage each rank's engine and model hold, so a whole buffer kept
  // where a stage shards it shows here. Every parameter group (embeddings, each block, ln_f) has
  // an even size, so the shards need no padding at dp = 2 and the bytes are exact.
  TempDir dir("layout-mem");
  write_file(dir / "c.toml", kLayoutGpt);
  // psi for this model, and the formula's bytes per rank at dp = 2.
  const double psi = 2 * (4 * 32 * 32 * 3 + 13 * 32) + 256 * 32 + 26 * 32 + 2 * 32;
  const auto sb = dl::plan::state_bytes("fp32");
  for (int zero = 0; zero <= 3; ++zero) {
    CAPTURE(zero);
    Run r = train(dir / "c.toml", dir / ("run" + std::to_string(zero)), 2,
                  {"parallel.dp=2", "train.batch_size=4", "parallel.zero=" + std::to_string(zero), "train.steps=1"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    json mem = json::parse(read_file(dir / ("run" + std::to_string(zero)) / "memory.json"));
    REQUIRE(mem["params"].get<double>() == psi);
    REQUIRE(mem["ranks"].size() == 2);
    double want_p = zero >= 3 ? sb.params * psi / 2 : sb.params * psi;
    double want_g = zero >= 2 ? sb.grads * psi / 2 : sb.grads * psi;
    double want_o = zero >= 1 ? sb.optimizer * psi / 2 : sb.optimizer * psi;
    // The formula's total per rank, as dl-shard computes it.
    double formula = dl::plan::zero_model_state_bytes(psi, 2, zero, sb);
    for (const auto& rk : mem["ranks"]) {
      double p = rk["params_bytes"], g = rk["grads_bytes"], o = rk["optimizer_bytes"];
      CHECK(p == want_p);
      CHECK(g == want_g);
      CHECK(o == want_o);
      CHECK(p + g + o == formula);
      CHECK(rk["optimizer_host_bytes"].get<double>() == 0);
      CHECK(rk["activation_bytes"].get<double>() > 0);
    }
  }
}

TEST_CASE("impossible layouts are clear errors") {
  TempDir dir("layout-bad");
  write_file(dir / "c.toml", kLayoutGpt);
  struct Case {
    int nproc;
    std::vector<std::string> sets;
    std::string expect;
  };
  std::vector<Case> cases = {
      {2, {"parallel.tp=3"}, "not divisible by parallel.tp x parallel.pp = 3 x 1 = 3"},
      {2, {"parallel.tp=3", "parallel.dp=1"}, "parallel.dp x parallel.tp x parallel.pp = 1 x 3 x 1 = 3 ranks, but 2"},
      {3, {"parallel.tp=3"}, "must divide model.n_head"},
      {2, {"parallel.pp=4"}, "not divisible by parallel.tp x parallel.pp = 1 x 4 = 4"},
      {4, {"parallel.pp=4", "model.n_layer=2"}, "must divide model.n_layer"},
      {2, {"parallel.dp=1"}, "parallel.dp x parallel.tp x parallel.pp = 1 x 1 x 1 = 1 ranks, but 2 processes"},
      {1, {"parallel.dp=2"}, "--nproc-per-node"},
      {2, {"parallel.pp=2", "parallel.zero=2"}, "zero = 2 with pipeline parallel"},
  };
  int i = 0;
  for (const auto& c : cases) {
    CAPTURE(c.expect);
    Run r = train(dir / "c.toml", dir / ("run" + std::to_string(i++)), c.nproc, c.sets);
    CHECK(r.code == 2);
    CHECK(r.err.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("bf16 with dp=2 and every ZeRO stage gives the single-rank bf16 losses; memory is 2+2+12 bytes") {
  TempDir dir("mixed-zero");
  write_file(dir / "c.toml", kLayoutGpt);
  Run single = train(dir / "c.toml", dir / "single", 1, {"train.precision=bf16"});
  REQUIRE(single.code == 0);
  const double psi = 2 * (4 * 32 * 32 * 3 + 13 * 32) + 256 * 32 + 26 * 32 + 2 * 32;
  const auto sb = dl::plan::state_bytes("bf16");  // the planner's mixed-precision Adam: 2 + 2 + 12
  CHECK(sb.params == 2);
  CHECK(sb.optimizer == 12);
  Curves zero0;
  for (int zero = 0; zero <= 3; ++zero) {
    CAPTURE(zero);
    const fs::path run_dir = dir / ("z" + std::to_string(zero));
    Run r = train(dir / "c.toml", run_dir, 2,
                  {"train.precision=bf16", "parallel.dp=2", "train.batch_size=4", "parallel.zero=" + std::to_string(zero)});
    INFO(r.err);
    REQUIRE(r.code == 0);
    REQUIRE(r.loss.size() == 20);
    // Gradients are summed over ranks in f32 and rounded once, whatever the stage: the stages
    // agree exactly (the norm up to the order of its partial sums); the single rank rounds a
    // different partial sum (measured: loss 1.3e-4, grad_norm 6.7e-4).
    if (zero == 0) zero0 = r;
    CHECK(r.loss == zero0.loss);
    CHECK(max_rel_diff(r.grad_norm, zero0.grad_norm) < 1e-12);
    check_curves("bf16 dp=2 zero=" + std::to_string(zero) + " vs one rank", r, single, 1e-3, 3e-3);
    json mem = json::parse(read_file(run_dir / "memory.json"));
    CHECK(mem["dtype"] == "bf16");
    const double formula = dl::plan::zero_model_state_bytes(psi, 2, zero, sb);
    for (const auto& rk : mem["ranks"]) {
      const double total = rk["params_bytes"].get<double>() + rk["grads_bytes"].get<double>() +
                           rk["optimizer_bytes"].get<double>();
      CHECK(total == formula);  // no padding: every parameter group's size is even
    }
  }
}

// The llama (GQA 4:2, untied head, rope scaling) through the same layouts as the GPT: tp = 2
// gives each rank 2 query heads and their 1 K/V head. And a checkpoint of a sharded run resumes
// bit for bit.
TEST_CASE("llama: every parallel layout gives the single-process losses and gradient norms; resume is bit for bit") {
  TempDir dir("layouts-llama");
  write_file(dir / "c.toml",
             layout_gpt({{"model.type", "\"llama\""}, {"model.n_kv_head", "2"}, {"model.ffn_hidden", "40"},
                         {"model.tie_embeddings", "false"}, {"model.rope_scaling", "\"llama3\""},
                         {"model.rope_original_max_position", "16"}, {"optim.lr", "3e-3"},
                         {"schedule.warmup_steps", "4"}, {"schedule.decay_steps", "20"}, {"train.steps", "20"}}));
  Run single = train(dir / "c.toml", dir / "single", 1, {});
  INFO(single.err);
  REQUIRE(single.code == 0);
  REQUIRE(single.loss.size() == 20);
  CHECK(single.loss.rbegin()->second < single.loss.begin()->second);
  check_layouts(dir / "c.toml", dir.path(), kLayouts, single, 20, "llama ");

  const std::vector<std::string> zero3 = {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3"};
  Run first = train(dir / "c.toml", dir / "split", 2, zero3, {"--steps", "10"});
  REQUIRE(first.code == 0);
  Run rest = resume(dir / "split", 2, {"train.steps=20"});
  INFO(rest.err);
  REQUIRE(rest.code == 0);
  append(first, rest);
  Run whole = train(dir / "c.toml", dir / "whole", 2, zero3);
  REQUIRE(whole.code == 0);
  CHECK(identical(first.loss, whole.loss));
  CHECK(identical(first.grad_norm, whole.grad_norm));
}

// Qwen2's q/k/v biases: tp = 2 splits them with their heads' rows; ZeRO-3 shards them with the
// block's other parameters; pp = 2 places them with their block.
TEST_CASE("llama with q/k/v biases: tp=2, dp=2 zero=3 and pp=2 give the single-process losses and gradient norms") {
  TempDir dir("layouts-qwen2");
  write_file(dir / "c.toml",
             layout_gpt({{"model.type", "\"llama\""}, {"model.n_kv_head", "2"}, {"model.ffn_hidden", "40"},
                         {"model.qkv_bias", "true"}, {"optim.lr", "3e-3"}, {"schedule.warmup_steps", "4"},
                         {"schedule.decay_steps", "20"}, {"train.steps", "20"}}));
  Run single = train(dir / "c.toml", dir / "single", 1, {});
  INFO(single.err);
  REQUIRE(single.code == 0);
  REQUIRE(single.loss.size() == 20);
  CHECK(single.loss.rbegin()->second < single.loss.begin()->second);
  const std::vector<Layout> layouts = {
      {"tp=2", 2, {"parallel.tp=2"}},
      {"dp=2 zero=3", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3"}},
      {"pp=2 1f1b m=4", 2, {"parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4", "parallel.schedule=1f1b"}},
  };
  check_layouts(dir / "c.toml", dir.path(), layouts, single, 20, "qkv_bias ");
}

TEST_CASE("llama: tensor parallel needs whole K/V groups per rank, said by key name") {
  TempDir dir("layouts-llama-kv");
  write_file(dir / "c.toml", layout_gpt({{"model.type", "\"llama\""}, {"model.n_kv_head", "1"}}));
  Run r = train(dir / "c.toml", dir / "run", 2, {"parallel.tp=2"});
  CHECK(r.code == 2);
  CHECK(r.err.find("parallel.tp = 2 must divide model.n_kv_head = 1") != std::string::npos);
}
