// The goodput factor (evaluation, checkpoint writes, failures and restarts) against hand-computed
// values, Llama 3's reported effective training time, and in dl-cost's output; FP8 and --fabric
// in the estimate.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/cost/estimate.hpp"
#include "dl/cost/goodput.hpp"
#include "fixtures.hpp"
#include "support/support.hpp"

using dl::test::has;
using namespace dl::cost;
using namespace cost_test;

namespace {

// A catalog with a GPU without FP8 (A100) beside one with it (H100), both 8-GPU NVLink boards.
const char* kFp8Catalog = R"(schema = "dlkit-catalog/1"

[[offer]]
provider = "P"
instance = "a100x8"
gpu = "A100-SXM-80GB"
gpus = 8
on_demand = 10.0
source = "test"
as_of = "2026-11"

[[offer]]
provider = "P"
instance = "h100x8"
gpu = "H100-SXM"
gpus = 8
on_demand = 20.0
source = "test"
as_of = "2026-11"
)";

EstimateInputs inputs(const std::string& catalog) {
  EstimateInputs in;
  in.tokens = 1e10;
  in.params = 1e9;
  in.catalogs = {catalog};
  in.speed_sources = {SpeedSource::analytic};
  in.mfu = 0.4;
  return in;
}

const CostRow& row_of(const CostReport& r, const std::string& id, int64_t gpus) {
  for (const auto& x : r.rows)
    if (x.offer.id == id && x.gpus == gpus) return x;
  FAIL("no row for ", id, " x", gpus);
  return r.rows.front();
}

}  // namespace

TEST_CASE("goodput: hand-computed evaluation, checkpoints and failures") {
  GoodputModel m;
  m.eval_share = 0.02;
  m.checkpoint_bw = 1e9;  // per GPU
  m.failures_per_gpu_hour = 1e-3;
  m.restart_hours = 0.5;
  // 10 h on 100 GPUs, 360 GB checkpoints every 2 h: a write = 360e9 / 100e9 = 3.6 s = 0.001 h;
  // 5 checkpoints; failures 0.1 per hour, each losing 0.5 + 1 h.
  const Goodput g = goodput(10, 100, 360e9, 2.0, m);
  const double busy = 10 + 0.2 + 5 * 0.001;
  const double wall = busy / (1 - 0.1 * 1.5);
  CHECK(g.checkpoint_write_hours == doctest::Approx(0.001));
  CHECK(g.checkpoints == 5);
  CHECK(g.wall_hours == doctest::Approx(wall));
  CHECK(g.factor == doctest::Approx(10 / wall));
  CHECK(g.failures == doctest::Approx(0.1 * wall));
  CHECK(g.failure_hours == doctest::Approx(0.1 * wall * 1.5));
  CHECK_FALSE(g.interval_optimal);

  // Without an interval: Young's sqrt(2 x write / failure rate).
  const Goodput y = goodput(10, 100, 360e9, std::nullopt, m);
  CHECK(y.interval_optimal);
  CHECK(y.checkpoint_interval_hours == doctest::Approx(std::sqrt(2 * 0.001 / 0.1)));

  // Failures faster than the run can recover: it never finishes.
  m.failures_per_gpu_hour = 1e-2;
  const Goodput never = goodput(10, 100, 360e9, 2.0, m);
  CHECK_FALSE(never.finishes);
  CHECK(has(describe_goodput(never), "never") == false);
  CHECK(has(describe_goodput(never), "faster than the run"));

  // none(): steady-state throughput.
  CHECK(goodput(10, 100, 360e9, std::nullopt, GoodputModel::none()).factor == doctest::Approx(1));
}

TEST_CASE("goodput: the defaults give Llama 3 405B's ~90% effective training time on 16,384 GPUs") {
  // 405B parameters, bf16 AdamW checkpoints (2 + 12 bytes per parameter), 54 days of compute.
  const double bytes = checkpoint_bytes(405e9, dl::Precision::bf16, dl::StateOptimizer::adamw);
  CHECK(bytes == doctest::Approx(405e9 * 14));
  const Goodput g = goodput(54 * 24, 16384, bytes, std::nullopt, GoodputModel{});
  CHECK(g.factor > 0.85);
  CHECK(g.factor < 0.95);
  // 419 unexpected interruptions in 54 days (of wall time, here a little longer than compute).
  CHECK(g.failures == doctest::Approx(419 * g.wall_hours / (54 * 24)).epsilon(1e-6));
  // fp8 saves what bf16 does: the FP8 weight copies are not checkpointed.
  CHECK(checkpoint_bytes(1e9, dl::Precision::fp8, dl::StateOptimizer::adamw) == doctest::Approx(14e9));
}

TEST_CASE("goodput in the estimate: hours = compute hours / goodput, and GPU-hours grow with the GPU count") {
  dl::test::TempDir dir;
  auto in = inputs(write_catalog(dir));
  in.gpus = {8, 4096};
  const CostReport r = make_estimate(in);
  const CostRow& small = row_of(r, "pricey/h100x8", 8);
  const CostRow& large = row_of(r, "pricey/h100x8", 4096);
  for (const CostRow* x : {&small, &large}) {
    CHECK(x->goodput.factor < 1);
    CHECK(x->hours == doctest::Approx(x->compute_hours / x->goodput.factor));
  }
  // Same work, fixed per-GPU speed: failures (per GPU-hour) and their restarts cost the large
  // run a larger share, so its GPU-hours are more than the small run's even at equal scaling.
  const double small_per_compute = small.gpu_hours() / (small.compute_hours * 8);
  const double large_per_compute = large.gpu_hours() / (large.compute_hours * 4096);
  CHECK(large_per_compute > small_per_compute);
  CHECK(large.goodput.failures > small.goodput.failures);

  // Turned off, hours are compute hours.
  in.goodput = GoodputModel::none();
  const CostReport off = make_estimate(in);
  CHECK(row_of(off, "pricey/h100x8", 4096).hours == doctest::Approx(row_of(off, "pricey/h100x8", 4096).compute_hours));
  CHECK(row_of(off, "pricey/h100x8", 4096).hours < large.hours);
}

TEST_CASE("goodput is printed: a table column and note, json fields") {
  dl::test::TempDir dir;
  auto in = inputs(write_catalog(dir));
  in.flags = {{"eval_share", "--eval-share"}, {"failure_rate", "--failure-rate"}};
  const CostReport r = make_estimate(in);
  const std::string table = render_estimate(r, dl::OutputFormat::table, 0);
  CHECK(has(table, "goodput"));
  CHECK(has(table, "# goodput: hours = compute / goodput; evaluation 1.0% (--eval-share)"));
  CHECK(has(table, "(--failure-rate; Llama 3: 419 in 54 days on 16,384 GPUs)"));
  const auto rows = nlohmann::json::parse(render_estimate(r, dl::OutputFormat::json, 0));
  REQUIRE(!rows.empty());
  for (const auto& x : rows) {
    CHECK(x["goodput"].get<double>() < 1);
    CHECK(x["goodput"].get<double>() > 0.9);
    CHECK(x["hours"].get<double>() == doctest::Approx(x["compute_hours"].get<double>() / x["goodput"].get<double>()));
    CHECK(x["gpu_hours"].get<double>() == doctest::Approx(x["hours"].get<double>() * x["gpus"].get<double>()));
    CHECK(x.contains("failures"));
    CHECK(x.contains("checkpoint_interval_hours"));
  }
  in.goodput.eval_share = -0.1;
  CHECK_THROWS_AS(make_estimate(in), dl::Error);
}

TEST_CASE("fp8: FP8 peaks on GPUs that have them, refused by name on the others") {
  dl::test::TempDir dir;
  auto p = dir / "fp8.toml";
  dl::test::write_file(p, kFp8Catalog);
  auto in = inputs(p.string());
  in.goodput = GoodputModel::none();
  in.precision = "bf16";
  const CostReport bf16 = make_estimate(in);
  in.precision = "fp8";
  const CostReport fp8 = make_estimate(in);
  CHECK(row_of(fp8, "p/h100x8", 8).speed.flops == doctest::Approx(1979e12 * 0.4));
  CHECK(row_of(fp8, "p/h100x8", 8).speed.flops == doctest::Approx(2 * row_of(bf16, "p/h100x8", 8).speed.flops).epsilon(0.001));
  bool a100_skipped = false;
  for (const auto& s : fp8.skipped)
    if (has(s, "p/a100x8") && has(s, "A100-SXM-80GB (Ampere) has no FP8 tensor cores")) a100_skipped = true;
  CHECK(a100_skipped);
  for (const auto& x : fp8.rows) CHECK(x.offer.gpu_model != "A100-SXM-80GB");
  // Memory: bf16 weights and grads plus the FP8 copy: 17 bytes per parameter at ZeRO-0.
  CHECK(row_of(fp8, "p/h100x8", 8).mem_per_gpu > row_of(bf16, "p/h100x8", 8).mem_per_gpu);
}

TEST_CASE("--fabric: a slower network between instances lowers the scaling efficiency of a multi-node run") {
  dl::test::TempDir dir;
  auto in = inputs(write_catalog(dir));
  in.goodput = GoodputModel::none();
  in.params = 7e9;
  in.layers = 32, in.hidden = 4096, in.heads = 32, in.seq = 2048;
  in.gpus = {64};
  in.gpu_filter = "H100-SXM";
  const double ndr = row_of(make_estimate(in), "pricey/h100x8", 64).efficiency;
  in.fabric = "ib-ndr";
  CHECK(row_of(make_estimate(in), "pricey/h100x8", 64).efficiency == doctest::Approx(ndr));  // the default
  in.fabric = "omnipath";
  const CostReport opa = make_estimate(in);
  CHECK(row_of(opa, "pricey/h100x8", 64).efficiency < ndr);
  bool noted = false;
  for (const auto& n : opa.notes)
    if (has(n, "# fabric between instances: omnipath") && has(n, "6.25 GB/s per GPU")) noted = true;
  CHECK(noted);
  in.fabric = "infiniband";
  CHECK_THROWS_AS(make_estimate(in), dl::Error);
}

TEST_CASE("a fixed run (global batch fixed) costs more GPU-hours on more GPUs once the per-replica batch shrinks") {
  dl::test::TempDir dir;
  auto in = inputs(write_catalog(dir));
  in.gpu_filter = "H100-SXM";
  // Llama 2 7B's block at sequence 2048 with a 4M-token batch (2,048 sequences per step).
  in.params = 6.74e9;
  in.layers = 32, in.hidden = 4096, in.heads = 32, in.seq = 2048, in.vocab = 32000;
  in.arch.family = "llama";
  in.arch.untied_head = true;
  in.tokens = 1e12;
  in.batch_tokens = 4194304;
  in.gpus = {64, 512, 2048};
  const CostReport fixed = make_estimate(in);
  const CostRow* rows[] = {&row_of(fixed, "pricey/h100x8", 64), &row_of(fixed, "pricey/h100x8", 512),
                           &row_of(fixed, "pricey/h100x8", 2048)};
  for (int i = 0; i < 3; ++i) {
    CAPTURE(rows[i]->gpus);
    MESSAGE(rows[i]->gpus, " GPUs: ", rows[i]->layout, ", ", rows[i]->gpu_hours(), " GPU-h, ", rows[i]->dp_detail);
    CHECK(rows[i]->replica_tokens > 0);
    if (i == 0) continue;
    // Fewer tokens per replica, fewer micro-batches to hide the same gradient traffic behind.
    CHECK(rows[i]->gpu_hours() > rows[i - 1]->gpu_hours() * 1.05);
    CHECK(rows[i]->compute_hours * static_cast<double>(rows[i]->gpus) >
          rows[i - 1]->compute_hours * static_cast<double>(rows[i - 1]->gpus));
    CHECK(rows[i]->efficiency < rows[i - 1]->efficiency);
  }
  CHECK(rows[0]->replica_tokens == doctest::Approx(4194304.0 / 64));
  CHECK(rows[1]->dp_efficiency < rows[0]->dp_efficiency);
  CHECK(rows[1]->microbatches < rows[0]->microbatches);

  // A batch of fewer sequences than GPUs stays as given (it was rounded up to one a GPU, which
  // hid the loss): at sequence 4096 the 4M tokens are 1,024 sequences on 2,048 GPUs, dp <= 1,024.
  {
    auto longer = in;
    longer.seq = 4096;
    longer.gpus = {2048};
    const CostReport r = make_estimate(longer);
    const CostRow& x = row_of(r, "pricey/h100x8", 2048);
    CHECK(check_fit(r.experiment, x.offer, 2048).global_batch == 1024);
    CHECK(x.replica_tokens >= 4096);
    CHECK(x.layout != "zero=1");  // pure DP over 2,048 replicas cannot split 1,024 sequences
  }

  // The same per-replica batch at every count (the global batch grows with the GPUs): compute
  // GPU-hours stay within 1%; only goodput (failures per GPU-hour) grows with scale.
  double first = 0;
  for (int64_t n : {64, 512, 2048}) {
    in.gpus = {n};
    in.batch_tokens = static_cast<double>(n) * 65536;
    const CostReport r = make_estimate(in);
    const CostRow& x = row_of(r, "pricey/h100x8", n);
    const double compute_gpu_hours = x.compute_hours * static_cast<double>(n);
    CAPTURE(n);
    CHECK(x.replica_tokens == doctest::Approx(65536));
    if (first == 0) first = compute_gpu_hours;
    CHECK(compute_gpu_hours == doctest::Approx(first).epsilon(0.01));
  }
}

TEST_CASE("the DP efficiency and the per-replica batch are printed: table column, note, json, --explain, --global-batch") {
  const std::vector<std::string> args = {"estimate", "--params", "6.74e9", "--arch", "llama", "--layers", "32", "--hidden",
                                         "4096", "--heads", "32", "--seq", "2048", "--vocab", "32000", "--tokens", "1e12",
                                         "--gpu", "H100-SXM", "--provider", "lambda", "--gpus", "512", "--global-batch",
                                         "4194304", "--top", "1"};
  auto table = dl::test::run(dl::test::tool("dl-cost"), args);
  REQUIRE_MESSAGE(table.exit_code == 0, table.err);
  CHECK(has(table.out, "DP eff"));
  CHECK(has(table.out, "DP efficiency 0."));
  CHECK(has(table.out, "tokens per replica per step"));
  auto explain_args = args;
  explain_args.push_back("--explain");
  auto explain = dl::test::run(dl::test::tool("dl-cost"), explain_args);
  REQUIRE_MESSAGE(explain.exit_code == 0, explain.err);
  const std::string ladder = explain.out.substr(explain.out.find("# layout on 512 x H100-SXM"));
  CHECK(has(ladder, "# DP efficiency 0."));
  auto json_args = args;
  json_args.insert(json_args.end(), {"--format", "json"});
  auto json = dl::test::run(dl::test::tool("dl-cost"), json_args);
  REQUIRE_MESSAGE(json.exit_code == 0, json.err);
  const auto rows = nlohmann::json::parse(json.out);
  REQUIRE(!rows.empty());
  const auto& x = rows[0];
  CHECK(x["dp_efficiency"].get<double>() < 1);
  CHECK(x["dp_efficiency"].get<double>() >= x["scaling_efficiency"].get<double>());
  // 4,194,304 tokens over the layout's replicas.
  const double replicas = 4194304.0 / x["replica_batch_tokens"].get<double>();
  CHECK(replicas == doctest::Approx(std::round(replicas)));
  CHECK(x["microbatches"].get<int64_t>() >= 1);
  // --batch-tokens stays an alias.
  auto alias_args = json_args;
  for (auto& a : alias_args)
    if (a == "--global-batch") a = "--batch-tokens";
  auto alias = dl::test::run(dl::test::tool("dl-cost"), alias_args);
  REQUIRE_MESSAGE(alias.exit_code == 0, alias.err);
  CHECK(nlohmann::json::parse(alias.out)[0]["replica_batch_tokens"] == x["replica_batch_tokens"]);
}
