// Backend: the ops every model is written in, at layer granularity (llm.c style: one forward and
// one backward per layer, side by side). The CPU backend implements them for f32 and f64 (f64 is
// what the finite-difference tests use), and bf16/f16 by widening to f32; the CUDA backend for
// f32/bf16/f16.
//
// Gradient conventions, the same for every op:
//  - parameter gradients (dweight, dbias, dwte, ...) are always ADDED to, so gradient
//    accumulation and tied weights need no extra work;
//  - input gradients (dinp, dqkv, dlogits) are written, or added when `accumulate` is true
//    (the residual stream).
#pragma once
#include <string>

#include "dl/core/tensor.hpp"

namespace dl {

// Weight layouts: Hugging Face GPT-2's Conv1D stores [in, out]; torch.nn.Linear and the tied
// LM head (the token embedding) store [out, in].
enum class WeightLayout { in_out, out_in };

struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;         // 1-based step count for bias correction
  double grad_scale = 1.0;  // multiplies the gradient first (clipping, loss-scale undo)
};

struct SgdParams {
  double lr = 1e-2, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // torch initialises the momentum buffer with the first gradient
  double grad_scale = 1.0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  virtual Tensor empty(Shape shape, DType dtype) = 0;
  virtual void zero(Tensor& t) = 0;
  // Copies between any two devices this backend can reach; same dtype and element count.
  virtual void copy(Tensor& dst, const Tensor& src) = 0;
  // dst = src converted between float dtypes (f32, bf16, f16; f64 on the CPU), rounding to
  // nearest even; both on this backend's device, same element count.
  virtual void convert(Tensor& dst, const Tensor& src) = 0;

  // out[B,T,C] = wte[tokens - vocab_start] + wpe[position]. With a vocabulary-parallel
  // embedding wte holds rows [vocab_start, vocab_start + rows) and tokens outside that range
  // contribute zero; wpe may be undefined (added elsewhere). Token ids are checked against
  // `vocab_size` (the whole vocabulary).
  virtual void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                               int64_t vocab_start, int64_t vocab_size) = 0;
  // dwpe may be undefined.
  virtual void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                int64_t vocab_start) = 0;

  // Row-wise over the last dimension C; mean/rstd [N] are saved for backward. eps = 1e-5.
  virtual void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                                 const Tensor& weight, const Tensor& bias) = 0;
  virtual void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                  const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, bool accumulate) = 0;

  // out[N,OC] = inp[N,IC] x W (+ bias[OC]); bias may be an undefined Tensor.
  virtual void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                              WeightLayout layout) = 0;
  // dinp may be undefined (first layer); dbias may be undefined when there is no bias.
  virtual void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                               const Tensor& inp, const Tensor& weight, WeightLayout layout,
                               bool accumulate) = 0;

  // Causal multi-head self-attention over qkv[B,T,3C] (q|k|v, each head's hs = C/H columns
  // contiguous) -> out[B,T,C]. `state` keeps what backward needs; its shape is the backend's:
  // attention_state_shape() tells the model what to allocate. Backward also takes forward's `out`
  // (flash-style backends read rowsum(dout * out) from it instead of recomputing the forward).
  virtual Shape attention_state_shape(int64_t B, int64_t T, int64_t C, int n_head) const = 0;
  virtual void attention_forward(Tensor& out, Tensor& state, const Tensor& qkv, int n_head) = 0;
  virtual void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                  const Tensor& state, int n_head) = 0;

  // GELU, tanh approximation (GPT-2's "gelu_new").
  virtual void gelu_forward(Tensor& out, const Tensor& inp) = 0;
  virtual void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) = 0;
  virtual void relu_forward(Tensor& out, const Tensor& inp) = 0;
  virtual void relu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) = 0;

  virtual void add(Tensor& out, const Tensor& a, const Tensor& b) = 0;  // the residual connection
  virtual void bias_add(Tensor& out, const Tensor& bias) = 0;           // out[N,C] += bias[C]

  // Softmax cross-entropy over logits[N,V] with int32 targets[N]; a negative target is ignored
  // (loss 0, gradient 0). losses[N] is f32/f64 like the logits; correct[N] (i32, optional) gets
  // 1 where the argmax equals the target.
  virtual void crossentropy_forward(Tensor& losses, Tensor& correct, const Tensor& logits,
                                    const Tensor& targets) = 0;
  // dlogits = (softmax(logits) - onehot(target)) * dloss for every row with a target >= 0.
  virtual void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                     double dloss) = 0;
  // argmax over the last dimension -> i32[N]
  virtual void argmax(Tensor& out, const Tensor& logits) = 0;

  // Cross-entropy over logits split by vocabulary across tensor-parallel ranks: each rank holds
  // columns [vocab_start, vocab_start + V_local). The caller combines the per-row statistics
  // across ranks (max, then sums) between these calls. All row tensors are [N] like the logits.
  virtual void logits_row_max(Tensor& row_max, const Tensor& logits) = 0;
  virtual void logits_sum_exp(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max) = 0;
  // picked[r] = logits[r, target - vocab_start] when this shard holds the target, else 0.
  virtual void logits_pick(Tensor& picked, const Tensor& logits, const Tensor& targets, int64_t vocab_start) = 0;
  // dlogits = (exp(logits - row_max) / sum_exp - onehot(target)) * dloss; rows with target < 0 get 0.
  virtual void crossentropy_backward_sharded(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                             const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start,
                                             double dloss) = 0;

  // Optimizer steps over flat ranges (param, grad and state tensors of equal size).
  virtual void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                          const AdamWParams& p) = 0;
  virtual void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p) = 0;

  virtual double sum(const Tensor& x) = 0;          // deterministic, in double
  virtual double sum_squares(const Tensor& x) = 0;  // deterministic, in double; NaN/Inf propagate
  virtual void scale(Tensor& x, double s) = 0;
};

Backend& cpu_backend();

// dst = src converted, wherever each lives: on one device the backend converts; across host and
// device the value is converted on the host side, then copied.
void copy_converted(Backend& be, Tensor& dst, const Tensor& src);

}  // namespace dl
