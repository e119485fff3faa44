// Every layer's backward against central finite differences, in double precision.
// Each check builds the scalar L = sum(forward(x) * R) with a fixed random R, so dL/dout = R,
// runs the analytic backward with dout = R, and compares with (L(x+h) - L(x-h)) / 2h.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "dl/backend/backend.hpp"
#include "dl/backend/cpu/math.hpp"
#include "support/numeric.hpp"

using namespace dl;
using namespace dl::test;

namespace {
Backend& be() { return cpu_backend(); }
constexpr DType F64 = DType::f64;
// Central differences in double with h = 1e-6 are good to ~1e-8 relative on these sizes.
constexpr double kTol = 1e-7;

Tensor int_tensor(Shape s, std::vector<int32_t> v) {
  Tensor t = Tensor::empty(std::move(s), DType::i32);
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
  return t;
}
}  // namespace

TEST_CASE("layernorm backward matches finite differences") {
  const int64_t N = 5, C = 7;
  Tensor x = random_tensor({N, C}, F64, 1, -2, 2);
  Tensor w = random_tensor({C}, F64, 2, 0.5, 1.5);
  Tensor b = random_tensor({C}, F64, 3);
  Tensor R = random_tensor({N, C}, F64, 4);
  Tensor out = Tensor::empty({N, C}, F64), mean = Tensor::empty({N}, F64), rstd = Tensor::empty({N}, F64);
  auto loss = [&] {
    be().layernorm_forward(out, mean, rstd, x, w, b);
    return dot(out, R);
  };
  loss();
  Tensor dx = random_tensor({N, C}, F64, 9), dw = Tensor::zeros({C}, F64), db = Tensor::zeros({C}, F64);
  be().layernorm_backward(dx, dw, db, R, x, w, mean, rstd, false);
  CHECK(rel_error(dx, numeric_grad(x, loss)) < kTol);
  CHECK(rel_error(dw, numeric_grad(w, loss)) < kTol);
  CHECK(rel_error(db, numeric_grad(b, loss)) < kTol);

  SUBCASE("accumulate adds to dinp, parameter grads always add") {
    Tensor dx2 = dx.clone(), dw2 = dw.clone(), db2 = db.clone();
    loss();
    be().layernorm_backward(dx2, dw2, db2, R, x, w, mean, rstd, true);
    for (int64_t i = 0; i < dx.numel(); ++i) CHECK(get(dx2, i) == doctest::Approx(2 * get(dx, i)));
    for (int64_t i = 0; i < C; ++i) CHECK(get(dw2, i) == doctest::Approx(2 * get(dw, i)));
  }
}

TEST_CASE("matmul backward matches finite differences in both weight layouts") {
  const int64_t N = 6, IC = 5, OC = 4;
  for (WeightLayout layout : {WeightLayout::in_out, WeightLayout::out_in}) {
    CAPTURE(static_cast<int>(layout));
    Shape wshape = layout == WeightLayout::in_out ? Shape{IC, OC} : Shape{OC, IC};
    Tensor x = random_tensor({N, IC}, F64, 11);
    Tensor w = random_tensor(wshape, F64, 12);
    Tensor bias = random_tensor({OC}, F64, 13);
    Tensor R = random_tensor({N, OC}, F64, 14);
    Tensor out = Tensor::empty({N, OC}, F64);
    auto loss = [&] {
      be().matmul_forward(out, x, w, bias, layout);
      return dot(out, R);
    };
    loss();
    // A reference product computed by hand.
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) {
        double s = get(bias, o);
        for (int64_t i = 0; i < IC; ++i)
          s += get(x, n * IC + i) * get(w, layout == WeightLayout::in_out ? i * OC + o : o * IC + i);
        CHECK(get(out, n * OC + o) == doctest::Approx(s).epsilon(1e-12));
      }
    Tensor dx = Tensor::empty({N, IC}, F64), dw = Tensor::zeros(wshape, F64), db = Tensor::zeros({OC}, F64);
    be().matmul_backward(dx, dw, db, R, x, w, layout, false);
    CHECK(rel_error(dx, numeric_grad(x, loss)) < kTol);
    CHECK(rel_error(dw, numeric_grad(w, loss)) < kTol);
    CHECK(rel_error(db, numeric_grad(bias, loss)) < kTol);
  }
}

TEST_CASE("causal attention backward matches finite differences") {
  const int64_t B = 2, T = 5, C = 8;
  const int H = 2;
  Tensor qkv = random_tensor({B, T, 3 * C}, F64, 21);
  Tensor R = random_tensor({B, T, C}, F64, 22);
  Tensor out = Tensor::empty({B, T, C}, F64);
  Tensor state = Tensor::empty(be().attention_state_shape(B, T, C, H), F64);
  auto loss = [&] {
    be().attention_forward(out, state, qkv, H);
    return dot(out, R);
  };
  loss();
  Tensor dqkv = Tensor::empty({B, T, 3 * C}, F64);
  be().attention_backward(dqkv, R, qkv, out, state, H);
  CHECK(rel_error(dqkv, numeric_grad(qkv, loss)) < kTol);

  SUBCASE("position t attends only to positions <= t") {
    Tensor before = out.clone();
    // Changing the last position's keys and values must not change any earlier output.
    for (int64_t c = C; c < 3 * C; ++c) set(qkv, (T - 1) * 3 * C + c, 5.0);
    loss();
    for (int64_t t = 0; t < T - 1; ++t)
      for (int64_t c = 0; c < C; ++c) CHECK(get(out, t * C + c) == get(before, t * C + c));
  }
}

TEST_CASE("gelu and relu backward match finite differences") {
  const int64_t n = 40;
  Tensor x = random_tensor({n}, F64, 31, -4, 4);
  Tensor R = random_tensor({n}, F64, 32);
  Tensor out = Tensor::empty({n}, F64), dx = Tensor::empty({n}, F64);
  auto gelu_loss = [&] {
    be().gelu_forward(out, x);
    return dot(out, R);
  };
  gelu_loss();
  // gelu(1) with the tanh approximation (GPT-2's gelu_new) = 0.8411919906082768
  Tensor one = Tensor::empty({1}, F64), o1 = Tensor::empty({1}, F64);
  set(one, 0, 1.0);
  be().gelu_forward(o1, one);
  CHECK(get(o1, 0) == doctest::Approx(0.8411919906082768).epsilon(1e-14));
  be().gelu_backward(dx, R, x, false);
  CHECK(rel_error(dx, numeric_grad(x, gelu_loss)) < kTol);

  // Keep ReLU inputs away from its kink at 0.
  for (int64_t i = 0; i < n; ++i)
    if (std::fabs(get(x, i)) < 0.01) set(x, i, 0.5);
  auto relu_loss = [&] {
    be().relu_forward(out, x);
    return dot(out, R);
  };
  relu_loss();
  be().relu_backward(dx, R, x, false);
  CHECK(rel_error(dx, numeric_grad(x, relu_loss)) < kTol);
}

TEST_CASE("encoder backward matches finite differences, repeated tokens accumulate") {
  const int64_t B = 2, T = 3, C = 4, V = 5;
  Tensor tokens = int_tensor({B, T}, {1, 4, 1, 0, 1, 3});
  Tensor wte = random_tensor({V, C}, F64, 41), wpe = random_tensor({T, C}, F64, 42);
  Tensor R = random_tensor({B, T, C}, F64, 43);
  Tensor out = Tensor::empty({B, T, C}, F64);
  auto loss = [&] {
    be().encoder_forward(out, tokens, wte, wpe, 0, V);
    return dot(out, R);
  };
  loss();
  Tensor dwte = Tensor::zeros({V, C}, F64), dwpe = Tensor::zeros({T, C}, F64);
  be().encoder_backward(dwte, dwpe, R, tokens, 0);
  CHECK(rel_error(dwte, numeric_grad(wte, loss)) < kTol);
  CHECK(rel_error(dwpe, numeric_grad(wpe, loss)) < kTol);
  // Token 2 never appears: its row gets no gradient.
  for (int64_t c = 0; c < C; ++c) CHECK(get(dwte, 2 * C + c) == 0.0);

  Tensor bad = int_tensor({1, 1}, {V});
  Tensor o = Tensor::empty({1, 1, C}, F64);
  CHECK_THROWS_AS(be().encoder_forward(o, bad, wte, wpe, 0, V), Error);

  SUBCASE("vocabulary shards add up to the whole embedding") {
    // Rows [0,2) and [2,5) of wte on two "ranks": the sum of their outputs (one adds wpe) is the
    // whole lookup, and each shard's gradient is the whole gradient's rows.
    be().encoder_forward(out, tokens, wte, wpe, 0, V);
    Tensor lo = wte.rows(0, 2).clone(), hi = wte.rows(2, 3).clone();
    Tensor o0 = Tensor::empty({B, T, C}, F64), o1 = Tensor::empty({B, T, C}, F64);
    be().encoder_forward(o0, tokens, lo, wpe, 0, V);
    be().encoder_forward(o1, tokens, hi, Tensor(), 2, V);
    for (int64_t i = 0; i < out.numel(); ++i) CHECK(get(o0, i) + get(o1, i) == doctest::Approx(get(out, i)));
    Tensor g0 = Tensor::zeros({2, C}, F64), g1 = Tensor::zeros({3, C}, F64), none;
    be().encoder_backward(g0, none, R, tokens, 0);
    be().encoder_backward(g1, none, R, tokens, 2);
    for (int64_t i = 0; i < 2 * C; ++i) CHECK(get(g0, i) == doctest::Approx(get(dwte, i)));
    for (int64_t i = 0; i < 3 * C; ++i) CHECK(get(g1, i) == doctest::Approx(get(dwte, 2 * C + i)));
  }
}

TEST_CASE("vocabulary-sharded cross-entropy equals the whole one") {
  const int64_t N = 5, V = 6;
  Tensor logits = random_tensor({N, V}, F64, 55, -3, 3);
  Tensor targets = int_tensor({N}, {0, 5, -1, 3, 2});
  Tensor losses = Tensor::empty({N}, F64), none;
  be().crossentropy_forward(losses, none, logits, targets);
  Tensor dl = Tensor::empty({N, V}, F64);
  be().crossentropy_backward(dl, logits, targets, 0.25);
  // Two shards of 3 columns; combine the statistics as the tensor-parallel model does.
  Tensor shard[2], mx[2], se[2], pk[2];
  for (int s = 0; s < 2; ++s) {
    shard[s] = Tensor::empty({N, 3}, F64);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < 3; ++j) set(shard[s], r * 3 + j, get(logits, r * V + s * 3 + j));
    mx[s] = Tensor::empty({N}, F64);
    be().logits_row_max(mx[s], shard[s]);
  }
  Tensor gmax = Tensor::empty({N}, F64);
  for (int64_t r = 0; r < N; ++r) set(gmax, r, std::max(get(mx[0], r), get(mx[1], r)));
  for (int s = 0; s < 2; ++s) {
    se[s] = Tensor::empty({N}, F64);
    pk[s] = Tensor::empty({N}, F64);
    be().logits_sum_exp(se[s], shard[s], gmax);
    be().logits_pick(pk[s], shard[s], targets, s * 3);
  }
  Tensor gse = Tensor::empty({N}, F64);
  for (int64_t r = 0; r < N; ++r) {
    set(gse, r, get(se[0], r) + get(se[1], r));
    double loss = targets.data<int32_t>()[r] < 0 ? 0 : std::log(get(gse, r)) + get(gmax, r) - get(pk[0], r) - get(pk[1], r);
    CHECK(loss == doctest::Approx(get(losses, r)).epsilon(1e-12));
  }
  for (int s = 0; s < 2; ++s) {
    Tensor d = Tensor::empty({N, 3}, F64);
    be().crossentropy_backward_sharded(d, shard[s], targets, gmax, gse, s * 3, 0.25);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < 3; ++j) CHECK(get(d, r * 3 + j) == doctest::Approx(get(dl, r * V + s * 3 + j)).epsilon(1e-12));
  }
}

TEST_CASE("bias_add adds a row vector") {
  Tensor x = Tensor::zeros({3, 2}, F64), b = random_tensor({2}, F64, 7);
  be().bias_add(x, b);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 2; ++c) CHECK(get(x, r * 2 + c) == get(b, c));
}

TEST_CASE("softmax cross-entropy backward matches finite differences; ignored targets") {
  const int64_t N = 6, V = 5;
  Tensor logits = random_tensor({N, V}, F64, 51, -3, 3);
  Tensor targets = int_tensor({N}, {0, 4, -1, 2, 2, 1});
  Tensor losses = Tensor::empty({N}, F64), correct = Tensor::empty({N}, DType::i32);
  const double dloss = 0.37;
  auto loss = [&] {
    be().crossentropy_forward(losses, correct, logits, targets);
    double s = 0;
    for (int64_t i = 0; i < N; ++i) s += get(losses, i);
    return s * dloss;
  };
  loss();
  CHECK(get(losses, 2) == 0.0);
  // Row 0 by hand: log(sum exp) - logit[target].
  double mx = -1e300, s = 0;
  for (int64_t j = 0; j < V; ++j) mx = std::max(mx, get(logits, j));
  for (int64_t j = 0; j < V; ++j) s += std::exp(get(logits, j) - mx);
  CHECK(get(losses, 0) == doctest::Approx(std::log(s) + mx - get(logits, 0)).epsilon(1e-14));
  Tensor dl = Tensor::empty({N, V}, F64);
  be().crossentropy_backward(dl, logits, targets, dloss);
  CHECK(rel_error(dl, numeric_grad(logits, loss)) < kTol);
  for (int64_t j = 0; j < V; ++j) CHECK(get(dl, 2 * V + j) == 0.0);
  // correct[] flags rows whose argmax is the target.
  Tensor am = Tensor::empty({N}, DType::i32);
  be().argmax(am, logits);
  for (int64_t i = 0; i < N; ++i) {
    int32_t t = targets.data<int32_t>()[i];
    CHECK(correct.data<int32_t>()[i] == (t >= 0 && am.data<int32_t>()[i] == t ? 1 : 0));
  }
}

TEST_CASE("f32 kernels agree with f64 to float precision") {
  // The f32 path uses the vectorised exp/tanh; these checks bound their error in context.
  const int64_t B = 2, T = 16, C = 32, V = 50;
  const int H = 4;
  Tensor qkv64 = random_tensor({B, T, 3 * C}, F64, 61, -2, 2);
  Tensor R64 = random_tensor({B, T, C}, F64, 62);
  Tensor qkv32 = to_dtype(qkv64, DType::f32), R32 = to_dtype(R64, DType::f32);
  auto run_attn = [&](const Tensor& qkv, const Tensor& R, DType dt, Tensor& out, Tensor& dqkv) {
    out = Tensor::empty({B, T, C}, dt);
    dqkv = Tensor::empty({B, T, 3 * C}, dt);
    Tensor st = Tensor::empty(be().attention_state_shape(B, T, C, H), dt);
    be().attention_forward(out, st, qkv, H);
    be().attention_backward(dqkv, R, qkv, out, st, H);
  };
  Tensor o64, d64, o32, d32;
  run_attn(qkv64, R64, F64, o64, d64);
  run_attn(qkv32, R32, DType::f32, o32, d32);
  CHECK(rel_error(o32, o64) < 2e-6);
  CHECK(rel_error(d32, d64) < 2e-6);

  Tensor x64 = random_tensor({4096}, F64, 63, -8, 8), x32 = to_dtype(x64, DType::f32);
  Tensor g64 = Tensor::empty({4096}, F64), g32 = Tensor::empty({4096}, DType::f32);
  be().gelu_forward(g64, x64);
  be().gelu_forward(g32, x32);
  CHECK(rel_error(g32, g64) < 1e-6);
  be().gelu_backward(g64, x64, x64, false);
  be().gelu_backward(g32, x32, x32, false);
  CHECK(rel_error(g32, g64) < 1e-6);

  Tensor l64 = random_tensor({T, V}, F64, 64, -10, 10), l32 = to_dtype(l64, DType::f32);
  Tensor tg = Tensor::empty({T}, DType::i32);
  for (int64_t i = 0; i < T; ++i) tg.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % V);
  Tensor ls64 = Tensor::empty({T}, F64), ls32 = Tensor::empty({T}, DType::f32), none;
  be().crossentropy_forward(ls64, none, l64, tg);
  be().crossentropy_forward(ls32, none, l32, tg);
  CHECK(rel_error(ls32, ls64) < 1e-6);
}

TEST_CASE("adamw_step follows torch.optim.AdamW's update") {
  const int64_t n = 9;
  Tensor p = random_tensor({n}, F64, 71), g = random_tensor({n}, F64, 72);
  Tensor m = Tensor::zeros({n}, F64), v = Tensor::zeros({n}, F64);
  Tensor p_ref = p.clone(), m_ref = m.clone(), v_ref = v.clone();
  AdamWParams ap;
  ap.lr = 0.01;
  ap.beta1 = 0.9;
  ap.beta2 = 0.95;
  ap.eps = 1e-8;
  ap.weight_decay = 0.1;
  for (int64_t step = 1; step <= 3; ++step) {
    ap.step = step;
    be().adamw_step(p, g, m, v, ap);
    for (int64_t i = 0; i < n; ++i) {
      double gi = get(g, i), pi = get(p_ref, i) * (1 - ap.lr * ap.weight_decay);
      double mi = ap.beta1 * get(m_ref, i) + (1 - ap.beta1) * gi;
      double vi = ap.beta2 * get(v_ref, i) + (1 - ap.beta2) * gi * gi;
      double mhat = mi / (1 - std::pow(ap.beta1, step));
      double vhat = vi / (1 - std::pow(ap.beta2, step));
      set(m_ref, i, mi);
      set(v_ref, i, vi);
      set(p_ref, i, pi - ap.lr * mhat / (std::sqrt(vhat) + ap.eps));
    }
  }
  CHECK(max_abs_diff(p, p_ref) < 1e-14);
  CHECK(max_abs_diff(m, m_ref) < 1e-14);
  CHECK(max_abs_diff(v, v_ref) < 1e-14);
}

TEST_CASE("sgd_step with momentum, dampening and Nesterov follows torch.optim.SGD") {
  const int64_t n = 5;
  struct Case {
    double dampening;
    bool nesterov;
  };
  for (Case c : {Case{0.0, false}, Case{0.3, false}, Case{0.0, true}}) {
    CAPTURE(c.dampening);
    CAPTURE(c.nesterov);
    Tensor p = random_tensor({n}, F64, 81), g = random_tensor({n}, F64, 82), buf = Tensor::zeros({n}, F64);
    Tensor p_ref = p.clone(), b_ref = buf.clone();
    SgdParams sp;
    sp.lr = 0.1;
    sp.momentum = 0.9;
    sp.dampening = c.dampening;
    sp.nesterov = c.nesterov;
    sp.weight_decay = 0.01;
    for (int step = 0; step < 3; ++step) {
      sp.first_step = step == 0;
      be().sgd_step(p, g, buf, sp);
      // torch.optim.SGD's _single_tensor_sgd: d_p = grad + wd * p; buf = d_p on the first step,
      // else momentum * buf + (1 - dampening) * d_p; d_p = d_p + momentum * buf if nesterov,
      // else buf; p -= lr * d_p.
      for (int64_t i = 0; i < n; ++i) {
        double d = get(g, i) + sp.weight_decay * get(p_ref, i);
        double b = step == 0 ? d : sp.momentum * get(b_ref, i) + (1 - sp.dampening) * d;
        set(b_ref, i, b);
        d = sp.nesterov ? d + sp.momentum * b : b;
        set(p_ref, i, get(p_ref, i) - sp.lr * d);
      }
    }
    CHECK(max_abs_diff(p, p_ref) < 1e-14);
    CHECK(max_abs_diff(buf, b_ref) < 1e-14);
  }
}

TEST_CASE("sum and sum_squares are deterministic and propagate NaN") {
  Tensor x = random_tensor({100000}, DType::f32, 91);
  double a = be().sum_squares(x), b = be().sum_squares(x);
  CHECK(a == b);
  double ref = 0;
  for (int64_t i = 0; i < x.numel(); ++i) ref += get(x, i) * get(x, i);
  CHECK(a == doctest::Approx(ref).epsilon(1e-12));
  x.data<float>()[777] = std::nanf("");
  CHECK(std::isnan(be().sum_squares(x)));
}

namespace {
// Straightforward causal attention in double, the reference for the tiled kernels.
void naive_attention(const Tensor& qkv, int64_t B, int64_t T, int64_t C, int64_t H, Tensor& out) {
  int64_t hs = C / H;
  out = Tensor::zeros({B, T, C}, F64);
  // Raw pointers: the finite differences below call this 776 times (get() per element was 42 s
  // under ASan).
  const double* x = qkv.data<double>();
  double* o_all = out.data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          for (int64_t k = 0; k < hs; ++k)
            d += x[(b * T + i) * 3 * C + h * hs + k] * x[(b * T + j) * 3 * C + C + h * hs + k];
          s[j] = d / std::sqrt(double(hs));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (auto& v : s) z += v = std::exp(v - mx);
        for (int64_t k = 0; k < hs; ++k) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += s[j] / z * x[(b * T + j) * 3 * C + 2 * C + h * hs + k];
          o_all[(b * T + i) * C + h * hs + k] = o;
        }
      }
}
}  // namespace

TEST_CASE("attention kernels match a naive reference across tile and padding boundaries") {
  // Sizes straddle the kernels' 4-row tiles and 2-vector column blocks (32 floats, 16 doubles).
  struct Case { int64_t B, T, C, H; };
  for (Case c : {Case{1, 64, 128, 4}, Case{2, 37, 24, 3}, Case{1, 129, 64, 1}, Case{2, 33, 96, 2}}) {
    CAPTURE(c.T);
    CAPTURE(c.C);
    Tensor qkv = random_tensor({c.B, c.T, 3 * c.C}, F64, 100 + c.T, -2, 2);
    Tensor ref;
    naive_attention(qkv, c.B, c.T, c.C, c.H, ref);
    for (DType dt : {F64, DType::f32}) {
      Tensor in = to_dtype(qkv, dt);
      Tensor out = Tensor::empty({c.B, c.T, c.C}, dt);
      Tensor st = Tensor::empty(be().attention_state_shape(c.B, c.T, c.C, static_cast<int>(c.H)), dt);
      be().attention_forward(out, st, in, static_cast<int>(c.H));
      CHECK(rel_error(out, ref) < (dt == F64 ? 1e-12 : 2e-6));
    }
    // Backward against finite differences on a sample of inputs (the full check is too slow here).
    Tensor R = random_tensor({c.B, c.T, c.C}, F64, 200 + c.T);
    Tensor out = Tensor::empty({c.B, c.T, c.C}, F64);
    Tensor st = Tensor::empty(be().attention_state_shape(c.B, c.T, c.C, static_cast<int>(c.H)), F64);
    be().attention_forward(out, st, qkv, static_cast<int>(c.H));
    Tensor dqkv = Tensor::empty(qkv.shape(), F64);
    be().attention_backward(dqkv, R, qkv, out, st, static_cast<int>(c.H));
    double num2 = 0, den2 = 0;
    for (int64_t e = 3; e < qkv.numel(); e += qkv.numel() / 97) {
      double orig = get(qkv, e), h = 1e-6;
      Tensor ref_p, ref_m;
      set(qkv, e, orig + h);
      naive_attention(qkv, c.B, c.T, c.C, c.H, ref_p);
      set(qkv, e, orig - h);
      naive_attention(qkv, c.B, c.T, c.C, c.H, ref_m);
      set(qkv, e, orig);
      double fd = (dot(ref_p, R) - dot(ref_m, R)) / (2 * h);
      num2 += (get(dqkv, e) - fd) * (get(dqkv, e) - fd);
      den2 += fd * fd;
    }
    CHECK(std::sqrt(num2) < 1e-7 * std::sqrt(den2));
  }
}

TEST_CASE("fast_expf: NaN stays NaN without undefined behaviour; the clamped ends and ordinary values") {
  // UBSan found fast_expf converting a NaN to int (a diverging run's attention scores). NaN
  // must come back NaN so that divergence is still seen, and both ends stay clamped.
  CHECK(std::isnan(dl::cpu::fast_expf(std::numeric_limits<float>::quiet_NaN())));
  CHECK(dl::cpu::fast_expf(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(dl::cpu::fast_expf(-1000.0f) == 0.0f);
  CHECK(std::isfinite(dl::cpu::fast_expf(std::numeric_limits<float>::infinity())));
  for (float x : {-87.0f, -10.0f, -1.0f, 0.0f, 0.5f, 10.0f, 88.0f})
    CHECK(dl::cpu::fast_expf(x) == doctest::Approx(std::exp(static_cast<double>(x))).epsilon(2e-7));
}
