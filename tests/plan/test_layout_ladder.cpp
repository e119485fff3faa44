// dl-shard recommend climbs the ladder practitioners climb (issue 35 item 2): DP, ZeRO-1..3,
// selective then full recompute, TP inside a node with sequence parallelism, PP across nodes
// with the embedding and head counted as stages, CPU offload last with its host time costed.
#include <doctest/doctest.h>

#include "dl/plan/gpus.hpp"
#include "dl/plan/plan.hpp"
#include "dl/plan/report.hpp"
#include "support/published_shapes.hpp"
#include "support/support.hpp"

using namespace dl::plan;
using dl::test::has;

namespace {

using Shape = dl::test::PublishedShape;
// Llama 2 7B and 70B, GPT-3 175B, BLOOM-176B (GPT-style block: GELU, LayerNorm, biases, tied head).
constexpr Shape kLlama2_7B{6.74e9, "llama", 32, 4096, 32, 0, 11008, 32000, 4096};
constexpr Shape kLlama2_70B{69e9, "llama", 80, 8192, 64, 8, 28672, 32000, 8192};
constexpr Shape kGpt3{175e9, "", 96, 12288, 96, 0, 0, 50257, 2048};
constexpr Shape kBloom{176e9, "", 70, 14336, 112, 0, 0, 250880, 2048};

PlanInputs inputs(const Shape& s, int64_t gpus, const char* gpu, int64_t global_batch = 0) {
  PlanInputs in;
  dl::test::set_shape(in, s);
  in.gpus = gpus;
  in.gpu = gpu;
  if (global_batch) in.global_batch = global_batch;
  return in;
}

const Estimate& recommended(const PlanReport& r) {
  REQUIRE(r.best() != nullptr);
  REQUIRE(r.best() == &r.rows.front());
  return r.rows.front();
}

}  // namespace

TEST_CASE("Llama 2 7B at sequence 4096 on 8 x A100-80GB: FSDP/ZeRO over dp8, not dp4 tp2") {
  for (int64_t global_batch : {int64_t{0}, int64_t{1024}}) {
    CAPTURE(global_batch);
    const PlanReport r = make_recommendation(inputs(kLlama2_7B, 8, "A100-SXM-80GB", global_batch));
    const Layout& l = recommended(r).layout;
    CHECK(l.dp == 8);
    CHECK(l.tp == 1);
    CHECK(l.pp == 1);
    CHECK(l.zero >= 1);
    CHECK_FALSE(l.offload_cpu);
  }
}

TEST_CASE("Llama 2 70B at 8192 on 64 x H100: no offload, FSDP + recompute or TP with sequence parallelism") {
  const PlanReport r = make_recommendation(inputs(kLlama2_70B, 64, "H100-SXM", 512));
  const Layout& l = recommended(r).layout;
  CHECK_FALSE(l.offload_cpu);
  CHECK(((l.zero == 3 && l.recompute != Recompute::none) || (l.tp > 1 && l.sequence_parallel)));
  // Offload is no longer free: every offloaded layout pays the host's optimizer step.
  bool offload_seen = false;
  for (const auto& e : r.rows)
    if (e.valid && e.layout.offload_cpu) {
      offload_seen = true;
      CHECK(e.cpu_optimizer_seconds > 0);
      CHECK(e.offload_seconds > e.cpu_optimizer_seconds);
    }
  CHECK(offload_seen);
}

TEST_CASE("GPT-3 175B on 128 x H100: a TP/PP layout with a distributed optimizer, not ZeRO-0 at 98.6%") {
  const PlanReport r = make_recommendation(inputs(kGpt3, 128, "H100-SXM", 1536));
  const Estimate& e = recommended(r);
  CHECK((e.layout.tp > 1 || e.layout.pp > 1));
  CHECK(e.layout.zero >= 1);
  CHECK_FALSE(e.layout.offload_cpu);
  CHECK(e.headroom >= kComfortHeadroom * r.hardware.gpu_mem_bytes);
}

TEST_CASE("BLOOM-176B's published TP4 PP12 DP8 on 384 x A100-80GB fits: 70 blocks + embedding + head on 12 stages") {
  StageBlocks b = stage_blocks(70, 12);
  CHECK(b.first == 5);
  CHECK(b.middle == 6);
  CHECK(b.last == 5);
  b = stage_blocks(32, 4);
  CHECK((b.first == 8 && b.middle == 8 && b.last == 8));
  PlanInputs in = inputs(kBloom, 384, "A100-SXM-80GB", 2048);
  in.micro_batch = 2;  // BLOOM's micro-batch, global batch 2048
  in.fixed.tp = 4;
  in.fixed.pp = 12;
  in.fixed.zero = 1;  // BLOOM trained with ZeRO stage 1
  const PlanReport r = make_recommendation(in);
  const Estimate& e = recommended(r);
  CHECK(e.layout.dp == 8);
  CHECK(e.fits);
  // The first stage holds the embedding (250880 x 14336 / 4) and 5 blocks; a middle one 6 blocks.
  const ModelShape& m = r.model;
  CHECK(params_per_rank(m, 4, 12) < 6.0 * 2.47e9 / 4 + 250880.0 * 14336 / 4);
  // Layers that neither pp nor pp + 2 divide stay impossible.
  Layout l;
  l.gpus = 16, l.dp = 1, l.tp = 1, l.pp = 16;
  const std::string why = check_layout(m, l, 0);
  CAPTURE(why);
  CHECK(has(why, "pp = 16 does not divide the 70 layers (nor the 72"));
}

TEST_CASE("sequence parallelism splits the activations tensor parallelism leaves whole") {
  const ModelShape m = make_plan(inputs(kGpt3, 8, "H100-SXM")).model;
  const double s = 2048, h = 12288;
  const double without = activation_bytes_per_layer(m, 1, 8, Recompute::selective, 2.0, Attention::flash, false);
  const double with = activation_bytes_per_layer(m, 1, 8, Recompute::selective, 2.0, Attention::flash, true);
  // Korthikanti et al. table 2: sbh(10 + 24/t) without, sbh x 34/t with (selective recompute).
  CHECK(without == doctest::Approx(s * h * (10 + 24.0 / 8)));
  CHECK(with == doctest::Approx(s * h * 34.0 / 8));
  CHECK(activation_bytes_per_layer(m, 1, 8, Recompute::full, 2.0, Attention::flash, true) == doctest::Approx(2 * s * h / 8));
}

TEST_CASE("the ladder: the recommended rung and why each simpler one was rejected") {
  const PlanReport r = make_recommendation(inputs(kLlama2_70B, 64, "H100-SXM", 512));
  const std::vector<std::string> lines = explain_ladder(r.rows);
  REQUIRE(lines.size() == kLadder.size() + 1);
  CHECK(has(lines[1], "1. DP"));
  CHECK(has(lines[1], "does not fit: needs "));
  CHECK(has(lines.back(), "CPU offload"));
  size_t recommended_at = 0;
  for (size_t i = 1; i < lines.size(); ++i)
    if (has(lines[i], "recommended: ")) recommended_at = i;
  REQUIRE(recommended_at > 0);
  // Every simpler rung says why not: it does not fit, or it was passed over.
  for (size_t i = 1; i < recommended_at; ++i) {
    CAPTURE(lines[i]);
    CHECK((has(lines[i], "does not fit: ") || has(lines[i], "passed over: ") || has(lines[i], "not searched")));
  }
}

TEST_CASE("context parallelism for long sequences: each rank holds seq / cp, K/V travel the ring, ZeRO shards over dp x cp") {
  Shape llama3 = {8.03e9, "llama", 32, 4096, 32, 8, 14336, 128256, 131072};
  const PlanReport r = make_recommendation(inputs(llama3, 64, "H100-SXM"));
  const ModelShape& m = r.model;
  Layout l = r.base;
  l.gpus = 64, l.dp = 4, l.tp = 4, l.cp = 4, l.zero = 1;
  l.sequence_parallel = true;
  CHECK(check_layout(m, l, 0).empty());
  const MemoryBreakdown mem = memory_per_rank(m, l);
  ModelShape chunk = m;
  chunk.seq = m.seq / 4;
  Layout whole = l;
  whole.cp = 1;
  CHECK(mem.activations == doctest::Approx(activation_bytes(chunk, whole)));
  // The optimizer state shards over dp x cp = 16 ranks.
  CHECK(mem.optimizer == doctest::Approx(12 * params_per_rank(m, 4, 1) / 16));
  // Forward, and backward's K/V and their gradients: 3 passes of 2 x s/cp x b x h x KV/heads / t, cp - 1 hops a layer.
  const double kv = 2 * (131072.0 / 4) * 4096 * (8.0 / 32) / 4 * 2;
  CHECK(comm_per_rank(m, l).cp == doctest::Approx(3 * 32 * kv * 3));
  l.cp = 3, l.dp = 16, l.tp = 1;
  CHECK(has(check_layout(m, l, 0), "dp x tp x pp x cp"));
  // At 128K tokens a sequence, recommend climbs to the context-parallel rung; at 4096 it never searches it.
  const Layout& chosen = recommended(r).layout;
  CHECK(chosen.cp > 1);
  CHECK_FALSE(chosen.offload_cpu);
  for (const auto& e : make_recommendation(inputs(kLlama2_7B, 8, "A100-SXM-80GB")).rows) CHECK(e.layout.cp == 1);
}
