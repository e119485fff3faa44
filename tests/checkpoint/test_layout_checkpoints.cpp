// Checkpoints under parallel layouts, through dl-train: a sharded checkpoint resumes bit for bit
// under its own layout and continues the single-process losses under another; model.init_from (a
// GPT-2 folder, or a zero=3 run's shards) loads into dp, ZeRO-3, tp and pp; mixed-precision
// checkpoints hold f32 master weights and resume bit for bit, fp16's loss scale included.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "support/hf_gpt2.hpp"
#include "support/layout_runs.hpp"
#include "support/support.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

// The final val_loss a run recorded.
double final_val_loss(const fs::path& run_dir) {
  double v = NAN;
  for (const auto& l : lines(read_file(run_dir / "metrics.jsonl")))
    if (json j = json::parse(l); j.contains("val_loss")) v = j["val_loss"].get<double>();
  return v;
}

std::vector<json> metric_records(const fs::path& run_dir) {
  std::vector<json> out;
  for (const auto& l : lines(read_file(run_dir / "metrics.jsonl")))
    if (!l.empty()) out.push_back(json::parse(l));
  return out;
}

}  // namespace

TEST_CASE("sharded checkpoints: resume is bit for bit; other layouts continue the same losses and gradient norms") {
  const auto& ref = reference();
  TempDir dir("layout-ckpt");
  write_file(dir / "c.toml", kLayoutGpt);
  // Same layout: 10 steps + resume to 20 equals 20 uninterrupted steps exactly.
  std::vector<std::string> zero1 = {"parallel.dp=2", "train.batch_size=4", "parallel.zero=1"};
  Run whole = train(dir / "c.toml", dir / "whole", 2, zero1);
  REQUIRE(whole.code == 0);
  Run first = train(dir / "c.toml", dir / "split", 2, zero1, {"--steps", "10"});
  REQUIRE(first.code == 0);
  CHECK(fs::exists(dir / "split" / "checkpoints" / "step_00000010" / "shards" / "rank00001.safetensors"));
  Run rest = resume(dir / "split", 2, {"train.steps=20"});
  INFO(rest.err);
  REQUIRE(rest.code == 0);
  append(first, rest);
  REQUIRE(first.loss.size() == 20);
  REQUIRE(whole.loss.size() == 20);
  for (int64_t s = 1; s <= 20; ++s) {
    CAPTURE(s);
    CHECK(first.loss[s] == whole.loss[s]);
    CHECK(first.grad_norm[s] == whole.grad_norm[s]);
  }

  // Saved with dp=2 zero=3, resumed with tp=2 (and the reverse): the losses go on as the
  // single-process run's.
  struct Pair {
    std::string name;
    std::vector<std::string> save, load;
  };
  std::vector<Pair> pairs = {
      {"zero3 -> tp2", {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3"},
       {"parallel.dp=1", "parallel.tp=2", "train.batch_size=8", "parallel.zero=0", "train.steps=20"}},
      {"tp2 -> zero3", {"parallel.tp=2"},
       {"parallel.tp=1", "parallel.dp=2", "train.batch_size=4", "parallel.zero=3", "train.steps=20"}},
  };
  int i = 0;
  for (const auto& p : pairs) {
    CAPTURE(p.name);
    fs::path run_dir = dir / ("x" + std::to_string(i++));
    Run a = train(dir / "c.toml", run_dir, 2, p.save, {"--steps", "10"});
    INFO(a.err);
    REQUIRE(a.code == 0);
    Run b = resume(run_dir, 2, p.load);
    INFO(b.err);
    REQUIRE(b.code == 0);
    append(a, b);
    REQUIRE(a.loss.size() == 20);
    check_curves(p.name, a, ref, 1e-5);
  }
}

TEST_CASE("model.init_from into dp=2, ZeRO-3, tp=2 and pp=2 gives the single-process losses, tied or untied, with "
          "GPT-2's odd vocabulary; a sharded checkpoint starts a run") {
  TempDir dir("layout-init");
  // PyTorch-written GPT-2 folders (tests/scripts/hf_gpt2.py) with GPT-2's 50257-token vocabulary,
  // which tp=2 splits unevenly (25128 + 25129 rows): the head tied to wte, and a head of its own.
  // ASCII bytes x 397 spread the ids over both ranks' rows (x 197 would keep them below 25128).
  const json shape = {{"n_layer", 2}, {"n_head", 4}, {"n_embd", 16}, {"n_positions", 16}, {"vocab_size", 50257},
                      {"id_stride", 397}};
  json untied = shape;
  untied.update({{"seed", 6}, {"lm_head", "random"}, {"tie", false}});
  json tied = shape;
  tied["seed"] = 5;
  write_hf_gpt2s({{dir / "hf", tied}, {dir / "hf-untied", untied}});
  for (const std::string head : {"tied", "untied"}) {
    CAPTURE(head);
    const fs::path sub = dir / head;
    fs::create_directories(sub);
    write_file(sub / "c.toml", "[model]\ninit_from = \"" + (dir / (head == "tied" ? "hf" : "hf-untied")).string() +
                                   "\"\n\n[data]\nsource = \"tokens:../hf/train.bin\"\n"
                                   "val_source = \"tokens:../hf/val.bin\"\n\n[optim]\nlr = 3e-3\n\n[schedule]\n"
                                   "decay_steps = 8\n\n[train]\nsteps = 8\nbatch_size = 8\nthreads = 1\neval_every = 0\n"
                                   "eval_batches = 1\n\n[log]\nevery = 1\nsamples = 0\nprogress = \"none\"\nenv_lock = false\n"
                                   "tensorboard = false\n");
    Run single = train(sub / "c.toml", sub / "single", 1, {});
    INFO(single.err);
    REQUIRE(single.code == 0);
    REQUIRE(single.loss.size() == 8);
    std::vector<Layout> layouts = {
        {"dp=2", 2, {"parallel.dp=2", "train.batch_size=4"}},
        {"dp=2 zero=3", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=3"}},
        {"tp=2", 2, {"parallel.tp=2"}},
        {"pp=2", 2, {"parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4"}},
    };
    if (head == "untied") {  // the head's own gradient through every sharding of it
      layouts.push_back({"dp=2 zero=1", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=1"}});
      layouts.push_back({"dp=2 zero=2", 2, {"parallel.dp=2", "train.batch_size=4", "parallel.zero=2"}});
      layouts.push_back({"tp=2 x pp=2", 4, {"parallel.tp=2", "parallel.pp=2", "train.batch_size=2", "parallel.microbatches=4"}});
    }
    check_layouts(sub / "c.toml", sub, layouts, single, 8, "init_from " + head + " ");
    // The ZeRO-3 run's sharded checkpoint (one flat piece per rank) as model.init_from of a single
    // process: its weights are the single run's to float tolerance, so is its loss.
    const fs::path sharded = sub / "run1" / "checkpoints" / "step_00000008";
    REQUIRE(fs::exists(sharded / "shards" / "rank00001.safetensors"));
    Run from_shards = train(sub / "c.toml", sub / "from-shards", 1, {"model.init_from=" + sharded.string()}, {"--steps", "0"});
    INFO(from_shards.err);
    REQUIRE(from_shards.code == 0);
    const double a = final_val_loss(sub / "from-shards"), b = final_val_loss(sub / "single");
    MESSAGE(head << ": val loss from the zero=3 shards " << a << ", single process " << b);
    CHECK(std::fabs(a - b) / b < 1e-5);
  }
}

TEST_CASE("mixed-precision checkpoints hold f32 master weights; resume is bit for bit, fp16's loss scale included") {
  TempDir dir("mixed-ckpt");
  write_file(dir / "c.toml", kLayoutGpt);
  // fp16 from a loss scale that overflows (2^24): the first steps are skipped while the scale
  // halves, then training proceeds; the scale doubles after 4 good steps and overflows again.
  const std::vector<std::string> fp16 = {"train.precision=fp16", "train.loss_scale=16777216",
                                         "train.loss_scale_window=4", "parallel.dp=2", "train.batch_size=4",
                                         "parallel.zero=2"};
  Run whole = train(dir / "c.toml", dir / "whole", 2, fp16);
  INFO(whole.err);
  REQUIRE(whole.code == 0);
  auto recs = metric_records(dir / "whole");
  int skipped = 0, applied = 0;
  double prev_scale = 0;
  bool prev_skipped = false;
  for (const auto& r : recs) {
    if (!r.contains("loss_scale")) continue;
    const double s = r["loss_scale"];
    if (prev_scale > 0 && prev_skipped) CHECK(s == prev_scale / 2);  // every skip halves the scale
    if (prev_scale > 0 && !prev_skipped) CHECK((s == prev_scale || s == 2 * prev_scale));
    prev_skipped = r["skipped"];
    prev_scale = s;
    (prev_skipped ? skipped : applied)++;
  }
  MESSAGE("fp16 from scale 2^24: " << skipped << " skipped steps, " << applied << " applied");
  CHECK(recs.front()["skipped"] == true);
  CHECK(skipped >= 5);
  CHECK(applied >= 5);
  REQUIRE(whole.loss.size() == 20);
  CHECK(whole.loss.rbegin()->second < whole.loss.begin()->second * 0.9);  // it learned after the skips

  Run first = train(dir / "c.toml", dir / "split", 2, fp16, {"--steps", "12"});
  REQUIRE(first.code == 0);
  const fs::path ck = dir / "split" / "checkpoints" / "step_00000012";
  json manifest = json::parse(read_file(ck / "trainer_state.json"));
  CHECK(manifest["loss_scale"]["skipped_steps"].get<int>() > 0);
  for (const auto& [name, t] : manifest["tensors"].items()) CHECK(t["dtype"] == "F32");
  Run rest = resume(dir / "split", 2, {"train.steps=20"});
  INFO(rest.err);
  REQUIRE(rest.code == 0);
  append(first, rest);
  REQUIRE(first.loss.size() == 20);
  CHECK(first.loss == whole.loss);
  CHECK(identical(first.grad_norm, whole.grad_norm));  // overflowed steps' norms are NaN in both

  // A bf16 checkpoint resumed under another layout continues within bf16 tolerance.
  Run b = train(dir / "c.toml", dir / "b", 2, {"train.precision=bf16", "parallel.dp=2", "train.batch_size=4", "parallel.zero=3"}, {"--steps", "10"});
  REQUIRE(b.code == 0);
  Run b2 = resume(dir / "b", 1, {"train.steps=20", "parallel.dp=1", "train.batch_size=8", "parallel.zero=0"});
  INFO(b2.err);
  REQUIRE(b2.code == 0);
  append(b, b2);
  REQUIRE(b.loss.size() == 20);
  Run bs = train(dir / "c.toml", dir / "bs", 1, {"train.precision=bf16"});
  REQUIRE(bs.code == 0);
  REQUIRE(bs.loss.size() == 20);
  check_curves("bf16 dp=2 zero=3 -> one rank", b, bs, 1e-3, 3e-3);
}
