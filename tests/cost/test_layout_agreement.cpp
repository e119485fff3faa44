// One memory model (issue 35 item 1): dl-cost's fit check is dl-shard recommend's choice, with
// the same defaults (flash attention) and the same search, so the two never disagree on whether a
// run fits, in which layout, and how much memory a GPU needs.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "dl/cost/estimate.hpp"
#include "dl/plan/report.hpp"
#include "support/published_shapes.hpp"
#include "support/support.hpp"

using namespace dl::cost;
using dl::test::has;

namespace {

struct Run {
  const char* name;
  dl::test::PublishedShape shape;
  const char* gpu;
  int64_t gpus, global_batch, micro_batch;
};

// Published shapes at their published scale: sequences per step and micro-batch as trained.
const Run kRuns[] = {
    {"Llama 2 7B, seq 4096", {6.74e9, "llama", 32, 4096, 32, 0, 11008, 32000, 4096}, "A100-SXM-80GB", 8, 1024, 1},
    {"Llama 3 8B", {8.03e9, "llama", 32, 4096, 32, 8, 14336, 128256, 8192}, "H100-SXM", 8, 512, 1},
    {"Llama 2 70B at 8192", {69e9, "llama", 80, 8192, 64, 8, 28672, 32000, 8192}, "H100-SXM", 64, 512, 1},
    {"GPT-3 175B", {175e9, "", 96, 12288, 96, 0, 0, 50257, 2048}, "H100-SXM", 128, 1536, 1},
    {"BLOOM-176B", {176e9, "", 70, 14336, 112, 0, 0, 250880, 2048}, "A100-SXM-80GB", 384, 2048, 2},
    {"GPT-3 175B on 8 GPUs (fits nowhere)", {175e9, "", 96, 12288, 96, 0, 0, 50257, 2048}, "H100-SXM", 8, 8, 1},
};

// The run's model priced on lambda's offers of `gpu` in the shipped catalog.
EstimateInputs on_lambda(const Run& run, double tokens) {
  EstimateInputs in;
  in.catalogs = {"builtin"};
  in.provider_filter = "lambda";
  in.gpu_filter = run.gpu;
  dl::test::set_shape(in, run.shape);
  in.tokens = tokens;
  return in;
}

// dl-cost's rows on 8-GPU instances against dl-shard recommend for the same model; `moe` adds the
// expert flags both tools take (experts 0: dense).
void check_agreement(const Run& run, const dl::plan::ArchHints& moe = {}) {
  CAPTURE(run.name);
  EstimateInputs in = on_lambda(run, 1e12);
  in.micro_batch = run.micro_batch;
  in.batch_tokens = static_cast<double>(run.global_batch * run.shape.seq);
  in.gpus = {run.gpus};
  in.arch.experts = moe.experts, in.arch.active_experts = moe.active_experts;
  const CostReport cost = make_estimate(in);
  REQUIRE_FALSE(cost.rows.empty());

  dl::plan::PlanInputs p;
  dl::test::set_shape(p, run.shape);
  p.arch.experts = moe.experts, p.arch.active_experts = moe.active_experts;
  p.gpus = run.gpus;
  p.gpu = run.gpu;
  p.micro_batch = run.micro_batch;
  p.global_batch = run.global_batch;
  const dl::plan::PlanReport shard = dl::plan::make_recommendation(p);
  for (const CostRow& row : cost.rows) {
    if (row.offer.gpu_count != 8) continue;  // an 8-GPU instance is dl-shard's default node
    CAPTURE(row.offer.id);
    REQUIRE(row.fits.has_value());
    CHECK(*row.fits == (shard.best() != nullptr));
    if (const dl::plan::Estimate* best = shard.best()) {
      CHECK(row.layout == dl::plan::compact_layout(best->layout));
      CHECK(row.mem_per_gpu == doctest::Approx(best->memory.total()).epsilon(1e-12));
      // Full recompute repeats the forward: the speed pays for the work the layout adds.
      CHECK(row.recompute_factor == doctest::Approx(best->model_flops / best->hardware_flops));
    } else {
      CHECK(has(row.why_not, "needs "));
    }
  }
}

}  // namespace

TEST_CASE("dl-cost and dl-shard agree on fit, layout and per-GPU memory for published shapes") {
  for (const Run& run : kRuns) check_agreement(run);
}

TEST_CASE("dl-cost and dl-shard agree on a mixture of experts: Mixtral 8x7B chooses the same expert-parallel layout") {
  const Run mixtral = {"Mixtral 8x7B", {46.7e9, "llama", 32, 4096, 32, 8, 14336, 32000, 4096}, "H100-SXM", 64, 256, 1};
  dl::plan::ArchHints moe;
  moe.experts = 8, moe.active_experts = 2;
  check_agreement(mixtral, moe);
  // The layout both choose shards the experts (ep > 1).
  dl::plan::PlanInputs p;
  dl::test::set_shape(p, mixtral.shape);
  p.arch.experts = 8, p.arch.active_experts = 2;
  p.gpus = 64, p.gpu = "H100-SXM", p.global_batch = 256;
  const dl::plan::PlanReport shard = dl::plan::make_recommendation(p);
  REQUIRE(shard.best());
  CHECK(has(dl::plan::compact_layout(shard.best()->layout), "ep="));
}

TEST_CASE("dl-cost no longer plans materialized attention: Llama 2 7B at 4096 fits without recompute") {
  EstimateInputs in = on_lambda(kRuns[0], 2e12);  // Llama 2 7B at 4096 on A100-SXM-80GB
  in.gpus = {8};
  const CostReport r = make_estimate(in);
  bool seen = false;
  for (const CostRow& row : r.rows)
    if (row.offer.gpu_count == 8) {
      seen = true;
      CHECK(row.fits.value_or(false));
      CHECK(row.recompute_factor == 1.0);  // was full recompute (x0.75) with materialized scores
      CHECK_FALSE(has(row.layout, "recompute"));
      CHECK(row.mem_per_gpu < 80e9);
    }
  CHECK(seen);
}

TEST_CASE("dl-cost --explain and dl-shard recommend --explain print the same ladder") {
  const std::vector<std::string> model = {"--params", "6.74e9", "--arch", "llama", "--layers", "32", "--hidden", "4096",
                                          "--heads", "32", "--seq", "4096", "--vocab", "32000"};
  std::vector<std::string> cost_args = {"estimate", "--tokens", "2e12", "--provider", "lambda", "--gpu", "A100-SXM-80GB",
                                        "--gpus", "8", "--batch-tokens", "32768", "--explain", "--top", "1"};
  cost_args.insert(cost_args.end(), model.begin(), model.end());
  const auto cost = dl::test::run(dl::test::tool("dl-cost"), cost_args);
  REQUIRE_MESSAGE(cost.exit_code == 0, cost.err);
  std::vector<std::string> shard_args = {"recommend", "--gpus", "8", "--gpu", "A100-SXM-80GB", "--explain"};
  shard_args.insert(shard_args.end(), model.begin(), model.end());
  const auto shard = dl::test::run(dl::test::tool("dl-shard"), shard_args);
  REQUIRE_MESSAGE(shard.exit_code == 0, shard.err);
  const std::string ladder = shard.out.substr(shard.out.find("# the layouts practitioners try"));
  CHECK(has(ladder, "2. ZeRO-1"));
  CHECK(has(ladder, "recommended: "));
  CHECK(has(cost.out, ladder));
  CHECK(has(cost.out, "# layout on 8 x A100-SXM-80GB"));
}

TEST_CASE("an offloaded layout pays the host's optimizer step in dl-cost's speed, on one GPU too") {
  EstimateInputs in = on_lambda(kRuns[1], 1e10);  // Llama 3 8B on H100-SXM
  in.batch_tokens = 8192 * 8;
  in.gpus = {1};
  const CostReport r = make_estimate(in);
  bool seen = false;
  for (const CostRow& row : r.rows)
    if (row.gpus == 1 && has(row.layout, "offload=cpu")) {
      seen = true;
      CHECK(row.fits.value_or(false));
      CHECK(row.efficiency < 0.99);  // was 1: a single GPU had no cost beside compute
    }
  CHECK(seen);
}

TEST_CASE("dl-cost and dl-shard agree on fit, layout and per-GPU memory for every held-out run of dl-cost validate") {
  const auto& runs = held_out_runs();
  REQUIRE(runs.size() >= 20);
  for (const HeldOutRun& run : runs) {
    CAPTURE(run.name);
    // The held-out row as validate prices it, on lambda's 8-GPU offers where they exist.
    const EstimateInputs in = held_out_inputs(run);
    const CostReport cost = make_estimate(in);

    dl::plan::PlanInputs p;
    p.params = run.params;
    p.layers = run.layers, p.hidden = run.hidden, p.heads = run.heads, p.seq = run.seq, p.vocab = run.vocab;
    p.arch = run.arch;
    p.gpus = run.gpus;
    p.gpu = run.gpu;
    p.precision = run.precision;
    if (run.micro_batch > 0) p.micro_batch = run.micro_batch;
    p.fixed = run.layout;  // a published layout (DeepSeek-V3's pp16 ep64 ZeRO-1) as dl-shard's --tp --pp --ep --zero
    p.fixed.recompute = run.recompute;
    p.uneven_stages = run.uneven_stages;
    p.moe_overlap = run.moe_overlap;
    if (!run.fabric.empty()) p.fabric = run.fabric;
    size_t compared = 0;
    for (const CostRow& row : cost.rows) {
      if (row.spot || row.offer.gpu_count != 8) continue;  // an 8-GPU instance is dl-shard's default node
      CAPTURE(row.offer.id);
      // The global batch the fit was searched for, in sequences (dl-shard's --global-batch).
      p.global_batch = check_fit(cost.experiment, row.offer, run.gpus).global_batch;
      const dl::plan::PlanReport shard = dl::plan::make_recommendation(p);
      REQUIRE(row.fits.has_value());
      CHECK(*row.fits == (shard.best() != nullptr));
      if (const dl::plan::Estimate* best = shard.best()) {
        CHECK(row.layout == dl::plan::compact_layout(best->layout));
        CHECK(row.mem_per_gpu == doctest::Approx(best->memory.total()).epsilon(1e-12));
      }
      ++compared;
      break;  // one offer per GPU model: the same GPU, memory and node size give the same plan
    }
    CHECK(compared == 1);
  }
}
