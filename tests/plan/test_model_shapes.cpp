// Llama-family shapes in the planner: grouped-query attention, SwiGLU, RMSNorm, rotary positions,
// untied heads. Counts against the published exact ones (../shared/REFERENCE.md "Llama-family
// arithmetic"), memory and FLOPs by hand, and the three ways in: --params with hints, a Hugging
// Face config.json, a dl-train config of model.type "llama".
#include <doctest/doctest.h>

#include <string>

#include "dl/core/error.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/gpt_from_config.hpp"
#include "dl/nn/llama.hpp"
#include "dl/plan/gpus.hpp"
#include "dl/plan/plan.hpp"
#include "dl/plan/speed.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::plan;

namespace {

ModelShape llama(int64_t layers, int64_t hidden, int64_t heads, int64_t kv, int64_t ffn, int64_t vocab, int64_t seq = 4096) {
  ModelShape m = with_family(ModelShape{}, Family::llama);
  m.n_layer = layers, m.hidden = hidden, m.heads = heads, m.kv_heads = kv, m.ffn_hidden = ffn, m.vocab = vocab, m.seq = seq;
  m.params = transformer_param_count(m);
  return m;
}

ModelShape llama2_7b() { return llama(32, 4096, 32, 32, 11008, 32000); }
ModelShape llama3_8b() { return llama(32, 4096, 32, 8, 14336, 128256, 8192); }
ModelShape tinyllama() { return llama(22, 2048, 32, 4, 5632, 32000, 2048); }

// A tiny llama for hand calculations: s=8, h=16, a=4 query heads over 2 K/V heads (K/V width 8),
// SwiGLU F=40, L=2, V=32.
ModelShape tiny_llama() { return llama(2, 16, 4, 2, 40, 32, 8); }

// Llama 3 8B's block as --arch llama --kv-heads 8 --ffn-hidden 14336.
ArchHints llama3_arch() {
  ArchHints a;
  a.family = "llama";
  a.kv_heads = 8;
  a.ffn_hidden = 14336;
  return a;
}

std::string hf_json(const std::string& arch, const std::string& type, const std::string& extra) {
  return "{\"architectures\": [\"" + arch + "\"], \"model_type\": \"" + type + "\", " + extra + "}";
}

// Meta-Llama-3-8B/config.json's shape keys.
const std::string kLlama3 =
    "\"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
    "\"num_key_value_heads\": 8, \"vocab_size\": 128256, \"max_position_embeddings\": 8192, \"hidden_act\": \"silu\", "
    "\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"rope_scaling\": null, \"tie_word_embeddings\": false, "
    "\"attention_bias\": false";

}  // namespace

TEST_CASE("parameter counts equal the published exact ones: Llama 2 7B, Llama 3 8B, TinyLlama, GPT-2") {
  CHECK(llama2_7b().params == 6738415616.0);
  CHECK(llama3_8b().params == 8030261248.0);
  CHECK(tinyllama().params == 1100048384.0);
  // GPT-2's block through the same function: gpt_param_count, tied and untied, any vocabulary.
  for (bool tied : {true, false})
    for (int64_t vocab : {50257, 50304}) {
      ModelShape m;
      m.n_layer = 12, m.hidden = 768, m.heads = 12, m.seq = 1024, m.vocab = vocab, m.tied_head = tied;
      GptConfig g;
      g.n_layer = 12, g.n_head = 12, g.n_embd = 768, g.block_size = 1024, g.vocab_size = vocab, g.tie_embeddings = tied;
      CHECK(transformer_param_count(m) == static_cast<double>(gpt_param_count(g)));
    }
  // Meta's SwiGLU width rule gives Llama 2 7B's and TinyLlama's sizes.
  CHECK(swiglu_hidden(4096) == 11008);
  CHECK(swiglu_hidden(2048) == 5632);
  ModelShape defaulted = llama2_7b();
  defaulted.ffn_hidden = 0;
  CHECK(defaulted.ffn() == 11008);
  CHECK(transformer_param_count(defaulted) == 6738415616.0);
}

TEST_CASE("--params with llama hints plans the exact count; multi-query GPT hints are no longer refused") {
  ModelShape hints = with_family(ModelShape{}, Family::llama);
  hints.n_layer = 32, hints.hidden = 4096, hints.heads = 32, hints.kv_heads = 8, hints.ffn_hidden = 14336;
  hints.seq = 8192, hints.vocab = 128256;
  ModelShape m = model_from_params(8e9, hints);
  CHECK(m.params == 8030261248.0);
  CHECK(m.note.find("8,030,261,248") != std::string::npos);
  CHECK(m.kv() == 8);
  CHECK_FALSE(m.dropout);
  // Through the flags' entry point, which applies --arch's defaults (untied head, SwiGLU).
  ArchHints a = llama3_arch();
  CHECK(model_from_hints(8e9, 32, 4096, 32, 8192, 128256, a).params == 8030261248.0);
  a.kv_heads = 32;
  a.ffn_hidden = 0;  // Llama 2 7B: MHA, the default SwiGLU width
  CHECK(model_from_hints(6.74e9, 32, 4096, 32, 4096, 32000, a).params == 6738415616.0);
  // StarCoder 15.5B: a GPT block (GELU, 4D, biases, learned positions) with one K/V head.
  // GPT-2's multi-head count needs 1.81e10 for 40 x 6144 and was refused ("fewer than the
  // architecture hints alone need"); with --kv-heads 1 the count is 15,517,456,384.
  CHECK_THROWS_AS(model_from_params(1.55e10, 40, 6144, 48, 8192, 49152), Error);
  ArchHints mqa;
  mqa.kv_heads = 1;
  CHECK(model_from_hints(1.55e10, 40, 6144, 48, 8192, 49152, mqa).params == 15517456384.0);
  // K/V heads must divide the query heads, and need them.
  mqa.kv_heads = 5;
  CHECK_THROWS_AS(model_from_hints(1.55e10, 40, 6144, 48, 8192, 49152, mqa), Error);
  ArchHints bad;
  bad.family = "mamba";
  CHECK_THROWS_AS(model_from_hints(1e9, 0, 0, 0, 0, 0, bad), Error);
}

TEST_CASE("activations per layer by hand: K/V of the K/V heads' width, SwiGLU's three F-wide values") {
  const ModelShape m = tiny_llama();
  const double s = 8, b = 2, h = 16, a = 4, f = 40;
  // No dropout (llama): replicated 8 (two norm inputs, the q/k/v input, the MLP input); split:
  // Q 2 + K and V 2 x 2 x KV/heads + projection input 2 + SwiGLU 3 x 2F/h; materialized scores
  // 2 a s / h; 16-bit bytes per value count.
  const double split = 2 + 2 * 2 * (2.0 / 4) + 2 + 3 * 2 * f / h;  // 21
  CHECK(split == 21);
  CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::none) == s * b * h * (8 + split + 2 * a * s / h));
  CHECK(activation_bytes_per_layer(m, 2, 2, Recompute::none) == s * b * h * (8 + split / 2 + 2 * a * s / (h * 2)));
  CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::selective) == s * b * h * (8 + split));
  CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::full) == 2 * s * b * h);
  CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::none, 2.0, Attention::flash) ==
        s * b * h * (8 + split) + 2 * a * s * b * 2);
  // fp32 values: twice the 16-bit bytes.
  CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::selective, 4.0) == 2 * s * b * h * (8 + split));
  // A GPT block keeps GPT-2's 24 (existing formula) whatever the new fields' defaults.
  ModelShape g = m;
  g = with_family(g, Family::gpt);
  g.kv_heads = 0, g.ffn_hidden = 0;
  CHECK(activation_bytes_per_layer(g, 2, 1, Recompute::selective) == s * b * h * (10 + 24));
  // The busiest rank's whole activations: layers + the backward working set
  // s*b*h*(3 + (2 + 2 KV/heads + 2 KV/heads + 3F/h)/t) values (the block output, q/k/v and their
  // gradient, SwiGLU's three F-wide gradients) + the output layer (4sbh + sbV values), one GPU.
  Layout l;
  l.micro_batch = 2;
  l.precision = Precision::bf16;
  const double per = activation_bytes_per_layer(m, 2, 1, Recompute::none);
  CHECK(activation_bytes(m, l) ==
        doctest::Approx(2 * per + s * b * h * (3 + 2 + 2 * 0.5 + 2 * 0.5 + 3 * f / h) * 2 + 4 * s * b * h + 2 * s * b * 32));
  // K and V repeated to every query head (dl-train's llama): Q, K and V all 2 each, and the
  // packed q/k/v gradient as wide (1 + 2 instead of 1 + 2 KV/heads).
  ModelShape repeated = m;
  repeated.kv_repeated = true;
  CHECK(activation_bytes_per_layer(repeated, 2, 2, Recompute::selective) == s * b * h * (8 + (split + 2) / 2));
  CHECK(activation_bytes(repeated, l) ==
        doctest::Approx(2 * activation_bytes_per_layer(repeated, 2, 1, Recompute::none) +
                        s * b * h * (3 + 2 + 2 + 2 * 0.5 + 3 * f / h) * 2 + 4 * s * b * h + 2 * s * b * 32));
}

TEST_CASE("parameters per rank: grouped K/V and SwiGLU split t ways, RMSNorms replicated") {
  const ModelShape m = tiny_llama();
  // Per block: q and o 16 x 16 each, k and v 16 x 8 each, gate, up and down 16 x 40 each: 2688
  // split; two RMSNorms 2 x 16 replicated. No biases.
  CHECK(block_param_count(m) == 2688 + 32);
  // Embedding 32 x 16 and the untied head 32 x 16 (vocabulary-parallel), final RMSNorm 16.
  CHECK(m.params == 2 * 2720 + 2 * 32 * 16 + 16);
  CHECK(params_per_rank(m, 1, 1) == m.params);
  CHECK(params_per_rank(m, 2, 1) == 2 * (2688 / 2 + 32) + 2 * 16 * 16 + 16);
  // pp=2: the first stage holds a block and the embedding; the last a block, the final norm and
  // the untied head.
  CHECK(params_per_rank(m, 1, 2) == 2720 + 32 * 16 + 16);
  // ZeRO-3 gathers a layer of this shape.
  Layout l;
  l.gpus = l.dp = 2;
  l.zero = 3;
  CHECK(memory_per_rank(m, l).comm_buffers == doctest::Approx(2 * 25e6 + 2 * 2720 * 2));
}

TEST_CASE("FLOPs per token: 6N with the GQA and SwiGLU count, attention over all query heads") {
  const ModelShape m = llama3_8b();
  CHECK(flops_per_token(m) == 6 * 8030261248.0 + 12.0 * 32 * 4096 * 8192);
  CHECK(flops_per_token(m, FlopFormula::llmc) == 6 * 8030261248.0 + 6.0 * 32 * 4096 * 8192);
}

TEST_CASE("tensor parallelism holds whole K/V groups: tp must divide the K/V heads") {
  const ModelShape m = tinyllama();  // 32 query heads, 4 K/V heads
  Layout l;
  l.gpus = 8, l.tp = 4;
  l.dp = 2;
  CHECK(check_layout(m, l, 0).empty());
  l.tp = 8, l.dp = 1;
  const std::string why = check_layout(m, l, 0);
  CHECK(why.find("does not divide the 4 K/V heads") != std::string::npos);
}

TEST_CASE("--hf-config: Llama, Mistral, Qwen2 and GPT-2 config.json; other models and fields refused by name") {
  dl::test::TempDir dir("plan-hf");
  auto write = [&](const std::string& name, const std::string& text) {
    dl::test::write_file(dir / name, text);
    return (dir / name).string();
  };
  const ModelShape l3 = model_from_hf_config(write("llama3.json", hf_json("LlamaForCausalLM", "llama", kLlama3)));
  CHECK(l3.params == 8030261248.0);
  CHECK(l3.seq == 8192);
  CHECK(l3.kv() == 8);
  CHECK_FALSE(l3.tied_head);
  CHECK(model_from_hf_config(dir / "llama3.json", 4096).seq == 4096);
  // TinyLlama (no tie_word_embeddings key: LlamaConfig's default, untied).
  const ModelShape tiny = model_from_hf_config(write(
      "tiny.json", hf_json("LlamaForCausalLM", "llama",
                           "\"hidden_size\": 2048, \"intermediate_size\": 5632, \"num_hidden_layers\": 22, "
                           "\"num_attention_heads\": 32, \"num_key_value_heads\": 4, \"vocab_size\": 32000, "
                           "\"max_position_embeddings\": 2048")));
  CHECK(tiny.params == 1100048384.0);
  // Mistral 7B v0.3 (sliding_window null): 7,248,023,552.
  const std::string mistral =
      "\"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
      "\"num_key_value_heads\": 8, \"vocab_size\": 32768, \"max_position_embeddings\": 32768, \"tie_word_embeddings\": false";
  CHECK(model_from_hf_config(write("mistral.json", hf_json("MistralForCausalLM", "mistral", mistral + ", \"sliding_window\": null")))
            .params == 7248023552.0);
  // Qwen2.5-0.5B: biases on q, k and v, a tied head: 494,032,768; sliding_window written but off.
  const ModelShape qwen = model_from_hf_config(write(
      "qwen.json", hf_json("Qwen2ForCausalLM", "qwen2",
                           "\"hidden_size\": 896, \"intermediate_size\": 4864, \"num_hidden_layers\": 24, "
                           "\"num_attention_heads\": 14, \"num_key_value_heads\": 2, \"vocab_size\": 151936, "
                           "\"max_position_embeddings\": 32768, \"tie_word_embeddings\": true, "
                           "\"use_sliding_window\": false, \"sliding_window\": 32768")));
  CHECK(qwen.params == 494032768.0);
  // GPT-2 small.
  CHECK(model_from_hf_config(write("gpt2.json", hf_json("GPT2LMHeadModel", "gpt2",
                                                        "\"n_embd\": 768, \"n_layer\": 12, \"n_head\": 12, "
                                                        "\"n_positions\": 1024, \"vocab_size\": 50257")))
            .params == 124439808.0);

  auto refusal = [&](const std::string& name, const std::string& text) {
    try {
      model_from_hf_config(write(name, text));
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
      return std::string(e.what());
    }
    FAIL("expected a refusal of ", name);
    return std::string();
  };
  CHECK(refusal("gemma.json", hf_json("GemmaForCausalLM", "gemma", mistral)).find("architectures [\"GemmaForCausalLM\"] is not a model") !=
        std::string::npos);
  CHECK(refusal("moe.json", hf_json("LlamaForCausalLM", "llama", kLlama3 + ", \"num_local_experts\": 8"))
            .find("\"num_local_experts\"") != std::string::npos);
  CHECK(refusal("swa.json", hf_json("MistralForCausalLM", "mistral", mistral + ", \"sliding_window\": 4096"))
            .find("\"sliding_window\"") != std::string::npos);
  CHECK(refusal("qswa.json", hf_json("Qwen2ForCausalLM", "qwen2", mistral + ", \"use_sliding_window\": true"))
            .find("\"use_sliding_window\"") != std::string::npos);
  CHECK(refusal("nokv.json", hf_json("LlamaForCausalLM", "llama", "\"hidden_size\": 4096")).find("\"num_hidden_layers\"") !=
        std::string::npos);
  CHECK(refusal("hd.json", hf_json("MistralForCausalLM", "mistral", mistral + ", \"head_dim\": 160")).find("\"head_dim\"") !=
        std::string::npos);
  CHECK(refusal("gelu.json", hf_json("LlamaForCausalLM", "llama", mistral + ", \"hidden_act\": \"gelu\"")).find("\"hidden_act\"") !=
        std::string::npos);
  // The flags' entry point: --hf-config replaces --params and the hints.
  ArchHints a;
  a.hf_config = (dir / "llama3.json").string();
  CHECK(model_from_hints(std::nullopt, 0, 0, 0, 2048, 0, a).seq == 2048);
  CHECK_THROWS_AS(model_from_hints(8e9, 0, 0, 0, 0, 0, a), Error);
  CHECK_THROWS_AS(model_from_hints(std::nullopt, 32, 0, 0, 0, 0, a), Error);
}

TEST_CASE("model sizes beyond any model are refused before they are counted (fuzz_hf_config found 4 x n_embd overflow)") {
  dl::test::TempDir dir("plan-huge");
  auto usage_error = [](auto&& make) {
    try {
      make();
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
      return std::string(e.what());
    }
    FAIL("expected a usage error");
    return std::string();
  };
  // config.json: the width fuzz_hf_config found (4 x n_embd overflowed int64 in ModelShape::ffn).
  dl::test::write_file(dir / "wide.json", hf_json("GPT2LMHeadModel", "gpt2",
                                                   "\"n_embd\": 6917529027641081856, \"n_layer\": 2, \"n_head\": 1, "
                                                   "\"n_positions\": 8, \"vocab_size\": 10"));
  CHECK(usage_error([&] { model_from_hf_config(dir / "wide.json"); }).find("\"n_embd\" must be an integer from 1 to 1073741824") !=
        std::string::npos);
  // Each dimension in range, the product beyond 10^15 parameters.
  dl::test::write_file(dir / "deep.json", hf_json("LlamaForCausalLM", "llama",
                                                   "\"hidden_size\": 1000000, \"intermediate_size\": 100, "
                                                   "\"num_hidden_layers\": 1000000, \"num_attention_heads\": 1, "
                                                   "\"vocab_size\": 10, \"max_position_embeddings\": 8"));
  CHECK(usage_error([&] { model_from_hf_config(dir / "deep.json"); }).find("more than the 1e+15") != std::string::npos);
  CHECK(usage_error([&] { model_from_hf_config(dir / "deep.json", int64_t{1} << 40); }).find("seq 1099511627776: at most") != std::string::npos);
  // Flags: each hint bounded, and --params.
  CHECK(usage_error([] { model_from_params(7e9, 32, 6917529027641081856, 1, 0, 0); }).find("hidden 6917529027641081856: at most") !=
        std::string::npos);
  CHECK(usage_error([] { model_from_params(7e19, 32, 4096, 32, 0, 0); }).find("params 7e+19: more than") != std::string::npos);
  ArchHints moe;
  moe.experts = int64_t{1} << 40;
  moe.active_experts = 2;
  CHECK(usage_error([&] { model_from_hints(7e9, 32, 4096, 32, 0, 0, moe); }).find("experts 1099511627776: at most") != std::string::npos);
  // A dl-train config (the loader, which dl-train shares): every key within its int32 range, the
  // model beyond 10^15 parameters.
  CHECK(usage_error([] { parse_config("[model]\ntype = \"llama\"\nn_layer = 32\nn_embd = 20000000\nn_head = 1\n", "big.toml", "."); })
            .find("more than the 1e+15") != std::string::npos);
  // The largest published models stay well inside: DeepSeek-V3's 671B.
  CHECK(kMaxModelParameters > 671e9 * 100);
}

TEST_CASE("a dl-train config of model.type llama: the shipped Llama 3 8B and TinyLlama configs count exactly") {
  CHECK(load_plan_config(dl::test::source_path("configs/llama3-8b.toml").string(), {}).model.params == 8030261248.0);
  const PlanConfig tiny = load_plan_config(dl::test::source_path("configs/tinyllama-1.1b.toml").string(), {});
  CHECK(tiny.model.params == 1100048384.0);
  CHECK(tiny.model.kv() == 4);
  CHECK(tiny.model.seq == 2048);
  CHECK(tiny.model.name == "tinyllama-1.1b.toml");
  CHECK(tiny.config.train.precision == Precision::bf16);
  // --set reaches the llama keys and the shared ones alike: 32 K/V heads add 22 x 2 x 2048 x 1792.
  const PlanConfig mha = load_plan_config(dl::test::source_path("configs/tinyllama-1.1b.toml").string(),
                                          {"model.n_kv_head=32", "train.batch_size=2"});
  CHECK(mha.model.params == 1100048384.0 + 22.0 * 2 * 2048 * (2048 - 256));
  CHECK(mha.config.train.batch_size == 2);
  // A GPT config loads as before.
  CHECK(load_plan_config(dl::test::source_path("configs/gpt2-124m.toml").string(), {}).model.params == 124439808.0);

  // The shared config loader reads it: errors name file:line and the key as for any config.
  dl::test::TempDir dir("plan-llama-toml");
  dl::test::write_file(dir / "l.toml",
                       "[model]\ntype = \"llama\"\nn_kv_head = 2\nrope_scaling = \"llama3\"\n"
                       "n_layer = 2\nn_head = 4\nn_embd = 64\nffn_hidden = 96\nblock_size = 32\nvocab_size = 256\n"
                       "tie_embeddings = true\nrms_norm_eps = 1e-6\nrope_theta = 10000.0\nn_layr = 3\n"
                       "[data]\nsource = \"synthetic:addition\"\n");
  try {
    load_plan_config((dir / "l.toml").string(), {});
    FAIL("expected the unknown key to be refused");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("l.toml:14") != std::string::npos);
    CHECK(std::string(e.what()).find("n_layr") != std::string::npos);
  }
  dl::test::write_file(dir / "ok.toml",
                       "[model]\ntype = \"llama\"\nn_kv_head = 2\nn_layer = 2\nn_head = 4\nn_embd = 64\nffn_hidden = 96\n"
                       "block_size = 32\nvocab_size = 256\ntie_embeddings = true\nrope_scaling = \"llama3\"\n"
                       "rope_factor = 8.0\n[data]\nsource = \"synthetic:addition\"\n");
  const ModelShape ok = load_plan_config((dir / "ok.toml").string(), {}).model;
  // 2 x (2 x 64^2 + 2 x 64 x 32 + 3 x 64 x 96 + 2 x 64) + 256 x 64 (tied) + 64.
  CHECK(ok.params == 2 * (2 * 64.0 * 64 + 2 * 64 * 32 + 3 * 64 * 96 + 2 * 64) + 256 * 64 + 64);
  try {
    load_plan_config((dir / "ok.toml").string(), {"model.n_kv_head=3"});
    FAIL("expected n_kv_head 3 to be refused");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("model.n_kv_head (3) must divide model.n_head") != std::string::npos);
  }
  // A key of the schema the old path did not know is read, not refused (rope_low_freq_factor).
  CHECK(load_plan_config((dir / "ok.toml").string(), {"model.rope_low_freq_factor=2"}).config.model.rope_low_freq_factor == 2);
}

TEST_CASE("model_from_config of a llama: llama_param_count's count and the llama block, for GQA, MQA, MHA, tied, untied") {
  struct Shape {
    int64_t layers, heads, kv, embd, ffn, vocab;
    bool tied, qkv_bias;
  };
  // kv 0 and ffn 0 are the config's defaults: n_head and 4 x n_embd (not Meta's SwiGLU width).
  // The last two carry Qwen2's q/k/v biases.
  const Shape shapes[] = {{2, 4, 2, 32, 96, 256, false, false}, {2, 4, 2, 32, 96, 256, true, false},
                          {3, 6, 1, 48, 128, 100, false, false}, {1, 8, 1, 64, 0, 512, true, false},
                          {4, 6, 0, 192, 512, 256, false, false}, {2, 4, 4, 16, 40, 32, true, false},
                          {2, 4, 2, 32, 96, 256, false, true},   {3, 6, 1, 48, 128, 100, true, true}};
  for (const auto& sh : shapes) {
    Config c;
    c.model.type = ModelType::llama;
    c.model.n_layer = sh.layers, c.model.n_head = sh.heads, c.model.n_kv_head = sh.kv, c.model.n_embd = sh.embd;
    c.model.ffn_hidden = sh.ffn, c.model.vocab_size = sh.vocab, c.model.block_size = 16, c.model.tie_embeddings = sh.tied;
    c.model.qkv_bias = sh.qkv_bias;
    CAPTURE(sh.heads);
    CAPTURE(sh.qkv_bias);
    CAPTURE(sh.kv);
    CAPTURE(sh.ffn);
    CAPTURE(sh.tied);
    const ModelShape m = model_from_config(c);
    const LlamaConfig lc = llama_config_from(c.model);
    CHECK(m.params == static_cast<double>(llama_param_count(lc)));
    // The shape is the block dl-train builds, so its own count agrees and the activations use it.
    CHECK(m.family == Family::llama);
    CHECK(m.mlp == MlpKind::swiglu);
    CHECK(m.norm == NormKind::rmsnorm);
    CHECK_FALSE(m.learned_positions);
    CHECK_FALSE(m.dropout);
    CHECK(m.kv() == lc.n_kv_head);
    CHECK(m.ffn() == lc.ffn_hidden);
    CHECK(m.tied_head == sh.tied);
    CHECK(m.qkv_bias == sh.qkv_bias);
    CHECK_FALSE(m.proj_bias);
    CHECK(transformer_param_count(m) == m.params);
    ModelShape by_hand = with_family(ModelShape{}, Family::llama);
    by_hand.n_layer = sh.layers, by_hand.hidden = sh.embd, by_hand.heads = sh.heads, by_hand.kv_heads = lc.n_kv_head;
    by_hand.ffn_hidden = lc.ffn_hidden, by_hand.vocab = sh.vocab, by_hand.seq = 16, by_hand.tied_head = sh.tied;
    by_hand.kv_repeated = true;  // dl-train's attention op takes K and V repeated per query head
    CHECK(m.kv_repeated);
    CHECK(activation_bytes_per_layer(m, 2, 1, Recompute::none) == activation_bytes_per_layer(by_hand, 2, 1, Recompute::none));
  }
}

TEST_CASE("a published run with a Llama block: run_model and run_mfu use its real K/V heads and SwiGLU width") {
  PublishedRun r;
  r.name = "Llama 3 8B shape";
  r.gpu = "H100-SXM";
  r.gpus = 8;
  r.params = 8e9;
  r.layers = 32, r.hidden = 4096, r.heads = 32, r.seq = 8192, r.vocab = 128256;
  r.arch = llama3_arch();
  r.tokens = 1e9;
  r.minutes = 60;
  const ModelShape m = run_model(r);
  CHECK(m.params == 8030261248.0);
  CHECK(m.kv() == 8);
  // MFU counts the shape's own FLOPs per token over the run's bf16 peak.
  CHECK(run_mfu(r) == doctest::Approx(1e9 * flops_per_token(m) / (3600.0 * 8 * *gpu_spec("H100-SXM")->peak_flops(MathPrecision::bf16))));
  // Without the block, GPT-2's multi-head hints would plan 6.97e9 + the embeddings: another count.
  r.arch = {};
  CHECK(run_model(r).params != 8030261248.0);
}
