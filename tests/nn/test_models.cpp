// Whole-model gradients against finite differences in double precision, on sampled parameter
// elements, and the parameter counts from REFERENCE.md.
#include <doctest/doctest.h>

#include "dl/nn/gpt.hpp"
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
  Batch b;
  b.inputs = Tensor::empty({2, 5}, DType::i32);
  b.targets = Tensor::empty({2, 5}, DType::i32);
  for (int i = 0; i < 10; ++i) {
    b.inputs.data<int32_t>()[i] = (i * 3 + 1) % 11;
    b.targets.data<int32_t>()[i] = i == 4 ? -1 : (i * 5 + 2) % 11;
  }
  check_model_grads(model, b, 12, 1e-6);
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
