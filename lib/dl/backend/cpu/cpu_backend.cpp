// The CPU backend: shape and dtype checks, then dispatch to the templated kernels.
#include <cstring>
#include <deque>
#include <exception>
#include <utility>
#include <vector>

#include "dl/backend/backend.hpp"
#include "dl/backend/cpu/kernels.hpp"
#include "dl/core/half.hpp"

namespace dl {

namespace {

// Shape checks: a mismatch is a bug in the caller, reported with the op and the tensors.
void expect(bool ok, const char* op, const std::string& what) {
  if (!ok) throw_runtime(op, ": ", what);
}

void expect_float(const char* op, std::initializer_list<const Tensor*> ts) {
  DType d = (*ts.begin())->dtype();
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    expect(t->device().is_cpu(), op, "tensor " + t->describe() + " is on " + t->device().name());
    expect(t->dtype() == d && (d == DType::f32 || d == DType::f64), op,
           "the CPU backend takes f32 or f64 tensors of one dtype, got " + t->describe());
  }
}

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Calls fn.template operator()<T>() with T = float or double per the tensor's dtype.
template <class F>
void dispatch(const Tensor& t, F&& fn) {
  if (t.dtype() == DType::f32) {
    fn(float{});
  } else {
    fn(double{});
  }
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cpu"; }

  Tensor empty(Shape shape, DType dtype) override { return Tensor::empty(std::move(shape), dtype); }
  void zero(Tensor& t) override { t.zero_(); }
  void copy(Tensor& dst, const Tensor& src) override { dst.copy_from(src); }
  void convert(Tensor& dst, const Tensor& src) override { convert_host(dst, src); }

  void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int64_t vocab_start,
                       int64_t vocab_size) override {
    const char* op = "encoder_forward";
    expect_float(op, {&out, &wte, &wpe});
    expect(tokens.dtype() == DType::i32 && tokens.ndim() == 2, op, "tokens must be i32[B,T], got " + tokens.describe());
    int64_t B = tokens.size(0), T = tokens.size(1), C = wte.size(1);
    expect(out.numel() == B * T * C && (!wpe.defined() || (wpe.size(1) == C && wpe.size(0) >= T)), op,
           "out " + out.describe() + ", wte " + wte.describe() + ", wpe " + (wpe.defined() ? wpe.describe() : "-") +
               ", tokens " + tokens.describe());
    check_tokens(tokens, vocab_size);
    dispatch(out, [&](auto z) {
      using F = decltype(z);
      cpu::encoder_forward(ptr<F>(out), tokens.data<int32_t>(), ptr<F>(wte), ptr<F>(wpe), B, T, C, vocab_start,
                           wte.size(0));
    });
  }

  void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_start) override {
    expect_float("encoder_backward", {&dout, &dwte, &dwpe});
    int64_t B = tokens.size(0), T = tokens.size(1), C = dwte.size(1);
    dispatch(dout, [&](auto z) {
      using F = decltype(z);
      cpu::encoder_backward(ptr<F>(dwte), ptr<F>(dwpe), ptr<F>(dout), tokens.data<int32_t>(), B, T, C, vocab_start,
                            dwte.size(0));
    });
  }

  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                         const Tensor& bias) override {
    const char* op = "layernorm_forward";
    expect_float(op, {&out, &mean, &rstd, &inp, &weight, &bias});
    int64_t C = inp.size(-1), N = inp.numel() / C;
    expect(out.numel() == N * C && mean.numel() == N && rstd.numel() == N && weight.numel() == C &&
               bias.numel() == C,
           op, "inp " + inp.describe() + ", out " + out.describe() + ", weight " + weight.describe());
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::layernorm_forward(ptr<F>(out), ptr<F>(mean), ptr<F>(rstd), ptr<F>(inp), ptr<F>(weight),
                             ptr<F>(bias), N, C);
    });
  }

  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                          const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate) override {
    const char* op = "layernorm_backward";
    expect_float(op, {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd});
    int64_t C = inp.size(-1), N = inp.numel() / C;
    expect(dinp.numel() == N * C && dout.numel() == N * C && dweight.numel() == C && dbias.numel() == C, op,
           "dinp " + dinp.describe() + ", dout " + dout.describe() + ", inp " + inp.describe());
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::layernorm_backward(ptr<F>(dinp), ptr<F>(dweight), ptr<F>(dbias), ptr<F>(dout), ptr<F>(inp),
                              ptr<F>(weight), ptr<F>(mean), ptr<F>(rstd), N, C, accumulate);
    });
  }

  static void matmul_dims(const char* op, const Tensor& inp, const Tensor& weight, WeightLayout layout,
                          int64_t& N, int64_t& IC, int64_t& OC) {
    expect(weight.ndim() == 2, op, "weight must be 2-D, got " + weight.describe());
    IC = inp.size(-1);
    N = inp.numel() / IC;
    int64_t w_in = layout == WeightLayout::in_out ? weight.size(0) : weight.size(1);
    OC = layout == WeightLayout::in_out ? weight.size(1) : weight.size(0);
    expect(w_in == IC, op, "input " + inp.describe() + " does not match weight " + weight.describe());
  }

  void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                      WeightLayout layout) override {
    const char* op = "matmul_forward";
    expect_float(op, {&out, &inp, &weight, &bias});
    int64_t N, IC, OC;
    matmul_dims(op, inp, weight, layout, N, IC, OC);
    expect(out.numel() == N * OC && (!bias.defined() || bias.numel() == OC), op,
           "out " + out.describe() + " for input " + inp.describe() + " x weight " + weight.describe());
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::matmul_forward(ptr<F>(out), ptr<F>(inp), ptr<F>(weight), ptr<F>(bias), N, IC, OC,
                          layout == WeightLayout::in_out);
    });
  }

  void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                       const Tensor& weight, WeightLayout layout, bool accumulate) override {
    const char* op = "matmul_backward";
    expect_float(op, {&dout, &dinp, &dweight, &dbias, &inp, &weight});
    int64_t N, IC, OC;
    matmul_dims(op, inp, weight, layout, N, IC, OC);
    expect(dout.numel() == N * OC && (!dinp.defined() || dinp.numel() == N * IC) &&
               dweight.numel() == weight.numel() && (!dbias.defined() || dbias.numel() == OC),
           op, "dout " + dout.describe() + ", inp " + inp.describe() + ", weight " + weight.describe());
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::matmul_backward(ptr<F>(dinp), ptr<F>(dweight), ptr<F>(dbias), ptr<F>(dout), ptr<F>(inp),
                           ptr<F>(weight), N, IC, OC, layout == WeightLayout::in_out, accumulate);
    });
  }

  Shape attention_state_shape(int64_t B, int64_t T, int64_t C, int n_head) const override {
    return {B, n_head, T, T};
  }

  void attention_dims(const char* op, const Tensor& qkv, int n_head, int64_t& B, int64_t& T, int64_t& C) {
    expect(qkv.ndim() == 3 && qkv.size(2) % 3 == 0, op, "qkv must be [B,T,3C], got " + qkv.describe());
    B = qkv.size(0);
    T = qkv.size(1);
    C = qkv.size(2) / 3;
    expect(n_head > 0 && C % n_head == 0, op, "C=" + std::to_string(C) + " not divisible by heads");
  }

  void attention_forward(Tensor& out, Tensor& state, const Tensor& qkv, int n_head) override {
    const char* op = "attention_forward";
    expect_float(op, {&out, &state, &qkv});
    int64_t B, T, C;
    attention_dims(op, qkv, n_head, B, T, C);
    expect(out.numel() == B * T * C && state.numel() == B * n_head * T * T, op,
           "out " + out.describe() + ", state " + state.describe() + ", qkv " + qkv.describe());
    dispatch(qkv, [&](auto z) {
      using F = decltype(z);
      cpu::attention_forward(ptr<F>(out), ptr<F>(state), ptr<F>(qkv), B, T, C, n_head);
    });
  }

  // `out` is not read (the probabilities saved in `state` give everything), so only its shape is
  // checked and its dtype may be any: the 16-bit wrapper passes it without a widened copy.
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& state,
                          int n_head) override {
    const char* op = "attention_backward";
    expect_float(op, {&dqkv, &dout, &qkv, &state});
    int64_t B, T, C;
    attention_dims(op, qkv, n_head, B, T, C);
    expect(dqkv.numel() == qkv.numel() && dout.numel() == B * T * C && out.numel() == B * T * C, op,
           "dqkv " + dqkv.describe() + ", dout " + dout.describe() + ", out " + out.describe());
    dispatch(qkv, [&](auto z) {
      using F = decltype(z);
      cpu::attention_backward(ptr<F>(dqkv), ptr<F>(dout), ptr<F>(qkv), ptr<F>(state), B, T, C, n_head, false);
    });
  }

  void gelu_forward(Tensor& out, const Tensor& inp) override {
    expect_float("gelu_forward", {&out, &inp});
    expect(out.numel() == inp.numel(), "gelu_forward", out.describe() + " vs " + inp.describe());
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::gelu_forward(ptr<F>(out), ptr<F>(inp), inp.numel());
    });
  }
  void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) override {
    expect_float("gelu_backward", {&dinp, &dout, &inp});
    expect(dinp.numel() == inp.numel() && dout.numel() == inp.numel(), "gelu_backward", inp.describe());
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::gelu_backward(ptr<F>(dinp), ptr<F>(dout), ptr<F>(inp), inp.numel(), accumulate);
    });
  }
  void relu_forward(Tensor& out, const Tensor& inp) override {
    expect_float("relu_forward", {&out, &inp});
    expect(out.numel() == inp.numel(), "relu_forward", out.describe() + " vs " + inp.describe());
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::relu_forward(ptr<F>(out), ptr<F>(inp), inp.numel());
    });
  }
  void relu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) override {
    expect_float("relu_backward", {&dinp, &dout, &inp});
    expect(dinp.numel() == inp.numel() && dout.numel() == inp.numel(), "relu_backward", inp.describe());
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::relu_backward(ptr<F>(dinp), ptr<F>(dout), ptr<F>(inp), inp.numel(), accumulate);
    });
  }

  void add(Tensor& out, const Tensor& a, const Tensor& b) override {
    expect_float("add", {&out, &a, &b});
    expect(out.numel() == a.numel() && a.numel() == b.numel(), "add",
           out.describe() + " = " + a.describe() + " + " + b.describe());
    dispatch(a, [&](auto z) {
      using F = decltype(z);
      cpu::add(ptr<F>(out), ptr<F>(a), ptr<F>(b), a.numel());
    });
  }

  void bias_add(Tensor& out, const Tensor& bias) override {
    expect_float("bias_add", {&out, &bias});
    int64_t C = bias.numel();
    expect(C > 0 && out.numel() % C == 0, "bias_add", out.describe() + " += " + bias.describe());
    dispatch(out, [&](auto z) {
      using F = decltype(z);
      cpu::add_bias(ptr<F>(out), ptr<F>(bias), out.numel() / C, C);
    });
  }

  void crossentropy_dims(const char* op, const Tensor& logits, const Tensor& targets, int64_t& N, int64_t& V) {
    V = logits.size(-1);
    N = logits.numel() / V;
    expect(targets.dtype() == DType::i32 && targets.numel() == N, op,
           "targets must be i32 with one entry per logits row: logits " + logits.describe() + ", targets " +
               targets.describe());
    const int32_t* t = targets.data<int32_t>();
    for (int64_t r = 0; r < N; ++r) {
      if (t[r] >= V)
        throw_usage(op, ": target ", t[r], " at row ", r, " is outside the ", V, " classes of the output");
    }
  }

  void crossentropy_forward(Tensor& losses, Tensor& correct, const Tensor& logits, const Tensor& targets) override {
    const char* op = "crossentropy_forward";
    expect_float(op, {&logits, &losses});
    int64_t N, V;
    crossentropy_dims(op, logits, targets, N, V);
    expect(losses.numel() == N && (!correct.defined() || (correct.numel() == N && correct.dtype() == DType::i32)),
           op, "losses " + losses.describe() + " for logits " + logits.describe());
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::crossentropy_forward(ptr<F>(losses), correct.defined() ? correct.data<int32_t>() : nullptr,
                                ptr<F>(logits), targets.data<int32_t>(), N, V);
    });
  }

  void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, double dloss) override {
    const char* op = "crossentropy_backward";
    expect_float(op, {&dlogits, &logits});
    int64_t N, V;
    crossentropy_dims(op, logits, targets, N, V);
    expect(dlogits.numel() == logits.numel(), op, dlogits.describe() + " vs " + logits.describe());
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::crossentropy_backward(ptr<F>(dlogits), ptr<F>(logits), targets.data<int32_t>(), N, V, F(dloss));
    });
  }

  void argmax(Tensor& out, const Tensor& logits) override {
    expect_float("argmax", {&logits});
    int64_t V = logits.size(-1), N = logits.numel() / V;
    expect(out.dtype() == DType::i32 && out.numel() == N, "argmax", out.describe());
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::argmax(out.data<int32_t>(), ptr<F>(logits), N, V);
    });
  }

  void logits_row_max(Tensor& row_max, const Tensor& logits) override {
    expect_float("logits_row_max", {&logits, &row_max});
    int64_t V = logits.size(-1), N = logits.numel() / V;
    expect(row_max.numel() == N, "logits_row_max", row_max.describe());
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::logits_row_max(ptr<F>(row_max), ptr<F>(logits), N, V);
    });
  }
  void logits_sum_exp(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max) override {
    expect_float("logits_sum_exp", {&logits, &sum_exp, &row_max});
    int64_t V = logits.size(-1), N = logits.numel() / V;
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::logits_sum_exp(ptr<F>(sum_exp), ptr<F>(logits), ptr<F>(row_max), N, V);
    });
  }
  void logits_pick(Tensor& picked, const Tensor& logits, const Tensor& targets, int64_t vocab_start) override {
    expect_float("logits_pick", {&logits, &picked});
    int64_t V = logits.size(-1), N = logits.numel() / V;
    expect(targets.numel() == N && targets.dtype() == DType::i32, "logits_pick", targets.describe());
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::logits_pick(ptr<F>(picked), ptr<F>(logits), targets.data<int32_t>(), N, V, vocab_start);
    });
  }
  void crossentropy_backward_sharded(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                     const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start,
                                     double dloss) override {
    expect_float("crossentropy_backward_sharded", {&dlogits, &logits, &row_max, &sum_exp});
    int64_t V = logits.size(-1), N = logits.numel() / V;
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::crossentropy_backward_sharded(ptr<F>(dlogits), ptr<F>(logits), targets.data<int32_t>(), ptr<F>(row_max),
                                         ptr<F>(sum_exp), N, V, vocab_start, F(dloss));
    });
  }

  void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) override {
    expect_float("adamw_step", {&param, &grad, &m, &v});
    expect(grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
           "adamw_step", "param " + param.describe() + ", grad " + grad.describe());
    dispatch(param, [&](auto z) {
      using F = decltype(z);
      cpu::adamw_step(ptr<F>(param), ptr<F>(grad), ptr<F>(m), ptr<F>(v), param.numel(), p.lr, p.beta1, p.beta2,
                      p.eps, p.weight_decay, p.step, p.grad_scale);
    });
  }

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p) override {
    expect_float("sgd_step", {&param, &grad, &momentum});
    dispatch(param, [&](auto z) {
      using F = decltype(z);
      cpu::sgd_step(ptr<F>(param), ptr<F>(grad), ptr<F>(momentum), param.numel(), p.lr, p.momentum, p.dampening,
                    p.weight_decay, p.nesterov, p.first_step, p.grad_scale);
    });
  }

  double sum(const Tensor& x) override {
    expect_float("sum", {&x});
    double s = 0;
    dispatch(x, [&](auto z) {
      using F = decltype(z);
      const F* p = ptr<F>(x);
      s = parallel_sum(x.numel(), 4096, [&](int64_t lo, int64_t hi) {
        double a = 0;
        for (int64_t i = lo; i < hi; ++i) a += p[i];
        return a;
      });
    });
    return s;
  }

  double sum_squares(const Tensor& x) override {
    expect_float("sum_squares", {&x});
    double s = 0;
    dispatch(x, [&](auto z) {
      using F = decltype(z);
      const F* p = ptr<F>(x);
      s = parallel_sum(x.numel(), 4096, [&](int64_t lo, int64_t hi) {
        double a = 0;
#pragma omp simd reduction(+ : a)
        for (int64_t i = lo; i < hi; ++i) a += static_cast<double>(p[i]) * p[i];
        return a;
      });
    });
    return s;
  }

  void scale(Tensor& x, double s) override {
    expect_float("scale", {&x});
    dispatch(x, [&](auto z) {
      using F = decltype(z);
      F* p = ptr<F>(x);
      F f = F(s);
      parallel_for(x.numel(), 16384, [&](int64_t lo, int64_t hi) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) p[i] *= f;
      });
    });
  }

 private:
  static void check_tokens(const Tensor& tokens, int64_t V) {
    const int32_t* t = tokens.data<int32_t>();
    int64_t T = tokens.size(1);
    for (int64_t i = 0; i < tokens.numel(); ++i) {
      if (t[i] < 0 || t[i] >= V)
        throw_usage("token id ", t[i], " at batch row ", i / T, ", position ", i % T,
                    " is outside the model's vocabulary of ", V, " (check model.vocab_size against the data)");
    }
  }
};

// bf16 and f16 on the CPU, emulated: every 16-bit tensor of an op is widened to f32, the f32
// kernel runs, and the outputs are rounded back once, which is what the CUDA kernels do (16-bit
// storage, f32 arithmetic). Slower than f32; it exists so that mixed-precision training runs
// and is tested on any machine, and so the GPU's 16-bit numerics have a host reference.
class Widened {
 public:
  Widened() = default;
  Widened(const Widened&) = delete;
  Widened& operator=(const Widened&) = delete;
  ~Widened() noexcept(false) {
    if (std::uncaught_exceptions() > uncaught_) return;  // the op failed: leave the outputs alone
    for (auto& [dst, wide] : outs_) convert_host(*dst, wide);
  }
  // An input: itself, or an f32 copy when it is 16-bit.
  const Tensor& in(const Tensor& t) {
    if (!narrow(t)) return t;
    return widen(t);
  }
  // An output (values read too: accumulating and in-place ops): rounded back when the op returns.
  Tensor& out(Tensor& t) {
    if (!narrow(t)) return t;
    Tensor& w = widen(t);
    outs_.emplace_back(&t, w);
    return w;
  }

 private:
  static bool narrow(const Tensor& t) { return t.defined() && is_16bit_float(t.dtype()); }
  Tensor& widen(const Tensor& t) {
    expect(t.device().is_cpu(), "cpu backend", "tensor " + t.describe() + " is on " + t.device().name());
    wide_.push_back(Tensor::empty(t.shape(), DType::f32));
    convert_host(wide_.back(), t);
    return wide_.back();
  }
  int uncaught_ = std::uncaught_exceptions();
  std::deque<Tensor> wide_;  // stable addresses
  std::vector<std::pair<Tensor*, Tensor>> outs_;
};

class CpuBackendWithHalf final : public Backend {
 public:
  Device device() const override { return f32_.device(); }
  std::string name() const override { return f32_.name(); }
  Tensor empty(Shape shape, DType dtype) override { return f32_.empty(std::move(shape), dtype); }
  void zero(Tensor& t) override { f32_.zero(t); }
  void copy(Tensor& dst, const Tensor& src) override { f32_.copy(dst, src); }
  void convert(Tensor& dst, const Tensor& src) override { f32_.convert(dst, src); }

  void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int64_t vocab_start,
                       int64_t vocab_size) override {
    Widened w;
    f32_.encoder_forward(w.out(out), tokens, w.in(wte), w.in(wpe), vocab_start, vocab_size);
  }
  void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_start) override {
    Widened w;
    f32_.encoder_backward(w.out(dwte), w.out(dwpe), w.in(dout), tokens, vocab_start);
  }
  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                         const Tensor& bias) override {
    Widened w;
    f32_.layernorm_forward(w.out(out), w.out(mean), w.out(rstd), w.in(inp), w.in(weight), w.in(bias));
  }
  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                          const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate) override {
    Widened w;
    f32_.layernorm_backward(w.out(dinp), w.out(dweight), w.out(dbias), w.in(dout), w.in(inp), w.in(weight),
                            w.in(mean), w.in(rstd), accumulate);
  }
  void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                      WeightLayout layout) override {
    Widened w;
    f32_.matmul_forward(w.out(out), w.in(inp), w.in(weight), w.in(bias), layout);
  }
  void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                       const Tensor& weight, WeightLayout layout, bool accumulate) override {
    Widened w;
    f32_.matmul_backward(w.out(dinp), w.out(dweight), w.out(dbias), w.in(dout), w.in(inp), w.in(weight), layout,
                         accumulate);
  }
  Shape attention_state_shape(int64_t B, int64_t T, int64_t C, int n_head) const override {
    return f32_.attention_state_shape(B, T, C, n_head);
  }
  void attention_forward(Tensor& out, Tensor& state, const Tensor& qkv, int n_head) override {
    Widened w;
    f32_.attention_forward(w.out(out), w.out(state), w.in(qkv), n_head);
  }
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& state,
                          int n_head) override {
    Widened w;
    f32_.attention_backward(w.out(dqkv), w.in(dout), w.in(qkv), out, w.in(state), n_head);
  }
  void gelu_forward(Tensor& out, const Tensor& inp) override {
    Widened w;
    f32_.gelu_forward(w.out(out), w.in(inp));
  }
  void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) override {
    Widened w;
    f32_.gelu_backward(w.out(dinp), w.in(dout), w.in(inp), accumulate);
  }
  void relu_forward(Tensor& out, const Tensor& inp) override {
    Widened w;
    f32_.relu_forward(w.out(out), w.in(inp));
  }
  void relu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) override {
    Widened w;
    f32_.relu_backward(w.out(dinp), w.in(dout), w.in(inp), accumulate);
  }
  void add(Tensor& out, const Tensor& a, const Tensor& b) override {
    Widened w;
    f32_.add(w.out(out), w.in(a), w.in(b));
  }
  void bias_add(Tensor& out, const Tensor& bias) override {
    Widened w;
    f32_.bias_add(w.out(out), w.in(bias));
  }
  void crossentropy_forward(Tensor& losses, Tensor& correct, const Tensor& logits, const Tensor& targets) override {
    Widened w;
    f32_.crossentropy_forward(w.out(losses), correct, w.in(logits), targets);
  }
  void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, double dloss) override {
    Widened w;
    f32_.crossentropy_backward(w.out(dlogits), w.in(logits), targets, dloss);
  }
  void argmax(Tensor& out, const Tensor& logits) override {
    Widened w;
    f32_.argmax(out, w.in(logits));
  }
  void logits_row_max(Tensor& row_max, const Tensor& logits) override {
    Widened w;
    f32_.logits_row_max(w.out(row_max), w.in(logits));
  }
  void logits_sum_exp(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max) override {
    Widened w;
    f32_.logits_sum_exp(w.out(sum_exp), w.in(logits), w.in(row_max));
  }
  void logits_pick(Tensor& picked, const Tensor& logits, const Tensor& targets, int64_t vocab_start) override {
    Widened w;
    f32_.logits_pick(w.out(picked), w.in(logits), targets, vocab_start);
  }
  void crossentropy_backward_sharded(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                     const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start,
                                     double dloss) override {
    Widened w;
    f32_.crossentropy_backward_sharded(w.out(dlogits), w.in(logits), targets, w.in(row_max), w.in(sum_exp),
                                       vocab_start, dloss);
  }
  void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) override {
    Widened w;
    f32_.adamw_step(w.out(param), w.in(grad), w.out(m), w.out(v), p);
  }
  void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p) override {
    Widened w;
    f32_.sgd_step(w.out(param), w.in(grad), w.out(momentum), p);
  }
  double sum(const Tensor& x) override {
    Widened w;
    return f32_.sum(w.in(x));
  }
  double sum_squares(const Tensor& x) override {
    Widened w;
    return f32_.sum_squares(w.in(x));
  }
  void scale(Tensor& x, double s) override {
    Widened w;
    f32_.scale(w.out(x), s);
  }

 private:
  CpuBackend f32_;
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackendWithHalf backend;
  return backend;
}

void copy_converted(Backend& be, Tensor& dst, const Tensor& src) {
  if (src.device() == dst.device()) {
    (dst.device().is_cpu() ? cpu_backend() : be).convert(dst, src);
  } else if (src.device().is_cpu()) {
    Tensor host = Tensor::empty(src.shape(), dst.dtype());
    convert_host(host, src);
    be.copy(dst, host.view(dst.shape()));
  } else {
    Tensor host = Tensor::empty(src.shape(), src.dtype());
    be.copy(host, src);
    convert_host(dst, host);
  }
}

}  // namespace dl
