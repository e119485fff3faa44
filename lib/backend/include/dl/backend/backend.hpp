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
#include <cstdint>
#include <initializer_list>
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

// The front: every op is a non-virtual function that checks its arguments once (backend.cpp:
// dtypes, devices and shapes, O(rank), never per element) and then calls the device's
// implementation, the protected virtual <op>_impl, which trusts them. A bad argument throws
// Error(runtime) naming the op, the argument, what it is and what was expected, the same
// message on every backend:
//   "layernorm_backward: mean is f32[3], expected 4 elements (one per row of inp f32[4,8])".
// The rules every backend shares:
//  - float tensors are on the backend's device, of one dtype per op, which the backend takes
//    (the CPU: f32, f64, bf16, f16; CUDA: f32, bf16, f16); the exceptions are named per op
//    (f32 losses of 16-bit logits, 16-bit gradients of f32 master weights);
//  - index tensors (tokens, targets, correct, argmax's out) are i32, on the host or the device;
//  - an undefined tensor is allowed only where the op says "may be undefined".
// Values (token ids, targets) are checked by the implementation once they are on the host,
// through check_token_ids and check_targets, so their messages are shared too.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  // Any shape and dtype: nothing to check.
  virtual Tensor empty(Shape shape, DType dtype) = 0;
  virtual void zero(Tensor& t) = 0;
  // Copies between any two devices this backend can reach; same dtype and element count.
  void copy(Tensor& dst, const Tensor& src);
  // dst = src converted between float dtypes (f32, bf16, f16; f64 on the CPU), rounding to
  // nearest even; both on this backend's device, same element count.
  void convert(Tensor& dst, const Tensor& src);

  // out[B,T,C] = wte[tokens - vocab_start] + wpe[position]. With a vocabulary-parallel
  // embedding wte holds rows [vocab_start, vocab_start + rows) and tokens outside that range
  // contribute zero; wpe may be undefined (added elsewhere). Token ids are checked against
  // `vocab_size` (the whole vocabulary).
  void encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int64_t vocab_start,
                       int64_t vocab_size);
  // dwpe may be undefined.
  void encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens, int64_t vocab_start);

  // Row-wise over the last dimension C; mean/rstd [N] are saved for backward. eps = 1e-5.
  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                         const Tensor& bias);
  void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                          const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate);

  // out[N,OC] = inp[N,IC] x W (+ bias[OC]); bias may be an undefined Tensor.
  void matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias, WeightLayout layout);
  // dinp may be undefined (first layer); dbias may be undefined when there is no bias.
  void matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                       const Tensor& weight, WeightLayout layout, bool accumulate);

  // Causal multi-head self-attention over qkv[B,T,3C] (q|k|v, each head's hs = C/H columns
  // contiguous) -> out[B,T,C]. `state` keeps what backward needs; its shape is the backend's:
  // attention_state_shape() tells the model what to allocate. Backward also takes forward's `out`
  // (flash-style backends read rowsum(dout * out) from it instead of recomputing the forward).
  virtual Shape attention_state_shape(int64_t B, int64_t T, int64_t C, int n_head) const = 0;
  void attention_forward(Tensor& out, Tensor& state, const Tensor& qkv, int n_head);
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& state,
                          int n_head);

  // The Llama family's ops (lib/nn/llama.*). The CPU and CUDA backends implement them all; a
  // backend without a kernel for one refuses it by name ("rmsnorm_forward: not implemented on the
  // <name> backend"), so a model that needs it stops before its first step rather than computing garbage.
  //
  // RMSNorm (Zhang & Sennrich 2019), row-wise over the last dimension C:
  // out = inp * rstd * weight with rstd = 1 / sqrt(mean(inp^2) + eps) saved per row [N].
  void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps);
  void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                        const Tensor& rstd, bool accumulate);
  // Rotary position embedding of x[B,T,H*hs] (hs even) at positions 0..T-1, transformers' Llama
  // convention (rotate_half): each head's pair (i, i + hs/2) is rotated by the angle
  // t * inv_freq[i]. inv_freq [hs/2] is f32 (or f64 under f64 ops), computed once by the model
  // with any rope scaling; the angle is formed in f32 as transformers does. out may be inp.
  // Backward rotates back; dinp may be dout.
  void rope_forward(Tensor& out, const Tensor& inp, const Tensor& inv_freq, int n_head);
  void rope_backward(Tensor& dinp, const Tensor& dout, const Tensor& inv_freq, int n_head);
  // SwiGLU (Shazeer 2020): out = silu(gate) * up, element-wise.
  void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up);
  void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up);
  // Grouped-query attention through attention_forward/backward: q[B,T,H*hs], k and v
  // [B,T,Hkv*hs] are packed into qkv[B,T,3*H*hs] with query head h reading K/V head
  // h / (H / Hkv); unpack gives dq and, for each K/V head, the sum of its group's dk and dv.
  // (Copies are O(B*T*C), the attention O(B*T*T*C): a kernel of its own would save little.)
  void qkv_pack(Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head);
  void qkv_unpack(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dqkv, int n_head, int n_kv_head);

  // GELU, tanh approximation (GPT-2's "gelu_new").
  void gelu_forward(Tensor& out, const Tensor& inp);
  void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate);
  void relu_forward(Tensor& out, const Tensor& inp);
  void relu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate);

  void add(Tensor& out, const Tensor& a, const Tensor& b);  // the residual connection
  void bias_add(Tensor& out, const Tensor& bias);           // out[N,C] += bias[C]

  // Softmax cross-entropy over logits[N,V] with int32 targets[N]; a negative target is ignored
  // (loss 0, gradient 0). losses[N] has the logits' dtype, or f32 under 16-bit logits (a 16-bit
  // loss loses the digits that matter); correct[N] (i32, may be undefined) gets 1 where the
  // argmax equals the target.
  void crossentropy_forward(Tensor& losses, Tensor& correct, const Tensor& logits, const Tensor& targets);
  // dlogits = (softmax(logits) - onehot(target)) * dloss for every row with a target >= 0.
  void crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, double dloss);
  // argmax over the last dimension -> i32[N]
  void argmax(Tensor& out, const Tensor& logits);

  // Cross-entropy over logits split by vocabulary across tensor-parallel ranks: each rank holds
  // columns [vocab_start, vocab_start + V_local). The caller combines the per-row statistics
  // across ranks (max, then sums) between these calls. All row tensors are [N] like the logits.
  void logits_row_max(Tensor& row_max, const Tensor& logits);
  void logits_sum_exp(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max);
  // picked[r] = logits[r, target - vocab_start] when this shard holds the target, else 0.
  void logits_pick(Tensor& picked, const Tensor& logits, const Tensor& targets, int64_t vocab_start);
  // dlogits = (exp(logits - row_max) / sum_exp - onehot(target)) * dloss; rows with target < 0 get 0.
  void crossentropy_backward_sharded(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                     const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start, double dloss);

  // Optimizer steps over flat ranges (param, grad and state tensors of equal size). param and
  // the state share a dtype; grad has it too, or is bf16 or f16 under f32 master weights (mixed
  // precision). sgd's momentum may be undefined when p.momentum is 0.
  void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p);
  void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p);

  double sum(const Tensor& x);          // deterministic, in double
  double sum_squares(const Tensor& x);  // deterministic, in double; NaN/Inf propagate
  void scale(Tensor& x, double s);

 protected:
  // `floats`: the float dtypes the backend computes in.
  explicit Backend(std::initializer_list<DType> floats);

  // The device implementations, called only with arguments the front has checked.
  virtual void copy_impl(Tensor& dst, const Tensor& src) = 0;
  virtual void convert_impl(Tensor& dst, const Tensor& src) = 0;
  virtual void encoder_forward_impl(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                    int64_t vocab_start, int64_t vocab_size) = 0;
  virtual void encoder_backward_impl(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                     int64_t vocab_start) = 0;
  virtual void layernorm_forward_impl(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                                      const Tensor& weight, const Tensor& bias) = 0;
  virtual void layernorm_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                       const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                       const Tensor& rstd, bool accumulate) = 0;
  virtual void matmul_forward_impl(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                   WeightLayout layout) = 0;
  virtual void matmul_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                    const Tensor& inp, const Tensor& weight, WeightLayout layout,
                                    bool accumulate) = 0;
  virtual void attention_forward_impl(Tensor& out, Tensor& state, const Tensor& qkv, int n_head) = 0;
  virtual void attention_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                       const Tensor& state, int n_head) = 0;
  // The Llama ops: by default refused by name (a backend without their kernels).
  virtual void rmsnorm_forward_impl(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps);
  virtual void rmsnorm_backward_impl(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                                     const Tensor& weight, const Tensor& rstd, bool accumulate);
  virtual void rope_forward_impl(Tensor& out, const Tensor& inp, const Tensor& inv_freq, int n_head);
  virtual void rope_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inv_freq, int n_head);
  virtual void swiglu_forward_impl(Tensor& out, const Tensor& gate, const Tensor& up);
  virtual void swiglu_backward_impl(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                                    const Tensor& up);
  virtual void qkv_pack_impl(Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head,
                             int n_kv_head);
  virtual void qkv_unpack_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dqkv, int n_head, int n_kv_head);
  virtual void gelu_forward_impl(Tensor& out, const Tensor& inp) = 0;
  virtual void gelu_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) = 0;
  virtual void relu_forward_impl(Tensor& out, const Tensor& inp) = 0;
  virtual void relu_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) = 0;
  virtual void add_impl(Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual void bias_add_impl(Tensor& out, const Tensor& bias) = 0;
  virtual void crossentropy_forward_impl(Tensor& losses, Tensor& correct, const Tensor& logits,
                                         const Tensor& targets) = 0;
  virtual void crossentropy_backward_impl(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                          double dloss) = 0;
  virtual void argmax_impl(Tensor& out, const Tensor& logits) = 0;
  virtual void logits_row_max_impl(Tensor& row_max, const Tensor& logits) = 0;
  virtual void logits_sum_exp_impl(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max) = 0;
  virtual void logits_pick_impl(Tensor& picked, const Tensor& logits, const Tensor& targets,
                                int64_t vocab_start) = 0;
  virtual void crossentropy_backward_sharded_impl(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                                  const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start,
                                                  double dloss) = 0;
  virtual void adamw_step_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) = 0;
  virtual void sgd_step_impl(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p) = 0;
  virtual double sum_impl(const Tensor& x) = 0;
  virtual double sum_squares_impl(const Tensor& x) = 0;
  virtual void scale_impl(Tensor& x, double s) = 0;

  // The value checks, on host copies of the index tensors: every token id in [0, vocab_size)
  // (Error(usage): the data does not fit the model); every target below V.
  static void check_token_ids(const Tensor& host_tokens, int64_t vocab_size);
  static void check_targets(const char* op, const Tensor& host_targets, int64_t V);

 private:
  uint32_t floats_ = 0;  // bit d set: the backend takes DType d
};

Backend& cpu_backend();

// dst = src converted, wherever each lives: on one device the backend converts; across host and
// device the value is converted on the host side, then copied.
void copy_converted(Backend& be, Tensor& dst, const Tensor& src);

}  // namespace dl
