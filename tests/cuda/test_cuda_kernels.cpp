// The CUDA backend against the CPU backend in double precision, op by op and for a whole GPT.
//
// Method (the GPU method notes): fresh random inputs for every check, rounded to the dtype under
// test first so the f64 reference sees exactly what the GPU sees; every output poisoned with NaN
// before the op, so an element the kernel forgot to write fails; the error is
// ||gpu - ref|| / ||ref|| over the whole tensor, below 1e-5 for f32, 1e-2 for bf16 and 2e-3 for
// f16 (see tolerance()), and every element within a bound (element_bound()). Gradients that ops
// add to start from random values, so "added to" and "written" are both checked.
//
// Every case needs a GPU: without one, gpu_main.cpp prints "skipped: no CUDA device (<reason>)"
// and exits 77 before running any, which ctest reports as skipped. The probe and device-selection
// tests, which run everywhere, are in test_cuda_host.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "dl/backend/backend.hpp"
#include "dl/backend/cuda/cuda_backend.hpp"
#include "dl/core/half.hpp"
#include "dl/nn/gpt.hpp"
#include "support/numeric.hpp"

using namespace dl;
using namespace dl::test;

namespace {

constexpr DType F64 = DType::f64;

CudaBackend& cu() { return cuda_backend(); }
Backend& cpu() { return cpu_backend(); }

uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7FC0;
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float bf16_value(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double round_to(double x, DType dt) {
  if (dt == DType::f32) return static_cast<double>(static_cast<float>(x));
  if (dt == DType::bf16) return bf16_value(bf16_bits(static_cast<float>(x)));
  if (dt == DType::f16) return f16_to_float(float_to_f16(static_cast<float>(x)));
  return x;
}

// Host f64 values -> a device tensor of dtype dt (values must already be representable).
Tensor upload(const Tensor& ref, DType dt) {
  Tensor host = Tensor::empty(ref.shape(), dt);
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double v = get(ref, i);
    if (dt == DType::f32) host.data<float>()[i] = static_cast<float>(v);
    else if (dt == DType::f16) static_cast<uint16_t*>(host.raw())[i] = float_to_f16(static_cast<float>(v));
    else static_cast<uint16_t*>(host.raw())[i] = bf16_bits(static_cast<float>(v));
  }
  Tensor dev = cu().empty(ref.shape(), dt);
  cu().copy(dev, host);
  return dev;
}

// A device float tensor -> host f64.
Tensor download(const Tensor& dev) {
  Tensor host = Tensor::empty(dev.shape(), dev.dtype());
  cu().copy(host, dev);
  Tensor out = Tensor::empty(dev.shape(), F64);
  for (int64_t i = 0; i < dev.numel(); ++i) {
    const uint16_t bits = dev.dtype() == DType::f32 ? 0 : static_cast<uint16_t*>(host.raw())[i];
    double v = dev.dtype() == DType::f32   ? host.data<float>()[i]
               : dev.dtype() == DType::f16 ? f16_to_float(bits)
                                           : bf16_value(bits);
    out.data<double>()[i] = v;
  }
  return out;
}

Tensor download_i32(const Tensor& dev) {
  Tensor host = Tensor::empty(dev.shape(), DType::i32);
  cu().copy(host, dev);
  return host;
}

// A device tensor full of NaN: whatever the op does not write stays NaN and fails the check.
Tensor poisoned(Shape shape, DType dt) {
  Tensor ref = Tensor::empty(shape, F64);
  for (int64_t i = 0; i < ref.numel(); ++i) ref.data<double>()[i] = std::numeric_limits<double>::quiet_NaN();
  return upload(ref, dt);
}

// Random inputs: the f64 reference (already rounded to dt) and its device copy.
struct Pair {
  Tensor ref, dev;
};
uint64_t g_key = 0x5eed;  // every draw takes a fresh key: new inputs for every check
Pair make(Shape shape, DType dt, double lo = -1.0, double hi = 1.0) {
  Tensor r = random_tensor(shape, F64, g_key++, lo, hi);
  for (int64_t i = 0; i < r.numel(); ++i) r.data<double>()[i] = round_to(r.data<double>()[i], dt);
  return {r, upload(r, dt)};
}

bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(get(t, i))) return false;
  return true;
}

// f32: 1e-5. bf16 (8 significant bits, unit roundoff u = 2^-8 = 3.9e-3): 1e-2. f16 (11 bits,
// u = 2^-11 = 4.9e-4): 2e-3, since inputs are exact in f16 and arithmetic is f32, so the error is
// the output's rounding, at most two roundings where an op's result is rounded and then used
// (bias_add then scale; a GEMM then the bias kernel when the epilogue is not taken): 2u = 9.8e-4
// per element at worst, and the norm over a tensor averages it lower. A cuBLASLt split-K that
// adds its parts in the output type adds about u * sqrt((parts + 1) / 6) (rms), well inside.
double tolerance(DType dt) {
  if (dt == DType::f32) return 1e-5;
  if (dt == DType::f16) return 2e-3;
  return 1e-2;
}

// Element by element too, since a norm over the whole tensor lets one wrong column through:
// |gpu - ref| <= k u max|ref| with u = 2^-24 (f32), 2^-8 (bf16), 2^-11 (f16). bf16, f16: k = 4,
// twice the two roundings that tolerance() allows per element, and 4.4x the largest element error
// of the tensor-core attention under the warp emulator (tests/kernels: 0.91 u); f32: k = 168, the
// f32 bar (1e-5) per element, for sums of hundreds of terms in f32. Not yet run on a GPU: each
// check prints its largest element error on failure, so the first GPU run reports them.
double element_bound(DType dt) {
  if (dt == DType::f32) return 168 * 0x1p-24;
  return 4 * (dt == DType::f16 ? 0x1p-11 : 0x1p-8);
}
// max |got - ref| / max |ref|.
double element_error(const Tensor& got, const Tensor& ref) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    err = std::max(err, std::fabs(get(got, i) - get(ref, i)));
    scale = std::max(scale, std::fabs(get(ref, i)));
  }
  return err == 0 ? 0 : err / scale;
}

void check_close(const Tensor& dev, const Tensor& ref, DType dt, const char* what) {
  Tensor got = download(dev);
  const bool finite = all_finite(got);
  const double err = rel_error(got, ref), el = element_error(got, ref);
  CHECK_MESSAGE((finite && err < tolerance(dt)), what, ": rel error ", err, (finite ? "" : " (NaN/Inf: unwritten?)"),
                " in ", dtype_name(dt));
  CHECK_MESSAGE((finite && el <= element_bound(dt)), what, ": an element off by ", el, " max|ref| (bound ",
                element_bound(dt), ") in ", dtype_name(dt));
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

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Op by op against the CPU backend in f64.

TEST_CASE("encoder forward and backward") {
  for (DType dt : kDTypes) {
    for (int64_t v0 : {int64_t{0}, int64_t{20}}) {  // whole vocabulary, and a vocabulary-parallel shard
      CAPTURE(v0);
      const int64_t B = 3, T = 37, C = 72, V = 50, rows = v0 ? 25 : V;
      Pair wte = make({rows, C}, dt), wpe = make({T + 3, C}, dt), dout = make({B, T, C}, dt);
      Tensor tokens = host_i32({B, T}, random_ids(B * T, V, g_key++));
      Tensor wpe_rows = wpe.ref.rows(0, T), wpe_dev = wpe.dev.rows(0, T);

      Tensor out_ref = Tensor::empty({B, T, C}, F64), out = poisoned({B, T, C}, dt);
      cpu().encoder_forward(out_ref, tokens, wte.ref, wpe_rows, v0, V);
      cu().encoder_forward(out, tokens, wte.dev, wpe_dev, v0, V);
      check_close(out, out_ref, dt, "encoder_forward");

      // Tokens already on the device take the same path.
      Tensor tokens_dev = cu().empty({B, T}, DType::i32);
      cu().copy(tokens_dev, tokens);
      Tensor out2 = poisoned({B, T, C}, dt);
      cu().encoder_forward(out2, tokens_dev, wte.dev, Tensor(), v0, V);
      Tensor out2_ref = Tensor::empty({B, T, C}, F64);
      cpu().encoder_forward(out2_ref, tokens, wte.ref, Tensor(), v0, V);
      check_close(out2, out2_ref, dt, "encoder_forward without wpe, device tokens");

      Pair dwte = make({rows, C}, dt), dwpe = make({T, C}, dt);  // added to
      Tensor dwte_ref = dwte.ref.clone(), dwpe_ref = dwpe.ref.clone();
      cpu().encoder_backward(dwte_ref, dwpe_ref, dout.ref, tokens, v0);
      cu().encoder_backward(dwte.dev, dwpe.dev, dout.dev, tokens, v0);
      check_close(dwte.dev, dwte_ref, dt, "encoder_backward dwte");
      check_close(dwpe.dev, dwpe_ref, dt, "encoder_backward dwpe");
    }
  }
}

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

TEST_CASE("layernorm forward and backward") {
  for (DType dt : kDTypes) {
    for (int64_t C : {int64_t{96}, int64_t{773}}) {
      CAPTURE(C);
      const int64_t N = 301;
      Pair x = make({N, C}, dt, -2, 3), w = make({C}, dt, 0.5, 1.5), b = make({C}, dt);
      Tensor out_ref = Tensor::empty({N, C}, F64), mean_ref = Tensor::empty({N}, F64), rstd_ref = Tensor::empty({N}, F64);
      cpu().layernorm_forward(out_ref, mean_ref, rstd_ref, x.ref, w.ref, b.ref);
      Tensor out = poisoned({N, C}, dt), mean = poisoned({N}, dt), rstd = poisoned({N}, dt);
      cu().layernorm_forward(out, mean, rstd, x.dev, w.dev, b.dev);
      check_close(out, out_ref, dt, "layernorm_forward out");
      check_close(mean, mean_ref, dt, "layernorm_forward mean");
      check_close(rstd, rstd_ref, dt, "layernorm_forward rstd");

      for (bool accumulate : {false, true}) {
        CAPTURE(accumulate);
        Pair dout = make({N, C}, dt), dw = make({C}, dt), db = make({C}, dt);
        Pair dinp = accumulate ? make({N, C}, dt) : Pair{Tensor::zeros({N, C}, F64), poisoned({N, C}, dt)};
        Tensor dinp_ref = dinp.ref.clone(), dw_ref = dw.ref.clone(), db_ref = db.ref.clone();
        cpu().layernorm_backward(dinp_ref, dw_ref, db_ref, dout.ref, x.ref, w.ref, mean_ref, rstd_ref, accumulate);
        cu().layernorm_backward(dinp.dev, dw.dev, db.dev, dout.dev, x.dev, w.dev, mean, rstd, accumulate);
        check_close(dinp.dev, dinp_ref, dt, "layernorm_backward dinp");
        check_close(dw.dev, dw_ref, dt, "layernorm_backward dweight");
        check_close(db.dev, db_ref, dt, "layernorm_backward dbias");
      }
    }
  }
}

TEST_CASE("matmul forward and backward, both weight layouts, with and without bias") {
  for (DType dt : kDTypes) {
    for (WeightLayout layout : {WeightLayout::in_out, WeightLayout::out_in}) {
      for (bool with_bias : {true, false}) {
        for (bool misaligned : {false, true}) {
          CAPTURE(static_cast<int>(layout));
          CAPTURE(with_bias);
          CAPTURE(misaligned);
          const int64_t N = 150, IC = 96, OC = 200;
          const Shape ws = layout == WeightLayout::in_out ? Shape{IC, OC} : Shape{OC, IC};
          Pair x = make({N, IC}, dt), bias = make({OC}, dt), dout = make({N, OC}, dt);
          // A weight at an odd element offset (as parameters sit in one flat buffer): exercises
          // the alignment handling of the GEMM path.
          Pair wbuf = make({IC * OC + 1}, dt);
          const int64_t off = misaligned ? 1 : 0;
          Tensor w_ref = wbuf.ref.flat_slice(off, ws), w = wbuf.dev.flat_slice(off, ws);
          Tensor b_ref = with_bias ? bias.ref : Tensor(), b = with_bias ? bias.dev : Tensor();

          Tensor out_ref = Tensor::empty({N, OC}, F64), out = poisoned({N, OC}, dt);
          cpu().matmul_forward(out_ref, x.ref, w_ref, b_ref, layout);
          cu().matmul_forward(out, x.dev, w, b, layout);
          check_close(out, out_ref, dt, "matmul_forward");

          for (bool accumulate : {false, true}) {
            CAPTURE(accumulate);
            Pair dinp = accumulate ? make({N, IC}, dt) : Pair{Tensor::zeros({N, IC}, F64), poisoned({N, IC}, dt)};
            Pair dw = make(ws, dt), db = make({OC}, dt);
            Tensor dinp_ref = dinp.ref.clone(), dw_ref = dw.ref.clone(), db_ref = db.ref.clone();
            Tensor db_ref_arg = with_bias ? db_ref : Tensor(), db_arg = with_bias ? db.dev : Tensor();
            cpu().matmul_backward(dinp_ref, dw_ref, db_ref_arg, dout.ref, x.ref, w_ref, layout, accumulate);
            cu().matmul_backward(dinp.dev, dw.dev, db_arg, dout.dev, x.dev, w, layout, accumulate);
            check_close(dinp.dev, dinp_ref, dt, "matmul_backward dinp");
            check_close(dw.dev, dw_ref, dt, "matmul_backward dweight");
            if (with_bias) check_close(db.dev, db_ref, dt, "matmul_backward dbias");
          }
        }
      }
    }
  }
}

TEST_CASE("causal attention forward and backward (flash kernel, no T x T buffer)") {
  struct Shape3 {
    int64_t B, T, C;
    int H;
  };
  // Head sizes 32, 64, 80 (not a multiple of 32) and 128 (the limit); T not a multiple of the tiles.
  for (Shape3 s : {Shape3{2, 67, 96, 3}, Shape3{1, 130, 256, 4}, Shape3{2, 45, 160, 2}, Shape3{1, 70, 256, 2}}) {
    for (DType dt : kDTypes) {
      CAPTURE(s.T);
      CAPTURE(s.C);
      CAPTURE(s.H);
      const int64_t B = s.B, T = s.T, C = s.C;
      Pair qkv = make({B, T, 3 * C}, dt, -2, 2), dout = make({B, T, C}, dt);
      Tensor out_ref = Tensor::empty({B, T, C}, F64);
      Tensor att_ref = Tensor::empty(cpu().attention_state_shape(B, T, C, s.H), F64);
      cpu().attention_forward(out_ref, att_ref, qkv.ref, s.H);
      Tensor out = poisoned({B, T, C}, dt);
      Tensor state = cu().empty(cu().attention_state_shape(B, T, C, s.H), dt);
      CHECK(state.numel() < B * s.H * T * T);  // the GPU state is per row, not per pair
      cu().attention_forward(out, state, qkv.dev, s.H);
      check_close(out, out_ref, dt, "attention_forward");

      Tensor dqkv_ref = Tensor::empty({B, T, 3 * C}, F64), dqkv = poisoned({B, T, 3 * C}, dt);
      cpu().attention_backward(dqkv_ref, dout.ref, qkv.ref, out_ref, att_ref, s.H);
      cu().attention_backward(dqkv, dout.dev, qkv.dev, out, state, s.H);
      check_close(dqkv, dqkv_ref, dt, "attention_backward dqkv");
    }
  }
}

TEST_CASE("gelu, relu, add, bias_add, scale, convert") {
  for (DType dt : kDTypes) {
    const int64_t N = 513, C = 77;
    Pair x = make({N, C}, dt, -4, 4), dout = make({N, C}, dt), y = make({N, C}, dt), bias = make({C}, dt);
    for (bool gelu : {true, false}) {
      CAPTURE(gelu);
      Tensor out_ref = Tensor::empty({N, C}, F64), out = poisoned({N, C}, dt);
      if (gelu) {
        cpu().gelu_forward(out_ref, x.ref);
        cu().gelu_forward(out, x.dev);
      } else {
        cpu().relu_forward(out_ref, x.ref);
        cu().relu_forward(out, x.dev);
      }
      check_close(out, out_ref, dt, gelu ? "gelu_forward" : "relu_forward");
      for (bool accumulate : {false, true}) {
        Pair dinp = accumulate ? make({N, C}, dt) : Pair{Tensor::zeros({N, C}, F64), poisoned({N, C}, dt)};
        Tensor dinp_ref = dinp.ref.clone();
        if (gelu) {
          cpu().gelu_backward(dinp_ref, dout.ref, x.ref, accumulate);
          cu().gelu_backward(dinp.dev, dout.dev, x.dev, accumulate);
        } else {
          cpu().relu_backward(dinp_ref, dout.ref, x.ref, accumulate);
          cu().relu_backward(dinp.dev, dout.dev, x.dev, accumulate);
        }
        check_close(dinp.dev, dinp_ref, dt, gelu ? "gelu_backward" : "relu_backward");
      }
    }
    // In place, as the model calls it: gelu_backward(d, d, x).
    {
      Pair d = make({N, C}, dt);
      Tensor d_ref = d.ref.clone();
      cpu().gelu_backward(d_ref, d_ref, x.ref, false);
      cu().gelu_backward(d.dev, d.dev, x.dev, false);
      check_close(d.dev, d_ref, dt, "gelu_backward in place");
    }
    Tensor sum_ref = Tensor::empty({N, C}, F64), sum = poisoned({N, C}, dt);
    cpu().add(sum_ref, x.ref, y.ref);
    cu().add(sum, x.dev, y.dev);
    check_close(sum, sum_ref, dt, "add");
    Tensor yb_ref = y.ref.clone();
    cpu().bias_add(yb_ref, bias.ref);
    cu().bias_add(y.dev, bias.dev);
    check_close(y.dev, yb_ref, dt, "bias_add");
    cpu().scale(yb_ref, -0.37);
    cu().scale(y.dev, -0.37);
    check_close(y.dev, yb_ref, dt, "scale");
  }
  // f32 -> bf16 / f16 -> f32 rounds to nearest even, as the host does; so do bf16 <-> f16 (through
  // f32, which holds both exactly).
  Pair a = make({1000}, DType::f32, -100, 100);
  auto rounded = [](const Tensor& ref, DType dt) {
    Tensor r = ref.clone();
    for (int64_t i = 0; i < r.numel(); ++i) r.data<double>()[i] = round_to(get(r, i), dt);
    return r;
  };
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(dt));
    Tensor narrow = poisoned({1000}, dt), back = poisoned({1000}, DType::f32);
    cu().convert(narrow, a.dev);
    cu().convert(back, narrow);
    Tensor want = rounded(a.ref, dt);
    CHECK(max_abs_diff(download(narrow), want) == 0.0);
    CHECK(max_abs_diff(download(back), want) == 0.0);
    // To the other 16-bit type.
    const DType other = dt == DType::bf16 ? DType::f16 : DType::bf16;
    Tensor cross = poisoned({1000}, other);
    cu().convert(cross, narrow);
    CHECK(max_abs_diff(download(cross), rounded(want, other)) == 0.0);
  }
  // f16 overflows to Inf (what fp16 loss scaling detects): 65504 is the largest f16, 65519 rounds
  // down to it, 65520 is the halfway point and rounds to even, which is Inf.
  {
    Tensor big = Tensor::empty({6}, F64);
    const double vals[] = {65504.0, 65519.0, 65520.0, -70000.0, 1e6, 6e-8};
    for (int64_t i = 0; i < 6; ++i) big.data<double>()[i] = vals[i];
    Tensor h = poisoned({6}, DType::f16);
    cu().convert(h, upload(big, DType::f32));
    Tensor got = download(h);
    CHECK(get(got, 0) == 65504.0);
    CHECK(get(got, 1) == 65504.0);
    CHECK((std::isinf(get(got, 2)) && get(got, 2) > 0));
    CHECK((std::isinf(get(got, 3)) && get(got, 3) < 0));
    CHECK(std::isinf(get(got, 4)));
    CHECK(get(got, 5) == std::ldexp(1.0, -24));  // the smallest subnormal (5.96e-8)
  }
}

TEST_CASE("softmax cross-entropy over a GPT-2 sized vocabulary, argmax, vocabulary-parallel pieces") {
  for (DType dt : kDTypes) {
    const int64_t N = 37, V = 50257;
    Pair logits = make({N, V}, dt, -6, 6);
    Tensor targets = host_i32({N}, random_ids(N, V, g_key++, 0.15));
    const DType loss_t = DType::f32;  // f32 losses under bf16 logits
    Tensor losses_ref = Tensor::empty({N}, F64), correct_ref = Tensor::empty({N}, DType::i32);
    cpu().crossentropy_forward(losses_ref, correct_ref, logits.ref, targets);
    Tensor losses = poisoned({N}, loss_t), correct = Tensor::empty({N}, DType::i32);
    std::fill_n(correct.data<int32_t>(), N, -7);
    cu().crossentropy_forward(losses, correct, logits.dev, targets);
    check_close(losses, losses_ref, DType::f32, "crossentropy_forward losses");
    for (int64_t r = 0; r < N; ++r) CHECK(correct.data<int32_t>()[r] == correct_ref.data<int32_t>()[r]);

    Tensor am_ref = Tensor::empty({N}, DType::i32), am = cu().empty({N}, DType::i32);
    cpu().argmax(am_ref, logits.ref);
    cu().argmax(am, logits.dev);
    Tensor am_host = download_i32(am);
    for (int64_t r = 0; r < N; ++r) CHECK(am_host.data<int32_t>()[r] == am_ref.data<int32_t>()[r]);

    const double dloss = 1.0 / 29.0;
    Tensor dl_ref = Tensor::empty({N, V}, F64), dl = poisoned({N, V}, dt);
    cpu().crossentropy_backward(dl_ref, logits.ref, targets, dloss);
    cu().crossentropy_backward(dl, logits.dev, targets, dloss);
    check_close(dl, dl_ref, dt, "crossentropy_backward");
    // In place, as the model calls it.
    Tensor inplace = cu().empty({N, V}, dt);
    cu().copy(inplace, logits.dev);
    cu().crossentropy_backward(inplace, inplace, targets, dloss);
    check_close(inplace, dl_ref, dt, "crossentropy_backward in place");

    // Vocabulary-parallel pieces over a shard [v0, v0 + Vs).
    const int64_t v0 = 1000, Vs = 3000;
    Pair shard = make({N, Vs}, dt, -6, 6);
    Tensor mx_ref = Tensor::empty({N}, F64), se_ref = Tensor::empty({N}, F64), pk_ref = Tensor::empty({N}, F64);
    cpu().logits_row_max(mx_ref, shard.ref);
    cpu().logits_sum_exp(se_ref, shard.ref, mx_ref);
    cpu().logits_pick(pk_ref, shard.ref, targets, v0);
    Tensor mx = poisoned({N}, dt), se = poisoned({N}, dt), pk = poisoned({N}, dt);
    cu().logits_row_max(mx, shard.dev);
    check_close(mx, mx_ref, dt, "logits_row_max");
    cu().logits_sum_exp(se, shard.dev, mx);
    // The sum uses the GPU's (rounded) row max: compare against the reference on that max.
    Tensor mx_used = download(mx), se_ref2 = Tensor::empty({N}, F64);
    cpu().logits_sum_exp(se_ref2, shard.ref, mx_used);
    check_close(se, se_ref2, dt, "logits_sum_exp");
    cu().logits_pick(pk, shard.dev, targets, v0);
    check_close(pk, pk_ref, dt, "logits_pick");
    Tensor se_used = download(se);
    Tensor dsh_ref = Tensor::empty({N, Vs}, F64), dsh = poisoned({N, Vs}, dt);
    cpu().crossentropy_backward_sharded(dsh_ref, shard.ref, targets, mx_used, se_used, v0, dloss);
    cu().crossentropy_backward_sharded(dsh, shard.dev, targets, mx, se, v0, dloss);
    check_close(dsh, dsh_ref, dt, "crossentropy_backward_sharded");
  }
}

TEST_CASE("AdamW and SGD over flat buffers, f32, bf16, f16, and f32 master weights with 16-bit gradients") {
  struct Mix {
    DType param, grad;
  };
  const Mix mixes[] = {Mix{DType::f32, DType::f32},  Mix{DType::bf16, DType::bf16}, Mix{DType::f16, DType::f16},
                       Mix{DType::f32, DType::bf16}, Mix{DType::f32, DType::f16}};
  for (Mix mix : mixes) {
    CAPTURE(dtype_name(mix.param));
    CAPTURE(dtype_name(mix.grad));
    const int64_t n = 100003;
    Pair p = make({n}, mix.param), g = make({n}, mix.grad, -0.1, 0.1), m = make({n}, mix.param, -0.01, 0.01);
    Pair v = make({n}, mix.param, 0.0, 1e-3);
    AdamWParams ap;
    ap.lr = 3e-3;
    ap.weight_decay = 0.1;
    ap.step = 7;
    ap.grad_scale = 0.8;
    Tensor p_ref = p.ref.clone(), m_ref = m.ref.clone(), v_ref = v.ref.clone();
    cpu().adamw_step(p_ref, g.ref, m_ref, v_ref, ap);
    cu().adamw_step(p.dev, g.dev, m.dev, v.dev, ap);
    check_close(p.dev, p_ref, mix.param, "adamw param");
    check_close(m.dev, m_ref, mix.param, "adamw exp_avg");
    check_close(v.dev, v_ref, mix.param, "adamw exp_avg_sq");
    // The update itself, which is small next to the parameters: f32 must get it right too.
    if (mix.param == DType::f32) {
      Tensor delta_got = download(p.dev), delta_ref = p_ref.clone();
      for (int64_t i = 0; i < n; ++i) {
        delta_got.data<double>()[i] -= get(p.ref, i);
        delta_ref.data<double>()[i] -= get(p.ref, i);
      }
      CHECK(rel_error(delta_got, delta_ref) < 1e-4);
    }
  }
  for (Mix mix : mixes) {
    CAPTURE(dtype_name(mix.param));
    CAPTURE(dtype_name(mix.grad));
    const DType dt = mix.param;
    for (bool nesterov : {false, true}) {
      const int64_t n = 5001;
      Pair p = make({n}, dt), g = make({n}, mix.grad), buf = make({n}, dt);
      SgdParams sp;
      sp.lr = 0.05;
      sp.momentum = 0.9;
      sp.dampening = 0.1;
      sp.weight_decay = 0.01;
      sp.nesterov = nesterov;
      sp.grad_scale = 0.5;
      Tensor p_ref = p.ref.clone(), b_ref = buf.ref.clone();
      cpu().sgd_step(p_ref, g.ref, b_ref, sp);
      cu().sgd_step(p.dev, g.dev, buf.dev, sp);
      check_close(p.dev, p_ref, dt, "sgd param");
      check_close(buf.dev, b_ref, dt, "sgd momentum");
    }
  }
}

TEST_CASE("sum and sum_squares are exact in double and propagate NaN") {
  for (DType dt : kDTypes) {
    Pair x = make({1234567}, dt);
    const double s_ref = cpu().sum(x.ref), ss_ref = cpu().sum_squares(x.ref);
    CHECK(std::fabs(cu().sum(x.dev) - s_ref) <= 1e-9 * std::max(1.0, std::fabs(s_ref)));
    CHECK(std::fabs(cu().sum_squares(x.dev) - ss_ref) <= 1e-12 * ss_ref);
    CHECK(cu().sum(x.dev) == cu().sum(x.dev));  // the same bits every time
    Tensor with_nan = x.ref.clone();
    with_nan.data<double>()[777] = std::numeric_limits<double>::quiet_NaN();
    Tensor nan_dev = upload(with_nan, dt);
    CHECK(std::isnan(cu().sum_squares(nan_dev)));
    // An overflowed gradient (Inf) makes the norm Inf: the fp16 loss scaler's overflow check.
    Tensor with_inf = x.ref.clone();
    with_inf.data<double>()[4321] = -std::numeric_limits<double>::infinity();
    const double ss_inf = cu().sum_squares(upload(with_inf, dt));
    CHECK((std::isinf(ss_inf) && ss_inf > 0));
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

TEST_CASE("a whole GPT forward and backward on the GPU matches the CPU in f64") {
  GptConfig g;
  g.n_layer = 2;
  g.n_head = 4;
  g.n_embd = 64;
  g.block_size = 32;
  g.vocab_size = 97;
  const int64_t B = 3, T = 32;
  GptModel ref(g, cpu(), F64), dev(g, cu(), DType::f32);
  ref.params().initialize(1234);
  dev.params().initialize(1234);
  Batch batch{host_i32({B, T}, random_ids(B * T, g.vocab_size, g_key++)),
              host_i32({B, T}, random_ids(B * T, g.vocab_size, g_key++, 0.1))};
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
