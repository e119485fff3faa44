// bf16 and fp16 tensors on the CPU backend, every op: each computes in f32 on the 16-bit inputs
// and rounds its outputs once (the CUDA kernels' contract), so it lands within half a 16-bit ulp
// (plus the f32 arithmetic's own error) of the op computed in f64 on the same 16-bit values.
// The f64 reference shares no code with the 16-bit path's rounding or its f32 kernels' fast
// exp and sgemm, and the 16-bit values are decoded here from their bits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

#include "dl/backend/backend.hpp"
#include "dl/core/half.hpp"
#include "support/numeric.hpp"

using namespace dl;
using namespace dl::test;

namespace {

Tensor converted(const Tensor& t, DType dt) {
  Tensor out = Tensor::empty(t.shape(), dt);
  convert_host(out, t);
  return out;
}
bool is_float(DType dt) { return dt == DType::f64 || dt == DType::f32 || is_16bit_float(dt); }

// Element i of a float tensor, 16-bit ones decoded from the IEEE-style bit fields directly.
double value(const Tensor& t, int64_t i) {
  if (!is_16bit_float(t.dtype())) return get(t, i);
  const uint16_t h = static_cast<const uint16_t*>(t.raw())[i];
  const bool bf = t.dtype() == DType::bf16;
  const int man_bits = bf ? 7 : 10, bias = bf ? 127 : 15;
  const int e = (h >> man_bits) & (bf ? 0xff : 0x1f), m = h & ((1 << man_bits) - 1);
  double v = e == 0 ? std::ldexp(m, 1 - bias - man_bits) : std::ldexp(m + (1 << man_bits), e - bias - man_bits);
  if (e == (bf ? 0xff : 0x1f)) v = m ? NAN : INFINITY;
  return (h & 0x8000) ? -v : v;
}

// A copy of t with its float elements in dt (exact: every 16-bit value is an f32 and an f64).
Tensor widened(const Tensor& t, DType dt) {
  if (!t.defined() || !is_float(t.dtype())) return t.defined() ? t.clone() : t;
  Tensor out = Tensor::empty(t.shape(), dt);
  for (int64_t i = 0; i < t.numel(); ++i) set(out, i, value(t, i));
  return out;
}

// Half an ulp of dtype dt at magnitude a: the most a correct round-to-nearest moves a value.
double half_ulp(DType dt, double a) {
  const int precision = dt == DType::bf16 ? 8 : dt == DType::f16 ? 11 : 24;  // significand bits
  const int emin = dt == DType::f16 ? -14 : -126;
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, emin) - precision);
}

Tensor rnd(Shape s, DType dt, uint64_t key, double lo = -1, double hi = 1) {
  return converted(random_tensor(std::move(s), DType::f64, key, lo, hi), dt);
}
Tensor ids(Shape s, int64_t n, int64_t mult, int64_t offset = 0) {
  Tensor t = Tensor::empty(std::move(s), DType::i32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>((i * mult + offset) % n);
  return t;
}

// One op of the backend, run three times on the same tensors: 16-bit (as made), f32 and f64
// (widened from them). Tensors made in f32 stay f32 in the 16-bit run (master weights, losses).
struct OpCase {
  const char* name;
  std::function<std::vector<Tensor>(DType)> make;  // the op's tensors, floats in the given dtype
  std::vector<size_t> outs;  // which tensors the op writes (all are filled first: some ops add)
  std::function<void(std::vector<Tensor>&)> run;
  double k;  // the f32 arithmetic's error allowed: k * 2^-24 * max|f64 result| of each output
};

void check_op(const OpCase& c, DType dt) {
  const std::string op = c.name;
  CAPTURE(op);
  CAPTURE(dtype_name(dt));
  std::vector<Tensor> t16 = c.make(dt), t32, t64;
  for (const Tensor& t : t16) {
    t32.push_back(widened(t, DType::f32));
    t64.push_back(widened(t, DType::f64));
  }
  c.run(t16);
  c.run(t32);
  c.run(t64);
  for (size_t o : c.outs) {
    CAPTURE(o);
    const Tensor &got = t16[o], &f32 = t32[o], &ref = t64[o];
    if (!is_float(got.dtype())) {
      CHECK(same_bits(got, f32));
      CHECK(same_bits(got, ref));
      continue;
    }
    // Rounded once from the f32 result: bit for bit.
    CHECK(same_bits(got, got.dtype() == DType::f32 ? f32 : converted(f32, got.dtype())));
    double max_ref = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) max_ref = std::max(max_ref, std::fabs(value(ref, i)));
    const double tol = c.k * std::ldexp(max_ref, -24);
    // The worst element against its bound, for f32 and for the 16-bit output.
    double worst32 = 0, worst16 = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      const double r = value(ref, i);
      const double q32 = std::fabs(value(f32, i) - r) / std::max(tol, 1e-300);
      if (!(q32 <= worst32)) worst32 = q32;  // NaN included
      const double bound = half_ulp(got.dtype(), std::fabs(r) + tol) + tol;
      const double q = std::fabs(value(got, i) - r) / bound;
      if (!(q <= worst16)) {
        worst16 = q;
        at = i;
      }
    }
    CHECK_MESSAGE(worst32 <= 1.0, "f32 result off the f64 one by ", worst32, " x the allowed ", tol);
    std::ostringstream why;
    if (at >= 0)
      why << "element " << at << ": " << value(got, at) << " vs f64 " << value(ref, at) << ", "
          << worst16 << " x half an ulp + " << tol;
    CHECK_MESSAGE(worst16 <= 1.0, why.str());
  }
}

const int64_t N = 24, IC = 40, OC = 56, V = 50;          // rows, matmul sizes, classes
const int64_t B = 2, T = 9, C = 24;                      // attention, 3 heads of size 8
const int H = 3;
const int64_t ET = 8, EC = 16, EV = 30, E0 = 4, ER = 20;  // encoder: this shard's vocab rows [4, 24)
using Ts = std::vector<Tensor>;

std::vector<OpCase> op_cases() {
  const Tensor targets = [] {
    Tensor t = ids({N}, V, 7);
    t.data<int32_t>()[5] = -1;  // an ignored row
    return t;
  }();
  const Tensor tokens = ids({B, ET}, EV, 11, 3);
  constexpr DType F32 = DType::f32;  // constexpr: lambdas use it without capturing it
  const auto state = [](DType dt) { return cpu_backend().empty(cpu_backend().attention_state_shape(B, T, C, H), dt); };
  // Vocabulary-parallel cross-entropy's row statistics over this shard's logits, in 16 bits.
  const auto shard = [](DType dt, uint64_t key) {
    Tensor logits = rnd({N, V}, dt, key, -5, 5), mx = cpu_backend().empty({N}, dt), se = cpu_backend().empty({N}, dt);
    cpu_backend().logits_row_max(mx, logits);
    cpu_backend().logits_sum_exp(se, logits, mx);
    return Ts{logits, mx, se};
  };
  std::vector<OpCase> v;
  v.push_back({"matmul_forward",
               [](DType dt) { return Ts{cpu_backend().empty({N, OC}, dt), rnd({N, IC}, dt, 1), rnd({IC, OC}, dt, 2, -.2, .2), rnd({OC}, dt, 3)}; },
               {0}, [](Ts& t) { cpu_backend().matmul_forward(t[0], t[1], t[2], t[3], WeightLayout::in_out); }, 16});
  v.push_back({"matmul_backward in_out",
               [](DType dt) {
                 return Ts{rnd({N, IC}, dt, 4), rnd({IC, OC}, dt, 5), rnd({OC}, dt, 6), rnd({N, OC}, dt, 7), rnd({N, IC}, dt, 8),
                           rnd({IC, OC}, dt, 9, -.2, .2)};
               },
               {0, 1, 2}, [](Ts& t) { cpu_backend().matmul_backward(t[0], t[1], t[2], t[3], t[4], t[5], WeightLayout::in_out, false); }, 16});
  v.push_back({"matmul_backward out_in, accumulating, no bias",
               [](DType dt) {
                 return Ts{rnd({N, IC}, dt, 10), rnd({OC, IC}, dt, 11), rnd({N, OC}, dt, 12), rnd({N, IC}, dt, 13),
                           rnd({OC, IC}, dt, 14, -.2, .2)};
               },
               {0, 1}, [](Ts& t) {
                 Tensor none;
                 cpu_backend().matmul_backward(t[0], t[1], none, t[2], t[3], t[4], WeightLayout::out_in, true);
               }, 16});
  v.push_back({"layernorm_forward",
               [](DType dt) {
                 return Ts{cpu_backend().empty({N, IC}, dt), cpu_backend().empty({N}, dt), cpu_backend().empty({N}, dt), rnd({N, IC}, dt, 15, -2, 2),
                           rnd({IC}, dt, 16, .5, 1.5), rnd({IC}, dt, 17)};
               },
               {0, 1, 2}, [](Ts& t) { cpu_backend().layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5]); }, 8});
  v.push_back({"layernorm_backward, accumulating",
               [](DType dt) {
                 Tensor x = rnd({N, IC}, dt, 18, -2, 2), g = rnd({IC}, dt, 19, .5, 1.5), out = cpu_backend().empty({N, IC}, dt);
                 Tensor mean = cpu_backend().empty({N}, dt), rstd = cpu_backend().empty({N}, dt);
                 cpu_backend().layernorm_forward(out, mean, rstd, x, g, rnd({IC}, dt, 20));
                 return Ts{rnd({N, IC}, dt, 21), rnd({IC}, dt, 22), rnd({IC}, dt, 23), rnd({N, IC}, dt, 24), x, g, mean, rstd};
               },
               {0, 1, 2}, [](Ts& t) { cpu_backend().layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], true); }, 8});
  v.push_back({"encoder_forward, vocabulary-parallel rows",
               [](DType dt) { return Ts{cpu_backend().empty({B, ET, EC}, dt), rnd({ER, EC}, dt, 25), rnd({ET, EC}, dt, 26)}; },
               {0}, [tokens](Ts& t) { cpu_backend().encoder_forward(t[0], tokens, t[1], t[2], E0, EV); }, 1});
  v.push_back({"encoder_backward",
               [](DType dt) { return Ts{rnd({ER, EC}, dt, 27), rnd({ET, EC}, dt, 28), rnd({B, ET, EC}, dt, 29)}; },
               {0, 1}, [tokens](Ts& t) { cpu_backend().encoder_backward(t[0], t[1], t[2], tokens, E0); }, 2});
  v.push_back({"attention_forward",
               [state](DType dt) { return Ts{cpu_backend().empty({B, T, C}, dt), state(dt), rnd({B, T, 3 * C}, dt, 30, -2, 2)}; },
               {0, 1}, [](Ts& t) { cpu_backend().attention_forward(t[0], t[1], t[2], H); }, 8});
  v.push_back({"attention_backward",
               [state](DType dt) {
                 Tensor qkv = rnd({B, T, 3 * C}, dt, 31, -2, 2), out = cpu_backend().empty({B, T, C}, dt), st = state(dt);
                 cpu_backend().attention_forward(out, st, qkv, H);
                 return Ts{rnd({B, T, 3 * C}, dt, 32), rnd({B, T, C}, dt, 33), qkv, out, st};
               },
               {0}, [](Ts& t) { cpu_backend().attention_backward(t[0], t[1], t[2], t[3], t[4], H); }, 8});
  v.push_back({"gelu_forward", [](DType dt) { return Ts{cpu_backend().empty({N, IC}, dt), rnd({N, IC}, dt, 34, -4, 4)}; },
               {0}, [](Ts& t) { cpu_backend().gelu_forward(t[0], t[1]); }, 4});
  v.push_back({"gelu_backward, accumulating",
               [](DType dt) { return Ts{rnd({N, IC}, dt, 35), rnd({N, IC}, dt, 36), rnd({N, IC}, dt, 37, -4, 4)}; },
               {0}, [](Ts& t) { cpu_backend().gelu_backward(t[0], t[1], t[2], true); }, 32});
  v.push_back({"relu_forward", [](DType dt) { return Ts{cpu_backend().empty({N, IC}, dt), rnd({N, IC}, dt, 38)}; },
               {0}, [](Ts& t) { cpu_backend().relu_forward(t[0], t[1]); }, 0});
  v.push_back({"relu_backward", [](DType dt) { return Ts{rnd({N, IC}, dt, 39), rnd({N, IC}, dt, 40), rnd({N, IC}, dt, 41)}; },
               {0}, [](Ts& t) { cpu_backend().relu_backward(t[0], t[1], t[2], false); }, 0});
  v.push_back({"add", [](DType dt) { return Ts{cpu_backend().empty({N, IC}, dt), rnd({N, IC}, dt, 42), rnd({N, IC}, dt, 43)}; },
               {0}, [](Ts& t) { cpu_backend().add(t[0], t[1], t[2]); }, 1});
  v.push_back({"bias_add", [](DType dt) { return Ts{rnd({N, OC}, dt, 44), rnd({OC}, dt, 45)}; },
               {0}, [](Ts& t) { cpu_backend().bias_add(t[0], t[1]); }, 1});
  v.push_back({"crossentropy_forward: f32 losses, i32 hits",
               [](DType dt) { return Ts{cpu_backend().empty({N}, F32), Tensor::zeros({N}, DType::i32), rnd({N, V}, dt, 46, -5, 5)}; },
               {0, 1}, [targets](Ts& t) { cpu_backend().crossentropy_forward(t[0], t[1], t[2], targets); }, 4});
  v.push_back({"crossentropy_backward", [](DType dt) { return Ts{cpu_backend().empty({N, V}, dt), rnd({N, V}, dt, 47, -5, 5)}; },
               {0}, [targets](Ts& t) { cpu_backend().crossentropy_backward(t[0], t[1], targets, 1.0 / N); }, 4});
  v.push_back({"argmax", [](DType dt) { return Ts{Tensor::zeros({N}, DType::i32), rnd({N, V}, dt, 48)}; },
               {0}, [](Ts& t) { cpu_backend().argmax(t[0], t[1]); }, 0});
  v.push_back({"logits_row_max", [](DType dt) { return Ts{cpu_backend().empty({N}, dt), rnd({N, V}, dt, 49, -5, 5)}; },
               {0}, [](Ts& t) { cpu_backend().logits_row_max(t[0], t[1]); }, 0});
  v.push_back({"logits_sum_exp",
               [shard](DType dt) {
                 Ts s = shard(dt, 50);
                 return Ts{cpu_backend().empty({N}, dt), s[0], s[1]};
               },
               {0}, [](Ts& t) { cpu_backend().logits_sum_exp(t[0], t[1], t[2]); }, 8});
  // This shard holds vocabulary columns [10, 10 + V).
  v.push_back({"logits_pick", [](DType dt) { return Ts{rnd({N}, dt, 51), rnd({N, V}, dt, 52, -5, 5)}; },
               {0}, [targets](Ts& t) { cpu_backend().logits_pick(t[0], t[1], targets, 10); }, 0});
  v.push_back({"crossentropy_backward_sharded",
               [shard](DType dt) {
                 Ts s = shard(dt, 53);
                 return Ts{cpu_backend().empty({N, V}, dt), s[0], s[1], s[2]};
               },
               {0}, [targets](Ts& t) { cpu_backend().crossentropy_backward_sharded(t[0], t[1], targets, t[2], t[3], 10, 1.0 / N); }, 4});
  // Mixed precision: f32 master weights and optimizer state, 16-bit gradients.
  v.push_back({"adamw_step, f32 master weights",
               [](DType dt) {
                 return Ts{rnd({N, IC}, F32, 54), rnd({N, IC}, dt, 55), rnd({N, IC}, F32, 56, -.1, .1), rnd({N, IC}, F32, 57, 0, .01)};
               },
               {0, 2, 3}, [](Ts& t) {
                 AdamWParams ap;
                 ap.lr = 1e-2;
                 ap.weight_decay = 0.1;
                 ap.grad_scale = 0.5;
                 ap.step = 3;
                 cpu_backend().adamw_step(t[0], t[1], t[2], t[3], ap);
               }, 4});
  for (bool nesterov : {false, true}) {
    v.push_back({nesterov ? "sgd_step, Nesterov" : "sgd_step, dampening",
                 [](DType dt) { return Ts{rnd({N, IC}, F32, 58), rnd({N, IC}, dt, 59), rnd({N, IC}, F32, 60)}; },
                 {0, 2}, [nesterov](Ts& t) {
                   SgdParams sp;
                   sp.lr = 0.1;
                   sp.momentum = 0.9;
                   sp.dampening = nesterov ? 0.0 : 0.25;
                   sp.nesterov = nesterov;
                   sp.weight_decay = 0.01;
                   sp.grad_scale = 0.5;
                   cpu_backend().sgd_step(t[0], t[1], t[2], sp);
                 }, 4});
  }
  v.push_back({"scale", [](DType dt) { return Ts{rnd({N, IC}, dt, 61)}; }, {0}, [](Ts& t) { cpu_backend().scale(t[0], 0.3); }, 2});
  v.push_back({"convert f32 -> 16-bit", [](DType dt) { return Ts{cpu_backend().empty({N, IC}, dt), rnd({N, IC}, F32, 62)}; },
               {0}, [](Ts& t) { cpu_backend().convert(t[0], t[1]); }, 0});
  v.push_back({"convert 16-bit -> f32", [](DType dt) { return Ts{cpu_backend().empty({N, IC}, F32), rnd({N, IC}, dt, 63)}; },
               {0}, [](Ts& t) { cpu_backend().convert(t[0], t[1]); }, 0});
  return v;
}
}  // namespace

TEST_CASE("every op in bf16 and fp16: rounded once from f32 arithmetic, within half an ulp of f64 on the same inputs") {
  for (DType dt : {DType::bf16, DType::f16})
    for (const OpCase& c : op_cases()) check_op(c, dt);
}

TEST_CASE("sums and sums of squares of 16-bit values: in double, as exact as the order of additions allows") {
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(dt));
    Tensor g = rnd({1000}, dt, 64);
    double s = 0, s2 = 0, mag = 0;
    for (int64_t i = 0; i < g.numel(); ++i) {
      s += value(g, i);
      s2 += value(g, i) * value(g, i);  // a 16-bit square is exact in double
      mag += std::fabs(value(g, i));
    }
    // Only the order of the double additions may differ: within n * 2^-53 of the magnitudes.
    CHECK(std::fabs(cpu_backend().sum(g) - s) <= 1000 * std::ldexp(mag, -53));
    CHECK(std::fabs(cpu_backend().sum_squares(g) - s2) <= 1000 * std::ldexp(s2, -53));
  }
}

TEST_CASE("fp16 overflows to Inf where f32 does not: what dynamic loss scaling detects") {
  Tensor x = Tensor::empty({2}, DType::f16);
  Tensor f = Tensor::empty({2}, DType::f32);
  f.data<float>()[0] = 300.0f;
  f.data<float>()[1] = 1.0f;
  convert_host(x, f);
  cpu_backend().scale(x, 1000.0);  // 300000 > 65504
  CHECK(std::isinf(cpu_backend().sum_squares(x)));
}
