// The front of every backend: each op's dtype, device and shape checks, written once (the
// strictest of what the CPU and CUDA backends each checked before), then the device's
// implementation. The checks cost a few comparisons per tensor; a message is formatted only
// when one fails.
#include "dl/backend/backend.hpp"

#include <ostream>
#include <string>
#include <utility>

#include "dl/core/half.hpp"

namespace dl {

namespace {

bool is_float(DType d) { return d == DType::f32 || d == DType::f64 || is_16bit_float(d); }

// A tensor as the messages show it, formatted only when printed.
struct Desc {
  const Tensor& t;
};
std::ostream& operator<<(std::ostream& os, Desc d) {
  return d.t.defined() ? os << d.t.describe() : os << "undefined";
}

// The float dtypes of a backend's bit set, in a message: "f32, f64, bf16 or f16".
struct Floats {
  uint32_t bits;
};
std::ostream& operator<<(std::ostream& os, Floats f) {
  int n = 0, total = 0;
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) total += (f.bits >> static_cast<int>(d)) & 1;
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    if (!((f.bits >> static_cast<int>(d)) & 1)) continue;
    os << (n == 0 ? "" : n + 1 == total ? " or " : ", ") << dtype_name(d);
    ++n;
  }
  return os;
}

// One op call's checks. The first that fails throws Error(runtime)
// "<op>: <argument> is <dtype[shape]>, expected <what>".
class Check {
 public:
  Check(const char* op, Device dev, uint32_t floats) : op_(op), dev_(dev), floats_(floats) {}
  const char* op() const { return op_; }

  template <class... A>
  [[noreturn]] void fail(const char* name, const Tensor& t, A&&... expected) const {
    throw_runtime(op_, ": ", name, " is ", Desc{t}, ", expected ", std::forward<A>(expected)...);
  }

  // A float tensor of the op, on the backend's device. The first one sets the op's dtype (one
  // the backend takes); every later one has it.
  void flt(const Tensor& t, const char* name) {
    defined_here(t, name);
    if (!first_) {
      if (!is_float(t.dtype())) fail(name, t, "a float tensor");
      if (!((floats_ >> static_cast<int>(t.dtype())) & 1))
        fail(name, t, Floats{floats_}, " (the dtypes this backend takes)");
      first_ = &t;
      first_name_ = name;
    } else if (t.dtype() != first_->dtype()) {
      fail_dtype(name, t, "");
    }
  }
  // A tensor of a dtype the op fixes whatever its own (`ok`), which `expected` names.
  void of_dtype(const Tensor& t, const char* name, bool ok, const char* expected) {
    defined_here(t, name);
    if (!ok) fail(name, t, expected);
  }
  void flt_or_undefined(const Tensor& t, const char* name) {
    if (t.defined()) flt(t, name);
  }
  // A float tensor with the op's dtype, or another where `other_ok` (mixed precision: f32
  // losses of 16-bit logits, 16-bit gradients of f32 weights), which `other` names.
  void flt_mixed(const Tensor& t, const char* name, bool other_ok, const char* other) {
    defined_here(t, name);
    if (t.dtype() != first_->dtype() && !other_ok) fail_dtype(name, t, other);
  }
  // An i32 index tensor, on the host or the backend's device.
  void index(const Tensor& t, const char* name) {
    if (!t.defined() || t.dtype() != DType::i32) fail(name, t, "an i32 tensor");
    if (!t.device().is_cpu() && t.device() != dev_)
      throw_runtime(op_, ": ", name, " is ", Desc{t}, " on ", t.device().name(), ", expected it on cpu or ",
                    dev_.name());
  }
  // On the host or the backend's device (copy's ends).
  void reachable(const Tensor& t, const char* name) {
    if (!t.device().is_cpu() && t.device() != dev_)
      throw_runtime(op_, ": ", name, " is ", Desc{t}, " on ", t.device().name(), ", expected it on cpu or ",
                    dev_.name());
  }
  void rank(const Tensor& t, const char* name, int n, const char* form) {
    if (t.ndim() != n) fail(name, t, form);
  }
  // The size of the last dimension, which must exist and be positive (rows of C, V, IC).
  int64_t last(const Tensor& t, const char* name, const char* form) {
    if (t.ndim() < 1 || t.size(-1) <= 0) fail(name, t, form, " with a last dimension > 0");
    return t.size(-1);
  }
  void count(const Tensor& t, const char* name, int64_t n, const char* why, const char* of, const Tensor& ref) {
    if (t.numel() != n) fail(name, t, n, " elements (", why, " ", of, " ", Desc{ref}, ")");
  }

 private:
  void defined_here(const Tensor& t, const char* name) {
    if (!t.defined()) fail(name, t, "a tensor");
    if (t.device() != dev_)
      throw_runtime(op_, ": ", name, " is ", Desc{t}, " on ", t.device().name(), ", expected it on ", dev_.name());
  }
  [[noreturn]] void fail_dtype(const char* name, const Tensor& t, const char* other) const {
    fail(name, t, dtype_name(first_->dtype()), " like ", first_name_, " ", Desc{*first_}, other);
  }

  const char* op_;
  Device dev_;
  uint32_t floats_;
  const Tensor* first_ = nullptr;
  const char* first_name_ = "";
};

// The rows N and the last dimension of a row-wise op's main input: [..., C] -> N = numel / C.
struct Rows {
  int64_t N, C;
};
Rows rows_of(Check& c, const Tensor& t, const char* name, const char* form) {
  const int64_t C = c.last(t, name, form);
  return {t.numel() / C, C};
}

}  // namespace

Backend::Backend(std::initializer_list<DType> floats) {
  for (DType d : floats) {
    DL_CHECK(is_float(d), "a backend computes in float dtypes, not ", dtype_name(d));
    floats_ |= 1u << static_cast<int>(d);
  }
}

void Backend::check_token_ids(const Tensor& host_tokens, int64_t vocab_size) {
  const int32_t* t = host_tokens.data<int32_t>();
  const int64_t T = host_tokens.size(1);
  for (int64_t i = 0; i < host_tokens.numel(); ++i) {
    if (t[i] < 0 || t[i] >= vocab_size)
      throw_usage("token id ", t[i], " at batch row ", i / T, ", position ", i % T,
                  " is outside the model's vocabulary of ", vocab_size, " (check model.vocab_size against the data)");
  }
}

void Backend::check_targets(const char* op, const Tensor& host_targets, int64_t V) {
  const int32_t* t = host_targets.data<int32_t>();
  for (int64_t r = 0; r < host_targets.numel(); ++r) {
    if (t[r] >= V) throw_usage(op, ": target ", t[r], " at row ", r, " is outside the ", V, " classes of the output");
  }
}

// ---------------------------------------------------------------------------------------------
// Memory.

void Backend::copy(Tensor& dst, const Tensor& src) {
  Check c("copy", device(), floats_);
  c.reachable(dst, "dst");
  c.reachable(src, "src");
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel())
    c.fail("src", src, "the dtype and element count of dst ", Desc{dst});
  copy_impl(dst, src);
}

void Backend::convert(Tensor& dst, const Tensor& src) {
  Check c("convert", device(), floats_);
  c.flt(src, "src");
  c.flt_mixed(dst, "dst", ((floats_ >> static_cast<int>(dst.dtype())) & 1) != 0,
              " (or another float dtype this backend takes)");
  if (dst.numel() != src.numel()) c.fail("dst", dst, src.numel(), " elements like src ", Desc{src});
  convert_impl(dst, src);
}

// ---------------------------------------------------------------------------------------------
// Encoder.

// The shapes both directions share: tokens [B,T], (d)wte [rows,C], (d)out B*T*C elements,
// (d)wpe [>= T, C] when defined.
static void check_encoder(Check& c, const Tensor& out, const char* out_name, const Tensor& tokens, const Tensor& wte,
                          const char* wte_name, const Tensor& wpe, const char* wpe_name) {
  c.index(tokens, "tokens");
  c.rank(tokens, "tokens", 2, "i32[B,T]");
  c.rank(wte, wte_name, 2, "[rows,C]");
  const int64_t B = tokens.size(0), T = tokens.size(1), C = wte.size(1);
  c.count(out, out_name, B * T * C, "B*T*C", "for tokens", tokens);
  if (wpe.defined() && (wpe.ndim() != 2 || wpe.size(1) != C || wpe.size(0) < T))
    c.fail(wpe_name, wpe, "[>= T, C] with T = ", T, " and C = ", C, " (", wte_name, " ", Desc{wte}, ")");
}

void Backend::encoder_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                              int64_t vocab_start, int64_t vocab_size) {
  Check c("encoder_forward", device(), floats_);
  c.flt(wte, "wte");
  c.flt(out, "out");
  c.flt_or_undefined(wpe, "wpe");
  check_encoder(c, out, "out", tokens, wte, "wte", wpe, "wpe");
  encoder_forward_impl(out, tokens, wte, wpe, vocab_start, vocab_size);
}

void Backend::encoder_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                               int64_t vocab_start) {
  Check c("encoder_backward", device(), floats_);
  c.flt(dout, "dout");
  c.flt(dwte, "dwte");
  c.flt_or_undefined(dwpe, "dwpe");
  check_encoder(c, dout, "dout", tokens, dwte, "dwte", dwpe, "dwpe");
  encoder_backward_impl(dwte, dwpe, dout, tokens, vocab_start);
}

// ---------------------------------------------------------------------------------------------
// LayerNorm.

void Backend::layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias) {
  Check c("layernorm_forward", device(), floats_);
  c.flt(inp, "inp");
  c.flt(out, "out");
  c.flt(mean, "mean");
  c.flt(rstd, "rstd");
  c.flt(weight, "weight");
  c.flt(bias, "bias");
  const auto [N, C] = rows_of(c, inp, "inp", "[N,C]");
  c.count(out, "out", N * C, "the elements", "of inp", inp);
  c.count(mean, "mean", N, "one per row", "of inp", inp);
  c.count(rstd, "rstd", N, "one per row", "of inp", inp);
  c.count(weight, "weight", C, "one per column", "of inp", inp);
  c.count(bias, "bias", C, "one per column", "of inp", inp);
  layernorm_forward_impl(out, mean, rstd, inp, weight, bias);
}

void Backend::layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                 const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate) {
  Check c("layernorm_backward", device(), floats_);
  c.flt(inp, "inp");
  c.flt(dout, "dout");
  c.flt(dinp, "dinp");
  c.flt(dweight, "dweight");
  c.flt(dbias, "dbias");
  c.flt(weight, "weight");
  c.flt(mean, "mean");
  c.flt(rstd, "rstd");
  const auto [N, C] = rows_of(c, inp, "inp", "[N,C]");
  c.count(dout, "dout", N * C, "the elements", "of inp", inp);
  c.count(dinp, "dinp", N * C, "the elements", "of inp", inp);
  c.count(dweight, "dweight", C, "one per column", "of inp", inp);
  c.count(dbias, "dbias", C, "one per column", "of inp", inp);
  c.count(weight, "weight", C, "one per column", "of inp", inp);
  c.count(mean, "mean", N, "one per row", "of inp", inp);
  c.count(rstd, "rstd", N, "one per row", "of inp", inp);
  layernorm_backward_impl(dinp, dweight, dbias, dout, inp, weight, mean, rstd, accumulate);
}

// ---------------------------------------------------------------------------------------------
// Matmul.

namespace {
struct MatmulDims {
  int64_t N, IC, OC;
};
}  // namespace

static MatmulDims check_matmul(Check& c, const Tensor& inp, const Tensor& weight, WeightLayout layout) {
  const auto [N, IC] = rows_of(c, inp, "inp", "[N,IC]");
  const bool in_out = layout == WeightLayout::in_out;
  if (weight.ndim() != 2 || (in_out ? weight.size(0) : weight.size(1)) != IC)
    c.fail("weight", weight, in_out ? "[IC,OC] (in_out)" : "[OC,IC] (out_in)", " with IC = ", IC, " like inp ",
           Desc{inp});
  return {N, IC, in_out ? weight.size(1) : weight.size(0)};
}

void Backend::matmul_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                             WeightLayout layout) {
  Check c("matmul_forward", device(), floats_);
  c.flt(inp, "inp");
  c.flt(weight, "weight");
  c.flt(out, "out");
  c.flt_or_undefined(bias, "bias");
  const auto [N, IC, OC] = check_matmul(c, inp, weight, layout);
  c.count(out, "out", N * OC, "N*OC", "for weight", weight);
  if (bias.defined()) c.count(bias, "bias", OC, "OC", "of weight", weight);
  matmul_forward_impl(out, inp, weight, bias, layout);
}

void Backend::matmul_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                              const Tensor& weight, WeightLayout layout, bool accumulate) {
  Check c("matmul_backward", device(), floats_);
  c.flt(inp, "inp");
  c.flt(weight, "weight");
  c.flt(dout, "dout");
  c.flt(dweight, "dweight");
  c.flt_or_undefined(dinp, "dinp");
  c.flt_or_undefined(dbias, "dbias");
  const auto [N, IC, OC] = check_matmul(c, inp, weight, layout);
  c.count(dout, "dout", N * OC, "N*OC", "for weight", weight);
  c.count(dweight, "dweight", weight.numel(), "the elements", "of weight", weight);
  if (dinp.defined()) c.count(dinp, "dinp", N * IC, "the elements", "of inp", inp);
  if (dbias.defined()) c.count(dbias, "dbias", OC, "OC", "of weight", weight);
  matmul_backward_impl(dinp, dweight, dbias, dout, inp, weight, layout, accumulate);
}

// ---------------------------------------------------------------------------------------------
// Attention.

namespace {
struct AttentionDims {
  int64_t B, T, C;
};
}  // namespace

static AttentionDims check_attention(Check& c, const Backend& be, const Tensor& qkv, int n_head, const Tensor& state) {
  if (qkv.ndim() != 3 || qkv.size(2) % 3 != 0) c.fail("qkv", qkv, "[B,T,3C]");
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  if (n_head <= 0 || C % n_head != 0) c.fail("qkv", qkv, "C = ", C, " divisible by n_head = ", n_head);
  c.count(state, "state", shape_numel(be.attention_state_shape(B, T, C, n_head)), "attention_state_shape", "for qkv",
          qkv);
  return {B, T, C};
}

void Backend::attention_forward(Tensor& out, Tensor& state, const Tensor& qkv, int n_head) {
  Check c("attention_forward", device(), floats_);
  c.flt(qkv, "qkv");
  c.flt(out, "out");
  c.flt(state, "state");
  const auto [B, T, C] = check_attention(c, *this, qkv, n_head, state);
  c.count(out, "out", B * T * C, "B*T*C", "for qkv", qkv);
  attention_forward_impl(out, state, qkv, n_head);
}

void Backend::attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& state, int n_head) {
  Check c("attention_backward", device(), floats_);
  c.flt(qkv, "qkv");
  c.flt(dqkv, "dqkv");
  c.flt(dout, "dout");
  c.flt(out, "out");
  c.flt(state, "state");
  const auto [B, T, C] = check_attention(c, *this, qkv, n_head, state);
  c.count(dqkv, "dqkv", qkv.numel(), "the elements", "of qkv", qkv);
  c.count(dout, "dout", B * T * C, "B*T*C", "for qkv", qkv);
  c.count(out, "out", B * T * C, "B*T*C", "for qkv", qkv);
  attention_backward_impl(dqkv, dout, qkv, out, state, n_head);
}

// ---------------------------------------------------------------------------------------------
// Element-wise.

// An element-wise op's float tensors: the input, then those with its elements (out, dout, dinp).
static void check_elementwise(Check& c, const Tensor& inp, const char* name, const char* of_name,
                              std::initializer_list<std::pair<const Tensor&, const char*>> same) {
  c.flt(inp, name);
  for (const auto& [t, n] : same) c.flt(t, n);
  for (const auto& [t, n] : same) c.count(t, n, inp.numel(), "the elements", of_name, inp);
}

void Backend::gelu_forward(Tensor& out, const Tensor& inp) {
  Check c("gelu_forward", device(), floats_);
  check_elementwise(c, inp, "inp", "of inp", {{out, "out"}});
  gelu_forward_impl(out, inp);
}

void Backend::gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) {
  Check c("gelu_backward", device(), floats_);
  check_elementwise(c, inp, "inp", "of inp", {{dout, "dout"}, {dinp, "dinp"}});
  gelu_backward_impl(dinp, dout, inp, accumulate);
}

void Backend::relu_forward(Tensor& out, const Tensor& inp) {
  Check c("relu_forward", device(), floats_);
  check_elementwise(c, inp, "inp", "of inp", {{out, "out"}});
  relu_forward_impl(out, inp);
}

void Backend::relu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) {
  Check c("relu_backward", device(), floats_);
  check_elementwise(c, inp, "inp", "of inp", {{dout, "dout"}, {dinp, "dinp"}});
  relu_backward_impl(dinp, dout, inp, accumulate);
}

void Backend::add(Tensor& out, const Tensor& a, const Tensor& b) {
  Check c("add", device(), floats_);
  check_elementwise(c, a, "a", "of a", {{b, "b"}, {out, "out"}});
  add_impl(out, a, b);
}

void Backend::bias_add(Tensor& out, const Tensor& bias) {
  Check c("bias_add", device(), floats_);
  c.flt(out, "out");
  c.flt(bias, "bias");
  if (bias.numel() == 0 || out.numel() % bias.numel() != 0)
    c.fail("bias", bias, "C > 0 elements, C dividing those of out ", Desc{out});
  bias_add_impl(out, bias);
}

// ---------------------------------------------------------------------------------------------
// The Llama ops.

void Backend::rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps) {
  Check c("rmsnorm_forward", device(), floats_);
  check_elementwise(c, inp, "inp", "of inp", {{out, "out"}});
  c.flt(rstd, "rstd");
  c.flt(weight, "weight");
  const auto [N, C] = rows_of(c, inp, "inp", "[N,C]");
  c.count(rstd, "rstd", N, "one per row", "of inp", inp);
  c.count(weight, "weight", C, "one per column", "of inp", inp);
  if (!(eps > 0)) throw_runtime("rmsnorm_forward: eps is ", eps, ", expected > 0");
  rmsnorm_forward_impl(out, rstd, inp, weight, eps);
}

void Backend::rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                               const Tensor& weight, const Tensor& rstd, bool accumulate) {
  Check c("rmsnorm_backward", device(), floats_);
  check_elementwise(c, inp, "inp", "of inp", {{dout, "dout"}, {dinp, "dinp"}});
  for (const auto& [t, name] :
       {std::pair<const Tensor&, const char*>{dweight, "dweight"}, {weight, "weight"}, {rstd, "rstd"}})
    c.flt(t, name);
  const auto [N, C] = rows_of(c, inp, "inp", "[N,C]");
  c.count(dweight, "dweight", C, "one per column", "of inp", inp);
  c.count(weight, "weight", C, "one per column", "of inp", inp);
  c.count(rstd, "rstd", N, "one per row", "of inp", inp);
  rmsnorm_backward_impl(dinp, dweight, dout, inp, weight, rstd, accumulate);
}

// x[B,T,H*hs] with hs even, inv_freq [hs/2] f32 (f64 under f64 ops: the finite-difference
// tests'), never 16-bit: the angles t * inv_freq reach the context length, where a bf16
// frequency would be off by radians. The shapes both directions share.
static void check_rope(Check& c, const Tensor& x, const char* x_name, const Tensor& other, const char* other_name,
                       const Tensor& inv_freq, int n_head) {
  c.flt(x, x_name);
  c.flt(other, other_name);
  const bool f64_ops = x.dtype() == DType::f64;
  c.of_dtype(inv_freq, "inv_freq",
             inv_freq.dtype() == DType::f32 || (f64_ops && inv_freq.dtype() == DType::f64),
             f64_ops ? "f32 or f64" : "f32");
  if (x.ndim() != 3) c.fail(x_name, x, "[B,T,H*hs]");
  if (n_head <= 0 || x.size(2) % (2 * n_head) != 0)
    c.fail(x_name, x, "a last dimension of n_head = ", n_head, " heads of an even size");
  c.count(other, other_name, x.numel(), "the elements", "of", x);
  const int64_t hs = x.size(2) / n_head;
  c.count(inv_freq, "inv_freq", hs / 2, "half the head size", "of", x);
}

void Backend::rope_forward(Tensor& out, const Tensor& inp, const Tensor& inv_freq, int n_head) {
  Check c("rope_forward", device(), floats_);
  check_rope(c, inp, "inp", out, "out", inv_freq, n_head);
  rope_forward_impl(out, inp, inv_freq, n_head);
}

void Backend::rope_backward(Tensor& dinp, const Tensor& dout, const Tensor& inv_freq, int n_head) {
  Check c("rope_backward", device(), floats_);
  check_rope(c, dout, "dout", dinp, "dinp", inv_freq, n_head);
  rope_backward_impl(dinp, dout, inv_freq, n_head);
}

void Backend::swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  Check c("swiglu_forward", device(), floats_);
  check_elementwise(c, gate, "gate", "of gate", {{up, "up"}, {out, "out"}});
  swiglu_forward_impl(out, gate, up);
}

void Backend::swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  Check c("swiglu_backward", device(), floats_);
  check_elementwise(c, gate, "gate", "of gate", {{up, "up"}, {dout, "dout"}, {dgate, "dgate"}, {dup, "dup"}});
  swiglu_backward_impl(dgate, dup, dout, gate, up);
}

// q[B,T,H*hs], k and v [B,T,Hkv*hs] with Hkv dividing H, qkv [B,T,3*H*hs].
static void check_qkv_pack(Check& c, const Tensor& qkv, const char* qkv_name, const Tensor& q, const char* q_name,
                           const Tensor& k, const char* k_name, const Tensor& v, const char* v_name, int n_head,
                           int n_kv_head) {
  c.flt(qkv, qkv_name);
  c.flt(q, q_name);
  c.flt(k, k_name);
  c.flt(v, v_name);
  if (n_head <= 0 || n_kv_head <= 0 || n_head % n_kv_head != 0)
    throw_runtime(c.op(), ": n_kv_head = ", n_kv_head, " must divide n_head = ", n_head);
  if (q.ndim() != 3 || q.size(2) % n_head != 0) c.fail(q_name, q, "[B,T,H*hs] with H = n_head = ", n_head);
  const int64_t B = q.size(0), T = q.size(1), hs = q.size(2) / n_head;
  c.count(k, k_name, B * T * n_kv_head * hs, "B*T*n_kv_head*hs", "for", q);
  c.count(v, v_name, B * T * n_kv_head * hs, "B*T*n_kv_head*hs", "for", q);
  if (qkv.ndim() != 3 || qkv.size(0) != B || qkv.size(1) != T || qkv.size(2) != 3 * q.size(2))
    c.fail(qkv_name, qkv, "[B,T,3*H*hs] = [", B, ",", T, ",", 3 * q.size(2), "] for ", q_name, " ", Desc{q});
}

void Backend::qkv_pack(Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head) {
  Check c("qkv_pack", device(), floats_);
  check_qkv_pack(c, qkv, "qkv", q, "q", k, "k", v, "v", n_head, n_kv_head);
  qkv_pack_impl(qkv, q, k, v, n_head, n_kv_head);
}

void Backend::qkv_unpack(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dqkv, int n_head, int n_kv_head) {
  Check c("qkv_unpack", device(), floats_);
  check_qkv_pack(c, dqkv, "dqkv", dq, "dq", dk, "dk", dv, "dv", n_head, n_kv_head);
  qkv_unpack_impl(dq, dk, dv, dqkv, n_head, n_kv_head);
}

// A backend without the Llama kernels refuses them by name.
void Backend::rmsnorm_forward_impl(Tensor&, Tensor&, const Tensor&, const Tensor&, double) {
  throw_runtime("rmsnorm_forward: not implemented on the ", name(), " backend");
}
void Backend::rmsnorm_backward_impl(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    bool) {
  throw_runtime("rmsnorm_backward: not implemented on the ", name(), " backend");
}
void Backend::rope_forward_impl(Tensor&, const Tensor&, const Tensor&, int) {
  throw_runtime("rope_forward: not implemented on the ", name(), " backend");
}
void Backend::rope_backward_impl(Tensor&, const Tensor&, const Tensor&, int) {
  throw_runtime("rope_backward: not implemented on the ", name(), " backend");
}
void Backend::swiglu_forward_impl(Tensor&, const Tensor&, const Tensor&) {
  throw_runtime("swiglu_forward: not implemented on the ", name(), " backend");
}
void Backend::swiglu_backward_impl(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  throw_runtime("swiglu_backward: not implemented on the ", name(), " backend");
}
void Backend::qkv_pack_impl(Tensor&, const Tensor&, const Tensor&, const Tensor&, int, int) {
  throw_runtime("qkv_pack: not implemented on the ", name(), " backend");
}
void Backend::qkv_unpack_impl(Tensor&, Tensor&, Tensor&, const Tensor&, int, int) {
  throw_runtime("qkv_unpack: not implemented on the ", name(), " backend");
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy.

void Backend::crossentropy_forward(Tensor& losses, Tensor& correct, const Tensor& logits, const Tensor& targets) {
  Check c("crossentropy_forward", device(), floats_);
  c.flt(logits, "logits");
  c.flt_mixed(losses, "losses", is_16bit_float(logits.dtype()) && losses.dtype() == DType::f32,
              " (or f32 under 16-bit logits)");
  const auto [N, V] = rows_of(c, logits, "logits", "[N,V]");
  c.count(losses, "losses", N, "one per row", "of logits", logits);
  c.index(targets, "targets");
  c.count(targets, "targets", N, "one per row", "of logits", logits);
  if (correct.defined()) {
    c.index(correct, "correct");
    c.count(correct, "correct", N, "one per row", "of logits", logits);
  }
  crossentropy_forward_impl(losses, correct, logits, targets);
}

void Backend::crossentropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, double dloss) {
  Check c("crossentropy_backward", device(), floats_);
  c.flt(logits, "logits");
  c.flt(dlogits, "dlogits");
  const auto [N, V] = rows_of(c, logits, "logits", "[N,V]");
  c.count(dlogits, "dlogits", N * V, "the elements", "of logits", logits);
  c.index(targets, "targets");
  c.count(targets, "targets", N, "one per row", "of logits", logits);
  crossentropy_backward_impl(dlogits, logits, targets, dloss);
}

void Backend::argmax(Tensor& out, const Tensor& logits) {
  Check c("argmax", device(), floats_);
  c.flt(logits, "logits");
  const auto [N, V] = rows_of(c, logits, "logits", "[N,V]");
  c.index(out, "out");
  c.count(out, "out", N, "one per row", "of logits", logits);
  argmax_impl(out, logits);
}

void Backend::logits_row_max(Tensor& row_max, const Tensor& logits) {
  Check c("logits_row_max", device(), floats_);
  c.flt(logits, "logits");
  c.flt(row_max, "row_max");
  const auto [N, V] = rows_of(c, logits, "logits", "[N,V]");
  c.count(row_max, "row_max", N, "one per row", "of logits", logits);
  logits_row_max_impl(row_max, logits);
}

void Backend::logits_sum_exp(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max) {
  Check c("logits_sum_exp", device(), floats_);
  c.flt(logits, "logits");
  c.flt(sum_exp, "sum_exp");
  c.flt(row_max, "row_max");
  const auto [N, V] = rows_of(c, logits, "logits", "[N,V]");
  c.count(sum_exp, "sum_exp", N, "one per row", "of logits", logits);
  c.count(row_max, "row_max", N, "one per row", "of logits", logits);
  logits_sum_exp_impl(sum_exp, logits, row_max);
}

void Backend::logits_pick(Tensor& picked, const Tensor& logits, const Tensor& targets, int64_t vocab_start) {
  Check c("logits_pick", device(), floats_);
  c.flt(logits, "logits");
  c.flt(picked, "picked");
  const auto [N, V] = rows_of(c, logits, "logits", "[N,V]");
  c.count(picked, "picked", N, "one per row", "of logits", logits);
  c.index(targets, "targets");
  c.count(targets, "targets", N, "one per row", "of logits", logits);
  logits_pick_impl(picked, logits, targets, vocab_start);
}

void Backend::crossentropy_backward_sharded(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                            const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start,
                                            double dloss) {
  Check c("crossentropy_backward_sharded", device(), floats_);
  c.flt(logits, "logits");
  c.flt(dlogits, "dlogits");
  c.flt(row_max, "row_max");
  c.flt(sum_exp, "sum_exp");
  const auto [N, V] = rows_of(c, logits, "logits", "[N,V]");
  c.count(dlogits, "dlogits", N * V, "the elements", "of logits", logits);
  c.count(row_max, "row_max", N, "one per row", "of logits", logits);
  c.count(sum_exp, "sum_exp", N, "one per row", "of logits", logits);
  c.index(targets, "targets");
  c.count(targets, "targets", N, "one per row", "of logits", logits);
  crossentropy_backward_sharded_impl(dlogits, logits, targets, row_max, sum_exp, vocab_start, dloss);
}

// ---------------------------------------------------------------------------------------------
// Optimizers and reductions.

// An optimizer's gradient: the parameter's dtype, or bf16/f16 under f32 master weights.
static void check_grad(Check& c, const Tensor& grad, const Tensor& param) {
  c.flt_mixed(grad, "grad", param.dtype() == DType::f32 && is_16bit_float(grad.dtype()),
              " (or bf16/f16 under f32 master weights)");
  c.count(grad, "grad", param.numel(), "the elements", "of param", param);
}

void Backend::adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
  Check c("adamw_step", device(), floats_);
  c.flt(param, "param");
  c.flt(m, "m");
  c.flt(v, "v");
  check_grad(c, grad, param);
  c.count(m, "m", param.numel(), "the elements", "of param", param);
  c.count(v, "v", param.numel(), "the elements", "of param", param);
  adamw_step_impl(param, grad, m, v, p);
}

void Backend::sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p) {
  Check c("sgd_step", device(), floats_);
  c.flt(param, "param");
  if (p.momentum != 0.0) {
    c.flt(momentum, "momentum");
    c.count(momentum, "momentum", param.numel(), "the elements", "of param", param);
  } else {
    c.flt_or_undefined(momentum, "momentum");
  }
  check_grad(c, grad, param);
  sgd_step_impl(param, grad, momentum, p);
}

double Backend::sum(const Tensor& x) {
  Check c("sum", device(), floats_);
  c.flt(x, "x");
  return sum_impl(x);
}

double Backend::sum_squares(const Tensor& x) {
  Check c("sum_squares", device(), floats_);
  c.flt(x, "x");
  return sum_squares_impl(x);
}

void Backend::scale(Tensor& x, double s) {
  Check c("scale", device(), floats_);
  c.flt(x, "x");
  scale_impl(x, s);
}

}  // namespace dl
