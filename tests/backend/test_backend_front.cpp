// The backend front (backend.cpp): every op's dtype, device and shape checks, written once for
// every backend. A wrong argument to each op is refused before any implementation runs, with
// the same message from the CPU backend and from a fake backend that takes CUDA's dtypes, keeps
// CUDA's attention state and only counts the implementation calls it gets (the CUDA backend
// itself needs a GPU; it inherits the same front).
#include <doctest/doctest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dl/backend/backend.hpp"

using namespace dl;

namespace {

constexpr DType F32 = DType::f32;

// Takes f32, bf16 and f16 like the CUDA backend and counts the ops that reach an implementation.
// On Device::cuda(0) its tensors are host memory labelled cuda:0 (never read: no op runs).
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Device dev = Device::cpu()) : Backend({DType::f32, DType::bf16, DType::f16}), dev_(dev) {}
  int calls = 0;

  Device device() const override { return dev_; }
  std::string name() const override { return "counting"; }
  Tensor empty(Shape shape, DType dtype) override {
    if (dev_.is_cpu()) return Tensor::zeros(std::move(shape), dtype);
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    auto storage = std::make_shared<Storage>(std::calloc(bytes + 1, 1), bytes, dev_, [](void* p) { std::free(p); });
    return Tensor(std::move(storage), 0, std::move(shape), dtype);
  }
  void zero(Tensor&) override {}
  Shape attention_state_shape(int64_t B, int64_t T, int64_t, int n_head) const override { return {B, n_head, 2 * T}; }

 private:
  void copy_impl(Tensor&, const Tensor&) override { ++calls; }
  void convert_impl(Tensor&, const Tensor&) override { ++calls; }
  void encoder_forward_impl(Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t) override {
    ++calls;
  }
  void encoder_backward_impl(Tensor&, Tensor&, const Tensor&, const Tensor&, int64_t) override { ++calls; }
  void layernorm_forward_impl(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) override {
    ++calls;
  }
  void layernorm_backward_impl(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&, bool) override {
    ++calls;
  }
  void matmul_forward_impl(Tensor&, const Tensor&, const Tensor&, const Tensor&, WeightLayout) override { ++calls; }
  void matmul_backward_impl(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, WeightLayout,
                            bool) override {
    ++calls;
  }
  void attention_forward_impl(Tensor&, Tensor&, const Tensor&, int) override { ++calls; }
  void attention_backward_impl(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int) override {
    ++calls;
  }
  void gelu_forward_impl(Tensor&, const Tensor&) override { ++calls; }
  void gelu_backward_impl(Tensor&, const Tensor&, const Tensor&, bool) override { ++calls; }
  void relu_forward_impl(Tensor&, const Tensor&) override { ++calls; }
  void relu_backward_impl(Tensor&, const Tensor&, const Tensor&, bool) override { ++calls; }
  void add_impl(Tensor&, const Tensor&, const Tensor&) override { ++calls; }
  void bias_add_impl(Tensor&, const Tensor&) override { ++calls; }
  void crossentropy_forward_impl(Tensor&, Tensor&, const Tensor&, const Tensor&) override { ++calls; }
  void crossentropy_backward_impl(Tensor&, const Tensor&, const Tensor&, double) override { ++calls; }
  void argmax_impl(Tensor&, const Tensor&) override { ++calls; }
  void logits_row_max_impl(Tensor&, const Tensor&) override { ++calls; }
  void logits_sum_exp_impl(Tensor&, const Tensor&, const Tensor&) override { ++calls; }
  void logits_pick_impl(Tensor&, const Tensor&, const Tensor&, int64_t) override { ++calls; }
  void crossentropy_backward_sharded_impl(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                                          double) override {
    ++calls;
  }
  void adamw_step_impl(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWParams&) override { ++calls; }
  void sgd_step_impl(Tensor&, const Tensor&, Tensor&, const SgdParams&) override { ++calls; }
  double sum_impl(const Tensor&) override { return ++calls; }
  double sum_squares_impl(const Tensor&) override { return ++calls; }
  void scale_impl(Tensor&, double) override { ++calls; }

  Device dev_;
};

// Sizes: rows N = B*T = 4, features C = 8, classes V = 6, matmul 8 -> 5, attention 2 heads.
// Every tensor is made by the backend under test (zeros), floats in f32 unless a case says.
struct Make {
  Backend& be;
  Tensor f(Shape s, DType dt = F32) const { return be.empty(std::move(s), dt); }
  Tensor ids(Shape s) const { return Tensor::zeros(std::move(s), DType::i32); }  // host i32 zeros
  Tensor state(DType dt = F32) const { return f(be.attention_state_shape(2, 2, 8, 2), dt); }
};

struct Case {
  const char* op;
  std::function<void(Backend&, const Make&)> call;
  std::string refusal;  // the message; empty: a good call every backend takes
};

std::vector<Case> cases() {
  using B = Backend;
  using M = const Make;
  const auto in_out = WeightLayout::in_out;
  std::vector<Case> v;
  auto add = [&](const char* op, std::function<void(Backend&, const Make&)> call, std::string refusal = "") {
    v.push_back({op, std::move(call), std::move(refusal)});
  };
  Tensor none;

  add("copy", [](B& be, M& m) {
    Tensor dst = m.f({4});
    be.copy(dst, m.f({4}));
  });
  add("copy", [](B& be, M& m) {
    Tensor dst = m.f({4});
    be.copy(dst, m.f({3}));
  }, "copy: src is f32[3], expected the dtype and element count of dst f32[4]");
  add("copy", [](B& be, M& m) {
    Tensor dst = m.f({4});
    be.copy(dst, m.f({4}, DType::bf16));
  }, "copy: src is bf16[4], expected the dtype and element count of dst f32[4]");

  add("convert", [](B& be, M& m) {
    Tensor dst = m.f({4}, DType::bf16);
    be.convert(dst, m.f({4}));
  });
  add("convert", [](B& be, M& m) {
    Tensor dst = m.f({4});
    be.convert(dst, m.f({4}, DType::i32));
  }, "convert: src is i32[4], expected a float tensor");
  add("convert", [](B& be, M& m) {
    Tensor dst = m.f({5}, DType::f16);
    be.convert(dst, m.f({4}));
  }, "convert: dst is f16[5], expected 4 elements like src f32[4]");

  // Encoder: tokens [2,2], wte [6,8], wpe [2,8], out [2,2,8].
  add("encoder_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 8});
    be.encoder_forward(out, m.ids({2, 2}), m.f({6, 8}), m.f({2, 8}), 0, 6);
  });
  add("encoder_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 8});
    be.encoder_forward(out, m.f({2, 2}), m.f({6, 8}), m.f({2, 8}), 0, 6);
  }, "encoder_forward: tokens is f32[2,2], expected an i32 tensor");
  add("encoder_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 8});
    be.encoder_forward(out, m.ids({4}), m.f({6, 8}), m.f({2, 8}), 0, 6);
  }, "encoder_forward: tokens is i32[4], expected i32[B,T]");
  add("encoder_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 7});
    be.encoder_forward(out, m.ids({2, 2}), m.f({6, 8}), m.f({2, 8}), 0, 6);
  }, "encoder_forward: out is f32[2,2,7], expected 32 elements (B*T*C for tokens i32[2,2])");
  add("encoder_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 8});
    be.encoder_forward(out, m.ids({2, 2}), m.f({6, 8}), m.f({1, 8}), 0, 6);
  }, "encoder_forward: wpe is f32[1,8], expected [>= T, C] with T = 2 and C = 8 (wte f32[6,8])");
  add("encoder_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 8});
    be.encoder_forward(out, m.ids({2, 2}), m.f({6, 8}), m.f({2, 8}, DType::bf16), 0, 6);
  }, "encoder_forward: wpe is bf16[2,8], expected f32 like wte f32[6,8]");
  add("encoder_backward", [](B& be, M& m) {
    Tensor dwte = m.f({6, 8}), dwpe = m.f({2, 8});
    be.encoder_backward(dwte, dwpe, m.f({2, 2, 8}), m.ids({2, 2}), 0);
  });
  add("encoder_backward", [none](B& be, M& m) mutable {
    Tensor dwte = m.f({6, 8});
    be.encoder_backward(dwte, none, m.f({2, 2, 7}), m.ids({2, 2}), 0);
  }, "encoder_backward: dout is f32[2,2,7], expected 32 elements (B*T*C for tokens i32[2,2])");
  add("encoder_backward", [](B& be, M& m) {
    Tensor dwte = m.f({6, 8}), dwpe = m.f({2, 7});
    be.encoder_backward(dwte, dwpe, m.f({2, 2, 8}), m.ids({2, 2}), 0);
  }, "encoder_backward: dwpe is f32[2,7], expected [>= T, C] with T = 2 and C = 8 (dwte f32[6,8])");

  // LayerNorm over inp [4,8].
  add("layernorm_forward", [](B& be, M& m) {
    Tensor out = m.f({4, 8}), mean = m.f({4}), rstd = m.f({4});
    be.layernorm_forward(out, mean, rstd, m.f({4, 8}), m.f({8}), m.f({8}));
  });
  add("layernorm_forward", [](B& be, M& m) {
    Tensor out = m.f({4, 8}), mean = m.f({3}), rstd = m.f({4});
    be.layernorm_forward(out, mean, rstd, m.f({4, 8}), m.f({8}), m.f({8}));
  }, "layernorm_forward: mean is f32[3], expected 4 elements (one per row of inp f32[4,8])");
  add("layernorm_forward", [](B& be, M& m) {
    Tensor out = m.f({4, 8}), mean = m.f({4}), rstd = m.f({4});
    be.layernorm_forward(out, mean, rstd, m.f({4, 8}), m.f({8}), m.f({8}, DType::bf16));
  }, "layernorm_forward: bias is bf16[8], expected f32 like inp f32[4,8]");
  add("layernorm_forward", [none](B& be, M& m) mutable {
    Tensor out = m.f({4, 8}), mean = m.f({4}), rstd = m.f({4});
    be.layernorm_forward(out, mean, rstd, m.f({4, 8}), m.f({8}), none);
  }, "layernorm_forward: bias is undefined, expected a tensor");
  add("layernorm_backward", [](B& be, M& m) {
    Tensor dinp = m.f({4, 8}), dw = m.f({8}), db = m.f({8});
    be.layernorm_backward(dinp, dw, db, m.f({4, 8}), m.f({4, 8}), m.f({8}), m.f({4}), m.f({4}), false);
  });
  // What the CPU backend used not to check (the CUDA one did).
  add("layernorm_backward", [](B& be, M& m) {
    Tensor dinp = m.f({4, 8}), dw = m.f({8}), db = m.f({8});
    be.layernorm_backward(dinp, dw, db, m.f({4, 8}), m.f({4, 8}), m.f({8}), m.f({3}), m.f({4}), false);
  }, "layernorm_backward: mean is f32[3], expected 4 elements (one per row of inp f32[4,8])");
  add("layernorm_backward", [](B& be, M& m) {
    Tensor dinp = m.f({4, 8}), dw = m.f({8}), db = m.f({8});
    be.layernorm_backward(dinp, dw, db, m.f({4, 8}), m.f({4, 8}), m.f({8}), m.f({4}), m.f({5}), true);
  }, "layernorm_backward: rstd is f32[5], expected 4 elements (one per row of inp f32[4,8])");
  add("layernorm_backward", [](B& be, M& m) {
    Tensor dinp = m.f({4, 8}), dw = m.f({8}), db = m.f({8});
    be.layernorm_backward(dinp, dw, db, m.f({4, 8}), m.f({4, 8}), m.f({7}), m.f({4}), m.f({4}), false);
  }, "layernorm_backward: weight is f32[7], expected 8 elements (one per column of inp f32[4,8])");
  add("layernorm_backward", [](B& be, M& m) {
    Tensor dinp = m.f({4, 8}), dw = m.f({8}), db = m.f({8});
    be.layernorm_backward(dinp, dw, db, m.f({4, 8}, DType::f16), m.f({4, 8}), m.f({8}), m.f({4}), m.f({4}), false);
  }, "layernorm_backward: dout is f16[4,8], expected f32 like inp f32[4,8]");

  // Matmul inp [4,8] x weight [8,5] (in_out) -> out [4,5].
  add("matmul_forward", [](B& be, M& m) {
    Tensor out = m.f({4, 5});
    be.matmul_forward(out, m.f({4, 8}), m.f({8, 5}), m.f({5}), in_out);
  });
  add("matmul_forward", [](B& be, M& m) {
    Tensor out = m.f({4, 5});
    be.matmul_forward(out, m.f({4, 8}), m.f({7, 5}), m.f({5}), in_out);
  }, "matmul_forward: weight is f32[7,5], expected [IC,OC] (in_out) with IC = 8 like inp f32[4,8]");
  add("matmul_forward", [](B& be, M& m) {
    Tensor out = m.f({4, 5});
    be.matmul_forward(out, m.f({4, 8}), m.f({8, 5}), m.f({5}), WeightLayout::out_in);
  }, "matmul_forward: weight is f32[8,5], expected [OC,IC] (out_in) with IC = 8 like inp f32[4,8]");
  add("matmul_forward", [](B& be, M& m) {
    Tensor out = m.f({4, 4});
    be.matmul_forward(out, m.f({4, 8}), m.f({8, 5}), m.f({5}), in_out);
  }, "matmul_forward: out is f32[4,4], expected 20 elements (N*OC for weight f32[8,5])");
  add("matmul_forward", [none](B& be, M& m) mutable {
    Tensor out = m.f({4, 5});
    be.matmul_forward(out, m.f({4, 0}), m.f({0, 5}), none, in_out);
  }, "matmul_forward: inp is f32[4,0], expected [N,IC] with a last dimension > 0");
  add("matmul_forward", [](B& be, M& m) {
    Tensor out = m.f({4, 5});
    be.matmul_forward(out, m.f({4, 8}), m.f({8, 5}), m.f({4}), in_out);
  }, "matmul_forward: bias is f32[4], expected 5 elements (OC of weight f32[8,5])");
  add("matmul_backward", [](B& be, M& m) {
    Tensor dinp = m.f({4, 8}), dw = m.f({8, 5}), db = m.f({5});
    be.matmul_backward(dinp, dw, db, m.f({4, 5}), m.f({4, 8}), m.f({8, 5}), in_out, false);
  });
  add("matmul_backward", [](B& be, M& m) {
    Tensor dinp = m.f({4, 8}), dw = m.f({8, 4}), db = m.f({5});
    be.matmul_backward(dinp, dw, db, m.f({4, 5}), m.f({4, 8}), m.f({8, 5}), in_out, false);
  }, "matmul_backward: dweight is f32[8,4], expected 40 elements (the elements of weight f32[8,5])");
  add("matmul_backward", [none](B& be, M& m) mutable {
    Tensor dinp = m.f({4, 7}), dw = m.f({8, 5});
    be.matmul_backward(dinp, dw, none, m.f({4, 5}), m.f({4, 8}), m.f({8, 5}), in_out, true);
  }, "matmul_backward: dinp is f32[4,7], expected 32 elements (the elements of inp f32[4,8])");
  add("matmul_backward", [](B& be, M& m) {
    Tensor dinp = m.f({4, 8}), dw = m.f({8, 5}), db = m.f({5});
    be.matmul_backward(dinp, dw, db, m.f({5, 5}), m.f({4, 8}), m.f({8, 5}), in_out, false);
  }, "matmul_backward: dout is f32[5,5], expected 20 elements (N*OC for weight f32[8,5])");

  // Attention over qkv [2,2,24]: B = T = 2, C = 8, 2 heads.
  add("attention_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 8}), st = m.state();
    be.attention_forward(out, st, m.f({2, 2, 24}), 2);
  });
  add("attention_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 8}), st = m.state();
    be.attention_forward(out, st, m.f({2, 2, 25}), 2);
  }, "attention_forward: qkv is f32[2,2,25], expected [B,T,3C]");
  add("attention_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 8}), st = m.state();
    be.attention_forward(out, st, m.f({2, 2, 24}), 3);
  }, "attention_forward: qkv is f32[2,2,24], expected C = 8 divisible by n_head = 3");
  add("attention_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 8}), st = m.f({1});
    be.attention_forward(out, st, m.f({2, 2, 24}), 2);
  }, "attention_forward: state is f32[1], expected {state} elements (attention_state_shape for qkv f32[2,2,24])");
  add("attention_forward", [](B& be, M& m) {
    Tensor out = m.f({2, 2, 9}), st = m.state();
    be.attention_forward(out, st, m.f({2, 2, 24}), 2);
  }, "attention_forward: out is f32[2,2,9], expected 32 elements (B*T*C for qkv f32[2,2,24])");
  add("attention_backward", [](B& be, M& m) {
    Tensor dqkv = m.f({2, 2, 24});
    be.attention_backward(dqkv, m.f({2, 2, 8}), m.f({2, 2, 24}), m.f({2, 2, 8}), m.state(), 2);
  });
  // The CPU backend used to take `out` in any dtype (it does not read it).
  add("attention_backward", [](B& be, M& m) {
    Tensor dqkv = m.f({2, 2, 24});
    be.attention_backward(dqkv, m.f({2, 2, 8}), m.f({2, 2, 24}), m.f({2, 2, 8}, DType::bf16), m.state(), 2);
  }, "attention_backward: out is bf16[2,2,8], expected f32 like qkv f32[2,2,24]");
  add("attention_backward", [](B& be, M& m) {
    Tensor dqkv = m.f({2, 2, 21});
    be.attention_backward(dqkv, m.f({2, 2, 8}), m.f({2, 2, 24}), m.f({2, 2, 8}), m.state(), 2);
  }, "attention_backward: dqkv is f32[2,2,21], expected 96 elements (the elements of qkv f32[2,2,24])");
  add("attention_backward", [](B& be, M& m) {
    Tensor dqkv = m.f({2, 2, 24});
    be.attention_backward(dqkv, m.f({2, 2, 8}), m.f({2, 2, 24}), m.f({2, 2, 8}), m.f({1}), 2);
  }, "attention_backward: state is f32[1], expected {state} elements (attention_state_shape for qkv f32[2,2,24])");

  // Element-wise over [4,8]: GELU and ReLU take the same tensors.
  struct Activation {
    const char *fwd, *bwd;
    void (Backend::*forward)(Tensor&, const Tensor&);
    void (Backend::*backward)(Tensor&, const Tensor&, const Tensor&, bool);
  };
  for (Activation a : {Activation{"gelu_forward", "gelu_backward", &Backend::gelu_forward, &Backend::gelu_backward},
                       Activation{"relu_forward", "relu_backward", &Backend::relu_forward, &Backend::relu_backward}}) {
    const std::string fwd = a.fwd, bwd = a.bwd;
    add(a.fwd, [a](B& be, M& m) {
      Tensor out = m.f({4, 8});
      (be.*a.forward)(out, m.f({4, 8}));
    });
    add(a.fwd, [a](B& be, M& m) {
      Tensor out = m.f({4, 7});
      (be.*a.forward)(out, m.f({4, 8}));
    }, fwd + ": out is f32[4,7], expected 32 elements (the elements of inp f32[4,8])");
    add(a.fwd, [a](B& be, M& m) {
      Tensor out = m.f({4, 8}, DType::bf16);
      (be.*a.forward)(out, m.f({4, 8}));
    }, fwd + ": out is bf16[4,8], expected f32 like inp f32[4,8]");
    add(a.bwd, [a](B& be, M& m) {
      Tensor dinp = m.f({4, 8});
      (be.*a.backward)(dinp, m.f({4, 8}), m.f({4, 8}), true);
    });
    add(a.bwd, [a](B& be, M& m) {
      Tensor dinp = m.f({4, 8});
      (be.*a.backward)(dinp, m.f({4, 9}), m.f({4, 8}), true);
    }, bwd + ": dout is f32[4,9], expected 32 elements (the elements of inp f32[4,8])");
    add(a.bwd, [a](B& be, M& m) {
      Tensor dinp = m.f({3, 8});
      (be.*a.backward)(dinp, m.f({4, 8}), m.f({4, 8}), false);
    }, bwd + ": dinp is f32[3,8], expected 32 elements (the elements of inp f32[4,8])");
  }
  add("add", [](B& be, M& m) {
    Tensor out = m.f({4, 8});
    be.add(out, m.f({4, 8}), m.f({4, 8}));
  });
  add("add", [](B& be, M& m) {
    Tensor out = m.f({4, 8});
    be.add(out, m.f({4, 8}), m.f({8}));
  }, "add: b is f32[8], expected 32 elements (the elements of a f32[4,8])");
  add("bias_add", [](B& be, M& m) {
    Tensor out = m.f({4, 8});
    be.bias_add(out, m.f({8}));
  });
  add("bias_add", [](B& be, M& m) {
    Tensor out = m.f({4, 8});
    be.bias_add(out, m.f({3}));
  }, "bias_add: bias is f32[3], expected C > 0 elements, C dividing those of out f32[4,8]");

  // Cross-entropy over logits [4,6] with targets [4].
  add("crossentropy_forward", [](B& be, M& m) {
    Tensor losses = m.f({4}), correct = m.ids({4});
    be.crossentropy_forward(losses, correct, m.f({4, 6}), m.ids({4}));
  });
  add("crossentropy_forward", [none](B& be, M& m) mutable {
    Tensor losses = m.f({4});
    be.crossentropy_forward(losses, none, m.f({4, 6}), m.f({4}));
  }, "crossentropy_forward: targets is f32[4], expected an i32 tensor");
  add("crossentropy_forward", [none](B& be, M& m) mutable {
    Tensor losses = m.f({4});
    be.crossentropy_forward(losses, none, m.f({4, 6}), m.ids({3}));
  }, "crossentropy_forward: targets is i32[3], expected 4 elements (one per row of logits f32[4,6])");
  add("crossentropy_forward", [none](B& be, M& m) mutable {
    Tensor losses = m.f({4}, DType::bf16);
    be.crossentropy_forward(losses, none, m.f({4, 6}), m.ids({4}));
  }, "crossentropy_forward: losses is bf16[4], expected f32 like logits f32[4,6] (or f32 under 16-bit logits)");
  add("crossentropy_forward", [](B& be, M& m) {
    Tensor losses = m.f({4}), correct = m.ids({5});
    be.crossentropy_forward(losses, correct, m.f({4, 6}), m.ids({4}));
  }, "crossentropy_forward: correct is i32[5], expected 4 elements (one per row of logits f32[4,6])");
  add("crossentropy_backward", [](B& be, M& m) {
    Tensor dlogits = m.f({4, 6});
    be.crossentropy_backward(dlogits, m.f({4, 6}), m.ids({4}), 0.25);
  });
  add("crossentropy_backward", [](B& be, M& m) {
    Tensor dlogits = m.f({4, 5});
    be.crossentropy_backward(dlogits, m.f({4, 6}), m.ids({4}), 0.25);
  }, "crossentropy_backward: dlogits is f32[4,5], expected 24 elements (the elements of logits f32[4,6])");
  add("argmax", [](B& be, M& m) {
    Tensor out = m.ids({4});
    be.argmax(out, m.f({4, 6}));
  });
  add("argmax", [](B& be, M& m) {
    Tensor out = m.f({4});
    be.argmax(out, m.f({4, 6}));
  }, "argmax: out is f32[4], expected an i32 tensor");
  add("logits_row_max", [](B& be, M& m) {
    Tensor mx = m.f({4});
    be.logits_row_max(mx, m.f({4, 6}));
  });
  add("logits_row_max", [](B& be, M& m) {
    Tensor mx = m.f({6});
    be.logits_row_max(mx, m.f({4, 6}));
  }, "logits_row_max: row_max is f32[6], expected 4 elements (one per row of logits f32[4,6])");
  add("logits_sum_exp", [](B& be, M& m) {
    Tensor se = m.f({4});
    be.logits_sum_exp(se, m.f({4, 6}), m.f({4}));
  });
  add("logits_sum_exp", [](B& be, M& m) {
    Tensor se = m.f({4});
    be.logits_sum_exp(se, m.f({4, 6}), m.f({3}));
  }, "logits_sum_exp: row_max is f32[3], expected 4 elements (one per row of logits f32[4,6])");
  add("logits_pick", [](B& be, M& m) {
    Tensor picked = m.f({4});
    be.logits_pick(picked, m.f({4, 6}), m.ids({4}), 0);
  });
  add("logits_pick", [](B& be, M& m) {
    Tensor picked = m.f({2});
    be.logits_pick(picked, m.f({4, 6}), m.ids({4}), 0);
  }, "logits_pick: picked is f32[2], expected 4 elements (one per row of logits f32[4,6])");
  add("crossentropy_backward_sharded", [](B& be, M& m) {
    Tensor dlogits = m.f({4, 6});
    be.crossentropy_backward_sharded(dlogits, m.f({4, 6}), m.ids({4}), m.f({4}), m.f({4}), 0, 0.25);
  });
  add("crossentropy_backward_sharded", [](B& be, M& m) {
    Tensor dlogits = m.f({4, 6});
    be.crossentropy_backward_sharded(dlogits, m.f({4, 6}), m.ids({4}), m.f({4}), m.f({1}), 0, 0.25);
  }, "crossentropy_backward_sharded: sum_exp is f32[1], expected 4 elements (one per row of logits f32[4,6])");
  add("crossentropy_backward_sharded", [](B& be, M& m) {
    Tensor dlogits = m.f({4, 6});
    be.crossentropy_backward_sharded(dlogits, m.f({4, 6}), m.ids({2, 2, 2}), m.f({4}), m.f({4}), 0, 0.25);
  }, "crossentropy_backward_sharded: targets is i32[2,2,2], expected 4 elements (one per row of logits f32[4,6])");

  // Optimizers over 10 parameters.
  add("adamw_step", [](B& be, M& m) {
    Tensor p = m.f({10}), mo = m.f({10}), ve = m.f({10});
    be.adamw_step(p, m.f({10}), mo, ve, AdamWParams{});
  });
  add("adamw_step", [](B& be, M& m) {  // mixed precision: 16-bit gradients of f32 master weights
    Tensor p = m.f({10}), mo = m.f({10}), ve = m.f({10});
    be.adamw_step(p, m.f({10}, DType::bf16), mo, ve, AdamWParams{});
  });
  add("adamw_step", [](B& be, M& m) {
    Tensor p = m.f({10}), mo = m.f({10}), ve = m.f({9});
    be.adamw_step(p, m.f({10}), mo, ve, AdamWParams{});
  }, "adamw_step: v is f32[9], expected 10 elements (the elements of param f32[10])");
  add("adamw_step", [](B& be, M& m) {
    Tensor p = m.f({10}), mo = m.f({10}, DType::bf16), ve = m.f({10});
    be.adamw_step(p, m.f({10}), mo, ve, AdamWParams{});
  }, "adamw_step: m is bf16[10], expected f32 like param f32[10]");
  add("adamw_step", [](B& be, M& m) {
    Tensor p = m.f({10}, DType::bf16), mo = m.f({10}, DType::bf16), ve = m.f({10}, DType::bf16);
    be.adamw_step(p, m.f({10}), mo, ve, AdamWParams{});
  }, "adamw_step: grad is f32[10], expected bf16 like param bf16[10] (or bf16/f16 under f32 master weights)");
  add("sgd_step", [](B& be, M& m) {
    Tensor p = m.f({10}), mo = m.f({10});
    SgdParams sp;
    sp.momentum = 0.9;
    be.sgd_step(p, m.f({10}), mo, sp);
  });
  add("sgd_step", [](B& be, M& m) {
    Tensor p = m.f({10}), mo = m.f({10});
    be.sgd_step(p, m.f({9}), mo, SgdParams{});
  }, "sgd_step: grad is f32[9], expected 10 elements (the elements of param f32[10])");
  add("sgd_step", [none](B& be, M& m) mutable {
    Tensor p = m.f({10});
    SgdParams sp;
    sp.momentum = 0.9;
    be.sgd_step(p, m.f({10}), none, sp);
  }, "sgd_step: momentum is undefined, expected a tensor");

  // Reductions.
  add("sum", [](B& be, M& m) { be.sum(m.f({10})); });
  add("sum", [](B& be, M& m) { be.sum(m.f({10}, DType::i32)); }, "sum: x is i32[10], expected a float tensor");
  add("sum_squares", [](B& be, M& m) { be.sum_squares(m.f({10})); });
  add("sum_squares", [none](B& be, M&) { be.sum_squares(none); }, "sum_squares: x is undefined, expected a tensor");
  add("scale", [](B& be, M& m) {
    Tensor x = m.f({10});
    be.scale(x, 0.5);
  });
  add("scale", [](B& be, M& m) {
    Tensor x = m.f({10}, DType::u8);
    be.scale(x, 0.5);
  }, "scale: x is u8[10], expected a float tensor");
  return v;
}

// The message a call throws, or "(taken)".
std::string refusal(Backend& be, const Case& c) {
  try {
    c.call(be, Make{be});
  } catch (const Error& e) {
    return e.what();
  }
  return "(taken)";
}

// The case's message on this backend: {state} is the element count of its attention state.
std::string expected(const Backend& be, std::string msg) {
  const std::string key = "{state}";
  if (auto at = msg.find(key); at != std::string::npos)
    msg.replace(at, key.size(), std::to_string(shape_numel(be.attention_state_shape(2, 2, 8, 2))));
  return msg;
}

const char* const kOps[] = {"copy", "convert", "encoder_forward", "encoder_backward", "layernorm_forward",
                            "layernorm_backward", "matmul_forward", "matmul_backward", "attention_forward",
                            "attention_backward", "gelu_forward", "gelu_backward", "relu_forward", "relu_backward",
                            "add", "bias_add", "crossentropy_forward", "crossentropy_backward", "argmax",
                            "logits_row_max", "logits_sum_exp", "logits_pick", "crossentropy_backward_sharded",
                            "adamw_step", "sgd_step", "sum", "sum_squares", "scale"};

}  // namespace

TEST_CASE("every checked op has a good call and at least one refused one here") {
  const std::vector<Case> all = cases();
  for (const char* op : kOps) {
    CAPTURE(op);
    int good = 0, bad = 0;
    for (const Case& c : all) {
      if (std::string(c.op) != op) continue;
      (c.refusal.empty() ? good : bad) += 1;
    }
    CHECK(good >= 1);
    CHECK(bad >= 1);
  }
}

TEST_CASE("good arguments reach the implementation once; the CPU backend runs them") {
  for (const Case& c : cases()) {
    if (!c.refusal.empty()) continue;
    const std::string op = c.op;
    CAPTURE(op);
    CountingBackend fake;
    CHECK(refusal(fake, c) == "(taken)");
    CHECK(fake.calls == 1);
    CHECK(refusal(cpu_backend(), c) == "(taken)");
  }
}

TEST_CASE("a wrong shape or dtype is refused before any implementation runs, with one message on every backend") {
  for (const Case& c : cases()) {
    if (c.refusal.empty()) continue;
    const std::string op = c.op;
    CAPTURE(op);
    CountingBackend fake;
    CHECK(refusal(fake, c) == expected(fake, c.refusal));
    CHECK(fake.calls == 0);
    // An op the front let through would run the CPU kernels on bad tensors: run it only when
    // the fake proved the front refuses it.
    if (fake.calls == 0) CHECK(refusal(cpu_backend(), c) == expected(cpu_backend(), c.refusal));
  }
}

TEST_CASE("what differs per backend: its float dtypes and its device") {
  CountingBackend fake;
  Tensor x64 = Tensor::zeros({10}, DType::f64);
  SUBCASE("f64 is the CPU's alone") {
    CHECK_THROWS_WITH(fake.sum(x64), "sum: x is f64[10], expected f32, bf16 or f16 (the dtypes this backend takes)");
    CHECK(fake.calls == 0);
    CHECK(cpu_backend().sum(x64) == 0.0);
    CHECK_THROWS_WITH(cpu_backend().sum(Tensor::zeros({10}, DType::i64)), "sum: x is i64[10], expected a float tensor");
  }
  SUBCASE("float tensors on the backend's device; index tensors on it or on the host") {
    CountingBackend gpu(Device::cuda(0));
    Tensor host = Tensor::zeros({4, 8}, F32), out = gpu.empty({4, 8}, F32);
    CHECK_THROWS_WITH(gpu.gelu_forward(out, host), "gelu_forward: inp is f32[4,8] on cpu, expected it on cuda:0");
    Tensor on_gpu = gpu.empty({4, 8}, F32), host_out = Tensor::zeros({4, 8}, F32);
    CHECK_THROWS_WITH(cpu_backend().gelu_forward(host_out, on_gpu),
                      "gelu_forward: inp is f32[4,8] on cuda:0, expected it on cpu");
    CHECK(gpu.calls == 0);
    Tensor logits = gpu.empty({4, 6}, F32), dlogits = gpu.empty({4, 6}, F32);
    gpu.crossentropy_backward(dlogits, logits, Tensor::zeros({4}, DType::i32), 1.0);  // host targets
    gpu.crossentropy_backward(dlogits, logits, gpu.empty({4}, DType::i32), 1.0);      // device targets
    CHECK(gpu.calls == 2);
    CountingBackend other(Device::cuda(1));
    CHECK_THROWS_WITH(gpu.crossentropy_backward(dlogits, logits, other.empty({4}, DType::i32), 1.0),
                      "crossentropy_backward: targets is i32[4] on cuda:1, expected it on cpu or cuda:0");
    Tensor host_dst = Tensor::zeros({4, 6}, F32);
    gpu.copy(host_dst, logits);  // copies reach the host
    CHECK_THROWS_WITH(gpu.copy(host_dst, other.empty({4, 6}, F32)),
                      "copy: src is f32[4,6] on cuda:1, expected it on cpu or cuda:0");
    CHECK(gpu.calls == 3);
  }
}

TEST_CASE("values are checked by the implementation, with the same messages on every backend") {
  // Token ids and targets live on the host or the device: each backend checks them once they
  // are on the host, through Backend::check_token_ids and check_targets.
  Tensor tokens = Tensor::zeros({1, 2}, DType::i32), out = Tensor::zeros({1, 2, 8}, F32);
  tokens.data<int32_t>()[1] = 6;
  CHECK_THROWS_WITH(cpu_backend().encoder_forward(out, tokens, Tensor::zeros({6, 8}, F32), Tensor(), 0, 6),
                    "token id 6 at batch row 0, position 1 is outside the model's vocabulary of 6 (check "
                    "model.vocab_size against the data)");
  Tensor targets = Tensor::zeros({4}, DType::i32), dlogits = Tensor::zeros({4, 6}, F32);
  targets.data<int32_t>()[2] = 6;
  CHECK_THROWS_WITH(cpu_backend().crossentropy_backward(dlogits, Tensor::zeros({4, 6}, F32), targets, 1.0),
                    "crossentropy_backward: target 6 at row 2 is outside the 6 classes of the output");
}

// The Llama family's ops: a backend without their kernels (the counting fake here; the CPU and
// CUDA backends have them all) refuses each by name once the front has checked the call; the CPU
// runs it; a bad shape is refused by the front on both.
TEST_CASE("the llama ops: refused by name where a backend has no kernel, checked by the front everywhere") {
  auto f32 = [](Shape s) { return Tensor::zeros(std::move(s), F32); };
  Tensor x = f32({2, 3, 8}), out = f32({2, 3, 8}), rstd = f32({6}), w = f32({8}), dw = f32({8});
  Tensor freq = f32({2}), kv = f32({2, 3, 4}), dkv = f32({2, 3, 4}), qkv = f32({2, 3, 24});
  struct Call {
    const char* op;
    std::function<void(Backend&)> fn;
  };
  const std::vector<Call> calls = {
      {"rmsnorm_forward", [&](Backend& be) { be.rmsnorm_forward(out, rstd, x, w, 1e-5); }},
      {"rmsnorm_backward", [&](Backend& be) { be.rmsnorm_backward(out, dw, x, x, w, rstd, false); }},
      {"rope_forward", [&](Backend& be) { be.rope_forward(out, x, freq, 2); }},
      {"rope_backward", [&](Backend& be) { be.rope_backward(out, x, freq, 2); }},
      {"swiglu_forward", [&](Backend& be) { be.swiglu_forward(out, x, x); }},
      {"swiglu_backward", [&](Backend& be) { be.swiglu_backward(out, out, x, x, x); }},
      {"qkv_pack", [&](Backend& be) { be.qkv_pack(qkv, x, kv, kv, 2, 1); }},
      {"qkv_unpack", [&](Backend& be) { be.qkv_unpack(x, kv, dkv, qkv, 2, 1); }},
  };
  for (const Call& c : calls) {
    CAPTURE(c.op);
    CountingBackend fake;
    CHECK_THROWS_WITH(c.fn(fake), (std::string(c.op) + ": not implemented on the counting backend").c_str());
    CHECK_NOTHROW(c.fn(cpu_backend()));
  }
  Tensor wrong = f32({7});
  CHECK_THROWS_WITH(cpu_backend().rmsnorm_forward(out, rstd, x, wrong, 1e-5),
                    "rmsnorm_forward: weight is f32[7], expected 8 elements (one per column of inp f32[2,3,8])");
  CHECK_THROWS_WITH(cpu_backend().rope_forward(out, x, wrong, 2),
                    "rope_forward: inv_freq is f32[7], expected 2 elements (half the head size of f32[2,3,8])");
  CHECK_THROWS_WITH(cpu_backend().rope_forward(out, x, freq, 3),
                    "rope_forward: inp is f32[2,3,8], expected a last dimension of n_head = 3 heads of an even size");
  CHECK_THROWS_WITH(cpu_backend().qkv_pack(qkv, x, kv, kv, 2, 3), "qkv_pack: n_kv_head = 3 must divide n_head = 2");
  CountingBackend fake;
  CHECK_THROWS_WITH(fake.rmsnorm_forward(out, rstd, x, wrong, 1e-5),
                    "rmsnorm_forward: weight is f32[7], expected 8 elements (one per column of inp f32[2,3,8])");
}

// RoPE's inv_freq is f32 whatever the op's dtype (f64 under f64 ops): the front refused a 16-bit
// one on no backend, and the CPU's rope then failed inside ("tensor bf16[2] accessed as f64").
TEST_CASE("rope takes inv_freq in f32 (or f64 under f64 ops), never in the op's 16-bit dtype") {
  const Tensor f32_freq = Tensor::zeros({2}, F32), f64_freq = Tensor::zeros({2}, DType::f64);
  for (DType dt : {DType::bf16, DType::f16}) {
    const std::string dtype(dtype_name(dt));
    CAPTURE(dtype);
    Tensor x = Tensor::zeros({2, 3, 8}, dt), out = Tensor::zeros({2, 3, 8}, dt);
    const Tensor own = Tensor::zeros({2}, dt);
    const std::string want = std::string(": inv_freq is ") + std::string(dtype_name(dt)) + "[2], expected f32";
    CountingBackend fake;
    CHECK_THROWS_WITH(fake.rope_forward(out, x, own, 2), ("rope_forward" + want).c_str());
    CHECK_THROWS_WITH(fake.rope_backward(out, x, own, 2), ("rope_backward" + want).c_str());
    CHECK(fake.calls == 0);
    CHECK_THROWS_WITH(cpu_backend().rope_forward(out, x, own, 2), ("rope_forward" + want).c_str());
    CHECK_THROWS_WITH(cpu_backend().rope_backward(out, x, own, 2), ("rope_backward" + want).c_str());
    CHECK_NOTHROW(cpu_backend().rope_forward(out, x, f32_freq, 2));
    CHECK_NOTHROW(cpu_backend().rope_backward(out, x, f32_freq, 2));
  }
  Tensor x32 = Tensor::zeros({2, 3, 8}, F32), out32 = Tensor::zeros({2, 3, 8}, F32);
  CHECK_THROWS_WITH(cpu_backend().rope_forward(out32, x32, f64_freq, 2),
                    "rope_forward: inv_freq is f64[2], expected f32");
  Tensor x64 = Tensor::zeros({2, 3, 8}, DType::f64), out64 = Tensor::zeros({2, 3, 8}, DType::f64);
  CHECK_NOTHROW(cpu_backend().rope_forward(out64, x64, f64_freq, 2));
  CHECK_NOTHROW(cpu_backend().rope_forward(out64, x64, f32_freq, 2));
  CHECK_THROWS_WITH(cpu_backend().rope_forward(out64, x64, Tensor::zeros({2}, DType::bf16), 2),
                    "rope_forward: inv_freq is bf16[2], expected f32 or f64");
}
