// Whole-model gradients against finite differences in double precision, on sampled parameter
// elements, and the parameter counts from REFERENCE.md; the llama's names, published parameter
// counts and rotary frequencies.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "dl/nn/gpt.hpp"
#include "dl/nn/llama.hpp"
#include "dl/nn/mlp.hpp"
#include "support/numeric.hpp"

using namespace dl;
using namespace dl::test;

namespace {
// Checks dLoss/dparam for every parameter tensor on up to `per_param` elements.
void check_model_grads(Model& model, const Batch& batch, int per_param, double tol) {
  ParamSet& P = model.params();
  auto loss = [&] {
    ForwardStats st = model.forward(batch);
    return st.loss_sum / st.targets;
  };
  ForwardStats st = model.forward(batch);
  P.zero_grad();
  model.backward(1.0 / st.targets);
  for (size_t i = 0; i < P.size(); ++i) {
    Tensor& v = P.value(i);
    const Tensor& g = P.grad(i);
    int64_t n = v.numel();
    int64_t stride = std::max<int64_t>(1, n / per_param);
    double num2 = 0, den2 = 0;
    for (int64_t e = (i * 7) % stride; e < n; e += stride) {
      double orig = get(v, e), h = 1e-5;
      set(v, e, orig + h);
      double lp = loss();
      set(v, e, orig - h);
      double lm = loss();
      set(v, e, orig);
      double fd = (lp - lm) / (2 * h);
      num2 += (get(g, e) - fd) * (get(g, e) - fd);
      den2 += fd * fd;
    }
    CAPTURE(P.info(i).name);
    CHECK(std::sqrt(num2) <= tol * std::max(std::sqrt(den2), 1e-12));
  }
}

// A llama small enough for finite differences: 2 blocks of 4 query heads of size 4.
LlamaConfig tiny(int n_kv_head, bool tied) {
  LlamaConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = n_kv_head;
  c.n_embd = 16;
  c.ffn_hidden = 12;
  c.block_size = 6;
  c.vocab_size = 11;
  c.init_std = 0.3;  // large enough that every path carries signal
  c.tie_embeddings = tied;
  return c;
}

// Two rows of 5 tokens below 11, one target ignored.
Batch tiny_batch() {
  Batch b;
  b.inputs = Tensor::empty({2, 5}, DType::i32);
  b.targets = Tensor::empty({2, 5}, DType::i32);
  for (int i = 0; i < 10; ++i) {
    b.inputs.data<int32_t>()[i] = (i * 3 + 1) % 11;
    b.targets.data<int32_t>()[i] = i == 4 ? -1 : (i * 5 + 2) % 11;
  }
  return b;
}

}  // namespace

TEST_CASE("GPT-2 124M parameter count matches REFERENCE.md") {
  GptConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  c.block_size = 1024;
  c.vocab_size = 50257;
  CHECK(gpt_param_count(c) == 124439808);
  c.vocab_size = 50304;
  CHECK(gpt_param_count(c) == 124475904);
}

TEST_CASE("GPT gradients match finite differences (f64)") {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 6;
  c.vocab_size = 11;
  c.init_std = 0.3;  // large enough that every path carries signal
  GptModel model(c, cpu_backend(), DType::f64);
  model.params().initialize(7);
  check_model_grads(model, tiny_batch(), 12, 1e-6);
}

TEST_CASE("llama gradients match finite differences (f64): GQA, MQA, tied and untied, rope scaling") {
  struct Shape_ {
    int kv;
    bool tied;
    RopeScaling scaling;
  };
  for (Shape_ s : {Shape_{2, false, RopeScaling::none}, Shape_{1, true, RopeScaling::llama3},
                   Shape_{4, false, RopeScaling::linear}}) {
    CAPTURE(s.kv);
    CAPTURE(s.tied);
    LlamaConfig c = tiny(s.kv, s.tied);
    c.rope_scaling = s.scaling;
    c.rope_factor = 2;
    c.rope_original_max_position = 8;  // so llama3's three bands all occur at head size 4
    c.rope_theta = 50;
    LlamaModel model(c, cpu_backend(), DType::f64);
    model.params().initialize(7);
    // Norm weights away from 1, so their gradients and the scaling by them are both exercised.
    for (size_t i = 0; i < model.params().size(); ++i)
      if (model.params().info(i).init == ParamInit::ones) {
        Tensor& w = model.params().value(i);
        for (int64_t e = 0; e < w.numel(); ++e) set(w, e, 0.8 + 0.03 * double(e % 13));
      }
    check_model_grads(model, tiny_batch(), 12, 1e-6);
  }
}

// Qwen2's q/k/v biases, set away from 0 so the forward's bias add is exercised too.
TEST_CASE("llama q/k/v bias gradients match finite differences (f64): GQA untied, MQA tied") {
  for (int kv : {2, 1}) {
    CAPTURE(kv);
    LlamaConfig c = tiny(kv, kv == 1);
    c.qkv_bias = true;
    LlamaModel model(c, cpu_backend(), DType::f64);
    model.params().initialize(7);
    int biases = 0;
    for (size_t i = 0; i < model.params().size(); ++i) {
      const std::string& name = model.params().info(i).name;
      if (name.size() < 5 || name.compare(name.size() - 5, 5, ".bias") != 0) continue;
      ++biases;
      Tensor& b = model.params().value(i);
      for (int64_t e = 0; e < b.numel(); ++e) set(b, e, 0.2 * std::sin(double(e) + double(i)));
    }
    CHECK(biases == 3 * c.n_layer);
    check_model_grads(model, tiny_batch(), 12, 1e-6);
  }
}

TEST_CASE("MLP gradients match finite differences (f64), relu and gelu") {
  for (std::string act : {"relu", "gelu"}) {
    CAPTURE(act);
    MlpConfig c;
    c.n_inputs = 3;
    c.hidden = {7, 5};
    c.n_classes = 4;
    c.activation = choice_from_name<Activation>(act);
    MlpModel model(c, cpu_backend(), DType::f64);
    model.params().initialize(3);
    // Non-zero biases so ReLU units sit away from their kink.
    for (size_t i = 1; i < model.params().size(); i += 2) {
      Tensor& bias = model.params().value(i);
      for (int64_t e = 0; e < bias.numel(); ++e) set(bias, e, 0.1 + 0.05 * e);
    }
    Batch b;
    b.inputs = random_tensor({6, 3}, DType::f64, 5);
    b.targets = Tensor::empty({6}, DType::i32);
    for (int i = 0; i < 6; ++i) b.targets.data<int32_t>()[i] = i % 4;
    CHECK(model.params().numel() == mlp_param_count(c));
    CHECK(mlp_param_count(c) == 3 * 7 + 7 + 7 * 5 + 5 + 5 * 4 + 4);
    check_model_grads(model, b, 20, 1e-6);
  }
}

TEST_CASE("initial weights are a pure function of (seed, name, index)") {
  GptConfig c;
  c.n_layer = 2;
  c.n_embd = 16;
  c.n_head = 2;
  c.block_size = 8;
  c.vocab_size = 32;
  GptModel a(c, cpu_backend()), b(c, cpu_backend());
  a.params().initialize(42);
  b.params().initialize(42);
  CHECK(max_abs_diff(a.params().flat_values(), b.params().flat_values()) == 0.0);
  // The same parameter in a deeper model gets the same values: keys are names, not offsets.
  GptConfig deeper = c;
  deeper.n_layer = 3;
  GptModel d(deeper, cpu_backend());
  d.params().initialize(42);
  const std::string name = "h.1.mlp.c_fc.weight";
  CHECK(max_abs_diff(a.params().value(a.params().index(name)), d.params().value(d.params().index(name))) == 0.0);
  // LayerNorm weights start at 1, biases at 0, c_proj at std 0.02/sqrt(2L).
  CHECK(get(a.params().value(a.params().index("h.0.ln_1.weight")), 3) == 1.0);
  CHECK(get(a.params().value(a.params().index("h.0.attn.c_attn.bias")), 3) == 0.0);
  GptModel e(c, cpu_backend());
  e.params().initialize(43);
  CHECK(max_abs_diff(a.params().flat_values(), e.params().flat_values()) > 0.0);
}

TEST_CASE("llama parameter counts match the published TinyLlama 1.1B and Llama 3 8B") {
  LlamaConfig t;  // TinyLlama-1.1B: 22 layers, 2048 wide, 32 heads over 4 K/V heads, MLP 5632
  t.n_layer = 22, t.n_embd = 2048, t.n_head = 32, t.n_kv_head = 4, t.ffn_hidden = 5632, t.vocab_size = 32000;
  CHECK(llama_param_count(t) == 1100048384);
  LlamaConfig l;  // Meta-Llama-3-8B
  l.n_layer = 32, l.n_embd = 4096, l.n_head = 32, l.n_kv_head = 8, l.ffn_hidden = 14336, l.vocab_size = 128256;
  CHECK(llama_param_count(l) == 8030261248);
}

TEST_CASE("llama parameters carry LlamaForCausalLM's names and nn.Linear's [out, in] shapes") {
  LlamaConfig c = tiny(2, false);
  const ParamSet p = LlamaModel::declarations(c, GptParallel{});
  CHECK(p.numel() == llama_param_count(c));
  CHECK(p.info(p.index("model.embed_tokens.weight")).shape == Shape{11, 16});
  CHECK(p.info(p.index("model.layers.1.self_attn.q_proj.weight")).shape == Shape{16, 16});
  CHECK(p.info(p.index("model.layers.1.self_attn.k_proj.weight")).shape == Shape{8, 16});  // 2 K/V heads of 4
  CHECK(p.info(p.index("model.layers.1.self_attn.v_proj.weight")).shape == Shape{8, 16});
  CHECK(p.info(p.index("model.layers.0.mlp.gate_proj.weight")).shape == Shape{12, 16});
  CHECK(p.info(p.index("model.layers.0.mlp.down_proj.weight")).shape == Shape{16, 12});
  CHECK(p.info(p.index("model.norm.weight")).shape == Shape{16});
  CHECK(p.info(p.index("lm_head.weight")).shape == Shape{11, 16});
  CHECK_FALSE(LlamaModel::declarations(tiny(2, true), GptParallel{}).contains("lm_head.weight"));
}

TEST_CASE("llama q/k/v biases carry Qwen2ForCausalLM's names, and none on o_proj or the MLP") {
  LlamaConfig c = tiny(2, false);
  c.qkv_bias = true;
  const ParamSet p = LlamaModel::declarations(c, GptParallel{});
  CHECK(p.numel() == llama_param_count(c));
  CHECK(llama_param_count(c) == llama_param_count(tiny(2, false)) + 2 * (16 + 8 + 8));
  CHECK(p.info(p.index("model.layers.1.self_attn.q_proj.bias")).shape == Shape{16});
  CHECK(p.info(p.index("model.layers.1.self_attn.k_proj.bias")).shape == Shape{8});
  CHECK(p.info(p.index("model.layers.0.self_attn.v_proj.bias")).shape == Shape{8});
  CHECK_FALSE(p.contains("model.layers.0.self_attn.o_proj.bias"));
  CHECK_FALSE(p.contains("model.layers.0.mlp.up_proj.bias"));
  // Qwen2.5-0.5B: 24 layers, 896 wide, 14 heads over 2 K/V heads, MLP 4864, tied, 151936 ids.
  LlamaConfig q;
  q.n_layer = 24, q.n_embd = 896, q.n_head = 14, q.n_kv_head = 2, q.ffn_hidden = 4864, q.vocab_size = 151936;
  q.tie_embeddings = true, q.qkv_bias = true;
  CHECK(llama_param_count(q) == 494032768);
  // Tensor parallel: each rank holds its heads' rows of the biases, as of the weights.
  GptParallel par;
  par.tp_size = 2;
  par.tp_rank = 1;
  const ParamSet r1 = LlamaModel::declarations(c, par);
  const ParamInfo& bk = r1.info(r1.index("model.layers.0.self_attn.k_proj.bias"));
  CHECK(bk.shape == Shape{4});
  CHECK(bk.global_shape == Shape{8});
  CHECK(bk.slice.dim == 0);
  REQUIRE(bk.slice.segments.size() == 1);
  CHECK(bk.slice.segments[0] == std::pair<int64_t, int64_t>{4, 4});
}

TEST_CASE("llama rotary frequencies: theta, linear and llama3 scaling as transformers computes them") {
  LlamaConfig c;
  c.n_embd = 64 * 4, c.n_head = 4;  // head size 64
  c.rope_theta = 500000.0;
  const std::vector<float> plain = llama_inv_freq(c);
  REQUIRE(plain.size() == 32);
  CHECK(plain[0] == 1.0f);
  CHECK(plain[16] == doctest::Approx(std::pow(500000.0, -0.5)).epsilon(1e-6));
  c.rope_scaling = RopeScaling::linear;
  c.rope_factor = 4;
  CHECK(llama_inv_freq(c)[5] == doctest::Approx(plain[5] / 4).epsilon(1e-6));
  // Llama 3.1: factor 8, low 1, high 4, original 8192. Wavelengths below 8192/4 keep their
  // frequency, above 8192 are divided by 8, in between blend.
  c.rope_scaling = RopeScaling::llama3;
  c.rope_factor = 8, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4, c.rope_original_max_position = 8192;
  const std::vector<float> scaled = llama_inv_freq(c);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 2048) kept += scaled[i] == plain[i];
    else if (wavelen > 8192) divided += scaled[i] == doctest::Approx(plain[i] / 8).epsilon(1e-6);
    else blended += scaled[i] < plain[i] && scaled[i] > plain[i] / 8;
  }
  CHECK(kept + divided + blended == 32);
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(blended > 0);
}

TEST_CASE("llama refuses shapes it cannot split, by key name") {
  GptParallel par;
  par.tp_size = 2;
  CHECK_THROWS_WITH(LlamaModel::declarations(tiny(1, false), par),
                    doctest::Contains("needs model.n_kv_head (1) divisible by it"));
}
