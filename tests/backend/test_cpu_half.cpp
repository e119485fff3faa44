// bf16 and fp16 tensors on the CPU backend: each op computes in f32 on the 16-bit inputs and
// rounds its outputs once (the CUDA kernels' contract), and stays within 16-bit tolerance of the
// f64 result.
#include <doctest/doctest.h>

#include <cstring>

#include "dl/backend/backend.hpp"
#include "dl/core/half.hpp"
#include "support/numeric.hpp"

using namespace dl;
using namespace dl::test;

namespace {
Backend& be() { return cpu_backend(); }

Tensor converted(const Tensor& t, DType dt) {
  Tensor out = Tensor::empty(t.shape(), dt);
  convert_host(out, t);
  return out;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}
}  // namespace

TEST_CASE("16-bit matmul, layernorm and gelu: f32 arithmetic on the 16-bit inputs, outputs rounded once") {
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(dt));
    const int64_t N = 24, IC = 40, OC = 56;
    Tensor x64 = random_tensor({N, IC}, DType::f64, 1), w64 = random_tensor({IC, OC}, DType::f64, 2, -0.2, 0.2);
    Tensor b64 = random_tensor({OC}, DType::f64, 3);
    Tensor x = converted(x64, dt), w = converted(w64, dt), b = converted(b64, dt);
    // The same op in f32 on the widened 16-bit values, rounded once.
    Tensor xf = converted(x, DType::f32), wf = converted(w, DType::f32), bf = converted(b, DType::f32);
    Tensor out = be().empty({N, OC}, dt), outf = be().empty({N, OC}, DType::f32);
    be().matmul_forward(out, x, w, b, WeightLayout::in_out);
    be().matmul_forward(outf, xf, wf, bf, WeightLayout::in_out);
    CHECK(same_bits(out, converted(outf, dt)));
    // Against f64 on the unrounded inputs: the 16-bit error budget (1e-2 relative).
    Tensor out64 = be().empty({N, OC}, DType::f64);
    be().matmul_forward(out64, x64, w64, b64, WeightLayout::in_out);
    CHECK(rel_error(converted(out, DType::f64), out64) < 1e-2);

    // Backward accumulates into 16-bit weight gradients: old + f32 gradient, rounded once.
    Tensor dout = converted(random_tensor({N, OC}, DType::f64, 4), dt);
    Tensor dw = converted(random_tensor({IC, OC}, DType::f64, 5), dt), dx = be().empty({N, IC}, dt), db = be().empty({OC}, dt);
    be().zero(db);
    Tensor dwf = converted(dw, DType::f32), dxf = be().empty({N, IC}, DType::f32), dbf = be().empty({OC}, DType::f32);
    be().zero(dbf);
    be().matmul_backward(dx, dw, db, dout, x, w, WeightLayout::in_out, false);
    be().matmul_backward(dxf, dwf, dbf, converted(dout, DType::f32), xf, wf, WeightLayout::in_out, false);
    CHECK(same_bits(dw, converted(dwf, dt)));
    CHECK(same_bits(dx, converted(dxf, dt)));
    CHECK(same_bits(db, converted(dbf, dt)));

    Tensor ln = be().empty({N, IC}, dt), mean = be().empty({N}, dt), rstd = be().empty({N}, dt);
    Tensor g = converted(random_tensor({IC}, DType::f64, 6, 0.5, 1.5), dt), beta = converted(random_tensor({IC}, DType::f64, 7), dt);
    be().layernorm_forward(ln, mean, rstd, x, g, beta);
    Tensor lnf = be().empty({N, IC}, DType::f32), meanf = be().empty({N}, DType::f32), rstdf = be().empty({N}, DType::f32);
    be().layernorm_forward(lnf, meanf, rstdf, xf, converted(g, DType::f32), converted(beta, DType::f32));
    CHECK(same_bits(ln, converted(lnf, dt)));

    Tensor ge = be().empty({N, IC}, dt), gef = be().empty({N, IC}, DType::f32);
    be().gelu_forward(ge, x);
    be().gelu_forward(gef, xf);
    CHECK(same_bits(ge, converted(gef, dt)));
  }
}

TEST_CASE("mixed-precision AdamW: f32 master weights from 16-bit gradients; f32 losses from 16-bit logits") {
  const int64_t n = 1000;
  Tensor p = random_tensor({n}, DType::f32, 11), m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
  Tensor g16 = converted(random_tensor({n}, DType::f64, 12), DType::bf16);
  Tensor p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
  AdamWParams ap;
  ap.lr = 1e-2;
  ap.weight_decay = 0.1;
  ap.grad_scale = 0.5;
  be().adamw_step(p, g16, m, v, ap);
  be().adamw_step(p2, converted(g16, DType::f32), m2, v2, ap);
  CHECK(same_bits(p, p2));
  CHECK(same_bits(v, v2));

  const int64_t T = 16, V = 50;
  Tensor logits = converted(random_tensor({T, V}, DType::f64, 13, -5, 5), DType::bf16);
  Tensor tg = Tensor::empty({T}, DType::i32);
  for (int64_t i = 0; i < T; ++i) tg.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % V);
  Tensor losses = be().empty({T}, DType::f32), lossesf = be().empty({T}, DType::f32), none;
  be().crossentropy_forward(losses, none, logits, tg);
  be().crossentropy_forward(lossesf, none, converted(logits, DType::f32), tg);
  CHECK(same_bits(losses, lossesf));  // the loss is not rounded to bf16

  CHECK(be().sum_squares(g16) == doctest::Approx(be().sum_squares(converted(g16, DType::f32))).epsilon(1e-12));
  Tensor h = converted(random_tensor({8}, DType::f64, 14), DType::f16);
  Tensor back = be().empty({8}, DType::f32);
  be().convert(back, h);
  CHECK(same_bits(converted(back, DType::f16), h));
}

TEST_CASE("fp16 overflows to Inf where f32 does not: what dynamic loss scaling detects") {
  Tensor x = Tensor::empty({2}, DType::f16);
  Tensor f = Tensor::empty({2}, DType::f32);
  f.data<float>()[0] = 300.0f;
  f.data<float>()[1] = 1.0f;
  convert_host(x, f);
  be().scale(x, 1000.0);  // 300000 > 65504
  CHECK(std::isinf(be().sum_squares(x)));
}
