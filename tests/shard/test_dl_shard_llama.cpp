// dl-shard plan and recommend with Llama-family shapes (issue 33 item 6): the shipped llama
// configs, --arch/--kv-heads/--ffn-hidden hints and --hf-config.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "support/support.hpp"

using dl::test::has;
using dl::test::run;
using dl::test::tool;
using nlohmann::json;

namespace {

const std::string kShardBin = tool("dl-shard");

json plan_rows(const dl::test::RunResult& r) {
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("plan of the shipped TinyLlama config: its exact count, sharded by ZeRO-3") {
  const std::string config = dl::test::source_path("configs/tinyllama-1.1b.toml").string();
  const json j = plan_rows(run(kShardBin, {"plan", config, "--gpus", "8", "--gpu", "A100-SXM-80GB", "--zero", "3", "--format", "json"}));
  REQUIRE(j.size() == 1);
  CHECK(j[0]["model_params"] == 1100048384.0);
  CHECK(j[0]["params_bytes"].get<double>() == doctest::Approx(2.0 * 1100048384.0 / 8));
  CHECK(j[0]["flops_per_token"].get<double>() == doctest::Approx(6 * 1100048384.0 + 12.0 * 22 * 2048 * 2048));
  // tp must divide the 4 K/V heads: tp=8 is impossible, named.
  auto tp8 = run(kShardBin, {"plan", config, "--gpus", "8", "--gpu", "A100-SXM-80GB", "--tp", "8"});
  CHECK(tp8.exit_code == 2);
  CHECK(has(tp8.err, "does not divide the 4 K/V heads"));
  // --set reaches the llama keys.
  const json mha = plan_rows(run(kShardBin, {"plan", config, "--set", "model.n_kv_head=32", "--gpus", "8", "--gpu",
                                     "A100-SXM-80GB", "--tp", "8", "--zero", "1", "--format", "json"}));
  CHECK(mha[0]["model_params"] == 1100048384.0 + 22.0 * 2 * 2048 * (2048 - 256));
}

TEST_CASE("plan and recommend with --arch llama hints and with --hf-config agree on Llama 3 8B") {
  const json hinted = plan_rows(run(kShardBin, {"plan", "--params", "8B", "--arch", "llama", "--layers", "32", "--hidden", "4096",
                                        "--heads", "32", "--kv-heads", "8", "--ffn-hidden", "14336", "--vocab", "128256",
                                        "--seq", "8192", "--gpus", "8", "--gpu", "H100-SXM", "--tp", "2", "--format", "json"}));
  REQUIRE(hinted.size() == 4);
  CHECK(hinted[0]["model_params"] == 8030261248.0);

  dl::test::TempDir dir("shard-llama-hf");
  dl::test::write_file(dir / "config.json",
                       R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
 "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
 "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "tie_word_embeddings": false, "hidden_act": "silu"})");
  const std::string cfg = (dir / "config.json").string();
  const json hf = plan_rows(run(kShardBin, {"plan", "--hf-config", cfg, "--gpus", "8", "--gpu", "H100-SXM", "--tp", "2",
                                    "--format", "json"}));
  REQUIRE(hf.size() == hinted.size());
  for (size_t i = 0; i < hf.size(); ++i)
    for (const char* k : {"model_params", "params_bytes", "activation_bytes", "total_bytes", "flops_per_token"})
      CHECK(hf[i][k] == hinted[i][k]);
  // The same model from the shipped config (block_size 8192, micro-batch 1, bf16).
  const json toml = plan_rows(run(kShardBin, {"plan", dl::test::source_path("configs/llama3-8b.toml").string(), "--gpus", "8",
                                      "--gpu", "H100-SXM", "--tp", "2", "--format", "json"}));
  CHECK(toml[0]["model_params"] == 8030261248.0);
  CHECK(toml[0]["params_bytes"] == hf[0]["params_bytes"]);

  // recommend finds a layout for the help's example; with --params beside --hf-config it refuses.
  auto rec = run(kShardBin, {"recommend", dl::test::source_path("configs/llama3-8b.toml").string(), "--gpus", "8", "--gpu",
                          "H100-SXM"});
  CHECK_MESSAGE(rec.exit_code == 0, rec.err);
  CHECK(has(rec.out, "KV=8 F=14336 llama (SwiGLU, RMSNorm, rotary) untied head"));
  auto both = run(kShardBin, {"recommend", "--hf-config", cfg, "--params", "8B", "--gpus", "8", "--gpu", "H100-SXM"});
  CHECK(both.exit_code == 2);
  CHECK(has(both.err, "leave out --params"));
  auto arch = run(kShardBin, {"plan", "--params", "8B", "--arch", "mamba", "--gpus", "8", "--gpu", "H100-SXM"});
  CHECK(arch.exit_code == 2);
  CHECK(has(arch.err, "--arch: unknown architecture 'mamba' (gpt or llama)"));
  // The help shows the llama examples.
  auto help = run(kShardBin, {"plan", "--help"});
  CHECK(has(help.out, "configs/tinyllama-1.1b.toml"));
  CHECK(has(help.out, "--kv-heads"));
}
