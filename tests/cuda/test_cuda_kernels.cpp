// The CUDA backend's properties that one op against the CPU cannot show. Every op's numbers (each
// op, every dtype, against the CPU backend in f64, outputs poisoned with NaN) are backend-ops'
// cases (tests/backend/ops), run on every backend the build has; what stays here: a token id
// outside the vocabulary is an error, attention keeps a state per row rather than per pair,
// cross-row reductions give the same bits on every run, and a whole GPT's and Llama's forward and
// backward (every kernel together) match the CPU in f64.
//
// Every case needs a GPU: without one, gpu_main.cpp prints "skipped: no CUDA device (<reason>)"
// and exits 77 before running any, which ctest reports as skipped. The probe and device-selection
// tests, which run everywhere, are in test_cuda_host.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "dl/backend/backend.hpp"
#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/core/half.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/llama.hpp"
#include "support/numeric.hpp"

using namespace dl;
using namespace dl::test;

namespace {

constexpr DType F64 = DType::f64;

CudaBackend& cu() { return cuda_backend(); }
Backend& cpu() { return cpu_backend(); }

// Host f64 values -> a device tensor of dtype dt, rounded to it.
Tensor upload(const Tensor& ref, DType dt) {
  Tensor host = Tensor::empty(ref.shape(), dt);
  convert_host(host, ref);
  Tensor dev = cu().empty(ref.shape(), dt);
  cu().copy(dev, host);
  return dev;
}

// A device float tensor -> host f64.
Tensor download(const Tensor& dev) {
  Tensor host = Tensor::empty(dev.shape(), dev.dtype());
  cu().copy(host, dev);
  Tensor out = Tensor::empty(dev.shape(), F64);
  convert_host(out, host);
  return out;
}

// Random inputs: the f64 reference (already rounded to dt) and its device copy.
struct Pair {
  Tensor ref, dev;
};
uint64_t g_key = 0x5eed;  // every draw takes a fresh key: new inputs for every check
Pair make(Shape shape, DType dt, double lo = -1.0, double hi = 1.0) {
  Tensor dev = upload(random_tensor(shape, F64, g_key++, lo, hi), dt);
  return {download(dev), dev};
}

bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(get(t, i))) return false;
  return true;
}

Tensor host_i32(Shape shape, const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

std::vector<int32_t> random_ids(int64_t n, int64_t V, uint64_t key, double ignore_fraction = 0.0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double u = uniform_at(key, static_cast<uint64_t>(2 * i));
    v[static_cast<size_t>(i)] = static_cast<int32_t>(std::min<int64_t>(V - 1, static_cast<int64_t>(u * V)));
    if (uniform_at(key, static_cast<uint64_t>(2 * i + 1)) < ignore_fraction) v[static_cast<size_t>(i)] = -1;
  }
  return v;
}

}  // namespace

TEST_CASE("a token id outside the vocabulary is a usage error naming it") {
  Tensor wte = cu().empty({10, 8}, DType::f32), out = cu().empty({1, 2, 8}, DType::f32);
  Tensor bad = host_i32({1, 2}, {3, 10});
  try {
    cu().encoder_forward(out, bad, wte, Tensor(), 0, 10);
    FAIL("token 10 of a vocabulary of 10 was accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("token id 10") != std::string::npos);
  }
}

TEST_CASE("reductions across rows are deterministic: the same bits on every run") {
  const int64_t B = 4, T = 64, C = 128, V = 30, N = B * T;
  const DType dt = DType::f32;
  Pair dout = make({B, T, C}, dt), x = make({N, C}, dt), w = make({C}, dt);
  Tensor tokens = host_i32({B, T}, random_ids(B * T, V, g_key++));
  auto run_once = [&] {
    Tensor dwte = cu().empty({V, C}, dt), dwpe = cu().empty({T, C}, dt), dw = cu().empty({C}, dt);
    Tensor db = cu().empty({C}, dt), dx = cu().empty({N, C}, dt), out = cu().empty({N, C}, dt);
    Tensor mean = cu().empty({N}, dt), rstd = cu().empty({N}, dt), bias = cu().empty({C}, dt);
    for (Tensor* t : {&dwte, &dwpe, &dw, &db, &bias}) cu().zero(*t);
    cu().encoder_backward(dwte, dwpe, dout.dev, tokens, 0);
    cu().layernorm_forward(out, mean, rstd, x.dev, w.dev, bias);
    cu().layernorm_backward(dx, dw, db, dout.dev.view({N, C}), x.dev, w.dev, mean, rstd, false);
    return std::vector<Tensor>{download(dwte), download(dwpe), download(dw), download(db)};
  };
  auto a = run_once(), b = run_once();
  for (size_t i = 0; i < a.size(); ++i) CHECK(max_abs_diff(a[i], b[i]) == 0.0);
}

TEST_CASE("sum and sum_squares give the same bits on every run") {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Pair x = make({1234567}, dt);
    CHECK(cu().sum(x.dev) == cu().sum(x.dev));
    CHECK(cu().sum_squares(x.dev) == cu().sum_squares(x.dev));
  }
}

TEST_CASE("the attention state is per row, not per pair: no T x T buffer") {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const int64_t B = 2, T = 130, C = 256;
    const int H = 4;
    CHECK(cu().attention_state_shape(B, T, C, H) != cpu().attention_state_shape(B, T, C, H));
    Tensor state = cu().empty(cu().attention_state_shape(B, T, C, H), dt);
    CHECK(state.numel() < B * H * T * T);
    // The forward that fills it and the backward that reads it run at this size (their numbers:
    // backend-ops' attention cases).
    Pair qkv = make({B, T, 3 * C}, dt, -2, 2), dout = make({B, T, C}, dt);
    Tensor out = cu().empty({B, T, C}, dt), dqkv = cu().empty({B, T, 3 * C}, dt);
    cu().attention_forward(out, state, qkv.dev, H);
    cu().attention_backward(dqkv, dout.dev, qkv.dev, out, state, H);
    CHECK(all_finite(download(dqkv)));
  }
}

namespace {

// One forward and backward of `dev` (f32 on the GPU) and `ref` (the same model in f64 on the CPU,
// the same initial weights) on one random batch of B x T tokens (10% of the targets ignored):
// the loss within 1e-5, every parameter gradient within 1e-4 (relative norm), all finite.
void check_against_f64(Model& ref, Model& dev, int64_t vocab_size, int64_t B, int64_t T) {
  ref.params().initialize(1234);
  dev.params().initialize(1234);
  Batch batch{host_i32({B, T}, random_ids(B * T, vocab_size, g_key++)),
              host_i32({B, T}, random_ids(B * T, vocab_size, g_key++, 0.1))};
  ForwardStats s_ref = ref.forward(batch), s_dev = dev.forward(batch);
  CHECK(s_dev.targets == s_ref.targets);
  CHECK(std::fabs(s_dev.loss_sum - s_ref.loss_sum) < 1e-5 * s_ref.loss_sum);
  CHECK(std::abs(s_dev.correct - s_ref.correct) <= 1);  // an argmax tie may round either way
  const double dloss = 1.0 / static_cast<double>(s_ref.targets);
  ref.params().zero_grad();
  dev.params().zero_grad();
  ref.backward(dloss);
  dev.backward(dloss);
  for (size_t i = 0; i < ref.params().size(); ++i) {
    CAPTURE(ref.params().info(i).name);
    Tensor got = download(dev.params().grad(i));
    CHECK(all_finite(got));
    CHECK(rel_error(got, ref.params().grad(i)) < 1e-4);
  }
}

}  // namespace

TEST_CASE("a whole GPT forward and backward on the GPU matches the CPU in f64") {
  GptConfig g;
  g.n_layer = 2;
  g.n_head = 4;
  g.n_embd = 64;
  g.block_size = 32;
  g.vocab_size = 97;
  GptModel ref(g, cpu(), F64), dev(g, cu(), DType::f32);
  check_against_f64(ref, dev, g.vocab_size, 3, 32);
}

// The Llama family's kernels together (RMSNorm, RoPE, SwiGLU, the GQA pack/unpack around the
// attention): grouped-query 4:2 with an untied head, and multi-query 4:1 with a tied one.
TEST_CASE("a whole Llama forward and backward on the GPU matches the CPU in f64 (GQA untied, MQA tied)") {
  for (const auto& [n_kv_head, tied] : std::vector<std::pair<int, bool>>{{2, false}, {1, true}}) {
    CAPTURE(n_kv_head);
    LlamaConfig c;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = n_kv_head;
    c.n_embd = 64;
    c.ffn_hidden = 96;
    c.block_size = 32;
    c.vocab_size = 97;
    c.tie_embeddings = tied;
    LlamaModel ref(c, cpu(), F64), dev(c, cu(), DType::f32);
    check_against_f64(ref, dev, c.vocab_size, 3, 32);
  }
}
