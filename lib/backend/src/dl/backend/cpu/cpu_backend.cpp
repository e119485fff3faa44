// The CPU backend: the front's checked ops on host tensors, bf16/f16 widened to f32, dispatched to
// the templated kernels in f32 or f64.
#include <cstring>
#include <deque>
#include <exception>
#include <utility>
#include <vector>

#include "dl/backend/backend.hpp"
#include "dl/backend/cpu/kernels.hpp"
#include "dl/backend/cpu/llama_kernels.hpp"
#include "dl/core/half.hpp"

namespace dl {

namespace {

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

// The ops on f32 or f64 tensors, all of one dtype: the templated kernels dispatched by dtype.
// The front (backend.cpp) has checked the arguments, and CpuBackend the index values.
class Kernels {
 public:
  void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int64_t vocab_start) {
    int64_t B = tokens.size(0), T = tokens.size(1), C = wte.size(1);
    dispatch(out, [&](auto z) {
      using F = decltype(z);
      cpu::encoder_forward(ptr<F>(out), tokens.data<int32_t>(), ptr<F>(wte), ptr<F>(wpe), B, T, C, vocab_start,
                           wte.size(0));
    });
  }

  void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens, int64_t vocab_start) {
    int64_t B = tokens.size(0), T = tokens.size(1), C = dwte.size(1);
    dispatch(dout, [&](auto z) {
      using F = decltype(z);
      cpu::encoder_backward(ptr<F>(dwte), ptr<F>(dwpe), ptr<F>(dout), tokens.data<int32_t>(), B, T, C, vocab_start,
                            dwte.size(0));
    });
  }

  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                         const Tensor& bias) {
    int64_t C = inp.size(-1), N = inp.numel() / C;
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::layernorm_forward(ptr<F>(out), ptr<F>(mean), ptr<F>(rstd), ptr<F>(inp), ptr<F>(weight),
                             ptr<F>(bias), N, C);
    });
  }

  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                          const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate) {
    int64_t C = inp.size(-1), N = inp.numel() / C;
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::layernorm_backward(ptr<F>(dinp), ptr<F>(dweight), ptr<F>(dbias), ptr<F>(dout), ptr<F>(inp),
                              ptr<F>(weight), ptr<F>(mean), ptr<F>(rstd), N, C, accumulate);
    });
  }

  static void matmul_dims(const Tensor& inp, const Tensor& weight, WeightLayout layout, int64_t& N, int64_t& IC,
                          int64_t& OC) {
    IC = inp.size(-1);
    N = inp.numel() / IC;
    OC = layout == WeightLayout::in_out ? weight.size(1) : weight.size(0);
  }

  void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                      WeightLayout layout) {
    int64_t N, IC, OC;
    matmul_dims(inp, weight, layout, N, IC, OC);
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::matmul_forward(ptr<F>(out), ptr<F>(inp), ptr<F>(weight), ptr<F>(bias), N, IC, OC,
                          layout == WeightLayout::in_out);
    });
  }

  void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                       const Tensor& weight, WeightLayout layout, bool accumulate) {
    int64_t N, IC, OC;
    matmul_dims(inp, weight, layout, N, IC, OC);
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::matmul_backward(ptr<F>(dinp), ptr<F>(dweight), ptr<F>(dbias), ptr<F>(dout), ptr<F>(inp),
                           ptr<F>(weight), N, IC, OC, layout == WeightLayout::in_out, accumulate);
    });
  }

  static void attention_dims(const Tensor& qkv, int64_t& B, int64_t& T, int64_t& C) {
    B = qkv.size(0);
    T = qkv.size(1);
    C = qkv.size(2) / 3;
  }

  void attention_forward(Tensor& out, Tensor& state, const Tensor& qkv, int n_head) {
    int64_t B, T, C;
    attention_dims(qkv, B, T, C);
    dispatch(qkv, [&](auto z) {
      using F = decltype(z);
      cpu::attention_forward(ptr<F>(out), ptr<F>(state), ptr<F>(qkv), B, T, C, n_head);
    });
  }

  // `out` is not read (the probabilities saved in `state` give everything): the 16-bit path
  // passes it without a widened copy.
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& state,
                          int n_head) {
    int64_t B, T, C;
    attention_dims(qkv, B, T, C);
    dispatch(qkv, [&](auto z) {
      using F = decltype(z);
      cpu::attention_backward(ptr<F>(dqkv), ptr<F>(dout), ptr<F>(qkv), ptr<F>(state), B, T, C, n_head, false);
    });
  }

  void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps) {
    int64_t C = inp.size(-1), N = inp.numel() / C;
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::rmsnorm_forward(ptr<F>(out), ptr<F>(rstd), ptr<F>(inp), ptr<F>(weight), N, C, eps);
    });
  }
  void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                        const Tensor& rstd, bool accumulate) {
    int64_t C = inp.size(-1), N = inp.numel() / C;
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::rmsnorm_backward(ptr<F>(dinp), ptr<F>(dweight), ptr<F>(dout), ptr<F>(inp), ptr<F>(weight), ptr<F>(rstd),
                            N, C, accumulate);
    });
  }
  // sign +1: forward; -1: backward (the inverse rotation).
  void rope(Tensor& out, const Tensor& inp, const Tensor& inv_freq, int n_head, int sign) {
    const int64_t B = inp.size(0), T = inp.size(1), hs = inp.size(2) / n_head;
    // The angles are formed in f32 whatever inv_freq's dtype (f64 under f64 ops).
    std::vector<float> freq(static_cast<size_t>(inv_freq.numel()));
    for (size_t i = 0; i < freq.size(); ++i)
      freq[i] = inv_freq.dtype() == DType::f32 ? inv_freq.data<float>()[i]
                                               : static_cast<float>(inv_freq.data<double>()[i]);
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::rope(ptr<F>(out), ptr<F>(inp), freq.data(), B, T, int64_t{n_head}, hs, F(sign));
    });
  }
  void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
    dispatch(gate, [&](auto z) {
      using F = decltype(z);
      cpu::swiglu_forward(ptr<F>(out), ptr<F>(gate), ptr<F>(up), gate.numel());
    });
  }
  void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
    dispatch(gate, [&](auto z) {
      using F = decltype(z);
      cpu::swiglu_backward(ptr<F>(dgate), ptr<F>(dup), ptr<F>(dout), ptr<F>(gate), ptr<F>(up), gate.numel());
    });
  }
  void qkv_pack(Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head) {
    const int64_t BT = q.size(0) * q.size(1), hs = q.size(2) / n_head;
    dispatch(q, [&](auto z) {
      using F = decltype(z);
      cpu::qkv_pack(ptr<F>(qkv), ptr<F>(q), ptr<F>(k), ptr<F>(v), BT, int64_t{n_head}, int64_t{n_kv_head}, hs);
    });
  }
  void qkv_unpack(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dqkv, int n_head, int n_kv_head) {
    const int64_t BT = dq.size(0) * dq.size(1), hs = dq.size(2) / n_head;
    dispatch(dq, [&](auto z) {
      using F = decltype(z);
      cpu::qkv_unpack(ptr<F>(dq), ptr<F>(dk), ptr<F>(dv), ptr<F>(dqkv), BT, int64_t{n_head}, int64_t{n_kv_head}, hs);
    });
  }

  void gelu_forward(Tensor& out, const Tensor& inp) {
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::gelu_forward(ptr<F>(out), ptr<F>(inp), inp.numel());
    });
  }
  void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) {
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::gelu_backward(ptr<F>(dinp), ptr<F>(dout), ptr<F>(inp), inp.numel(), accumulate);
    });
  }
  void relu_forward(Tensor& out, const Tensor& inp) {
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::relu_forward(ptr<F>(out), ptr<F>(inp), inp.numel());
    });
  }
  void relu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) {
    dispatch(inp, [&](auto z) {
      using F = decltype(z);
      cpu::relu_backward(ptr<F>(dinp), ptr<F>(dout), ptr<F>(inp), inp.numel(), accumulate);
    });
  }

  void add(Tensor& out, const Tensor& a, const Tensor& b) {
    dispatch(a, [&](auto z) {
      using F = decltype(z);
      cpu::add(ptr<F>(out), ptr<F>(a), ptr<F>(b), a.numel());
    });
  }

  void bias_add(Tensor& out, const Tensor& bias) {
    int64_t C = bias.numel();
    dispatch(out, [&](auto z) {
      using F = decltype(z);
      cpu::add_bias(ptr<F>(out), ptr<F>(bias), out.numel() / C, C);
    });
  }

  void crossentropy_forward(Tensor& losses, Tensor& correct, const Tensor& logits, const Tensor& targets) {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::crossentropy_forward(ptr<F>(losses), correct.defined() ? correct.data<int32_t>() : nullptr,
                                ptr<F>(logits), targets.data<int32_t>(), N, V);
    });
  }

  void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, double dloss) {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::crossentropy_backward(ptr<F>(dlogits), ptr<F>(logits), targets.data<int32_t>(), N, V, F(dloss));
    });
  }

  void argmax(Tensor& out, const Tensor& logits) {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::argmax(out.data<int32_t>(), ptr<F>(logits), N, V);
    });
  }

  void logits_row_max(Tensor& row_max, const Tensor& logits) {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::logits_row_max(ptr<F>(row_max), ptr<F>(logits), N, V);
    });
  }
  void logits_sum_exp(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max) {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::logits_sum_exp(ptr<F>(sum_exp), ptr<F>(logits), ptr<F>(row_max), N, V);
    });
  }
  void logits_pick(Tensor& picked, const Tensor& logits, const Tensor& targets, int64_t vocab_start) {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::logits_pick(ptr<F>(picked), ptr<F>(logits), targets.data<int32_t>(), N, V, vocab_start);
    });
  }
  void crossentropy_backward_sharded(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                     const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start,
                                     double dloss) {
    int64_t V = logits.size(-1), N = logits.numel() / V;
    dispatch(logits, [&](auto z) {
      using F = decltype(z);
      cpu::crossentropy_backward_sharded(ptr<F>(dlogits), ptr<F>(logits), targets.data<int32_t>(), ptr<F>(row_max),
                                         ptr<F>(sum_exp), N, V, vocab_start, F(dloss));
    });
  }

  void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
    dispatch(param, [&](auto z) {
      using F = decltype(z);
      cpu::adamw_step(ptr<F>(param), ptr<F>(grad), ptr<F>(m), ptr<F>(v), param.numel(), p.lr, p.beta1, p.beta2,
                      p.eps, p.weight_decay, p.step, p.grad_scale);
    });
  }

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p) {
    dispatch(param, [&](auto z) {
      using F = decltype(z);
      cpu::sgd_step(ptr<F>(param), ptr<F>(grad), ptr<F>(momentum), param.numel(), p.lr, p.momentum, p.dampening,
                    p.weight_decay, p.nesterov, p.first_step, p.grad_scale);
    });
  }

  double sum(const Tensor& x) {
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

  double sum_squares(const Tensor& x) {
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

  void scale(Tensor& x, double s) {
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
    wide_.push_back(Tensor::empty(t.shape(), DType::f32));
    convert_host(wide_.back(), t);
    return wide_.back();
  }
  int uncaught_ = std::uncaught_exceptions();
  std::deque<Tensor> wide_;  // stable addresses
  std::vector<std::pair<Tensor*, Tensor>> outs_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend() : Backend({DType::f32, DType::f64, DType::bf16, DType::f16}) {}
  Device device() const override { return Device::cpu(); }
  std::string name() const override { return "cpu"; }
  Tensor empty(Shape shape, DType dtype) override { return Tensor::empty(std::move(shape), dtype); }
  void zero(Tensor& t) override { t.zero_(); }
  Shape attention_state_shape(int64_t B, int64_t T, int64_t C, int n_head) const override {
    return {B, n_head, T, T};
  }

 private:
  void copy_impl(Tensor& dst, const Tensor& src) override { dst.copy_from(src); }
  void convert_impl(Tensor& dst, const Tensor& src) override { convert_host(dst, src); }

  void encoder_forward_impl(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                            int64_t vocab_start, int64_t vocab_size) override {
    check_token_ids(tokens, vocab_size);
    Widened w;
    k_.encoder_forward(w.out(out), tokens, w.in(wte), w.in(wpe), vocab_start);
  }
  void encoder_backward_impl(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                             int64_t vocab_start) override {
    Widened w;
    k_.encoder_backward(w.out(dwte), w.out(dwpe), w.in(dout), tokens, vocab_start);
  }
  void layernorm_forward_impl(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                              const Tensor& bias) override {
    Widened w;
    k_.layernorm_forward(w.out(out), w.out(mean), w.out(rstd), w.in(inp), w.in(weight), w.in(bias));
  }
  void layernorm_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                               const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate) override {
    Widened w;
    k_.layernorm_backward(w.out(dinp), w.out(dweight), w.out(dbias), w.in(dout), w.in(inp), w.in(weight),
                            w.in(mean), w.in(rstd), accumulate);
  }
  void matmul_forward_impl(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                           WeightLayout layout) override {
    Widened w;
    k_.matmul_forward(w.out(out), w.in(inp), w.in(weight), w.in(bias), layout);
  }
  void matmul_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                            const Tensor& weight, WeightLayout layout, bool accumulate) override {
    Widened w;
    k_.matmul_backward(w.out(dinp), w.out(dweight), w.out(dbias), w.in(dout), w.in(inp), w.in(weight), layout,
                         accumulate);
  }
  void attention_forward_impl(Tensor& out, Tensor& state, const Tensor& qkv, int n_head) override {
    Widened w;
    k_.attention_forward(w.out(out), w.out(state), w.in(qkv), n_head);
  }
  void attention_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                               const Tensor& state, int n_head) override {
    Widened w;
    k_.attention_backward(w.out(dqkv), w.in(dout), w.in(qkv), out, w.in(state), n_head);
  }
  void rmsnorm_forward_impl(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                            double eps) override {
    Widened w;
    k_.rmsnorm_forward(w.out(out), w.out(rstd), w.in(inp), w.in(weight), eps);
  }
  void rmsnorm_backward_impl(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                             const Tensor& rstd, bool accumulate) override {
    Widened w;
    k_.rmsnorm_backward(w.out(dinp), w.out(dweight), w.in(dout), w.in(inp), w.in(weight), w.in(rstd), accumulate);
  }
  void rope_forward_impl(Tensor& out, const Tensor& inp, const Tensor& inv_freq, int n_head) override {
    Widened w;
    k_.rope(w.out(out), w.in(inp), inv_freq, n_head, +1);
  }
  void rope_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inv_freq, int n_head) override {
    Widened w;
    k_.rope(w.out(dinp), w.in(dout), inv_freq, n_head, -1);
  }
  void swiglu_forward_impl(Tensor& out, const Tensor& gate, const Tensor& up) override {
    Widened w;
    k_.swiglu_forward(w.out(out), w.in(gate), w.in(up));
  }
  void swiglu_backward_impl(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                            const Tensor& up) override {
    Widened w;
    k_.swiglu_backward(w.out(dgate), w.out(dup), w.in(dout), w.in(gate), w.in(up));
  }
  void qkv_pack_impl(Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head,
                     int n_kv_head) override {
    Widened w;
    k_.qkv_pack(w.out(qkv), w.in(q), w.in(k), w.in(v), n_head, n_kv_head);
  }
  void qkv_unpack_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dqkv, int n_head, int n_kv_head) override {
    Widened w;
    k_.qkv_unpack(w.out(dq), w.out(dk), w.out(dv), w.in(dqkv), n_head, n_kv_head);
  }
  void gelu_forward_impl(Tensor& out, const Tensor& inp) override {
    Widened w;
    k_.gelu_forward(w.out(out), w.in(inp));
  }
  void gelu_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) override {
    Widened w;
    k_.gelu_backward(w.out(dinp), w.in(dout), w.in(inp), accumulate);
  }
  void relu_forward_impl(Tensor& out, const Tensor& inp) override {
    Widened w;
    k_.relu_forward(w.out(out), w.in(inp));
  }
  void relu_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) override {
    Widened w;
    k_.relu_backward(w.out(dinp), w.in(dout), w.in(inp), accumulate);
  }
  void add_impl(Tensor& out, const Tensor& a, const Tensor& b) override {
    Widened w;
    k_.add(w.out(out), w.in(a), w.in(b));
  }
  void bias_add_impl(Tensor& out, const Tensor& bias) override {
    Widened w;
    k_.bias_add(w.out(out), w.in(bias));
  }
  void crossentropy_forward_impl(Tensor& losses, Tensor& correct, const Tensor& logits,
                                 const Tensor& targets) override {
    check_targets("crossentropy_forward", targets, logits.size(-1));
    Widened w;
    k_.crossentropy_forward(w.out(losses), correct, w.in(logits), targets);
  }
  void crossentropy_backward_impl(Tensor& dlogits, const Tensor& logits, const Tensor& targets, double dloss) override {
    check_targets("crossentropy_backward", targets, logits.size(-1));
    Widened w;
    k_.crossentropy_backward(w.out(dlogits), w.in(logits), targets, dloss);
  }
  void argmax_impl(Tensor& out, const Tensor& logits) override {
    Widened w;
    k_.argmax(out, w.in(logits));
  }
  void logits_row_max_impl(Tensor& row_max, const Tensor& logits) override {
    Widened w;
    k_.logits_row_max(w.out(row_max), w.in(logits));
  }
  void logits_sum_exp_impl(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max) override {
    Widened w;
    k_.logits_sum_exp(w.out(sum_exp), w.in(logits), w.in(row_max));
  }
  void logits_pick_impl(Tensor& picked, const Tensor& logits, const Tensor& targets, int64_t vocab_start) override {
    Widened w;
    k_.logits_pick(w.out(picked), w.in(logits), targets, vocab_start);
  }
  void crossentropy_backward_sharded_impl(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                          const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start,
                                          double dloss) override {
    Widened w;
    k_.crossentropy_backward_sharded(w.out(dlogits), w.in(logits), targets, w.in(row_max), w.in(sum_exp),
                                       vocab_start, dloss);
  }
  void adamw_step_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) override {
    Widened w;
    k_.adamw_step(w.out(param), w.in(grad), w.out(m), w.out(v), p);
  }
  void sgd_step_impl(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p) override {
    Widened w;
    k_.sgd_step(w.out(param), w.in(grad), w.out(momentum), p);
  }
  double sum_impl(const Tensor& x) override {
    Widened w;
    return k_.sum(w.in(x));
  }
  double sum_squares_impl(const Tensor& x) override {
    Widened w;
    return k_.sum_squares(w.in(x));
  }
  void scale_impl(Tensor& x, double s) override {
    Widened w;
    k_.scale(w.out(x), s);
  }

  Kernels k_;
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
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
