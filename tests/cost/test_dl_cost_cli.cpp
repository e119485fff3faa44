// dl-cost end to end: the built binary, the dl-bench pipe, output formats, call-outs and exit codes.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <nlohmann/json.hpp>

#include "dl/io/csv.hpp"
#include "fixtures.hpp"
#include "support/support.hpp"

using dl::test::has;

using nlohmann::json;
using dl::test::run;
using dl::test::tool;
using namespace cost_test;

namespace {

const std::string kCost = tool("dl-cost");


std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const json& row_of(const json& rows, const std::string& offer, int64_t gpus = 0) {
  for (const auto& r : rows)
    if (r["offer"] == offer && (gpus == 0 || r["gpus"] == gpus)) return r;
  FAIL("no row for ", offer);
  return rows[0];
}

std::string fsdl() { return dl::test::shared_path("data/fsdl_cloud-gpus.csv").string(); }

// What `dl-bench train ... --format json` prints (docs/FORMATS.md): one H100 training row.
const char* kBenchJson = R"json([
  {"schema": "dlkit-bench/1", "benchmark": "train", "time": "2026-11-20T10:00:00Z", "host": "gpu-box",
   "device_type": "cuda", "device": "NVIDIA H100 80GB HBM3", "gpu_model": "H100-SXM", "num_devices": 1,
   "driver": "580.65", "cuda_runtime": "13.0", "library": "cuBLASLt 13.0.0", "dlkit_version": "0.1.0",
   "repeat": 10, "warmup": 2, "config": "configs/gpt2-124m.toml", "model_params": 124439808,
   "flops_per_token": 1.0e9, "flop_formula": "6N+12LHQT (PaLM)", "precision": "bf16", "world": 1,
   "batch_tokens": 524288, "tokens_per_sec": 100000, "samples_per_sec": 97.7, "mfu": 0.101,
   "peak_flops": 9.894e14, "step_s": 5.24, "compute_s": 5.0, "comm_s": 0.0, "data_s": 0.1, "optimizer_s": 0.14},
  {"schema": "dlkit-bench/1", "benchmark": "gemm", "time": "2026-11-20T10:01:00Z", "host": "gpu-box",
   "device_type": "cuda", "device": "NVIDIA H100 80GB HBM3", "gpu_model": "H100-SXM", "num_devices": 1,
   "driver": "580.65", "cuda_runtime": "13.0", "library": "cuBLASLt 13.0.0", "dlkit_version": "0.1.0",
   "repeat": 10, "warmup": 2, "dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "time_s": 0.0014,
   "time_min_s": 0.0013, "time_max_s": 0.0015, "flops": 7.8e14, "peak_flops": 9.894e14, "pct_peak": 78.8,
   "checked": 64, "max_rel_error": 0.002}
])json";

}  // namespace

TEST_CASE("dl-bench json through a pipe: --bench -") {
  dl::test::TempDir dir("cost-cli-bench");
  const std::string cat = write_catalog(dir);
  auto r = run(kCost, {"estimate", "--tokens", "1e9", "--params", "124M", "--catalog", cat, "--bench", "-", "--format", "json",
                       "--no-goodput"},
               kBenchJson);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json rows = json::parse(r.out);
  REQUIRE(rows.size() == 3);
  const json& h = row_of(rows, "pricey/h100");
  CHECK(h["speed_source"] == "bench");
  CHECK(has(h["speed_detail"].get<std::string>(), "train: 100 TFLOP/s per GPU achieved (configs/gpt2-124m.toml, stdin)"));
  // The train row wins over the gemm row: 1e5 tokens/s x 1e9 FLOP/token = 1e14 FLOP/s.
  CHECK(h["per_gpu_flops"].get<double>() == doctest::Approx(1e14));
  CHECK(h["hours"].get<double>() == doctest::Approx(kWork / 1e14 / 3600));
  CHECK(h["total_usd"].get<double>() == doctest::Approx(kWork / 1e14 / 3600 * 2.5));
  CHECK(row_of(rows, "cheap/4090")["speed_source"] == "relative");
  // Machine formats keep stdout pure data; the call-outs go to stderr.
  CHECK(has(r.err, "[dl-cost] cheapest: "));
  CHECK(has(r.err, "[dl-cost] fastest: "));
  // stdin given twice is refused; an empty pipe is an error naming stdin.
  auto twice = run(kCost, {"estimate", "--flops", "1e18", "--catalog", cat, "--bench", "-", "--bench", "-"}, kBenchJson);
  CHECK(twice.exit_code == 2);
  CHECK(has(twice.err, "stdin can be read once"));
  auto empty = run(kCost, {"estimate", "--flops", "1e18", "--catalog", cat, "--bench", "-"}, "");
  CHECK(empty.exit_code == 2);
  CHECK(has(empty.err, "stdin: empty file"));
}

TEST_CASE("the most expensive GPU per hour is the cheapest per experiment, and the table says so") {
  dl::test::TempDir dir("cost-cli-lesson");
  const std::string cat = write_catalog(dir);
  // The fixed-MFU arithmetic (--mfu 0.4, --eff-nvlink 0.97): the numbers below are by hand.
  auto r = run(kCost, {"estimate", "--tokens", "1B", "--params", "124M", "--catalog", cat, "--speed", "analytic",
                       "--mfu", "0.4", "--eff-nvlink", "0.97", "--no-goodput"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  auto lines = dl::test::lines(r.out);
  REQUIRE(lines.size() > 4);
  CHECK(has(lines[0], "offer"));
  CHECK(has(lines[1], "pricey/h100 "));
  CHECK(has(lines[1], "$2.50"));
  CHECK(has(lines[1], "$1.31"));
  CHECK(has(lines[1], "cheapest"));
  CHECK(has(lines[3], "cheap/4090"));
  CHECK(has(lines[3], "$1.56"));
  CHECK(has(r.out, "# the cheapest per GPU-hour, cheap/4090 ($0.50/GPU-h, RTX-4090), is not the cheapest per experiment"));
  CHECK(has(r.out, "# work: 744 PFLOP"));
  CHECK(has(r.out, "analytic"));
  // md renders the same notes.
  auto md = run(kCost, {"estimate", "--tokens", "1B", "--params", "124M", "--catalog", cat, "--speed", "analytic", "--mfu",
                        "0.4", "--eff-nvlink", "0.97", "--format", "md"});
  CHECK(md.exit_code == 0);
  CHECK(has(md.out, "| # | offer |"));
  CHECK(has(md.out, "is not the cheapest per experiment"));
}

TEST_CASE("json and csv output parse, with the call-outs as fields") {
  dl::test::TempDir dir("cost-cli-fmt");
  const std::string cat = write_catalog(dir);
  const std::vector<std::string> args = {"estimate", "--tokens", "1e9", "--params", "124M", "--catalog", cat,
                                         "--speed", "analytic", "--gpus", "1,8", "--spot", "--mfu", "0.4",
                                         "--eff-nvlink", "0.97", "--no-goodput"};
  auto j = run(kCost, with(args, {"--format", "json"}));
  REQUIRE_MESSAGE(j.exit_code == 0, j.err);
  json rows = json::parse(j.out);
  REQUIRE(rows.is_array());
  CHECK(rows.size() == 10);  // 3 offers x 2 counts on demand + 2 offers with spot x 2 counts
  int cheapest = 0, fastest = 0, per_hour = 0;
  double prev = 0;
  for (const auto& x : rows) {
    cheapest += x["cheapest"].get<bool>();
    fastest += x["fastest"].get<bool>();
    per_hour += x["cheapest_per_gpu_hour"].get<bool>();
    CHECK(x["total_usd"].get<double>() >= prev);  // sorted by total cost
    prev = x["total_usd"].get<double>();
    CHECK(x["fits"] == true);
    CHECK(x["tokens"].get<double>() == 1e9);
  }
  CHECK(cheapest == 1);
  CHECK(fastest == 1);
  CHECK(per_hour == 1);
  // Spot on the 8-GPU machine: 1 h checkpoints assumed, 0.05/h, 15 min restart.
  const json* spot = nullptr;
  for (const auto& x : rows)
    if (x["offer"] == "pricey/h100x8" && x["gpus"] == 8 && x["pricing"] == "spot") spot = &x;
  REQUIRE(spot);
  const double compute = kWork / (8 * kH100 * 0.97 * 0.97 * 0.97) / 3600;
  CHECK((*spot)["hours"].get<double>() == doctest::Approx(compute / (1 - 0.05 * (0.5 + 0.25))));
  CHECK((*spot)["total_usd"].get<double>() == doctest::Approx(compute / 0.9625 * 8.0));
  CHECK((*spot)["checkpoint_hours"].get<double>() == 1.0);

  auto c = run(kCost, with(args, {"--format", "csv"}));
  REQUIRE(c.exit_code == 0);
  auto recs = dl::parse_csv(c.out, "stdout");
  REQUIRE(recs.size() == 11);
  const auto& header = recs[0].cells;
  CHECK(header[0] == "rank");
  CHECK(dl::csv_column(recs[0], "total_usd") >= 0);
  CHECK(dl::csv_column(recs[0], "speed_source") >= 0);
  for (const auto& rec : recs) CHECK(rec.cells.size() == header.size());
  const size_t total = static_cast<size_t>(dl::csv_column(recs[0], "total_usd"));
  CHECK(std::stod(recs[1].cells[total]) == doctest::Approx(rows[0]["total_usd"].get<double>()));
  // jsonl: one object per line.
  auto l = run(kCost, with(args, {"--format", "jsonl", "--top", "3"}));
  REQUIRE(l.exit_code == 0);
  auto ll = dl::test::lines(l.out);
  CHECK(ll.size() == 3);
  for (const auto& line : ll) CHECK(json::parse(line).is_object());
}

TEST_CASE("FSDL catalog through the binary: 257 listed, 6 without a price skipped with the reason") {
  auto offers = run(kCost, {"offers", "--catalog", fsdl(), "--format", "json"});
  REQUIRE_MESSAGE(offers.exit_code == 0, offers.err);
  json list = json::parse(offers.out);
  CHECK(list.size() == 257);
  int not_estimable = 0;
  for (const auto& o : list)
    if (!o["estimable"].get<bool>()) {
      ++not_estimable;
      CHECK(has(o["why_not_estimated"].get<std::string>(), "no on-demand price"));
      CHECK(o["on_demand_usd"].is_null());
    }
  CHECK(not_estimable == 6);
  auto table = run(kCost, {"offers", "--catalog", fsdl(), "--provider", "exoscale"});
  REQUIRE(table.exit_code == 0);
  CHECK(has(table.out, "exoscale/gpu3080ti-small"));
  CHECK(has(table.out, "no on-demand price in the source"));
  CHECK(has(table.out, "# 17 offers of 257"));

  auto est = run(kCost, {"estimate", "--tokens", "1e9", "--params", "124M", "--catalog", fsdl(), "--format", "json"});
  REQUIRE_MESSAGE(est.exit_code == 0, est.err);
  json rows = json::parse(est.out);
  CHECK(rows.size() == 251);
  int skipped = 0;
  for (const auto& line : dl::test::lines(est.err))
    if (has(line, "skipped exoscale/") && has(line, "no on-demand price in the source")) ++skipped;
  CHECK(skipped == 6);
  // Human format: the skipped offers are a note under the table.
  auto human = run(kCost, {"estimate", "--tokens", "1e9", "--params", "124M", "--catalog", fsdl(), "--top", "5"});
  CHECK(human.exit_code == 0);
  CHECK(has(human.out, "# skipped 6 offers: no on-demand price in the source"));
  CHECK(has(human.out, "# showing 5 of 251 rows"));
}

TEST_CASE("unmappable GPU names are reported on stderr") {
  auto r = run(kCost, {"offers", "--catalog", dl::test::shared_path("data/fsdl_serverless-gpus.csv").string(), "--format", "csv"});
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.err, "warning: "));
  CHECK(has(r.err, "GPU type 'A100 (20 GB)'"));
  auto tpu = run(kCost, {"offers", "--catalog", dl::test::shared_path("data/fsdl_serverless-gpus.csv").string(),
                         "--gpu", "A100"});
  CHECK(tpu.exit_code == 0);
  CHECK(has(tpu.out, "? A100 (20 GB)"));
  CHECK(has(tpu.out, "not in dlkit's GPU table"));
  CHECK(dl::parse_csv(r.out, "stdout").size() == 73);
}

TEST_CASE("the shipped catalog prices the GPT-2 config") {
  auto r = run(kCost, {"estimate", dl::test::source_path("configs/gpt2-124m.toml").string(), "--precision", "bf16",
                       "--format", "json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json rows = json::parse(r.out);
  CHECK(rows.size() >= 30);
  // 19000 steps x 16 x 32 x 1024 tokens.
  CHECK(rows[0]["tokens"].get<double>() == 19000.0 * 16 * 32 * 1024);
  std::set<std::string> sources;
  for (const auto& x : rows) sources.insert(x["speed_source"].get<std::string>());
  CHECK(sources.count("relative"));
  CHECK(sources.count("analytic"));
  CHECK(rows[0]["cheapest"] == true);
}

TEST_CASE("a dl-cost outside any build folder finds the catalog of the source tree it was built from") {
  // A build folder beside the source tree (not inside it) has no configs/ above its bin/: the
  // last place looked is the source tree this binary was compiled from.
  dl::test::TempDir dir("cost-cli-moved");
  const fs::path moved = dir / "dl-cost";
  fs::copy_file(dl::test::tool("dl-cost"), moved);
  auto r = run(moved.string(), {"offers", "--gpu", "H100", "--format", "json"}, "", {"DLKIT_CATALOG_DIR="});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(!json::parse(r.out).empty());
}

TEST_CASE("bad input: clear errors and exit 2") {
  dl::test::TempDir dir("cost-cli-bad");
  const std::string cat = write_catalog(dir);
  auto expect = [&](const std::vector<std::string>& args, const std::string& message) {
    auto r = run(kCost, args);
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, message));
    CHECK(r.out.empty());
  };
  expect({"estimate", "--hours", "10", "--on", "nosuch/offer", "--catalog", cat}, "unknown offer 'nosuch/offer'");
  expect({"estimate", "--hours=-3", "--on", "pricey/h100", "--catalog", cat}, "--hours: duration '-3' is negative");
  expect({"estimate", "--hours", "-3", "--on", "pricey/h100", "--catalog", cat}, "--hours: duration '-3' is negative");
  expect({"estimate", "--hours", "0", "--on", "pricey/h100", "--catalog", cat}, "--hours: need a positive duration");
  expect({"onprem", "--price", "1000", "--watts", "100", "--kwh-price", "0.1", "--utilization", "0.5", "--years", "3",
          "--vs", "nope", "--catalog", cat},
         "unknown offer 'nope'");
  // A malformed catalog row: a warning without --strict, an error naming file and line with it.
  auto bad = dir / "bad.csv";
  dl::test::write_file(bad,
                       "Cloud,GPU Type,GPU Arch,GPUs,GPU RAM,vCPUs,RAM,On-demand,Per-GPU,Spot,Name\n"
                       "X,H100 (80 GB),Hopper,1,80,8,64,2.00,2.00,,a\n"
                       "X,L4 (24 GB),Ada,1,24,4,16,cheap,,,b\n");
  auto lax = run(kCost, {"offers", "--catalog", bad.string()});
  CHECK(lax.exit_code == 0);
  CHECK(has(lax.err, "bad.csv:3: On-demand 'cheap' is not a price"));
  expect({"offers", "--catalog", bad.string(), "--strict"}, "bad.csv:3: malformed row (--strict)");
  expect({"estimate", "--flops", "1e18", "--catalog", bad.string(), "--strict"}, "bad.csv:3: malformed row");
  // Empty catalogs.
  auto empty = dir / "empty.toml";
  dl::test::write_file(empty, "schema = \"dlkit-catalog/1\"\n");
  expect({"offers", "--catalog", empty.string()}, "empty catalog: no offers in");
  auto header_only = dir / "header.csv";
  dl::test::write_file(header_only, "Cloud,GPU Type,GPU Arch,GPUs,GPU RAM,vCPUs,RAM,On-demand,Per-GPU,Spot,Name\n");
  expect({"estimate", "--flops", "1e18", "--catalog", header_only.string()}, "empty catalog");
  // Unknown format, missing experiment, out-of-range flags, a missing config.
  expect({"offers", "--catalog", cat, "--format", "xml"}, "xml");
  expect({"estimate", "--flops", "1e18", "--catalog", cat, "--format", "yaml"}, "yaml");
  expect({"estimate", "--catalog", cat}, "no experiment");
  expect({"estimate", "--flops", "1e18", "--catalog", cat, "--mfu", "2"}, "--mfu");
  expect({"estimate", "--flops", "1e18", "--catalog", cat, "--gpus", "1,0"}, "--gpus");
  expect({"estimate", "--flops", "1e18", "--catalog", cat, "--speed", "magic"}, "'magic' is not a speed source");
  expect({"estimate", (dir / "missing.toml").string(), "--catalog", cat}, "missing.toml");
  expect({"estimate", "--flops", "1e18", "--catalog", (dir / "nofile.csv").string()}, "no such file");
  expect({"onprem", "--price", "1000", "--watts", "100", "--kwh-price", "0.1", "--utilization", "1.5", "--years", "3",
          "--gpu", "H100-SXM", "--catalog", cat},
         "--utilization");
  // A flag CLI11 does not know is a usage error too.
  auto unknown = run(kCost, {"estimate", "--flops", "1e18", "--frobnicate"});
  CHECK(unknown.exit_code == 2);
}

TEST_CASE("--params 124M with GPT-2's hints plans its exact 124,439,808; 5.5% short is exit 2") {
  dl::test::TempDir dir("cost-cli-params");
  const std::string cat = write_catalog(dir);
  const std::vector<std::string> gpt2 = {"--layers", "12", "--hidden", "768", "--heads", "12", "--seq", "1024",
                                         "--vocab", "50257", "--tokens", "1e9", "--catalog", cat};
  auto ok = run(kCost, with({"estimate", "--params", "124M"}, gpt2));
  CHECK_MESSAGE(ok.exit_code == 0, ok.err);
  CHECK(has(ok.out, "--params 1.24e8 taken as 124,439,808"));
  CHECK(has(ok.out, "# model: 124,439,808 parameters"));
  auto bad = run(kCost, with({"estimate", "--params", "118M"}, gpt2));
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "fewer than the architecture hints alone need"));
}

TEST_CASE("exit 1 when nothing meets the deadline; the call-out says so") {
  dl::test::TempDir dir("cost-cli-deadline");
  const std::string cat = write_catalog(dir);
  auto r = run(kCost, {"estimate", "--tokens", "1e9", "--params", "124M", "--catalog", cat, "--speed", "analytic",
                       "--deadline", "1m"});
  CHECK(r.exit_code == 1);
  CHECK(has(r.out, "# nothing meets the deadline 1.0 min"));  // it said 0.02 h
  // The fixed arithmetic (--mfu 0.4, 0.97 per doubling): 8 H100s cost more than one, so one is best.
  auto ok = run(kCost, {"estimate", "--tokens", "1e9", "--params", "124M", "--catalog", cat, "--speed", "analytic",
                        "--deadline", "1h", "--mfu", "0.4", "--eff-nvlink", "0.97", "--format", "json"});
  CHECK(ok.exit_code == 0);
  json rows = json::parse(ok.out);
  CHECK(row_of(rows, "pricey/h100")["best"] == true);
  CHECK(has(ok.err, "best within deadline 1.00 h: pricey/h100"));
}

TEST_CASE("onprem through the binary") {
  dl::test::TempDir dir("cost-cli-onprem");
  const std::string cat = write_catalog(dir);
  auto r = run(kCost, {"onprem", "--price", "$30k", "--watts", "1000", "--kwh-price", "0.15", "--utilization", "0.5",
                       "--years", "3", "--gpu", "H100-SXM", "--catalog", cat, "--speed", "analytic", "--mfu", "0.4",
                       "--format", "json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json rows = json::parse(r.out);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["offer"] == "pricey/h100");
  CHECK(rows[0]["best"] == true);
  CHECK(rows[0]["breakeven_months"].get<double>() == doctest::Approx(30000.0 / (912.5 - 54.75)));
  CHECK(rows[0]["cloud_usd_per_month"].get<double>() == doctest::Approx(912.5));
  CHECK(rows[0]["onprem_power_usd_per_month"].get<double>() == doctest::Approx(54.75));
  CHECK(has(r.err, "break-even after 35.0 months against pricey/h100"));
  auto human = run(kCost, {"onprem", "--price", "30000", "--watts", "1000", "--kwh-price", "0.15", "--utilization", "0.5",
                           "--years", "3", "--vs", "pricey/h100", "--catalog", cat, "--speed", "analytic", "--mfu", "0.4"});
  CHECK(human.exit_code == 0);
  CHECK(has(human.out, "35.0 months"));
  CHECK(has(human.out, "# power/month = W/1000 x 730 h x utilization x PUE x $/kWh"));
}

TEST_CASE("--help teaches every subcommand with examples") {
  for (const char* sub : {"estimate", "offers", "onprem"}) {
    CAPTURE(sub);
    auto r = run(kCost, {sub, "--help"});
    CHECK(r.exit_code == 0);
    CHECK(has(r.out, "Examples:"));
    CHECK(has(r.out, std::string("dl-cost ") + sub));
    CHECK(has(r.out, "--format"));
  }
  auto top = run(kCost, {"--help"});
  CHECK(top.exit_code == 0);
  CHECK(has(top.out, "estimate"));
  CHECK(has(top.out, "docs/COST.md"));
  auto none = run(kCost, {});
  CHECK(none.exit_code == 2);
}

TEST_CASE("--throughput reads Lambda CSVs at run time") {
  dl::test::TempDir dir("cost-cli-tp");
  const std::string cat = write_catalog(dir);
  auto r = run(kCost, {"estimate", "--flops", "1e18", "--catalog", cat, "--precision", "fp32", "--speed", "relative",
                       "--throughput", dl::test::shared_path("data/lambda_pytorch-train-throughput-fp32.csv").string(),
                       "--mfu", "0.4", "--format", "json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json rows = json::parse(r.out);
  // fp32: the reference A100-SXM-80GB at 19.5 TFLOP/s x 0.4, scaled by the derived ratios.
  const json& rtx = row_of(rows, "cheap/4090");
  CHECK(rtx["speed_source"] == "relative");
  CHECK(rtx["per_gpu_flops"].get<double>() == doctest::Approx(19.5e12 * 0.4 * 0.6436075277121228));
  CHECK(has(rtx["speed_detail"].get<std::string>(), "fp32 ratio from lambda_pytorch-train-throughput-fp32.csv"));
  CHECK(row_of(rows, "pricey/h100")["per_gpu_flops"].get<double>() == doctest::Approx(19.5e12 * 0.4 * 1.7849056156973144));
  // A GPU the table lacks is skipped when only relative speeds are allowed.
  auto l4 = dir / "l4.toml";
  dl::test::write_file(l4, "schema = \"dlkit-catalog/1\"\n[[offer]]\nprovider = \"P\"\ninstance = \"l4\"\ngpu = \"L4\"\n"
                           "gpus = 1\non_demand = 0.7\nsource = \"s\"\nas_of = \"2026-11\"\n");
  auto none = run(kCost, {"estimate", "--flops", "1e18", "--catalog", l4.string(), "--speed", "relative"});
  CHECK(none.exit_code == 2);
  CHECK(has(none.err, "L4 is not in the fp16 relative-throughput table"));
}

TEST_CASE("dl-cost estimate of a sweep beyond the limits exits 2 naming the key (trials, asha max_steps)") {
  dl::test::TempDir dir("cost-cli-limits");
  dl::test::write_file(dir / "base.toml", "[train]\nsteps = 10\n");
  const std::string lr = "[parameters]\n\"optim.lr\" = [1e-3, 2e-3]\n";
  struct Case {
    std::string body, says;
  };
  for (const Case& c : std::vector<Case>{
           // The old step budget simulated asha over a vector of every trial: out of memory (exit 1).
           {"base = \"base.toml\"\n[method]\nname = \"random\"\ntrials = 1000000000\n" + lr +
                "[early_stopping]\ntype = \"asha\"\nmin_steps = 1\nmax_steps = 9\n",
            "method.trials = 1000000000 is beyond the limit of 100000"},
           {"base = \"base.toml\"\n[method]\nname = \"grid\"\n" + lr +
                "[early_stopping]\ntype = \"asha\"\nmin_steps = 1\nmax_steps = 9223372036854775807\n",
            "early_stopping.max_steps = 9223372036854775807 is beyond the limit of 1000000000"},
       }) {
    CAPTURE(c.body);
    dl::test::write_file(dir / "s.sweep.toml", c.body);
    const auto r = dl::test::run_limited(kCost, {"estimate", (dir / "s.sweep.toml").string()}, {}, 60);
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, c.says));
    CHECK(r.out.empty());
  }
}

TEST_CASE("the goodput factor through the binary: a column, a note, json fields and its flags") {
  dl::test::TempDir dir("cost-cli-goodput");
  const std::string cat = write_catalog(dir);
  const std::vector<std::string> args = {"estimate", "--tokens", "1e10", "--params", "1B", "--catalog", cat,
                                         "--speed", "analytic", "--mfu", "0.4", "--gpus", "8,1024"};
  auto table = run(kCost, args);
  REQUIRE_MESSAGE(table.exit_code == 0, table.err);
  CHECK(has(table.out, "goodput"));
  CHECK(has(table.out, "# goodput: hours = compute / goodput; evaluation 1.0% (--eval-share)"));
  CHECK(has(table.out, ": goodput 0."));
  auto j = run(kCost, with(args, {"--format", "json"}));
  REQUIRE_MESSAGE(j.exit_code == 0, j.err);
  auto jo = run(kCost, with(args, {"--format", "json", "--eval-share", "0", "--failure-rate", "0", "--checkpoint-bw",
                                   "1000TB/s"}));
  REQUIRE_MESSAGE(jo.exit_code == 0, jo.err);
  const json rows = json::parse(j.out), off = json::parse(jo.out);
  for (const auto& x : rows) {
    CHECK(x["goodput"].get<double>() < 1);
    CHECK(x["gpu_hours"].get<double>() == doctest::Approx(x["hours"].get<double>() * x["gpus"].get<double>()));
    const json& o = row_of(off, x["offer"].get<std::string>(), x["gpus"].get<int64_t>());
    CHECK(o["goodput"].get<double>() == doctest::Approx(1).epsilon(1e-6));
    CHECK(x["gpu_hours"].get<double>() > o["gpu_hours"].get<double>());  // GPU-hours grow with it
  }
  // Failures are per GPU-hour: 1,024 GPUs lose a larger share than 8.
  CHECK(row_of(rows, "pricey/h100x8", 1024)["goodput"].get<double>() < row_of(rows, "pricey/h100x8", 8)["goodput"].get<double>());
  auto bad = run(kCost, with(args, {"--eval-share", "-1"}));
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "--eval-share"));
  auto fabric = run(kCost, with(args, {"--fabric", "omnipath"}));
  REQUIRE_MESSAGE(fabric.exit_code == 0, fabric.err);
  CHECK(has(fabric.out, "# fabric between instances: omnipath"));
}

TEST_CASE("--moe-max-nodes and --moe-overlap price a mixture of experts' all-to-alls; --explain says how") {
  const std::vector<std::string> mixtral = {"estimate", "--params", "46.7B", "--arch", "llama", "--layers", "32", "--hidden",
                                            "4096", "--heads", "32", "--kv-heads", "8", "--ffn-hidden", "14336", "--vocab",
                                            "32000", "--seq", "4096", "--experts", "8", "--active-experts", "2", "--tokens",
                                            "100B", "--gpu", "H100-SXM", "--gpus", "64", "--catalog", "builtin",
                                            "--global-batch", "4194304", "--format", "json"};
  auto plain = run(kCost, mixtral);
  REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
  std::vector<std::string> tuned_flags = mixtral;
  for (const char* f : {"--moe-max-nodes", "1", "--moe-overlap", "full"}) tuned_flags.push_back(f);
  auto tuned = run(kCost, tuned_flags);
  REQUIRE_MESSAGE(tuned.exit_code == 0, tuned.err);
  const auto hours = [](const std::string& out) { return json::parse(out)[0]["hours"].get<double>(); };
  CHECK(hours(tuned.out) < hours(plain.out));
  auto explained = run(kCost, {"estimate", "--params", "46.7B", "--arch", "llama", "--layers", "32", "--hidden", "4096",
                               "--heads", "32", "--kv-heads", "8", "--ffn-hidden", "14336", "--vocab", "32000", "--seq",
                               "4096", "--experts", "8", "--active-experts", "2", "--tokens", "100B", "--gpu", "H100-SXM",
                               "--gpus", "64", "--catalog", "builtin", "--global-batch", "4194304", "--moe-overlap", "full",
                               "--explain"});
  REQUIRE_MESSAGE(explained.exit_code == 0, explained.err);
  CHECK(has(explained.out, "overlap (--moe-overlap) full"));
  auto bad = run(kCost, {"estimate", "--params", "7B", "--tokens", "1B", "--moe-overlap", "some"});
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "--moe-overlap: unknown overlap 'some' (none or full)"));
}
