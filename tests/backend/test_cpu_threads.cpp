// The CPU backend gives the same bits with 1, 2, 3 and 4 threads: every op on shapes large enough
// that the pool (and BLAS) split them, compared byte for byte against the one-thread result.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dl/backend/backend.hpp"
#include "dl/core/parallel.hpp"
#include "support/numeric.hpp"

using namespace dl;
using namespace dl::test;

namespace {

// Restores the pool's size when a test ends, whatever it set.
struct ThreadsGuard {
  int saved = num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

// The first element where a and b differ, for the failure message.
std::string first_difference(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape()) || a.dtype() != b.dtype()) return "different shapes or dtypes";
  const size_t w = dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw());
  const auto* pb = static_cast<const unsigned char*>(b.raw());
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * w, pb + i * w, w) != 0)
      return "element " + std::to_string(i) +
             (a.dtype() == DType::f32 || a.dtype() == DType::f64
                  ? ": " + std::to_string(get(a, i)) + " vs " + std::to_string(get(b, i))
                  : std::string());
  return "none";
}

// Runs `op` (which builds its inputs and returns its outputs) with 1 thread, then 2, 3 and 4, and
// checks every output equals the one-thread output bit for bit.
void same_bits_at_every_thread_count(const std::string& what, const std::function<std::vector<Tensor>()>& op) {
  ThreadsGuard guard;
  set_num_threads(1);
  const std::vector<Tensor> ref = op();
  for (int t = 2; t <= 4; ++t) {
    set_num_threads(t);
    const std::vector<Tensor> got = op();
    REQUIRE(got.size() == ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO(what, ": output ", i, " with ", t, " threads differs from 1 thread at ", first_difference(got[i], ref[i]));
      CHECK(same_bits(got[i], ref[i]));
    }
  }
}

Tensor scalar_tensor(double v) {
  Tensor t = Tensor::empty({1}, DType::f64);
  t.data<double>()[0] = v;
  return t;
}

Tensor tokens_tensor(Shape s, int32_t vocab, uint64_t key) {
  Tensor t = Tensor::empty(std::move(s), DType::i32);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int32_t>()[i] = static_cast<int32_t>(uniform_at(key, static_cast<uint64_t>(i)) * vocab) % vocab;
  return t;
}

// Shapes of the matmuls in a training step (rows = batch x sequence; weights C x 3C, 4C x C, the
// LM head), and odd sizes that leave partial tiles and a long reduction dimension. Which of them
// OpenBLAS's own threads summed differently depends on its kernels (OPENBLAS_CORETYPE=Haswell
// makes more of them differ than the Cooper Lake kernels of the development VM).
struct MatmulShape {
  int64_t N, IC, OC;
};
constexpr MatmulShape kMatmuls[] = {{96, 64, 192}, {96, 256, 64},  {3072, 64, 256}, {1000, 129, 67},
                                    {777, 600, 50}, {64, 1000, 300}, {8192, 48, 48}};

}  // namespace

TEST_CASE("matmul forward and backward: the same bits with 1, 2, 3 and 4 threads") {
  for (DType dt : {DType::f32, DType::f64}) {
    for (const MatmulShape& s : kMatmuls) {
      if (dt == DType::f64 && s.N * s.IC * s.OC > 10'000'000) continue;  // f64: the smaller ones
      for (WeightLayout layout : {WeightLayout::in_out, WeightLayout::out_in}) {
        const bool in_out = layout == WeightLayout::in_out;
        Shape wshape = in_out ? Shape{s.IC, s.OC} : Shape{s.OC, s.IC};
        std::string what = "matmul " + std::string(dtype_name(dt)) + " N=" + std::to_string(s.N) +
                           " IC=" + std::to_string(s.IC) + " OC=" + std::to_string(s.OC) + (in_out ? " in_out" : " out_in");
        same_bits_at_every_thread_count(what, [&] {
          Tensor x = random_tensor({s.N, s.IC}, dt, 1), w = random_tensor(wshape, dt, 2);
          Tensor bias = random_tensor({s.OC}, dt, 3), dout = random_tensor({s.N, s.OC}, dt, 4);
          Tensor out = Tensor::empty({s.N, s.OC}, dt);
          cpu_backend().matmul_forward(out, x, w, bias, layout);
          Tensor dx = random_tensor({s.N, s.IC}, dt, 5), dw = random_tensor(wshape, dt, 6);
          Tensor db = random_tensor({s.OC}, dt, 7);
          cpu_backend().matmul_backward(dx, dw, db, dout, x, w, layout, true);
          return std::vector<Tensor>{out, dx, dw, db};
        });
      }
    }
  }
}

TEST_CASE("layernorm, attention, activations, residual and encoder: the same bits with 1, 2, 3 and 4 threads") {
  const DType dt = DType::f32;
  SUBCASE("layernorm") {
    for (auto [N, C] : {std::pair<int64_t, int64_t>{3072, 64}, {1000, 129}, {96, 768}}) {
      same_bits_at_every_thread_count("layernorm", [&, N = N, C = C] {
        Tensor x = random_tensor({N, C}, dt, 11, -2, 2), w = random_tensor({C}, dt, 12, 0.5, 1.5);
        Tensor b = random_tensor({C}, dt, 13), dout = random_tensor({N, C}, dt, 14);
        Tensor out = Tensor::empty({N, C}, dt), mean = Tensor::empty({N}, dt), rstd = Tensor::empty({N}, dt);
        cpu_backend().layernorm_forward(out, mean, rstd, x, w, b);
        Tensor dx = random_tensor({N, C}, dt, 15), dw = random_tensor({C}, dt, 16), db = random_tensor({C}, dt, 17);
        cpu_backend().layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, true);
        return std::vector<Tensor>{out, mean, rstd, dx, dw, db};
      });
    }
  }
  SUBCASE("causal attention") {
    // Head sizes 8 and Llama's 64 and 80: tiles of two, four, and four then two vectors per row.
    for (auto [H, hs] : {std::pair<int64_t, int64_t>{8, 8}, {4, 64}, {4, 80}}) {
      const int64_t B = 6, T = 37, C = H * hs;
      same_bits_at_every_thread_count("attention hs=" + std::to_string(hs), [&, H = H, C = C] {
        Tensor qkv = random_tensor({B, T, 3 * C}, dt, 21), dout = random_tensor({B, T, C}, dt, 22);
        Tensor out = Tensor::empty({B, T, C}, dt), att = Tensor::empty({B, H, T, T}, dt);
        cpu_backend().attention_forward(out, att, qkv, static_cast<int>(H));
        Tensor dqkv = random_tensor({B, T, 3 * C}, dt, 23);
        cpu_backend().attention_backward(dqkv, dout, qkv, out, att, static_cast<int>(H));
        return std::vector<Tensor>{out, att, dqkv};
      });
    }
  }
  SUBCASE("gelu, relu, add, scale") {
    const int64_t n = 100003;
    same_bits_at_every_thread_count("activations", [&] {
      Tensor x = random_tensor({n}, dt, 31, -4, 4), d = random_tensor({n}, dt, 32), y = random_tensor({n}, dt, 33);
      Tensor g = Tensor::empty({n}, dt), r = Tensor::empty({n}, dt), s = Tensor::empty({n}, dt);
      cpu_backend().gelu_forward(g, x);
      cpu_backend().relu_forward(r, x);
      cpu_backend().add(s, x, y);
      Tensor dg = random_tensor({n}, dt, 34), dr = random_tensor({n}, dt, 35);
      cpu_backend().gelu_backward(dg, d, x, true);
      cpu_backend().relu_backward(dr, d, x, true);
      cpu_backend().scale(y, 0.37);
      return std::vector<Tensor>{g, r, s, dg, dr, y};
    });
  }
  SUBCASE("encoder with repeated tokens") {
    const int64_t B = 16, T = 64, C = 96, V = 50;
    same_bits_at_every_thread_count("encoder", [&] {
      Tensor tok = tokens_tensor({B, T}, static_cast<int32_t>(V), 41);
      Tensor wte = random_tensor({V, C}, dt, 42), wpe = random_tensor({T, C}, dt, 43);
      Tensor out = Tensor::empty({B, T, C}, dt);
      cpu_backend().encoder_forward(out, tok, wte, wpe, 0, V);
      Tensor dwte = random_tensor({V, C}, dt, 44), dwpe = random_tensor({T, C}, dt, 45);
      cpu_backend().encoder_backward(dwte, dwpe, random_tensor({B, T, C}, dt, 46), tok, 0);
      return std::vector<Tensor>{out, dwte, dwpe};
    });
  }
}

TEST_CASE("the Llama ops (RMSNorm, RoPE, SwiGLU, the grouped K/V pack): the same bits with 1, 2, 3 and 4 threads") {
  const DType dt = DType::f32;
  const int64_t B = 8, T = 70, H = 6, Hkv = 2, hs = 64, C = H * hs, Ckv = Hkv * hs, F = 1000;
  same_bits_at_every_thread_count("llama ops", [&] {
    Tensor x = random_tensor({B, T, C}, dt, 51, -2, 2), w = random_tensor({C}, dt, 52, 0.5, 1.5);
    Tensor out = Tensor::empty({B, T, C}, dt), rstd = Tensor::empty({B * T}, dt);
    cpu_backend().rmsnorm_forward(out, rstd, x, w, 1e-5);
    Tensor dx = random_tensor({B, T, C}, dt, 53), dw = random_tensor({C}, dt, 54);
    cpu_backend().rmsnorm_backward(dx, dw, random_tensor({B, T, C}, dt, 55), x, w, rstd, true);
    Tensor inv_freq = random_tensor({hs / 2}, dt, 56, 0.001, 1);
    Tensor q = random_tensor({B, T, C}, dt, 57), k = random_tensor({B, T, Ckv}, dt, 58);
    Tensor v = random_tensor({B, T, Ckv}, dt, 59);
    cpu_backend().rope_forward(q, q, inv_freq, static_cast<int>(H));
    cpu_backend().rope_backward(k, k, inv_freq, static_cast<int>(Hkv));
    Tensor qkv = Tensor::empty({B, T, 3 * C}, dt);
    cpu_backend().qkv_pack(qkv, q, k, v, static_cast<int>(H), static_cast<int>(Hkv));
    Tensor dq = Tensor::empty({B, T, C}, dt), dk = Tensor::empty({B, T, Ckv}, dt), dv = Tensor::empty({B, T, Ckv}, dt);
    cpu_backend().qkv_unpack(dq, dk, dv, random_tensor({B, T, 3 * C}, dt, 60), static_cast<int>(H),
                             static_cast<int>(Hkv));
    // Gates over [-12, 12]: the sigmoid's tails as well as its middle.
    Tensor gate = random_tensor({B * T, F}, dt, 61, -12, 12), up = random_tensor({B * T, F}, dt, 62);
    Tensor h = Tensor::empty({B * T, F}, dt), dgate = Tensor::empty({B * T, F}, dt), dup = Tensor::empty({B * T, F}, dt);
    cpu_backend().swiglu_forward(h, gate, up);
    cpu_backend().swiglu_backward(dgate, dup, random_tensor({B * T, F}, dt, 63), gate, up);
    return std::vector<Tensor>{out, rstd, dx, dw, q, k, qkv, dq, dk, dv, h, dgate, dup};
  });
}

TEST_CASE("cross-entropy, sums and optimizer steps: the same bits with 1, 2, 3 and 4 threads") {
  const DType dt = DType::f32;
  SUBCASE("cross-entropy, whole and vocabulary-sharded") {
    const int64_t N = 700, V = 259;
    same_bits_at_every_thread_count("cross-entropy", [&] {
      Tensor logits = random_tensor({N, V}, dt, 51, -5, 5);
      Tensor targets = tokens_tensor({N}, static_cast<int32_t>(V), 52);
      Tensor losses = Tensor::empty({N}, dt), correct = Tensor::empty({N}, DType::i32);
      cpu_backend().crossentropy_forward(losses, correct, logits, targets);
      Tensor dlogits = Tensor::empty({N, V}, dt);
      cpu_backend().crossentropy_backward(dlogits, logits, targets, 1.0 / N);
      Tensor mx = Tensor::empty({N}, dt), se = Tensor::empty({N}, dt), dsh = Tensor::empty({N, V}, dt);
      cpu_backend().logits_row_max(mx, logits);
      cpu_backend().logits_sum_exp(se, logits, mx);
      cpu_backend().crossentropy_backward_sharded(dsh, logits, targets, mx, se, 0, 1.0 / N);
      return std::vector<Tensor>{losses, correct, dlogits, mx, se, dsh, scalar_tensor(cpu_backend().sum(losses))};
    });
  }
  SUBCASE("sum and sum of squares, f32, f64 and bf16") {
    for (DType d : {DType::f32, DType::f64, DType::bf16}) {
      same_bits_at_every_thread_count("sums", [&] {
        Tensor x = random_tensor({123457}, d == DType::bf16 ? DType::f32 : d, 61);
        if (d == DType::bf16) {
          Tensor h = Tensor::empty(x.shape(), d);
          cpu_backend().convert(h, x);
          x = h;
        }
        return std::vector<Tensor>{scalar_tensor(cpu_backend().sum(x)), scalar_tensor(cpu_backend().sum_squares(x))};
      });
    }
  }
  SUBCASE("adamw and sgd steps") {
    const int64_t n = 70001;
    same_bits_at_every_thread_count("optimizers", [&] {
      Tensor p = random_tensor({n}, dt, 71), g = random_tensor({n}, dt, 72), m = random_tensor({n}, dt, 73);
      Tensor v = random_tensor({n}, dt, 74, 0, 1);
      AdamWParams ap;
      ap.lr = 1e-2;
      ap.weight_decay = 0.1;
      ap.step = 3;
      ap.grad_scale = 0.5;
      cpu_backend().adamw_step(p, g, m, v, ap);
      Tensor q = random_tensor({n}, dt, 75), buf = random_tensor({n}, dt, 76);
      SgdParams sp;
      sp.momentum = 0.9;
      sp.nesterov = true;
      cpu_backend().sgd_step(q, g, buf, sp);
      return std::vector<Tensor>{p, m, v, q, buf};
    });
  }
}
