// The whole model against PyTorch (Debian's python3-torch, CPU, fp32): the same initial weights,
// read by an independent safetensors reader, and the same batches give the same loss and
// gradients, and the same losses over 10 AdamW steps with clipping.
#include <doctest/doctest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "dl/core/rng.hpp"
#include "dl/io/safetensors.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/llama.hpp"
#include "dl/nn/mlp.hpp"
#include "dl/dist/comm.hpp"
#include "dl/optim/optimizer.hpp"
#include "dl/parallel/zero.hpp"
#include "support/numeric.hpp"
#include "support/support.hpp"
#include "support/torch_parity.hpp"

using namespace dl;
using namespace dl::test;
using nlohmann::json;


namespace {

// kParitySteps batches of random tokens [4, 32] below `vocab`, every 7th target ignored (as the
// synthetic tasks do).
std::vector<Batch> token_batches(const std::string& name, int vocab) {
  std::vector<Batch> batches;
  for (int k = 0; k < kParitySteps; ++k) {
    Batch b{Tensor::empty({4, 32}, DType::i32), Tensor::empty({4, 32}, DType::i32)};
    uint64_t key = stream_key(7, "parity/" + name + "/" + std::to_string(k));
    for (int64_t i = 0; i < 128; ++i) {
      b.inputs.data<int32_t>()[i] = static_cast<int32_t>(below_at(key, i, vocab));
      b.targets.data<int32_t>()[i] = i % 7 == 3 ? -1 : static_cast<int32_t>(below_at(key, i, vocab, 1));
    }
    batches.push_back(std::move(b));
  }
  return batches;
}

void check_parity(const json& r) {
  INFO(r.dump());
  CHECK(r["loss_rel"].get<double>() < 1e-5);
  CHECK(r["grad_rel_max"].get<double>() < 1e-5);
  CHECK(r["steps_rel_max"].get<double>() < 1e-5);
}

// Sets Qwen2's q/k/v biases (which start at zero) away from it, so the first forward adds them.
void biases_off_zero(ParamSet& P) {
  int n = 0;
  for (size_t i = 0; i < P.size(); ++i) {
    if (P.info(i).name.find("_proj.bias") == std::string::npos) continue;
    ++n;
    Tensor& b = P.value(i);
    for (int64_t e = 0; e < b.numel(); ++e) set(b, e, 0.1 * std::cos(0.7 * double(e) + double(i)));
  }
  REQUIRE(n > 0);
}

}  // namespace

TEST_CASE("GPT loss, gradients and 10 AdamW steps match PyTorch") {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.block_size = 32;
  c.vocab_size = 256;
  GptModel model(c, cpu_backend());
  json spec{{"model", "gpt"}, {"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}};
  check_parity(run_torch_parity(model, cpu_backend(), token_batches("gpt", 256), spec));
}

// Against tests/scripts/torch_llama.py: GQA 4:2 untied, MQA 4:1 tied with llama3 rope scaling,
// GQA 4:2 tied with linear scaling; Qwen2's q/k/v biases (F.linear's bias in the reference) GQA
// 4:2 untied and MQA 4:1 tied.
TEST_CASE("llama loss, gradients and 10 AdamW steps match PyTorch: GQA and MQA, tied and untied, rope scaling, "
          "q/k/v biases") {
  struct Variant {
    int kv;
    bool tied;
    RopeScaling scaling;
    bool qkv_bias;
  };
  for (Variant v : {Variant{2, false, RopeScaling::none, false}, Variant{1, true, RopeScaling::llama3, false},
                    Variant{2, true, RopeScaling::linear, false}, Variant{2, false, RopeScaling::none, true},
                    Variant{1, true, RopeScaling::none, true}}) {
    CAPTURE(v.kv);
    CAPTURE(v.tied);
    CAPTURE(v.qkv_bias);
    LlamaConfig c;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = v.kv;
    c.n_embd = 64;
    c.ffn_hidden = 96;
    c.block_size = 32;
    c.vocab_size = 256;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 500.0;  // angles that wrap within 32 positions, so every frequency matters
    c.tie_embeddings = v.tied;
    c.rope_scaling = v.scaling;
    c.rope_factor = 4;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_position = 64;  // wavelengths of 2pi .. 2pi 500^(7/8) cross all three llama3 bands
    c.qkv_bias = v.qkv_bias;
    LlamaModel model(c, cpu_backend());
    json scaling = nullptr;
    if (v.scaling != RopeScaling::none)
      scaling = {{"rope_type", std::string(choice_name(v.scaling))}, {"factor", c.rope_factor},
                 {"low_freq_factor", c.rope_low_freq_factor}, {"high_freq_factor", c.rope_high_freq_factor},
                 {"original_max_position_embeddings", c.rope_original_max_position}};
    json spec{{"model", "llama"},          {"n_layer", c.n_layer},         {"n_head", c.n_head},
              {"n_kv_head", c.n_kv_head},  {"n_embd", c.n_embd},           {"rms_norm_eps", c.rms_norm_eps},
              {"rope_theta", c.rope_theta}, {"rope_scaling", scaling},     {"tie_word_embeddings", c.tie_embeddings},
              {"qkv_bias", c.qkv_bias}};
    check_parity(run_torch_parity(model, cpu_backend(), token_batches("llama", 256), spec,
                                  v.qkv_bias ? biases_off_zero : std::function<void(ParamSet&)>()));
  }
}

TEST_CASE("MLP loss, gradients and 10 AdamW steps match PyTorch") {
  for (std::string act : {"relu", "gelu"}) {
    CAPTURE(act);
    MlpConfig c;
    c.n_inputs = 10;
    c.hidden = {32, 16};
    c.n_classes = 5;
    c.activation = choice_from_name<Activation>(act);
    MlpModel model(c, cpu_backend());
    std::vector<Batch> batches;
    for (int k = 0; k < kParitySteps; ++k) {
      Batch b{random_tensor({24, 10}, DType::f32, 500 + k, -2, 2), Tensor::empty({24}, DType::i32)};
      for (int64_t i = 0; i < 24; ++i)
        b.targets.data<int32_t>()[i] = static_cast<int32_t>(below_at(stream_key(9, "parity/mlp"), k * 24 + i, 5));
      batches.push_back(std::move(b));
    }
    check_parity(run_torch_parity(model, cpu_backend(), batches, json{{"model", "mlp"}, {"activation", act}}));
  }
}
