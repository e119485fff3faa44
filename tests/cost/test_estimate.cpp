// The cost model against hand-computed values: hours = work / speed, cost = hours x $/h x
// instances, scaling efficiency, spot expectation, memory fit, the call-outs; and on-prem
// break-even.
#include <doctest/doctest.h>

#include <array>
#include <cmath>

#include "dl/core/error.hpp"
#include "dl/cost/estimate.hpp"
#include "fixtures.hpp"
#include "support/support.hpp"

using dl::test::has;

using namespace dl::cost;
using dl::Precision;
using namespace cost_test;

namespace {


// dl-cost's flags for the options the library's messages name (tools/dl-cost/main.cpp).
const dl::OptionNames kCostFlags = {
    {"hours", "--hours"}, {"tokens", "--tokens"}, {"params", "--params"}, {"on_offer", "--on"},
    {"mfu", "--mfu"},     {"gpus", "--gpus"},     {"gpu_filter", "--gpu"}, {"pcie", "--eff-pcie"},
    {"budget", "--budget"}, {"bench", "--bench"}, {"utilization", "--utilization"}, {"years", "--years"},
    {"gpu", "--gpu"},     {"vs", "--vs"},         {"speed_sources", "--speed"}};

// The message as dl-cost prints it.
std::string error_as_printed(const std::function<void()>& f) {
  try {
    f();
  } catch (const dl::OptionError& e) {
    CHECK(e.kind() == dl::ErrorKind::usage);
    return e.named(kCostFlags);
  } catch (const dl::Error& e) {
    CHECK(e.kind() == dl::ErrorKind::usage);
    return e.what();
  }
  return "";
}

EstimateInputs base(const std::string& catalog) {
  EstimateInputs in;
  in.flags = kCostFlags;
  in.tokens = kTokens;
  in.params = kParams;
  in.catalogs = {catalog};
  in.speed_sources = {SpeedSource::analytic};
  // The fixed-MFU, per-doubling arithmetic (--mfu 0.4 and --eff-*); the calibrated model has
  // its own cases in test_speed.cpp.
  in.mfu = 0.4;
  in.scaling.fixed = true;
  // Hours = compute hours: the goodput factor has its own cases in test_goodput.cpp.
  in.goodput = GoodputModel::none();
  return in;
}

const CostRow& row(const CostReport& r, const std::string& id, int64_t gpus, bool spot = false) {
  for (const auto& x : r.rows)
    if (x.offer.id == id && x.gpus == gpus && x.spot == spot) return x;
  FAIL("no row ", id, " x", gpus);
  return r.rows.front();
}

// A transformer (layers, hidden, heads, seq, vocab) priced on lambda's H100 SXM offers of the
// shipped catalog, scaling from communication.
EstimateInputs lambda_h100(double params, std::array<int64_t, 5> shape, double tokens, double batch_tokens) {
  EstimateInputs in;
  in.catalogs = {"builtin"};
  in.gpu_filter = "H100-SXM";
  in.provider_filter = "lambda";
  in.params = params;
  in.layers = shape[0], in.hidden = shape[1], in.heads = shape[2], in.seq = shape[3], in.vocab = shape[4];
  in.tokens = tokens;
  in.batch_tokens = batch_tokens;
  return in;
}

std::string all(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

}  // namespace

TEST_CASE("scaling efficiency: e^log2(n) within an instance, internode per doubling of instances") {
  ScalingModel s;
  CHECK(s.efficiency(Interconnect::nvlink, 1, 8) == 1.0);
  CHECK(s.efficiency(Interconnect::nvlink, 8, 8) == doctest::Approx(0.97 * 0.97 * 0.97));
  CHECK(s.efficiency(Interconnect::pcie, 4, 8) == doctest::Approx(0.9 * 0.9));
  CHECK(s.efficiency(Interconnect::consumer, 2, 8) == doctest::Approx(0.85));
  CHECK(s.efficiency(Interconnect::nvlink, 16, 8) == doctest::Approx(0.97 * 0.97 * 0.97 * 0.90));
  CHECK(s.efficiency(Interconnect::nvlink, 8, 1) == doctest::Approx(0.9 * 0.9 * 0.9));  // 8 one-GPU machines
  CHECK(s.efficiency(Interconnect::pcie, 3, 8) == doctest::Approx(std::pow(0.9, std::log2(3.0))));
  s.nvlink = 1.0;
  s.internode = 1.0;
  CHECK(s.efficiency(Interconnect::nvlink, 64, 8) == 1.0);
}

TEST_CASE("spot expectation: lost half-interval plus restart per preemption") {
  SpotModel m;
  m.preempt_per_hour = 0.1;
  m.restart_hours = 0.5;
  // 10 h of compute, checkpoints every 2 h: each preemption costs 1 + 0.5 h;
  // wall = 10 / (1 - 0.1 x 1.5) = 11.7647 h, preemptions = 0.1 x wall.
  SpotOutcome o = spot_outcome(10.0, 2.0, 1, m);
  CHECK(o.finishes);
  CHECK(o.wall_hours == doctest::Approx(10.0 / 0.85));
  CHECK(o.preemptions == doctest::Approx(0.1 * 10.0 / 0.85));
  CHECK(o.overhead_hours == doctest::Approx(10.0 / 0.85 - 10.0));
  // Two instances: either one's preemption stops the job: rate 0.2.
  CHECK(spot_outcome(10.0, 2.0, 2, m).wall_hours == doctest::Approx(10.0 / 0.7));
  // Checkpoints only at the end of a 20 h run: 0.1 x (10 + 0.5) >= 1, it never finishes.
  SpotOutcome never = spot_outcome(20.0, 20.0, 1, m);
  CHECK_FALSE(never.finishes);
  CHECK(std::isinf(never.wall_hours));
  m.preempt_per_hour = 0;
  CHECK(spot_outcome(3.0, 1.0, 4, m).wall_hours == 3.0);
}

TEST_CASE("hours = work / speed, cost = hours x $/h x instances; the expensive GPU is cheapest") {
  dl::test::TempDir dir("cost-est");
  EstimateInputs in = base(write_catalog(dir));
  CostReport r = make_estimate(in);
  REQUIRE(r.rows.size() == 3);
  CHECK(r.experiment.flops == doctest::Approx(kWork));
  CHECK(r.experiment.flops_per_token == doctest::Approx(6 * kParams));

  const double h100_hours = kWork / kH100 / 3600;  // 0.52220 h
  const double x8_hours = kWork / (8 * kH100 * 0.97 * 0.97 * 0.97) / 3600;
  const double rtx_hours = kWork / k4090 / 3600;  // 3.12752 h
  const CostRow& h = row(r, "pricey/h100", 1);
  CHECK(h.hours == doctest::Approx(h100_hours));
  CHECK(h.hours == doctest::Approx(0.522203).epsilon(1e-5));
  CHECK(h.total_usd == doctest::Approx(h100_hours * 2.5));
  CHECK(h.total_usd == doctest::Approx(1.305508).epsilon(1e-5));
  CHECK(*h.usd_per_1b_tokens == doctest::Approx(h.total_usd));  // exactly 1B tokens
  CHECK(*h.tokens_per_s == doctest::Approx(kTokens / (h100_hours * 3600)));
  CHECK(h.speed.source == "analytic");
  CHECK(h.instances == 1);
  const CostRow& x8 = row(r, "pricey/h100x8", 8);
  CHECK(x8.efficiency == doctest::Approx(0.912673));
  CHECK(x8.hours == doctest::Approx(x8_hours));
  CHECK(x8.total_usd == doctest::Approx(x8_hours * 20.0));
  const CostRow& c = row(r, "cheap/4090", 1);
  CHECK(c.hours == doctest::Approx(rtx_hours));
  CHECK(c.total_usd == doctest::Approx(rtx_hours * 0.5));
  CHECK(c.total_usd == doctest::Approx(1.563760).epsilon(1e-5));

  // Sorted by total cost: the H100 at 5x the hourly price is the cheapest experiment.
  CHECK(r.rows[0].offer.id == "pricey/h100");
  CHECK(r.rows[1].offer.id == "pricey/h100x8");
  CHECK(r.rows[2].offer.id == "cheap/4090");
  CHECK(r.rows[0].cheapest);
  CHECK(r.rows[1].fastest);
  CHECK(r.rows[2].cheapest_per_gpu_hour);
  const std::string callouts = all(r.callouts);
  MESSAGE(callouts);
  CHECK(has(callouts, "cheapest: pricey/h100: $1.31"));
  CHECK(has(callouts, "fastest: pricey/h100x8"));
  CHECK(has(callouts, "the cheapest per GPU-hour, cheap/4090 ($0.50/GPU-h, RTX-4090), is not the cheapest per "
                      "experiment: it costs $1.56 where pricey/h100 ($2.50/GPU-h, H100-SXM) costs $1.31"));
}

TEST_CASE("GPU counts: instance granularity is billed honestly") {
  dl::test::TempDir dir("cost-gpus");
  EstimateInputs in = base(write_catalog(dir));
  in.gpus = {1, 8};
  CostReport r = make_estimate(in);
  CHECK(r.rows.size() == 6);
  // One GPU of the 8-GPU instance: the whole instance is billed.
  const CostRow& one_of_8 = row(r, "pricey/h100x8", 1);
  CHECK(one_of_8.instances == 1);
  CHECK(one_of_8.billed_gpus == 8);
  CHECK(one_of_8.usd_per_hour == 20.0);
  CHECK(one_of_8.total_usd == doctest::Approx(kWork / kH100 / 3600 * 20.0));
  // Eight one-GPU instances: 8 x $2.50/h, and only the internode efficiency 0.9^3.
  const CostRow& eight = row(r, "pricey/h100", 8);
  CHECK(eight.instances == 8);
  CHECK(eight.usd_per_hour == 20.0);
  CHECK(eight.efficiency == doctest::Approx(0.729));
  const double hours = kWork / (8 * kH100 * 0.729) / 3600;
  CHECK(eight.hours == doctest::Approx(hours));
  CHECK(eight.total_usd == doctest::Approx(hours * 2.5 * 8));
  // Eight 4090s in eight instances (consumer cards, one per machine).
  const CostRow& rtx8 = row(r, "cheap/4090", 8);
  CHECK(rtx8.total_usd == doctest::Approx(kWork / (8 * k4090 * 0.729) / 3600 * 0.5 * 8));
}

TEST_CASE("memory: rows that do not fit are marked, use ZeRO when it helps, and are never best") {
  dl::test::TempDir dir("cost-mem");
  EstimateInputs in = base(write_catalog(dir));
  in.params = 20e9;  // 16 bytes per parameter of mixed-precision Adam: 320 GB of model states
  in.gpus = {1, 8};
  CostReport r = make_estimate(in);
  const CostRow& one = row(r, "pricey/h100", 1);
  REQUIRE(one.fits);
  CHECK_FALSE(*one.fits);
  // The least memory any layout needs on one GPU: the optimizer state offloaded to the host
  // (2 + 2 bytes per parameter stay), 82 GB of 80.
  CHECK(has(one.why_not, "needs 82.0 GB per GPU even with zero=1 offload=cpu"));
  const CostRow& x8 = row(r, "pricey/h100x8", 8);
  REQUIRE(x8.fits);
  CHECK(*x8.fits);
  // ZeRO-2 over 8: 2 x 20e9 + 14 x 20e9 / 8 = 75 GB + 2 GB overhead + 50 MB buckets < 80 GB.
  CHECK(x8.layout == "zero=2");
  CHECK(x8.mem_per_gpu == doctest::Approx(2 * 20e9 + 14 * 20e9 / 8 + 2e9 + 50e6));
  for (const auto& x : r.rows) {
    if (!x.fits.value_or(true)) {
      CHECK_FALSE(x.cheapest);
      CHECK_FALSE(x.fastest);
    }
  }
  // Non-fitting rows sort after the fitting ones.
  CHECK(r.rows.front().eligible());
  CHECK_FALSE(r.rows.back().eligible());
  CHECK(r.rows.front().cheapest);
  // Without a model (--flops alone) the memory is not checked: fits unknown, still eligible.
  EstimateInputs f = base(in.catalogs[0]);
  f.tokens.reset();
  f.params.reset();
  f.flops = kWork;
  CostReport rf = make_estimate(f);
  CHECK_FALSE(rf.rows[0].fits.has_value());
  CHECK(rf.rows[0].eligible());
  CHECK(rf.rows[0].total_usd == doctest::Approx(kWork / kH100 / 3600 * 2.5));
  CHECK_FALSE(rf.rows[0].usd_per_1b_tokens);
}

TEST_CASE("budget and deadline pick the best") {
  dl::test::TempDir dir("cost-best");
  EstimateInputs in = base(write_catalog(dir));
  // Budget only: the fastest run within it. $1.50 excludes nothing but the 4090 ($1.56).
  in.budget = 1.50;
  CostReport r = make_estimate(in);
  CHECK(row(r, "pricey/h100x8", 8).best);  // $1.43 and the fastest
  CHECK(r.constraints_met);
  // Deadline only: the cheapest that finishes in time. 1 h excludes the 4090 (3.1 h).
  in.budget.reset();
  in.deadline = 1.0;
  r = make_estimate(in);
  CHECK(row(r, "pricey/h100", 1).best);
  // Both: 0.1 h leaves only the 8-GPU machine; with a $1 budget, nothing.
  in.deadline = 0.1;
  in.budget = 5.0;
  r = make_estimate(in);
  CHECK(row(r, "pricey/h100x8", 8).best);
  in.budget = 1.0;
  r = make_estimate(in);
  CHECK_FALSE(r.constraints_met);
  CHECK(has(all(r.callouts), "nothing meets the budget $1.00, deadline 0.10 h"));
}

TEST_CASE("spot rows from a config's checkpoint interval") {
  dl::test::TempDir dir("cost-spot");
  auto cfg = dir / "tiny.toml";
  dl::test::write_file(cfg,
                       "[model]\ntype = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 64\nblock_size = 32\nvocab_size = 256\n"
                       "[train]\nsteps = 1000\nbatch_size = 4\ngrad_accum = 2\ncheckpoint_every = 100\nprecision = \"bf16\"\n");
  EstimateInputs in;
  in.config_path = cfg.string();
  in.catalogs = {write_catalog(dir)};
  in.speed_sources = {SpeedSource::analytic};
  in.spot = true;
  in.spot_model.preempt_per_hour = 0.2;
  in.spot_model.restart_hours = 0.1;
  CostReport r = make_estimate(in);
  const Experiment& e = r.experiment;
  // tokens = steps x batch x accumulation x dp x block_size
  CHECK(*e.tokens == 1000.0 * 4 * 2 * 1 * 32);
  // PaLM: 6N + 12 L D T with L=2, D=64, T=32.
  CHECK(e.flops_per_token == doctest::Approx(6 * e.model->params + 12.0 * 2 * 64 * 32));
  CHECK(e.flops == doctest::Approx(*e.tokens * e.flops_per_token));
  CHECK(e.precision == Precision::bf16);
  // Spot only where the catalog has a spot price: the 4090 and the 8x H100 (not the 1x H100).
  CHECK(r.rows.size() == 5);
  const CostRow& od = row(r, "pricey/h100x8", 8, false);
  const CostRow& sp = row(r, "pricey/h100x8", 8, true);
  CHECK(sp.compute_hours == doctest::Approx(od.compute_hours));
  CHECK(sp.checkpoint_hours == doctest::Approx(od.compute_hours * 100 / 1000));
  const double wall = od.compute_hours / (1 - 0.2 * (sp.checkpoint_hours / 2 + 0.1));
  CHECK(sp.hours == doctest::Approx(wall));
  CHECK(sp.total_usd == doctest::Approx(wall * 8.0));
  CHECK(sp.spot_outcome.preemptions == doctest::Approx(0.2 * wall));
  bool skipped_h100 = false;
  for (const auto& s : r.skipped) skipped_h100 = skipped_h100 || has(s, "pricey/h100: spot: no spot price");
  CHECK(skipped_h100);
  // An explicit interval overrides the config's.
  in.checkpoint_hours = 2.0;
  CostReport r2 = make_estimate(in);
  const CostRow& sp2 = row(r2, "pricey/h100x8", 8, true);
  CHECK(sp2.hours == doctest::Approx(sp2.compute_hours / (1 - 0.2 * (1.0 + 0.1))));
}

TEST_CASE("--hours H --on OFFER: the reference run's time scaled by relative speed") {
  dl::test::TempDir dir("cost-hours");
  EstimateInputs in;
  in.catalogs = {write_catalog(dir)};
  in.speed_sources = {SpeedSource::analytic};
  in.mfu = 0.4;
  in.scaling.fixed = true;
  in.hours = 10.0;
  in.on_offer = "pricey/h100";
  // With goodput the reference row still comes back at the hours given (its goodput divided out).
  CHECK(row(make_estimate(in), "pricey/h100", 1).hours == doctest::Approx(10.0));
  CHECK(row(make_estimate(in), "pricey/h100", 1).compute_hours < 10.0);
  in.goodput = GoodputModel::none();  // the relative-speed arithmetic below, by hand
  CostReport r = make_estimate(in);
  CHECK(r.experiment.flops == doctest::Approx(10 * 3600 * kH100));
  CHECK(row(r, "pricey/h100", 1).hours == doctest::Approx(10.0));
  CHECK(row(r, "cheap/4090", 1).hours == doctest::Approx(10.0 * kH100 / k4090));  // 59.9 h
  CHECK(row(r, "pricey/h100x8", 8).hours == doctest::Approx(10.0 / (8 * 0.912673)).epsilon(1e-5));
  // The reference ran on 8 one-GPU machines: its work includes their efficiency.
  in.on_gpus = 8;
  r = make_estimate(in);
  CHECK(row(r, "pricey/h100", 1).hours == doctest::Approx(10.0 * 8 * 0.729));
}

TEST_CASE("bench rows set the speed of their GPU model and anchor the relative table") {
  dl::test::TempDir dir("cost-bench");
  auto bench = dir / "bench.json";
  dl::test::write_file(bench, R"([{"schema": "dlkit-bench/1", "benchmark": "train", "gpu_model": "H100-SXM",
    "device": "NVIDIA H100 80GB HBM3", "device_type": "cuda", "num_devices": 1, "precision": "bf16",
    "config": "gpt2-124m.toml", "tokens_per_sec": 100000, "flops_per_token": 1e9}])");
  EstimateInputs in = base(write_catalog(dir));
  in.speed_sources = {SpeedSource::bench, SpeedSource::relative, SpeedSource::analytic};
  in.bench = {bench.string()};
  CostReport r = make_estimate(in);
  const CostRow& h = row(r, "pricey/h100", 1);
  CHECK(h.speed.source == "bench");
  CHECK(h.speed.flops == doctest::Approx(1e14));  // 1e5 tokens/s x 1e9 FLOP per token
  CHECK(h.hours == doctest::Approx(kWork / 1e14 / 3600));
  // The 4090 has no bench rows: the shipped relative table scales the measured H100.
  auto table = load_relative_throughput({dl::test::source_path("configs/catalog/relative-throughput.toml").string()});
  const double ratio = table.find("RTX-4090", Precision::bf16)->ratio / table.find("H100-SXM", Precision::bf16)->ratio;
  const CostRow& c = row(r, "cheap/4090", 1);
  CHECK(c.speed.source == "relative");
  CHECK(c.speed.flops == doctest::Approx(1e14 * ratio));
  CHECK(has(c.speed.detail, "vs H100-SXM (bench"));
  // Without bench rows the reference GPU's analytic speed anchors the table.
  in.bench.clear();
  CostReport r2 = make_estimate(in);
  CHECK(row(r2, "pricey/h100", 1).speed.flops ==
        doctest::Approx(312e12 * 0.4 * table.find("H100-SXM", Precision::bf16)->ratio));
  CHECK(has(row(r2, "pricey/h100", 1).speed.detail, "vs A100-SXM-80GB (analytic"));
}

TEST_CASE("bad inputs are usage errors naming the thing") {
  dl::test::TempDir dir("cost-bad");
  const std::string cat = write_catalog(dir);
  auto err = [&](const std::function<void(EstimateInputs&)>& change) {
    EstimateInputs in = base(cat);
    change(in);
    return error_as_printed([&] { make_estimate(in); });
  };
  CHECK(has(err([](EstimateInputs& in) { in.hours = 3, in.on_offer = "nosuch/offer", in.tokens.reset(), in.params.reset(); }),
            "unknown offer 'nosuch/offer'"));
  CHECK(has(err([](EstimateInputs& in) { in.hours = -3, in.on_offer = "pricey/h100", in.tokens.reset(), in.params.reset(); }),
            "--hours: need a positive duration"));
  CHECK(has(err([](EstimateInputs& in) { in.tokens = -1; }), "--tokens: need a positive"));
  CHECK(has(err([](EstimateInputs& in) { in.params.reset(); }), "--tokens needs --params"));
  CHECK(has(err([](EstimateInputs& in) { in.tokens.reset(), in.params.reset(); }), "no experiment"));
  CHECK(has(err([](EstimateInputs& in) { in.hours = 2; }), "--hours needs --on"));
  CHECK(has(err([](EstimateInputs& in) { in.mfu = 1.5; }), "--mfu: a fraction in (0, 1]"));
  CHECK(has(err([](EstimateInputs& in) { in.gpus = {8, 0}; }), "--gpus: GPU counts must be >= 1"));
  CHECK(has(err([](EstimateInputs& in) { in.gpu_filter = "TPU"; }), "no offer matches --gpu TPU"));
  CHECK(has(err([](EstimateInputs& in) { in.precision = "fp4"; }), "fp4"));
  CHECK(has(err([](EstimateInputs& in) { in.scaling.pcie = 0; }), "--eff-pcie"));
  CHECK(has(err([](EstimateInputs& in) { in.budget = -5; }), "--budget"));
  CHECK(has(err([](EstimateInputs& in) { in.speed_sources = {SpeedSource::bench}; }), "no offer can be estimated: 3 offers: no speed (no --bench)"));
  CHECK(has(error_as_printed([] { parse_speed_sources("bench,guess"); }), "'guess' is not a speed source"));
}

TEST_CASE("onprem: break-even months with power, against the best offer or --vs") {
  dl::test::TempDir dir("cost-onprem");
  OnpremInputs in;
  in.flags = kCostFlags;
  in.catalogs = {write_catalog(dir)};
  in.speed_sources = {SpeedSource::analytic};
  in.mfu = 0.4;
  in.price = 30000;
  in.watts = 1000;
  in.kwh_price = 0.15;
  in.utilization = 0.5;
  in.years = 3;
  in.gpu = "H100-SXM";
  OnpremReport r = make_onprem(in);
  // Busy 365 h/month. Power: 1 kW x 365 h x $0.15 = $54.75. The 1x H100 offer does the same
  // work in 365 h: $912.50/month. Break-even: 30000 / (912.50 - 54.75) = 34.975 months.
  REQUIRE(r.rows.size() == 3);
  const OnpremRow& best = r.rows.front();
  CHECK(best.offer.id == "pricey/h100");
  CHECK(best.best);
  CHECK(best.cloud_hours_per_month == doctest::Approx(365.0));
  CHECK(best.cloud_per_month == doctest::Approx(912.5));
  CHECK(best.power_per_month == doctest::Approx(54.75));
  CHECK(*best.breakeven_months == doctest::Approx(30000.0 / (912.5 - 54.75)));
  CHECK(*best.breakeven_months == doctest::Approx(34.9752).epsilon(1e-5));
  CHECK(best.onprem_per_month == doctest::Approx(54.75 + 30000.0 / 36));
  CHECK(best.savings_over_life == doctest::Approx(912.5 * 36 - (30000 + 54.75 * 36)));
  CHECK(has(r.callouts.at(0), "break-even after 35.0 months against pricey/h100"));
  // Against the 4090: the same work takes 365 x 395.76 / 66.08 hours at $0.50.
  in.vs = "cheap/4090";
  r = make_onprem(in);
  REQUIRE(r.rows.size() == 1);
  CHECK(r.rows[0].cloud_per_month == doctest::Approx(365.0 * kH100 / k4090 * 0.5));
  // --vs alone: the machine is the offer's hardware (8 x H100, one NVLink box either way).
  in.gpu.clear();
  in.vs = "pricey/h100x8";
  r = make_onprem(in);
  CHECK(r.gpu_model == "H100-SXM");
  CHECK(r.gpus == 8);
  CHECK(r.rows[0].cloud_per_month == doctest::Approx(365.0 * 20.0));
  // Power dearer than renting: never breaks even.
  in.kwh_price = 100;  // 1 kW x 365 h x $100 = $36,500 a month, more than $7,300 of cloud
  r = make_onprem(in);
  CHECK_FALSE(r.rows[0].breakeven_months);
  CHECK(has(r.callouts.at(0), "never breaks even"));
  // Bad inputs.
  in.kwh_price = 0.15;
  OnpremInputs bad = in;
  bad.utilization = 1.5;
  CHECK(has(error_as_printed([&] { make_onprem(bad); }), "--utilization"));
  bad = in;
  bad.years = -1;
  CHECK(has(error_as_printed([&] { make_onprem(bad); }), "--years"));
  bad = in;
  bad.vs = "nosuch";
  CHECK(has(error_as_printed([&] { make_onprem(bad); }), "unknown offer 'nosuch'"));
  bad = in;
  bad.vs.clear();
  CHECK(has(error_as_printed([&] { make_onprem(bad); }), "--gpu MODEL"));
}

TEST_CASE("scaling from communication: near 1 inside an NVLink board, tensor parallelism at 1,024 GPUs, Ethernet costs") {
  EstimateInputs in = lambda_h100(70e9, {80, 8192, 64, 4096, 32000}, 1e12, 4194304);
  in.gpus = {1024};
  const CostReport big = make_estimate(in);
  const CostRow& r = row(big, "lambda/gpu_8x_h100_sxm5", 1024);
  // Pure ZeRO-3 data parallelism would expose a quarter of its step (0.74); the layout dl-shard
  // recommends keeps tensor parallelism inside the board, which shrinks the traffic between boards
  // (its own all-reduces are exposed: 0.89): the per-doubling constants gave 0.97^3 x 0.9^7 = 0.44.
  CHECK(r.efficiency > 0.85);
  CHECK(has(r.layout, "tp="));
  CHECK(has(all(big.notes), "# scaling: efficiency = compute / step of the row's layout"));
  // Same model, --eff-* fixed constants: 0.97^3 x 0.9^log2(128).
  in.scaling.fixed = true;
  CHECK(row(make_estimate(in), "lambda/gpu_8x_h100_sxm5", 1024).efficiency ==
        doctest::Approx(std::pow(0.97, 3) * std::pow(0.9, 7)));
  // GPT-2 124M on 8 single-GPU L4 instances over Ethernet (12.5 GB/s each) with tiny steps: the
  // gradient all-reduce no longer hides behind backward.
  EstimateInputs small;
  small.catalogs = {"builtin"};
  small.gpu_filter = "L4";
  small.provider_filter = "gcp";
  small.params = 124e6;
  small.tokens = 1e9;
  small.batch_tokens = 8192;
  small.gpus = {1, 8};
  const CostReport s = make_estimate(small);
  CHECK(row(s, "gcp/g2-standard-4", 1).efficiency == 1.0);
  CHECK(row(s, "gcp/g2-standard-4", 8).efficiency < 0.8);
}

TEST_CASE("64 single-GPU instances are slower than 8 NVLink boards for a communication-bound run, and the notes say why") {
  // It priced lambda's 1x H100 SXM like its 8x board: 50 GB/s per GPU between instances either way.
  // Small steps: the gradient all-reduce cannot hide behind backward.
  EstimateInputs in = lambda_h100(1.5e9, {48, 1600, 25, 1024, 50257}, 1e10, 65536);
  in.gpus = {64};
  const CostReport r = make_estimate(in);
  const CostRow& slices = row(r, "lambda/gpu_1x_h100_sxm5", 64);
  const CostRow& boards = row(r, "lambda/gpu_8x_h100_sxm5", 64);
  CHECK(slices.efficiency < 0.5 * boards.efficiency);
  CHECK(slices.hours > 2 * boards.hours);
  CHECK(slices.total_usd > boards.total_usd);
  CHECK(has(all(r.notes), "# lambda/gpu_1x_h100_sxm5: 1-GPU instances have no NVLink peer and no per-GPU cluster fabric"));
  // One instance of one GPU has nothing to talk to: no note, full efficiency.
  in.gpus = {1};
  const CostReport one = make_estimate(in);
  CHECK(row(one, "lambda/gpu_1x_h100_sxm5", 1).efficiency == 1.0);
  CHECK(!has(all(one.notes), "1-GPU instances have no NVLink peer"));
}

TEST_CASE("a mixture of experts costs its active parameters: DeepSeek-V3 on 2048 H800 at FP8 for 14.8T tokens") {
  // DeepSeek-V3 (arXiv 2412.19437): 2.664M H800 GPU-hours of pre-training for 14.8T tokens on
  // 2048 GPUs, FP8. Its multi-head latent attention is planned as standard attention (the
  // planner does not model MLA).
  dl::test::TempDir dir("cost-moe");
  dl::test::write_file(dir / "h800.toml", R"(schema = "dlkit-catalog/1"

[[offer]]
provider = "Test"
instance = "h800x8"
gpu = "H800"
gpus = 8
on_demand = 16.0
source = "test"
as_of = "2026-11"
)");
  EstimateInputs in;
  in.catalogs = {(dir / "h800.toml").string()};
  in.params = 671e9;
  in.layers = 61, in.hidden = 7168, in.heads = 128, in.seq = 4096, in.vocab = 129280;
  in.arch.family = "llama", in.arch.ffn_hidden = 18432;
  in.arch.experts = 256, in.arch.active_experts = 8, in.arch.expert_ffn = 2048, in.arch.shared_experts = 1,
  in.arch.dense_layers = 3;
  in.tokens = 14.8e12;
  in.precision = "fp8";
  in.batch_tokens = 15360.0 * 4096;  // 15,360 sequences of 4,096 tokens per step
  in.gpus = {2048};
  const CostReport r = make_estimate(in);
  REQUIRE(r.rows.size() == 1);
  const CostRow& row = r.rows.front();
  const dl::plan::ModelShape& m = *r.experiment.model;
  // The work counts the active parameters (6 x 38.7B + attention), not the 672B total.
  CHECK(r.experiment.flops == doctest::Approx(14.8e12 * (6 * dl::plan::active_param_count(m) +
                                                         dl::plan::attention_flops_per_token(m))));
  CHECK(r.experiment.flops < 14.8e12 * 6 * m.params / 10);
  // Memory holds every expert: the layout shards them (ep).
  REQUIRE(row.fits.value_or(false));
  CHECK(has(row.layout, "ep="));
  CHECK(has(render_estimate(r, dl::OutputFormat::table, 0), "# params 672B total, 38.7B active"));
  // Reported, not fitted: see docs/COST.md (mixture of experts) for why it is above the 0.6-1.6x band.
  const double ratio = row.gpu_hours() / 2.664e6;
  MESSAGE("DeepSeek-V3: ", row.gpu_hours() / 1e6, "M GPU-hours (published 2.664M, x", ratio, "), layout ", row.layout,
          ", scaling efficiency ", row.efficiency);
  CHECK(ratio > 0.6);
}
