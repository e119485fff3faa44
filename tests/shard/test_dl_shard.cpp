// dl-shard end to end: the built binary, its output formats and exit codes.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dl/core/strings.hpp"
#include "dl/io/crc32c.hpp"
#include "support/support.hpp"

using dl::test::has;

using nlohmann::json;
using dl::test::run;
using dl::test::tool;

namespace {

const std::string kShard = tool("dl-shard");


// A 7.5B model with an architecture: 36 layers of 4096, 32 heads, 2048 tokens, GPT-2 vocabulary.
std::vector<std::string> arch75() {
  return {"--params", "7.5e9", "--layers", "36", "--hidden", "4096", "--heads", "32", "--seq", "2048", "--vocab", "50257"};
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Trains a tiny GPT for two steps and returns its checkpoint directory.
dl::test::fs::path train_checkpoint(const dl::test::TempDir& dir) {
  auto r = run(tool("dl-train"), {dl::test::source_path("configs/addition.toml").string(), "--run-dir",
                                  (dir / "run").string(), "--set", "train.steps=2", "--set", "model.n_layer=1",
                                  "--set", "train.eval_every=0", "--set", "model.block_size=64",
                                  "--set", "model.n_embd=128", "--set", "train.batch_size=8", "--quiet"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  auto ckpt = dir / "run" / "checkpoints" / "step_00000002";
  REQUIRE(dl::test::fs::exists(ckpt / "trainer_state.json"));
  return ckpt;
}

// A CRC-32C as dl-shard shows it in every format: "0x1a2b3c4d".
std::string crc_text(uint32_t crc) { return "0x" + dl::hex32(crc); }

}  // namespace

TEST_CASE("dl-shard --help teaches each subcommand with examples") {
  auto top = run(kShard, {"--help"});
  CHECK(top.exit_code == 0);
  CHECK(has(top.out, "plan"));
  CHECK(has(top.out, "recommend"));
  CHECK(has(top.out, "inspect"));
  CHECK(has(top.out, "split"));
  CHECK(has(top.out, "merge"));
  for (const char* sub : {"plan", "recommend", "inspect", "split", "merge"}) {
    auto r = run(kShard, {sub, "--help"});
    CAPTURE(sub);
    CHECK(r.exit_code == 0);
    CHECK(has(r.out, "Examples:"));
    CHECK(has(r.out, std::string("dl-shard ") + sub));
  }
  auto none = run(kShard, {});
  CHECK(none.exit_code == 2);
  auto unknown = run(kShard, {"shuffle", "x"});
  CHECK(unknown.exit_code == 2);
  auto no_output = run(kShard, {"split", "x", "--ranks", "2"});  // -o is required
  CHECK(no_output.exit_code == 2);
}

TEST_CASE("plan: the ZeRO worked example, in every format") {
  std::vector<std::string> args = {"plan", "--params", "7.5e9", "--gpus", "64", "--gpu-mem", "80GB"};
  auto r = run(kShard, args);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(has(r.out, "120 GB"));
  CHECK(has(r.out, "31.4 GB"));
  CHECK(has(r.out, "16.6 GB"));
  CHECK(has(r.out, "1.88 GB"));
  CHECK(has(r.out, "decimal units (1 GB = 1e9 bytes)"));
  CHECK(has(r.out, "7,500,000,000 parameters"));
  // Plain DP needs 122 GB with the overhead allowance: it does not fit, and says why.
  CHECK(has(r.out, "does not fit: needs 122 GB of 80.0 GB: optimizer state 90.0 GB — try zero >= 1 or offload"));

  auto j = run(kShard, cat(args, {"--format", "json"}));
  REQUIRE(j.exit_code == 0);
  json rows = json::parse(j.out);
  REQUIRE(rows.size() == 4);
  const double want[4] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};
  for (int z = 0; z < 4; ++z) {
    CAPTURE(z);
    CHECK(rows[z]["zero"] == z);
    CHECK(rows[z]["dp"] == 64);
    CHECK(rows[z]["model_state_bytes"].get<double>() == doctest::Approx(want[z]).epsilon(1e-12));
    CHECK(rows[z]["gpu_mem_bytes"].get<double>() == 80e9);
    CHECK(rows[z]["fits"] == (z > 0));
  }
  CHECK(rows[3]["comm_dp_bytes"].get<double>() == doctest::Approx(1.5 * rows[0]["comm_dp_bytes"].get<double>()));

  // A bare number is refused before anything is planned: --gpu-mem 80 was read as 80 bytes
  // ("fits: no" everywhere, exit 0).
  auto bare = run(kShard, {"plan", "--params", "124M", "--gpus", "8", "--gpu-mem", "80"});
  CHECK(bare.exit_code == 2);
  CHECK(bare.out.empty());
  CHECK(has(bare.err, "dl-shard: error: --gpu-mem: '80' has no unit: write 80GB or 80GiB"));

  // Binary units in, decimal out: 80 GiB = 85.9 GB.
  auto gib = run(kShard, {"plan", "--params", "1.5B", "--gpus", "8", "--gpu-mem", "80GiB", "--zero", "3", "--format", "json"});
  REQUIRE(gib.exit_code == 0);
  json g = json::parse(gib.out);
  REQUIRE(g.size() == 1);
  CHECK(g[0]["gpu_mem_bytes"].get<double>() == 80.0 * 1024 * 1024 * 1024);
  CHECK(g[0]["model_params"].get<double>() == 1.5e9);

  auto csv = run(kShard, cat(args, {"--format", "csv"}));
  REQUIRE(csv.exit_code == 0);
  auto lines = dl::test::lines(csv.out);
  CHECK(lines.size() == 5);
  CHECK(lines[0].rfind("layout,", 0) == 0);
  auto md = run(kShard, cat(args, {"--format", "md"}));
  CHECK(md.exit_code == 0);
  CHECK(has(md.out, "| layout |"));
}

TEST_CASE("plan and recommend share their flags: --top and --flop-formula (plan had neither)") {
  for (const char* sub : {"plan", "recommend"}) {
    CAPTURE(sub);
    auto help = run(kShard, {sub, "--help"});
    CHECK(has(help.out, "--top"));
    CHECK(has(help.out, "--flop-formula"));
    CHECK(!has(help.out, "--flops"));  // dl-cost's --flops is a total FLOP count
  }
  // Four ZeRO stages, the first two shown.
  auto all = run(kShard, {"plan", "--params", "7.5e9", "--gpus", "64", "--gpu-mem", "80GB", "--format", "json"});
  REQUIRE_MESSAGE(all.exit_code == 0, all.err);
  REQUIRE(json::parse(all.out).size() == 4);
  auto two = run(kShard, {"plan", "--params", "7.5e9", "--gpus", "64", "--gpu-mem", "80GB", "--top", "2", "--format", "json"});
  REQUIRE_MESSAGE(two.exit_code == 0, two.err);
  const json rows = json::parse(two.out);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == json::parse(all.out)[0]);
  CHECK(rows[1] == json::parse(all.out)[1]);
  auto table = run(kShard, {"plan", "--params", "7.5e9", "--gpus", "64", "--gpu-mem", "80GB", "--top", "2"});
  CHECK(has(table.out, "# showing 2 of 4 layouts (--top 0 shows all)"));
  // The old spelling still works, with a warning.
  auto old = run(kShard, {"plan", "--params", "7.5e9", "--gpus", "64", "--gpu-mem", "80GB", "--flops", "llmc", "--format", "json"});
  REQUIRE_MESSAGE(old.exit_code == 0, old.err);
  CHECK(has(old.err, "--flops is deprecated: it is --flop-formula"));
}

TEST_CASE("--gpu: an ambiguous name lists its candidates in dl-shard and dl-cost onprem alike (it said unknown GPU)") {
  const std::string listed = "'A100' is ambiguous: A100-SXM-80GB, A100-SXM-40GB, A100-PCIe-80GB, A100-PCIe-40GB";
  for (const char* sub : {"plan", "recommend"}) {
    auto r = run(kShard, {sub, "--params", "124M", "--gpus", "8", "--gpu", "A100"});
    CAPTURE(sub);
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, "dl-shard: error: --gpu: " + listed));
  }
  auto onprem = run(tool("dl-cost"), {"onprem", "--price", "250k", "--watts", "3000", "--kwh-price", "0.15",
                                      "--utilization", "0.6", "--years", "4", "--gpu", "A100"});
  CHECK(onprem.exit_code == 2);
  CHECK(has(onprem.err, "dl-cost: error: --gpu: " + listed));
  // One spelling of one model is that model; a name near none says so and lists the known ones.
  auto exact = run(kShard, {"plan", "--params", "124M", "--gpus", "8", "--gpu", "a100 pcie 40gb", "--format", "json"});
  REQUIRE_MESSAGE(exact.exit_code == 0, exact.err);
  CHECK(json::parse(exact.out)[0]["gpu_mem_bytes"].get<double>() == 40e9);
  auto typo = run(kShard, {"plan", "--params", "124M", "--gpus", "8", "--gpu", "H100-SMX"});
  CHECK(typo.exit_code == 2);
  CHECK(has(typo.err, "unknown GPU 'H100-SMX' (did you mean 'H100-SXM'?); known: B200, GB200, H100-SXM, "));
}

TEST_CASE("plan from a config: the parameter count dl-train reports") {
  dl::test::TempDir dir("shard-cfg");
  dl::test::write_file(dir / "gpt2.toml",
                       "[model]\ntype = \"gpt\"\nn_layer = 12\nn_head = 12\nn_embd = 768\nblock_size = 1024\n"
                       "vocab_size = 50257\n[data]\nsource = \"synthetic:addition\"\n[train]\nbatch_size = 8\n"
                       "precision = \"bf16\"\n");
  auto r = run(kShard, {"plan", (dir / "gpt2.toml").string(), "--gpus", "8", "--gpu", "H100-SXM", "--zero", "1",
                        "--format", "json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json rows = json::parse(r.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["model_params"].get<double>() == 124439808.0);
  CHECK(rows[0]["micro_batch"] == 8);               // train.batch_size
  CHECK(rows[0]["global_batch"] == 64);             // 8 GPUs x 8
  CHECK(rows[0]["gpu_mem_bytes"].get<double>() == 80e9);  // from --gpu
  CHECK(rows[0]["flops_per_token"].get<double>() == 859885056.0);
  // ZeRO-1 over 8: 2+2 bytes x N + 12 x N / 8.
  CHECK(rows[0]["model_state_bytes"].get<double>() == doctest::Approx(124439808.0 * (4 + 12.0 / 8)));
  // --set reaches the config; the llm.c FLOP formula on request.
  auto s = run(kShard, {"plan", (dir / "gpt2.toml").string(), "--set", "model.vocab_size=50304", "--gpus", "1",
                        "--gpu-mem", "80GB", "--zero", "0", "--flop-formula", "llmc", "--format", "json"});
  REQUIRE_MESSAGE(s.exit_code == 0, s.err);
  json srow = json::parse(s.out);
  CHECK(srow[0]["model_params"].get<double>() == 124475904.0);
  CHECK(srow[0]["flops_per_token"].get<double>() == 6 * 124475904.0 + 6.0 * 12 * 768 * 1024);
  // fp32 state: 4 + 4 + 8 bytes per parameter.
  auto f = run(kShard, {"plan", (dir / "gpt2.toml").string(), "--gpus", "1", "--gpu-mem", "80GB", "--zero", "0",
                        "--precision", "fp32", "--format", "json"});
  REQUIRE(f.exit_code == 0);
  CHECK(json::parse(f.out)[0]["model_state_bytes"].get<double>() == 16 * 124439808.0);
  CHECK(json::parse(f.out)[0]["optimizer_bytes"].get<double>() == 8 * 124439808.0);

  // An unknown config key is a usage error naming the file.
  dl::test::write_file(dir / "bad.toml", "[model]\ntype = \"gpt\"\nn_layers = 12\n");
  auto bad = run(kShard, {"plan", (dir / "bad.toml").string(), "--gpus", "8", "--gpu-mem", "80GB"});
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "bad.toml"));
  CHECK(has(bad.err, "n_layers"));
}

TEST_CASE("--attention: flash keeps a log-sum-exp state instead of the scores") {
  dl::test::TempDir dir("shard-attention");
  dl::test::write_file(dir / "gpt2.toml",
                       "[model]\ntype = \"gpt\"\nn_layer = 12\nn_head = 12\nn_embd = 768\nblock_size = 1024\n"
                       "vocab_size = 50257\n[data]\nsource = \"synthetic:addition\"\n[train]\nbatch_size = 8\n"
                       "precision = \"bf16\"\ndevice = \"auto\"\n");
  auto plan = [&](std::vector<std::string> extra) {
    auto r = run(kShard, cat({"plan", (dir / "gpt2.toml").string(), "--gpus", "1", "--gpu-mem", "80GB", "--zero", "0",
                              "--format", "json"},
                             extra));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    json rows = json::parse(r.out);
    REQUIRE(rows.size() == 1);
    return rows[0];
  };
  json dflt = plan({}), flash = plan({"--attention", "flash"}), mat = plan({"--attention", "materialized"});
  json cpu = plan({"--set", "train.device=cpu"});
  // device auto plans the GPU run: flash; cpu the CPU backend's materialized scores.
  CHECK(dflt["attention"] == "flash");
  CHECK(dflt["layout"] == "dp=1 tp=1 pp=1 zero=0 offload=none recompute=none mb=8 attention=flash");
  CHECK(dflt["activation_bytes"] == flash["activation_bytes"]);
  CHECK(cpu["attention"] == "materialized");
  CHECK(cpu["layout"] == "dp=1 tp=1 pp=1 zero=0 offload=none recompute=none mb=8");
  CHECK(cpu["activation_bytes"] == mat["activation_bytes"]);
  // 12 layers x (the scores, 2 a s^2 b bytes at 16 bits without dropout, less the state,
  // 2 a s b values of 2 bytes): 12 x (201,326,592 - 393,216) = 2,411,200,512 bytes.
  CHECK(mat["activation_bytes"].get<double>() - flash["activation_bytes"].get<double>() == 2411200512.0);
  // 12 x (32 sbh + the state) + the backward working set + the output layer with bf16 logits
  // (2 s b V bytes = 823,410,688).
  CHECK(flash["activation_bytes"].get<double>() == 3395043328.0);
  // Model states do not depend on it.
  CHECK(mat["model_state_bytes"] == flash["model_state_bytes"]);
  auto table = run(kShard, {"plan", (dir / "gpt2.toml").string(), "--gpus", "1", "--gpu-mem", "80GB"});
  CHECK(has(table.out, "# attention: flash (train.device = \"auto\""));
  // recommend takes it too; an unknown value is a usage error naming the option and the choices.
  auto rec = run(kShard, {"recommend", (dir / "gpt2.toml").string(), "--gpus", "2", "--gpu-mem", "80GB",
                          "--attention", "materialized", "--format", "json", "--top", "0"});
  REQUIRE_MESSAGE(rec.exit_code == 0, rec.err);
  for (const auto& row : json::parse(rec.out)) CHECK(row["attention"] == "materialized");
  for (const char* sub : {"plan", "recommend"}) {
    auto bad = run(kShard, {sub, "--params", "7.5e9", "--gpus", "8", "--gpu-mem", "80GB", "--attention", "fast"});
    CHECK(bad.exit_code == 2);
    CHECK(has(bad.err, "--attention: unknown attention 'fast' (flash or materialized)"));
  }
}

TEST_CASE("impossible layouts: exit 2 naming the constraint") {
  auto heads = run(kShard, cat({"plan"}, cat(arch75(), {"--gpus", "6", "--gpu-mem", "80GB", "--tp", "3"})));
  CHECK(heads.exit_code == 2);
  CHECK(has(heads.err, "tp = 3 does not divide the 32 attention heads"));
  auto layers = run(kShard, cat({"plan"}, cat(arch75(), {"--gpus", "10", "--gpu-mem", "80GB", "--pp", "5"})));
  CHECK(layers.exit_code == 2);
  CHECK(has(layers.err, "pp = 5 does not divide the 36 layers"));
  auto product = run(kShard, cat({"plan"}, cat(arch75(), {"--gpus", "8", "--gpu-mem", "80GB", "--tp", "4", "--pp", "4"})));
  CHECK(product.exit_code == 2);
  CHECK(has(product.err, "does not divide the 8 GPUs"));
  auto node = run(kShard, cat({"plan"}, cat(arch75(), {"--gpus", "16", "--gpu-mem", "80GB", "--tp", "16"})));
  CHECK(node.exit_code == 2);
  CHECK(has(node.err, "more than the 8 GPUs per node"));
  auto off = run(kShard, {"plan", "--params", "7.5e9", "--gpus", "8", "--gpu-mem", "80GB", "--zero", "0", "--offload", "cpu"});
  CHECK(off.exit_code == 2);
  CHECK(has(off.err, "needs zero >= 1"));
  // recommend with an impossible fixed choice explains instead of recommending.
  auto rec = run(kShard, cat({"recommend"}, cat(arch75(), {"--gpus", "6", "--gpu-mem", "80GB", "--tp", "3"})));
  CHECK(rec.exit_code == 2);
  CHECK(has(rec.err, "32 attention heads"));
  // Bad input values.
  CHECK(run(kShard, {"plan", "--params", "7.5Q", "--gpus", "8", "--gpu-mem", "80GB"}).exit_code == 2);
  CHECK(run(kShard, {"plan", "--params", "7.5e9", "--gpus", "8", "--gpu-mem", "80XB"}).exit_code == 2);
  CHECK(run(kShard, {"plan", "--params", "7.5e9", "--gpus", "8"}).exit_code == 2);  // no memory given
  CHECK(run(kShard, {"plan", "--params", "7.5e9", "--gpus", "8", "--gpu", "TPU v4"}).exit_code == 2);
  CHECK(run(kShard, {"plan", "--params", "7.5e9", "--gpus", "8", "--gpu-mem", "80GB", "--recompute", "most"}).exit_code == 2);
  CHECK(run(kShard, {"plan", "--params", "7.5e9", "--gpus", "8", "--gpu-mem", "80GB", "--format", "xml"}).exit_code == 2);
}

TEST_CASE("recommend: 7.5e9 parameters on 8 x 80 GB") {
  auto args = cat({"recommend"}, cat(arch75(), {"--gpus", "8", "--gpu-mem", "80GB"}));
  auto r = run(kShard, args);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.rfind("recommended: dp=", 0) == 0);
  CHECK(has(r.out, "needs "));  // non-fitting layouts say why
  CHECK(has(r.out, "try zero >= 1 or offload"));

  auto j = run(kShard, cat(args, {"--format", "json", "--top", "0"}));
  REQUIRE(j.exit_code == 0);
  json rows = json::parse(j.out);
  REQUIRE(rows.size() > 10);
  CHECK(rows[0]["recommended"] == true);
  CHECK(rows[0]["fits"] == true);
  CHECK(rows[0]["rank"] == 1);
  CHECK(rows[0]["total_bytes"].get<double>() <= 80e9);
  size_t nonfit = 0;
  double prev = 0, fastest = rows[0]["step_s"].get<double>();
  bool in_fit = true;
  for (const auto& row : rows) {
    CHECK(row["dp"].get<int64_t>() * row["tp"].get<int64_t>() * row["pp"].get<int64_t>() == 8);
    if (row["fits"]) {
      CHECK(in_fit);  // fitting layouts come first: the recommended one, then the others fastest first
      if (row["rank"] != 1) {
        CHECK(row["step_s"].get<double>() >= prev * 0.999);
        prev = row["step_s"].get<double>();
        CHECK(has(row["passed_over"].get<std::string>(), "passed over: "));
      }
      fastest = std::min(fastest, row["step_s"].get<double>());
    } else {
      in_fit = false;
      ++nonfit;
      CHECK(row["total_bytes"].get<double>() > 80e9);
      CHECK(has(row["why_not"].get<std::string>(), "needs "));
    }
  }
  CHECK(nonfit > 0);
  // The recommended layout is within 5% of the fastest, and the first rung of the ladder
  // practitioners climb that fits: ZeRO-1 over dp8 (ZeRO shards 120 GB of model states before
  // anyone reaches for tensor parallelism), no offload.
  CHECK(rows[0]["step_s"].get<double>() <= fastest * 1.05);
  CHECK(rows[0]["offload"] == false);
  CHECK(rows[0]["dp"] == 8);
  CHECK(rows[0]["zero"] == 1);
  // Plain DP (zero 0) never fits: 120 GB of model state.
  for (const auto& row : rows)
    if (row["dp"] == 8 && row["zero"] == 0) CHECK(row["fits"] == false);
  // --top limits each group.
  auto t3 = run(kShard, cat(args, {"--format", "json", "--top", "3"}));
  REQUIRE(t3.exit_code == 0);
  CHECK(json::parse(t3.out).size() <= 6);

  // Nothing fits on 8 x 16 GB without offload: exit 1, the table still explains.
  auto tight = run(kShard, cat({"recommend"}, cat(arch75(), {"--gpus", "8", "--gpu-mem", "16GB", "--offload", "none"})));
  CHECK(tight.exit_code == 1);
  CHECK(has(tight.out, "no layout fits in 16.0 GB per GPU"));
  CHECK(has(tight.err, "no layout of 8 GPUs fits"));
}

TEST_CASE("recommend: GPT-2 124M on 8 x 24 GB is plain data parallel, ZeRO-0, no offload") {
  auto r = run(kShard, {"recommend", dl::test::source_path("configs/gpt2-124m.toml").string(), "--gpus", "8", "--gpu-mem",
                        "24GB", "--format", "json", "--top", "0"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json rows = json::parse(r.out);
  REQUIRE(rows.size() > 1);
  const json& best = rows[0];
  CHECK(best["recommended"] == true);
  CHECK(best["dp"] == 8);
  CHECK(best["tp"] == 1);
  CHECK(best["pp"] == 1);
  CHECK(best["zero"] == 0);
  CHECK(best["offload"] == false);
  CHECK(best["recompute"] == "none");
  CHECK(best["passed_over"].is_null());
  // ZeRO-1 with offload ties it (15.0 s): passed over for needing offload, as every other row says why.
  size_t offload_rows = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    if (!rows[i]["fits"]) continue;
    CHECK(has(rows[i]["passed_over"].get<std::string>(), "passed over: "));
    if (rows[i]["offload"] == true && rows[i]["zero"] == 1 && rows[i]["dp"] == 8 && rows[i]["recompute"] == "none") {
      ++offload_rows;
      CHECK(has(rows[i]["passed_over"].get<std::string>(), "needs CPU offload"));
    }
  }
  CHECK(offload_rows == 1);
  auto table = run(kShard, {"recommend", dl::test::source_path("configs/gpt2-124m.toml").string(), "--gpus", "8",
                            "--gpu-mem", "24GB"});
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.rfind("recommended: dp=8 tp=1 pp=1 zero=0 offload=none recompute=none", 0) == 0);
}

TEST_CASE("--bench: measured FLOP/s and bandwidth replace datasheet values") {
  dl::test::TempDir dir("shard-bench");
  auto row = [](const std::string& benchmark, json extra) {
    json r{{"schema", "dlkit-bench/1"}, {"benchmark", benchmark}, {"time", "2026-11-01T00:00:00Z"}, {"host", "h"},
           {"device_type", "cuda"}, {"device", "NVIDIA H100 80GB HBM3"}, {"gpu_model", "H100-SXM"},
           {"num_devices", 1}, {"driver", ""}, {"cuda_runtime", ""}, {"library", ""}, {"dlkit_version", "0.1.0"},
           {"repeat", 10}, {"warmup", 2}};
    for (auto& [k, v] : extra.items()) r[k] = v;
    return r;
  };
  json bench = json::array({row("gemm", {{"dtype", "bf16"}, {"m", 8192}, {"n", 8192}, {"k", 8192}, {"flops", 494.7e12}}),
                            row("collective", {{"op", "allreduce"}, {"backend", "nccl"}, {"nproc", 8}, {"size", 1e9},
                                               {"oop_busbw", 90.0}, {"ip_busbw", 85.0}})});
  dl::test::write_file(dir / "bench.json", bench.dump(2));
  auto base = cat({"plan"}, cat(arch75(), {"--gpus", "8", "--zero", "1", "--format", "json"}));
  auto datasheet = run(kShard, cat(base, {"--gpu", "H100-SXM"}));
  auto measured = run(kShard, cat(base, {"--bench", (dir / "bench.json").string()}));
  REQUIRE_MESSAGE(datasheet.exit_code == 0, datasheet.err);
  REQUIRE_MESSAGE(measured.exit_code == 0, measured.err);
  json d = json::parse(datasheet.out)[0], m = json::parse(measured.out)[0];
  // The bench rows name the GPU: its memory (80 GB) applies without --gpu-mem.
  CHECK(m["gpu_mem_bytes"].get<double>() == 80e9);
  // A GEMM at half the datasheet peak, where one usually reaches kGemmOfPeak = 0.79 of it (the
  // calibrated MFU counts datasheet peaks): 2 x 0.79 the compute time.
  CHECK(m["compute_s"].get<double>() == doctest::Approx(2 * 0.79 * d["compute_s"].get<double>()));
  // 90 GB/s instead of 450 GB/s: five times the communication time.
  CHECK(m["comm_total_s"].get<double>() == doctest::Approx(5 * d["comm_total_s"].get<double>()));
  auto table = run(kShard, cat({"plan"}, cat(arch75(), {"--gpus", "8", "--zero", "1", "--bench", (dir / "bench.json").string()})));
  CHECK(has(table.out, "measured (gemm+collective)"));

  // jsonl on stdin with a train row: its achieved FLOP/s is used as is (no MFU factor).
  json train = row("train", {{"config", "x.toml"}, {"precision", "bf16"}, {"tokens_per_sec", 1000.0},
                             {"flops_per_token", 1e9}, {"num_devices", 1}});
  auto stdin_run = run(kShard, cat(base, {"--bench", "-"}), train.dump() + "\n");
  REQUIRE_MESSAGE(stdin_run.exit_code == 0, stdin_run.err);
  json s = json::parse(stdin_run.out)[0];
  // compute = hardware FLOPs / (8 GPUs x 1e12 FLOP/s x 1.0)
  const double tokens = 8.0 * 2048;  // global batch 8 sequences of 2048
  CHECK(s["compute_s"].get<double>() == doctest::Approx(s["flops_per_token"].get<double>() * tokens / (8 * 1e12)));
  // A malformed bench file is a usage error naming it.
  dl::test::write_file(dir / "bad.json", "[{\"schema\": \"x\"}]");
  auto bad = run(kShard, cat(base, {"--bench", (dir / "bad.json").string()}));
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "bad.json"));
}

TEST_CASE("one rule in dl-shard and dl-cost: bench rows calibrate only a GPU of the model they measured") {
  // A CPU machine's rows (dl-bench train and gemm on this box): dl-shard predicted hours per step
  // from them for a GPU plan, with notes that contradicted each other; dl-cost ignored them.
  dl::test::TempDir dir("shard-cpu-bench");
  auto row = [](const std::string& benchmark, json extra) {
    json r{{"schema", "dlkit-bench/1"}, {"benchmark", benchmark}, {"device_type", "cpu"}, {"device", "x86_64 (2 threads)"},
           {"num_devices", 1}, {"dlkit_version", "0.1.0"}};
    for (auto& [k, v] : extra.items()) r[k] = v;
    return r;
  };
  const json cpu = json::array({row("gemm", {{"dtype", "fp32"}, {"m", 1024}, {"n", 1024}, {"k", 1024}, {"flops", 60e9}}),
                                row("train", {{"config", "addition.toml"}, {"precision", "fp32"}, {"tokens_per_sec", 20000.0},
                                              {"flops_per_token", 2e7}, {"num_devices", 1}})});
  const std::string file = (dir / "cpu.json").string();
  dl::test::write_file(file, cpu.dump(2));
  const std::string note = "bench: 2 CPU (no gpu_model) rows of " + file +
                           " ignored: a dl-bench row calibrates only a GPU of the model it measured";
  const auto base = cat({"plan"}, cat(arch75(), {"--gpus", "8", "--zero", "1", "--gpu", "H100-SXM"}));
  auto datasheet = run(kShard, cat(base, {"--format", "json"}));
  auto with_cpu = run(kShard, cat(base, {"--bench", file, "--format", "json"}));
  REQUIRE_MESSAGE(with_cpu.exit_code == 0, with_cpu.err);
  CHECK(json::parse(with_cpu.out)[0]["step_s"] == json::parse(datasheet.out)[0]["step_s"]);
  auto table = run(kShard, cat(base, {"--bench", file}));
  CHECK(has(table.out, "# " + note));
  CHECK(!has(table.out, "no MFU factor applied"));
  CHECK(has(table.out, "datasheet values kept"));
  auto cost = run(tool("dl-cost"), {"estimate", "--params", "7.5e9", "--tokens", "1B", "--gpu", "H100-SXM", "--bench", file});
  REQUIRE_MESSAGE(cost.exit_code == 0, cost.err);
  CHECK(has(cost.out, "# " + note));
  // Rows of another GPU model than the plan's are set aside the same way (it was an error).
  const json h100 = json::array({row("gemm", {{"dtype", "bf16"}, {"flops", 700e12}, {"gpu_model", "H100-SXM"},
                                              {"device_type", "cuda"}})});
  dl::test::write_file(dir / "h100.json", h100.dump());
  auto other = run(kShard, cat({"plan"}, cat(arch75(), {"--gpus", "8", "--zero", "1", "--gpu", "A100-SXM-80GB", "--bench",
                                                        (dir / "h100.json").string()})));
  REQUIRE_MESSAGE(other.exit_code == 0, other.err);
  CHECK(has(other.out, "# bench: 1 H100-SXM rows of " + (dir / "h100.json").string() + " ignored"));
}

TEST_CASE("inspect: a dl-train checkpoint, its tensors and checksums") {
  dl::test::TempDir dir("shard-inspect");
  auto ckpt = train_checkpoint(dir);
  auto r = run(kShard, {"inspect", ckpt.string(), "--format", "json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json doc = json::parse(r.out);
  CHECK(doc["kind"] == "checkpoint");
  CHECK(doc["step"] == 2);
  CHECK(doc["model_type"] == "gpt");
  CHECK(doc["ok"] == true);
  // One block: wte, wpe, 12 block tensors, ln_f weight and bias = 16 weights; AdamW keeps
  // exp_avg and exp_avg_sq per weight: 32 more.
  CHECK(doc["tensor_count"] == 48);
  size_t in_model = 0, in_opt = 0;
  for (const auto& t : doc["tensors"]) {
    if (t["file"] == "model.safetensors") ++in_model;
    if (t["file"] == "optimizer.safetensors") ++in_opt;
    CHECK(t["dtype"] == "F32");
    int64_t n = 1;
    for (auto d : t["shape"]) n *= d.get<int64_t>();
    CHECK(t["elements"] == n);
    CHECK(t["bytes"].is_number_integer());  // it was 65536.0
    CHECK(t["bytes"] == 4 * n);
    CHECK(t["bytes"].get<int64_t>() == 4 * n);
  }
  CHECK(in_model == 16);
  CHECK(in_opt == 32);
  // Every file matches the manifest's CRC.
  json manifest = json::parse(dl::test::read_file(ckpt / "trainer_state.json"));
  REQUIRE(doc["files"].size() == 3);
  for (const auto& f : doc["files"]) {
    CAPTURE(f["file"]);
    CHECK(f["ok"] == true);
    CHECK(f["crc32c"] == crc_text(manifest["files"][f["file"].get<std::string>()]["crc32c"].get<uint32_t>()));
  }
  // A tensor's CRC is the CRC-32C of its bytes at its offset.
  std::string model_bytes = dl::test::read_file(ckpt / "model.safetensors");
  for (const auto& t : doc["tensors"]) {
    if (t["file"] != "model.safetensors" || t["tensor"] != "wpe.weight") continue;
    const auto off = t["offset"].get<size_t>(), n = t["bytes"].get<size_t>();
    // A hex string in json as in the table and csv (json said 1234567890 where the table said 499602d2).
    const std::string crc = crc_text(dl::crc32c(model_bytes.data() + off, n));
    CHECK(t["crc32c"] == crc);
    CHECK(t["shape"] == json::array({64, 128}));
    for (const char* format : {"table", "csv", "md"}) {
      CAPTURE(format);
      CHECK(has(run(kShard, {"inspect", ckpt.string(), "--format", format}).out, crc));
    }
    const auto jsonl = run(kShard, {"inspect", ckpt.string(), "--format", "jsonl"}).out;
    CHECK(has(jsonl, "\"crc32c\":\"" + crc + "\""));
  }
  // A run directory resolves to its newest checkpoint; the table names the file and the result.
  auto table = run(kShard, {"inspect", (dir / "run").string()});
  REQUIRE(table.exit_code == 0);
  CHECK(has(table.out, "h.0.attn.c_attn.weight"));
  CHECK(has(table.out, "every file matches"));
  CHECK(has(table.out, "48 tensors"));
  // A bare safetensors file.
  auto file = run(kShard, {"inspect", (ckpt / "model.safetensors").string(), "--format", "csv"});
  REQUIRE(file.exit_code == 0);
  CHECK(dl::test::lines(file.out).size() == 17);  // header + 16 tensors
  CHECK(run(kShard, {"inspect", (dir / "nothing-here").string()}).exit_code == 2);
}

TEST_CASE("inspect: a corrupted checkpoint file exits 2 naming it") {
  dl::test::TempDir dir("shard-corrupt");
  auto ckpt = train_checkpoint(dir);
  // Flip one byte in the tensor data (the header stays valid).
  auto path = ckpt / "optimizer.safetensors";
  std::string bytes = dl::test::read_file(path);
  REQUIRE(bytes.size() > 100);
  bytes[bytes.size() - 10] ^= 0x5a;
  dl::test::write_file(path, bytes);
  auto r = run(kShard, {"inspect", ckpt.string()});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "optimizer.safetensors"));
  CHECK(has(r.err, "corrupt"));
  CHECK(has(r.out, "FAILED"));
  auto j = run(kShard, {"inspect", ckpt.string(), "--format", "json"});
  CHECK(j.exit_code == 2);
  json doc = json::parse(j.out);
  CHECK(doc["ok"] == false);
  // Truncation is named too.
  auto model = ckpt / "model.safetensors";
  std::string m = dl::test::read_file(model);
  dl::test::write_file(model, m.substr(0, m.size() - 4));
  auto t = run(kShard, {"inspect", ckpt.string()});
  CHECK(t.exit_code == 2);
  CHECK(has(t.err, "model.safetensors"));
}

TEST_CASE("--precision fp8: the FP8 peak and an FP8 weight copy; refused by name on a GPU without FP8") {
  auto plan = [&](std::vector<std::string> extra) {
    auto r = run(kShard, cat(cat({"plan"}, arch75()), cat({"--gpus", "8", "--zero", "1", "--format", "json"}, extra)));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    json rows = json::parse(r.out);
    REQUIRE(rows.size() == 1);
    return rows[0];
  };
  json bf16 = plan({"--gpu", "H100-SXM"}), fp8 = plan({"--gpu", "H100-SXM", "--precision", "fp8"});
  CHECK(fp8["precision"] == "fp8");
  // 3 bytes of weights per parameter (bf16 + FP8 copy) against 2; gradients unchanged.
  CHECK(fp8["params_bytes"].get<double>() == doctest::Approx(1.5 * bf16["params_bytes"].get<double>()));
  CHECK(fp8["grads_bytes"] == bf16["grads_bytes"]);
  // Compute at the FP8 peak (1,979 against 989.4 TFLOP/s).
  CHECK(fp8["compute_s"].get<double>() == doctest::Approx(bf16["compute_s"].get<double>() * 989.4 / 1979));
  json mi300x = plan({"--gpu", "MI300X", "--precision", "fp8"});
  CHECK(mi300x["gpu_mem_bytes"] == 192e9);
  auto bad = run(kShard, cat(cat({"plan"}, arch75()), {"--gpus", "8", "--gpu", "A100-SXM-80GB", "--precision", "fp8"}));
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "A100-SXM-80GB (Ampere) has no FP8 tensor cores"));
  CHECK(has(bad.err, "use --precision bf16"));
}

TEST_CASE("--fabric: the inter-node bandwidth per GPU, printed; a slower one slows a multi-node step") {
  auto plan = [&](std::vector<std::string> extra) {
    auto r = run(kShard, cat(cat({"plan"}, arch75()),
                             cat({"--gpus", "16", "--gpu", "H100-SXM", "--zero", "1", "--format", "json"}, extra)));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return json::parse(r.out)[0];
  };
  json ndr = plan({}), same = plan({"--fabric", "ib-ndr"}), opa = plan({"--fabric", "omnipath"});
  CHECK(same["step_s"] == ndr["step_s"]);
  CHECK(opa["comm_s"].get<double>() > ndr["comm_s"].get<double>());
  CHECK(opa["step_s"].get<double>() > ndr["step_s"].get<double>());
  auto table = run(kShard, cat(cat({"plan"}, arch75()), {"--gpus", "16", "--gpu", "H100-SXM", "--fabric", "omnipath"}));
  REQUIRE_MESSAGE(table.exit_code == 0, table.err);
  CHECK(has(table.out, " GB/s (--fabric omnipath)"));
  auto dflt = run(kShard, cat(cat({"plan"}, arch75()), {"--gpus", "16", "--gpu", "H100-SXM"}));
  CHECK(has(dflt.out, "inter-node 50.0 GB/s (--fabric ib-ndr, the default)"));
  auto bad = run(kShard, cat(cat({"plan"}, arch75()), {"--gpus", "16", "--gpu", "H100-SXM", "--fabric", "token-ring"}));
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "--fabric: unknown fabric 'token-ring'"));
}

TEST_CASE("a mixture of experts: total and active parameters printed, EP searched, bad expert flags exit 2 naming the flag") {
  const std::vector<std::string> mixtral = {"--params", "46.7B", "--arch", "llama", "--layers", "32", "--hidden", "4096",
                                            "--heads", "32", "--kv-heads", "8", "--ffn-hidden", "14336", "--vocab", "32000",
                                            "--seq", "4096", "--gpus", "64", "--gpu", "H100-SXM"};
  auto r = run(kShard, cat(cat({"recommend"}, mixtral), {"--experts", "8", "--active-experts", "2"}));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(has(r.out, "params 46.7B total, 12.9B active"));
  CHECK(has(r.out, "recommended: dp=64 tp=1 pp=1 ep="));
  // How the all-to-alls are priced is printed: the defaults, then node-limited, overlapped, over two nodes of 4.
  CHECK(has(r.out, "overlap (--moe-overlap) none: exposed in full"));
  CHECK(has(r.out, "(--moe-max-nodes N limits it)"));
  auto moe = run(kShard, cat(cat({"plan"}, mixtral), {"--experts", "8", "--active-experts", "2", "--ep", "8", "--zero", "1",
                                                      "--gpus-per-node", "4", "--format", "json"}));
  auto tuned = run(kShard, cat(cat({"plan"}, mixtral), {"--experts", "8", "--active-experts", "2", "--ep", "8", "--zero", "1",
                                                        "--gpus-per-node", "4", "--moe-max-nodes", "1", "--moe-overlap", "full"}));
  REQUIRE_MESSAGE(tuned.exit_code == 0, tuned.err);
  CHECK(has(tuned.out, "node-limited routing (--moe-max-nodes 1)"));
  CHECK(has(tuned.out, "overlap (--moe-overlap) full"));
  auto tuned_json = run(kShard, cat(cat({"plan"}, mixtral), {"--experts", "8", "--active-experts", "2", "--ep", "8", "--zero", "1",
                                                             "--gpus-per-node", "4", "--moe-max-nodes", "1", "--moe-overlap",
                                                             "full", "--format", "json"}));
  REQUIRE(moe.exit_code == 0);
  REQUIRE(tuned_json.exit_code == 0);
  CHECK(json::parse(tuned_json.out)[0]["step_s"].get<double>() < json::parse(moe.out)[0]["step_s"].get<double>());
  auto fixed = run(kShard, cat(cat({"plan"}, mixtral), {"--experts", "8", "--active-experts", "2", "--ep", "4", "--format", "json"}));
  REQUIRE_MESSAGE(fixed.exit_code == 0, fixed.err);
  for (const auto& row : json::parse(fixed.out)) {
    CHECK(row["ep"] == 4);
    CHECK(row["comm_ep_bytes"].get<double>() > 0);
    CHECK(row["active_params"].get<double>() == doctest::Approx(12.9e9).epsilon(0.02));
  }
  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"--experts", "0", "--active-experts", "2"}, "--experts: need at least 1 routed expert"},
      {{"--experts", "8", "--active-experts", "9"}, "--active-experts 9"},
      {{"--experts", "8"}, "--active-experts 0"},
      {{"--active-experts", "2"}, "give --experts N"},
      {{"--experts", "8", "--active-experts", "2", "--ep", "3"}, "--ep 3 does not divide the 8 experts"},
      {{"--experts", "8", "--active-experts", "2", "--ep", "8", "--tp", "8", "--pp", "2"}, "--ep 8 does not divide dp = 4"},
      {{"--ep", "2"}, "--ep 2: expert parallelism needs a mixture of experts (--experts N)"},
      {{"--experts", "8", "--active-experts", "2", "--capacity-factor", "0.5"}, "--capacity-factor 0.5"},
      {{"--experts", "8", "--active-experts", "2", "--moe-max-nodes", "-1"}, "--moe-max-nodes -1"},
      {{"--moe-max-nodes", "4"}, "--moe-max-nodes shape a mixture of experts: give --experts N"},
      {{"--experts", "8", "--active-experts", "2", "--moe-overlap", "half"}, "--moe-overlap: unknown overlap 'half'"},
  };
  for (const auto& flags_message : bad) {
    const std::string& message = flags_message.second;
    auto e = run(kShard, cat(cat({"plan"}, mixtral), flags_message.first));
    CAPTURE(message);
    CHECK(e.exit_code == 2);
    CHECK(has(e.err, message));
  }
}
