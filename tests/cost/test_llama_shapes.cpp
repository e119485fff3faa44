// dl-cost with Llama-family shapes: grouped-query attention, SwiGLU and untied heads, from
// --params with hints, a Hugging Face config.json or a llama dl-train config (issue 33 item 6).
#include <doctest/doctest.h>

#include "cost/fixtures.hpp"
#include "dl/cost/estimate.hpp"
#include "support/support.hpp"

using dl::test::has;
using dl::test::run;
using dl::test::tool;

namespace {

const std::string kCostBin = tool("dl-cost");

std::vector<std::string> with_args(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("published Llama shapes with their real K/V heads and SwiGLU widths are accepted at their exact counts") {
  dl::test::TempDir dir("cost-llama");
  const std::string cat = cost_test::write_catalog(dir);
  const std::vector<std::string> common = {"estimate", "--arch", "llama", "--tokens", "1T", "--catalog", cat,
                                           "--gpu", "H100-SXM", "--gpus", "64"};
  struct Case {
    const char* name;
    std::vector<std::string> shape;
    const char* count;
  };
  const Case cases[] = {
      {"Llama 2 7B",
       {"--params", "7B", "--layers", "32", "--hidden", "4096", "--heads", "32", "--ffn-hidden", "11008", "--seq", "4096",
        "--vocab", "32000"},
       "6,738,415,616"},
      {"Llama 3 8B",
       {"--params", "8B", "--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "8", "--ffn-hidden",
        "14336", "--seq", "8192", "--vocab", "128256"},
       "8,030,261,248"},
      {"TinyLlama 1.1B",
       {"--params", "1.1B", "--layers", "22", "--hidden", "2048", "--heads", "32", "--kv-heads", "4", "--ffn-hidden",
        "5632", "--seq", "2048", "--vocab", "32000"},
       "1,100,048,384"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto r = run(kCostBin, with_args(common, c.shape));
    CHECK_MESSAGE(r.exit_code == 0, r.err);
    CHECK(has(r.out, std::string("# model: ") + c.count + " parameters"));
    CHECK(has(r.out, "llama (SwiGLU, RMSNorm, rotary) untied head"));
  }
  // The refusal the issue quotes: StarCoder 15.5B's GPT block with one K/V head (multi-query).
  const std::vector<std::string> starcoder = {"estimate", "--params", "1.55e10", "--layers", "40", "--hidden", "6144",
                                              "--heads", "48", "--seq", "8192", "--vocab", "49152", "--tokens", "1T",
                                              "--catalog", cat, "--gpus", "512", "--gpu", "H100-SXM"};
  auto refused = run(kCostBin, starcoder);
  CHECK(refused.exit_code == 2);
  CHECK(has(refused.err, "fewer than the architecture hints alone need"));
  auto mqa = run(kCostBin, with_args(starcoder, {"--kv-heads", "1"}));
  CHECK_MESSAGE(mqa.exit_code != 2, mqa.err);
  CHECK(has(mqa.out, "# model: 15,517,456,384 parameters"));
  CHECK(has(mqa.out, "KV=1"));
}

TEST_CASE("FLOPs per token of a llama shape: 6N with grouped K/V and SwiGLU, attention over every query head") {
  dl::cost::EstimateInputs in;
  in.params = 8e9;
  in.tokens = 1e12;
  in.layers = 32, in.hidden = 4096, in.heads = 32, in.seq = 8192, in.vocab = 128256;
  in.arch.family = "llama";
  in.arch.kv_heads = 8;
  in.arch.ffn_hidden = 14336;
  const dl::cost::Experiment e = dl::cost::make_experiment(in);
  CHECK(e.model->params == 8030261248.0);
  CHECK(e.flops_per_token == 6 * 8030261248.0 + 12.0 * 32 * 4096 * 8192);
  CHECK(e.flops == doctest::Approx(1e12 * e.flops_per_token));
}

TEST_CASE("dl-cost estimate of the shipped llama configs and of a Hugging Face config.json") {
  dl::test::TempDir dir("cost-llama-config");
  const std::string cat = cost_test::write_catalog(dir);
  auto l3 = run(kCostBin, {"estimate", dl::test::source_path("configs/llama3-8b.toml").string(), "--catalog", cat, "--gpus",
                        "8", "--format", "md"});
  CHECK_MESSAGE(l3.exit_code == 0, l3.err);
  CHECK(has(l3.out, "# model: 8,030,261,248 parameters"));
  CHECK(has(l3.out, "1000 steps x 1 x 128 x dp 1 x 8192 tokens"));
  auto tiny = run(kCostBin, {"estimate", dl::test::source_path("configs/tinyllama-1.1b.toml").string(), "--catalog", cat});
  CHECK_MESSAGE(tiny.exit_code == 0, tiny.err);
  CHECK(has(tiny.out, "# model: 1,100,048,384 parameters"));

  dl::test::write_file(dir / "config.json",
                       R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
 "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
 "vocab_size": 128256, "max_position_embeddings": 8192, "tie_word_embeddings": false})");
  const std::string cfg = (dir / "config.json").string();
  auto hf = run(kCostBin, {"estimate", "--hf-config", cfg, "--seq", "4096", "--tokens", "1T", "--catalog", cat, "--gpus",
                        "64", "--format", "json"});
  CHECK_MESSAGE(hf.exit_code == 0, hf.err);
  auto human = run(kCostBin, {"estimate", "--hf-config", cfg, "--tokens", "1T", "--catalog", cat, "--gpus", "64"});
  CHECK(has(human.out, "# model: 8,030,261,248 parameters (L=32 D=4096 heads=32 T=8192 KV=8"));
  CHECK(has(human.out, "sequence length 8192 (its maximum; --seq to train shorter)"));
  // --hf-config is the whole model: with --params or --kv-heads it is a usage error naming them.
  auto both = run(kCostBin, {"estimate", "--hf-config", cfg, "--params", "8B", "--tokens", "1T", "--catalog", cat});
  CHECK(both.exit_code == 2);
  CHECK(has(both.err, "--hf-config gives the exact parameter count: leave out --params"));
  auto mixed = run(kCostBin, {"estimate", "--hf-config", cfg, "--kv-heads", "4", "--tokens", "1T", "--catalog", cat});
  CHECK(mixed.exit_code == 2);
  CHECK(has(mixed.err, "--kv-heads"));
  // A mixture of experts is refused by its key.
  dl::test::write_file(dir / "moe.json",
                       R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 8})");
  auto moe = run(kCostBin, {"estimate", "--hf-config", (dir / "moe.json").string(), "--tokens", "1T", "--catalog", cat});
  CHECK(moe.exit_code == 2);
  CHECK(has(moe.err, "MixtralForCausalLM"));
  // A config's model is its own: the shape flags are refused beside one.
  auto cfg_and_flag = run(kCostBin, {"estimate", dl::test::source_path("configs/tinyllama-1.1b.toml").string(),
                                  "--kv-heads", "8", "--catalog", cat});
  CHECK(cfg_and_flag.exit_code == 2);
  CHECK(has(cfg_and_flag.err, "--set model.n_kv_head"));
}
