// The cases: one function per dl::Backend op (op_case.hpp says what a case holds), instantiated
// with small, odd shapes for `test` (sizes that are no multiple of a tile, a warp or a vector) and
// with GPT-2 124M's shapes (B x T = 2 x 1024, C = 768, 12 heads, V = 50257) for `perf`.
#include <cmath>
#include <limits>

#include "dl/core/half.hpp"
#include "op_case.hpp"

namespace dl::ops {

namespace {

using D = DType;
std::string str_of(int64_t v) { return std::to_string(v); }
std::string layout_name(WeightLayout l) { return l == WeightLayout::in_out ? "in_out" : "out_in"; }

// <y, w> in double: the loss whose gradient with respect to y is w (the gradient checks' host f64
// tensors).
double dot(const Tensor& y, const Tensor& w) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += y.data<double>()[i] * w.data<double>()[i];
  return s;
}

// --- copies, conversions, zero, scale ----------------------------------------------------------

// dst = src on the device, from the host, or to the host.
Case copy(int64_t n, bool src_host, bool dst_host) {
  Case c{"copy", "n=" + str_of(n) + (src_host ? ",host->dev" : dst_host ? ",dev->host" : ",dev->dev")};
  Arg src = in("src", {n}, -100, 100), dst = out("dst", {n});
  c.args = {src_host ? src.on_host() : src, dst_host ? dst.on_host() : dst};
  c.run = [](Env& e) { e.be.copy(e["dst"], e["src"]); };
  c.tol = Tolerance::all({0, 0});
  return c;
}

// Rounds to nearest even like the host: the reference is the input rounded to the output's dtype.
Case convert(int64_t n, Type from, Type to, std::string what, std::function<double(int64_t, double)> fill = {}) {
  Case c{"convert", "n=" + str_of(n) + "," + what};
  Arg src = in("src", {n}, -100, 100).as(from);
  if (fill) src = src.with(std::move(fill));
  c.args = {src, out("dst", {n}).as(to)};
  c.dtypes = {D::bf16, D::f16};
  c.run = [](Env& e) { e.be.convert(e["dst"], e["src"]); };
  c.reference = [](Env& e) {
    Tensor rounded = Tensor::empty(e["dst"].shape(), e.declared.at("dst"));
    convert_host(rounded, e["src"]);
    convert_host(e["dst"], rounded);
  };
  c.tol = Tolerance::all({0, 0});
  return c;
}

Case zero(int64_t n) {
  Case c{"zero", "n=" + str_of(n)};
  c.args = {out("x", {n})};
  c.run = [](Env& e) { e.be.zero(e["x"]); };
  c.tol = Tolerance::all({0, 0});
  return c;
}

Case scale(int64_t n, double s) {
  Case c{"scale", "n=" + str_of(n) + ",s=" + std::to_string(s).substr(0, 5)};
  c.args = {inout("x", {n})};
  c.run = [s](Env& e) { e.be.scale(e["x"], s); };
  return c;
}

// --- embeddings --------------------------------------------------------------------------------

// v0 > 0: a vocabulary-parallel shard holding rows [v0, v0 + rows) of V.
Case encoder_forward(int64_t B, int64_t T, int64_t C, int64_t V, int64_t v0, bool with_wpe, bool tokens_on_host) {
  const int64_t rows = v0 ? V / 2 : V;
  Case c{"encoder_forward", "B=" + str_of(B) + ",T=" + str_of(T) + ",C=" + str_of(C) + ",V=" + str_of(V) +
                                ",v0=" + str_of(v0) + (with_wpe ? "" : ",no_wpe") + (tokens_on_host ? "" : ",dev_tokens")};
  Arg tokens = ids("tokens", {B, T}, V);
  tokens.host = tokens_on_host;
  c.args = {out("out", {B, T, C}), tokens, in("wte", {rows, C}), in("wpe", {T, C})};
  c.run = [v0, V, with_wpe](Env& e) {
    e.be.encoder_forward(e["out"], e["tokens"], e["wte"], with_wpe ? e["wpe"] : Tensor(), v0, V);
  };
  return c;
}

Case encoder_backward(int64_t B, int64_t T, int64_t C, int64_t V, int64_t v0, bool with_wpe) {
  const int64_t rows = v0 ? V / 2 : V;
  Case c{"encoder_backward", "B=" + str_of(B) + ",T=" + str_of(T) + ",C=" + str_of(C) + ",V=" + str_of(V) +
                                 ",v0=" + str_of(v0) + (with_wpe ? "" : ",no_wpe")};
  c.args = {inout("dwte", {rows, C}), inout("dwpe", {T, C}), in("dout", {B, T, C}), ids("tokens", {B, T}, V)};
  c.run = [v0, with_wpe](Env& e) {
    Tensor none;
    e.be.encoder_backward(e["dwte"], with_wpe ? e["dwpe"] : none, e["dout"], e["tokens"], v0);
  };
  c.loss = [=](Env& e) {
    Tensor y = e.be.empty({B, T, C}, e.float_dtype());
    e.be.encoder_forward(y, e["tokens"], e["wte"], with_wpe ? e["wpe"] : Tensor(), v0, V);
    return dot(y, e["dout"]);
  };
  c.wrt = {{"wte", "dwte"}};  // the check makes wte and wpe: the op takes neither
  if (with_wpe) c.wrt.push_back({"wpe", "dwpe"});
  return c;
}

// --- LayerNorm ---------------------------------------------------------------------------------

Case layernorm_forward(int64_t N, int64_t C) {
  Case c{"layernorm_forward", "N=" + str_of(N) + ",C=" + str_of(C)};
  c.args = {out("out", {N, C}), out("mean", {N}), out("rstd", {N}), in("inp", {N, C}, -2, 3),
            in("weight", {C}, 0.5, 1.5), in("bias", {C})};
  c.run = [](Env& e) { e.be.layernorm_forward(e["out"], e["mean"], e["rstd"], e["inp"], e["weight"], e["bias"]); };
  return c;
}

Case layernorm_backward(int64_t N, int64_t C, bool accumulate) {
  Case c{"layernorm_backward", "N=" + str_of(N) + ",C=" + str_of(C) + ",acc=" + str_of(accumulate)};
  c.args = {accumulate ? inout("dinp", {N, C}) : out("dinp", {N, C}),
            inout("dweight", {C}),
            inout("dbias", {C}),
            in("dout", {N, C}),
            in("inp", {N, C}, -2, 3),
            in("weight", {C}, 0.5, 1.5),
            in("bias", {C})};
  c.setup = [N, C](Env& e) {  // the tested backend's mean and rstd, rounded to its dtype
    Tensor fwd = e.be.empty({N, C}, e.float_dtype());
    e.t["mean"] = e.be.empty({N}, e.float_dtype());
    e.t["rstd"] = e.be.empty({N}, e.float_dtype());
    e.be.layernorm_forward(fwd, e["mean"], e["rstd"], e["inp"], e["weight"], e["bias"]);
  };
  c.shared = {"mean", "rstd"};
  c.run = [accumulate](Env& e) {
    e.be.layernorm_backward(e["dinp"], e["dweight"], e["dbias"], e["dout"], e["inp"], e["weight"], e["mean"],
                            e["rstd"], accumulate);
  };
  c.loss = [N, C](Env& e) {
    Tensor y = e.be.empty({N, C}, e.float_dtype()), mean = e.be.empty({N}, e.float_dtype());
    Tensor rstd = e.be.empty({N}, e.float_dtype());
    e.be.layernorm_forward(y, mean, rstd, e["inp"], e["weight"], e["bias"]);
    return dot(y, e["dout"]);
  };
  c.wrt = {{"inp", "dinp"}, {"weight", "dweight"}, {"bias", "dbias"}};
  return c;
}

// --- matmul ------------------------------------------------------------------------------------

// misaligned: the weight at an odd element offset of its buffer (parameters sit in one flat
// buffer), which the GEMM path's alignment handling must take.
Case matmul_forward(int64_t N, int64_t IC, int64_t OC, WeightLayout layout, bool with_bias, bool misaligned) {
  Case c{"matmul_forward", "N=" + str_of(N) + ",IC=" + str_of(IC) + ",OC=" + str_of(OC) + "," + layout_name(layout) +
                               (with_bias ? ",bias" : "") + (misaligned ? ",misaligned" : "")};
  const Shape ws = layout == WeightLayout::in_out ? Shape{IC, OC} : Shape{OC, IC};
  const int64_t off = misaligned ? 1 : 0;
  c.args = {out("out", {N, OC}), in("inp", {N, IC}), in("wbuf", {IC * OC + off}), in("bias", {OC})};
  c.run = [=](Env& e) {
    e.be.matmul_forward(e["out"], e["inp"], e["wbuf"].flat_slice(off, ws), with_bias ? e["bias"] : Tensor(), layout);
  };
  c.flops = 2.0 * double(N) * double(IC) * double(OC);
  return c;
}

Case matmul_backward(int64_t N, int64_t IC, int64_t OC, WeightLayout layout, bool with_bias, bool misaligned,
                     bool accumulate) {
  Case c{"matmul_backward", "N=" + str_of(N) + ",IC=" + str_of(IC) + ",OC=" + str_of(OC) + "," +
                                layout_name(layout) + (with_bias ? ",bias" : "") + (misaligned ? ",misaligned" : "") +
                                ",acc=" + str_of(accumulate)};
  const Shape ws = layout == WeightLayout::in_out ? Shape{IC, OC} : Shape{OC, IC};
  const int64_t off = misaligned ? 1 : 0;
  c.args = {accumulate ? inout("dinp", {N, IC}) : out("dinp", {N, IC}),
            inout("dweight", ws),
            inout("dbias", {OC}),
            in("dout", {N, OC}),
            in("inp", {N, IC}),
            in("wbuf", {IC * OC + off})};
  c.run = [=](Env& e) {
    Tensor none;
    e.be.matmul_backward(e["dinp"], e["dweight"], with_bias ? e["dbias"] : none, e["dout"], e["inp"],
                         e["wbuf"].flat_slice(off, ws), layout, accumulate);
  };
  c.loss = [=](Env& e) {
    Tensor y = e.be.empty({N, OC}, e.float_dtype());
    e.be.matmul_forward(y, e["inp"], e["wbuf"].flat_slice(off, ws), with_bias ? e["bias"] : Tensor(), layout);
    return dot(y, e["dout"]);
  };
  c.wrt = {{"inp", "dinp"}};
  if (!misaligned) c.wrt.push_back({"wbuf", "dweight"});  // element i of wbuf is element i of W
  if (with_bias) c.wrt.push_back({"bias", "dbias"});  // the check makes "bias": the op takes none
  c.flops = 4.0 * double(N) * double(IC) * double(OC);
  return c;
}

// --- attention ---------------------------------------------------------------------------------

std::string attn_params(int64_t B, int64_t T, int64_t C, int H) {
  return "B=" + str_of(B) + ",T=" + str_of(T) + ",C=" + str_of(C) + ",H=" + str_of(H) + ",hs=" + str_of(C / H);
}
// Causal: half of the T x T score matrix, two GEMMs of it forward.
double attention_flops(int64_t B, int64_t T, int64_t C) { return 2.0 * double(B) * double(T) * double(T) * double(C); }

Case attention_forward(int64_t B, int64_t T, int64_t C, int H) {
  Case c{"attention_forward", attn_params(B, T, C, H)};
  c.args = {out("out", {B, T, C}), in("qkv", {B, T, 3 * C}, -2, 2)};
  c.setup = [=](Env& e) { e.t["state"] = e.be.empty(e.be.attention_state_shape(B, T, C, H), e.float_dtype()); };
  c.run = [H](Env& e) { e.be.attention_forward(e["out"], e["state"], e["qkv"], H); };
  c.flops = attention_flops(B, T, C);
  return c;
}

// The state is each backend's own (its shape is the backend's): both run their forward first.
Case attention_backward(int64_t B, int64_t T, int64_t C, int H) {
  Case c{"attention_backward", attn_params(B, T, C, H)};
  c.args = {out("dqkv", {B, T, 3 * C}), in("dout", {B, T, C}), in("qkv", {B, T, 3 * C}, -2, 2)};
  c.setup = [=](Env& e) {
    e.t["state"] = e.be.empty(e.be.attention_state_shape(B, T, C, H), e.float_dtype());
    e.t["out"] = e.be.empty({B, T, C}, e.float_dtype());
    e.be.attention_forward(e["out"], e["state"], e["qkv"], H);
  };
  c.run = [H](Env& e) { e.be.attention_backward(e["dqkv"], e["dout"], e["qkv"], e["out"], e["state"], H); };
  c.loss = [=](Env& e) {
    Tensor y = e.be.empty({B, T, C}, e.float_dtype());
    Tensor state = e.be.empty(e.be.attention_state_shape(B, T, C, H), e.float_dtype());
    e.be.attention_forward(y, state, e["qkv"], H);
    return dot(y, e["dout"]);
  };
  c.wrt = {{"qkv", "dqkv"}};
  c.flops = 2.5 * attention_flops(B, T, C);  // five GEMMs of the score matrix (recomputing it)
  return c;
}

// --- the Llama ops -----------------------------------------------------------------------------

Case rmsnorm_forward(int64_t N, int64_t C) {
  Case c{"rmsnorm_forward", "N=" + str_of(N) + ",C=" + str_of(C)};
  c.args = {out("out", {N, C}), out("rstd", {N}), in("inp", {N, C}, -2, 3), in("weight", {C}, 0.5, 1.5)};
  c.run = [](Env& e) { e.be.rmsnorm_forward(e["out"], e["rstd"], e["inp"], e["weight"], 1e-5); };
  return c;
}

Case rmsnorm_backward(int64_t N, int64_t C, bool accumulate) {
  Case c{"rmsnorm_backward", "N=" + str_of(N) + ",C=" + str_of(C) + ",acc=" + str_of(accumulate)};
  c.args = {accumulate ? inout("dinp", {N, C}) : out("dinp", {N, C}), inout("dweight", {C}), in("dout", {N, C}),
            in("inp", {N, C}, -2, 3), in("weight", {C}, 0.5, 1.5)};
  c.setup = [N, C](Env& e) {  // the tested backend's rstd, rounded to its dtype
    Tensor fwd = e.be.empty({N, C}, e.float_dtype());
    e.t["rstd"] = e.be.empty({N}, e.float_dtype());
    e.be.rmsnorm_forward(fwd, e["rstd"], e["inp"], e["weight"], 1e-5);
  };
  c.shared = {"rstd"};
  c.run = [accumulate](Env& e) {
    e.be.rmsnorm_backward(e["dinp"], e["dweight"], e["dout"], e["inp"], e["weight"], e["rstd"], accumulate);
  };
  c.loss = [N, C](Env& e) {
    Tensor y = e.be.empty({N, C}, e.float_dtype()), rstd = e.be.empty({N}, e.float_dtype());
    e.be.rmsnorm_forward(y, rstd, e["inp"], e["weight"], 1e-5);
    return dot(y, e["dout"]);
  };
  c.wrt = {{"inp", "dinp"}, {"weight", "dweight"}};
  return c;
}

// inv_freq as Llama's (theta 10000) up to a factor: angles up to T radians, so every quadrant.
std::string rope_params(int64_t B, int64_t T, int H, int64_t hs) {
  return "B=" + str_of(B) + ",T=" + str_of(T) + ",H=" + str_of(H) + ",hs=" + str_of(hs);
}
Arg inv_freq_arg(int64_t hs) {
  return in("inv_freq", {hs / 2}).as(Type::f32).with([hs](int64_t i, double u) {
    return (0.75 + 0.5 * u) * std::pow(10000.0, -2.0 * double(i) / double(hs));
  });
}

Case rope_forward(int64_t B, int64_t T, int H, int64_t hs, bool in_place) {
  Case c{"rope_forward", rope_params(B, T, H, hs) + (in_place ? ",in_place" : "")};
  c.args = {in_place ? inout("inp", {B, T, H * hs}) : in("inp", {B, T, H * hs}), inv_freq_arg(hs)};
  if (!in_place) c.args.push_back(out("out", {B, T, H * hs}));
  c.run = [H, in_place](Env& e) { e.be.rope_forward(in_place ? e["inp"] : e["out"], e["inp"], e["inv_freq"], H); };
  return c;
}

Case rope_backward(int64_t B, int64_t T, int H, int64_t hs, bool in_place) {
  Case c{"rope_backward", rope_params(B, T, H, hs) + (in_place ? ",in_place" : "")};
  c.args = {in_place ? inout("dout", {B, T, H * hs}) : in("dout", {B, T, H * hs}), inv_freq_arg(hs)};
  if (!in_place) c.args.push_back(out("dinp", {B, T, H * hs}));
  c.run = [H, in_place](Env& e) {
    e.be.rope_backward(in_place ? e["dout"] : e["dinp"], e["dout"], e["inv_freq"], H);
  };
  if (!in_place) {
    c.loss = [H](Env& e) {
      Tensor y = e.be.empty(e["dout"].shape(), e.float_dtype());
      e.be.rope_forward(y, e["inp"], e["inv_freq"], H);
      return dot(y, e["dout"]);
    };
    c.wrt = {{"inp", "dinp"}};
  }
  return c;
}

Case swiglu_forward(int64_t N, int64_t F) {
  Case c{"swiglu_forward", "N=" + str_of(N) + ",F=" + str_of(F)};
  c.args = {out("out", {N, F}), in("gate", {N, F}, -6, 6), in("up", {N, F}, -2, 2)};
  c.run = [](Env& e) { e.be.swiglu_forward(e["out"], e["gate"], e["up"]); };
  return c;
}

Case swiglu_backward(int64_t N, int64_t F) {
  Case c{"swiglu_backward", "N=" + str_of(N) + ",F=" + str_of(F)};
  c.args = {out("dgate", {N, F}), out("dup", {N, F}), in("dout", {N, F}), in("gate", {N, F}, -6, 6),
            in("up", {N, F}, -2, 2)};
  c.run = [](Env& e) { e.be.swiglu_backward(e["dgate"], e["dup"], e["dout"], e["gate"], e["up"]); };
  c.loss = [N, F](Env& e) {
    Tensor y = e.be.empty({N, F}, e.float_dtype());
    e.be.swiglu_forward(y, e["gate"], e["up"]);
    return dot(y, e["dout"]);
  };
  c.wrt = {{"gate", "dgate"}, {"up", "dup"}};
  return c;
}

std::string gqa_params(int64_t B, int64_t T, int H, int Hkv, int64_t hs) {
  return "B=" + str_of(B) + ",T=" + str_of(T) + ",H=" + str_of(H) + ",Hkv=" + str_of(Hkv) + ",hs=" + str_of(hs);
}

Case qkv_pack(int64_t B, int64_t T, int H, int Hkv, int64_t hs) {
  Case c{"qkv_pack", gqa_params(B, T, H, Hkv, hs)};
  c.args = {out("qkv", {B, T, 3 * H * hs}), in("q", {B, T, H * hs}), in("k", {B, T, Hkv * hs}),
            in("v", {B, T, Hkv * hs})};
  c.run = [H, Hkv](Env& e) { e.be.qkv_pack(e["qkv"], e["q"], e["k"], e["v"], H, Hkv); };
  c.tol = Tolerance::all({0, 0});
  return c;
}

// The gradient of the pack: unpack is its transpose, checked against differences of <pack, dqkv>.
Case qkv_unpack(int64_t B, int64_t T, int H, int Hkv, int64_t hs) {
  Case c{"qkv_unpack", gqa_params(B, T, H, Hkv, hs)};
  c.args = {out("dq", {B, T, H * hs}), out("dk", {B, T, Hkv * hs}), out("dv", {B, T, Hkv * hs}),
            in("dqkv", {B, T, 3 * H * hs})};
  c.run = [H, Hkv](Env& e) { e.be.qkv_unpack(e["dq"], e["dk"], e["dv"], e["dqkv"], H, Hkv); };
  c.loss = [=](Env& e) {
    Tensor y = e.be.empty({B, T, 3 * H * hs}, e.float_dtype());
    e.be.qkv_pack(y, e["q"], e["k"], e["v"], H, Hkv);
    return dot(y, e["dqkv"]);
  };
  c.wrt = {{"q", "dq"}, {"k", "dk"}, {"v", "dv"}};
  return c;
}

// --- pointwise ---------------------------------------------------------------------------------

Case activation_forward(bool gelu, int64_t N, int64_t C) {
  Case c{gelu ? "gelu_forward" : "relu_forward", "N=" + str_of(N) + ",C=" + str_of(C)};
  c.args = {out("out", {N, C}), in("inp", {N, C}, -4, 4)};
  if (gelu) c.run = [](Env& e) { e.be.gelu_forward(e["out"], e["inp"]); };
  else c.run = [](Env& e) { e.be.relu_forward(e["out"], e["inp"]); };
  return c;
}

// in_place: dinp is dout, as the model calls it (gelu_backward(d, d, x)).
Case activation_backward(bool gelu, int64_t N, int64_t C, bool accumulate, bool in_place) {
  Case c{gelu ? "gelu_backward" : "relu_backward",
         "N=" + str_of(N) + ",C=" + str_of(C) + ",acc=" + str_of(accumulate) + (in_place ? ",in_place" : "")};
  c.args = {accumulate || in_place ? inout("dinp", {N, C}) : out("dinp", {N, C}), in("dout", {N, C}),
            in("inp", {N, C}, -4, 4)};
  c.run = [gelu, accumulate, in_place](Env& e) {
    const Tensor& dout = in_place ? e["dinp"] : e["dout"];
    if (gelu) e.be.gelu_backward(e["dinp"], dout, e["inp"], accumulate);
    else e.be.relu_backward(e["dinp"], dout, e["inp"], accumulate);
  };
  if (!in_place) {
    c.loss = [gelu](Env& e) {
      Tensor y = e.be.empty(e["inp"].shape(), e.float_dtype());
      if (gelu) e.be.gelu_forward(y, e["inp"]);
      else e.be.relu_forward(y, e["inp"]);
      return dot(y, e["dout"]);
    };
    c.wrt = {{"inp", "dinp"}};
  }
  return c;
}

Case add(int64_t N, int64_t C) {
  Case c{"add", "N=" + str_of(N) + ",C=" + str_of(C)};
  c.args = {out("out", {N, C}), in("a", {N, C}), in("b", {N, C})};
  c.run = [](Env& e) { e.be.add(e["out"], e["a"], e["b"]); };
  return c;
}

Case bias_add(int64_t N, int64_t C) {
  Case c{"bias_add", "N=" + str_of(N) + ",C=" + str_of(C)};
  c.args = {inout("out", {N, C}), in("bias", {C})};
  c.run = [](Env& e) { e.be.bias_add(e["out"], e["bias"]); };
  return c;
}

// --- cross-entropy -----------------------------------------------------------------------------

std::string nv(int64_t N, int64_t V) { return "N=" + str_of(N) + ",V=" + str_of(V); }

// Logits in [-6, 6]; 15% of the targets ignored (-1).
Case crossentropy_forward(int64_t N, int64_t V) {
  Case c{"crossentropy_forward", nv(N, V)};
  c.args = {out("losses", {N}).as(Type::loss), ids("correct", {N}, 2, 0, Role::out), in("logits", {N, V}, -6, 6),
            ids("targets", {N}, V, 0.15)};
  c.run = [](Env& e) { e.be.crossentropy_forward(e["losses"], e["correct"], e["logits"], e["targets"]); };
  return c;
}

// in_place: dlogits is the logits, as the model calls it.
Case crossentropy_backward(int64_t N, int64_t V, bool in_place) {
  Case c{"crossentropy_backward", nv(N, V) + (in_place ? ",in_place" : "")};
  c.args = {in_place ? inout("logits", {N, V}, -6, 6) : in("logits", {N, V}, -6, 6), ids("targets", {N}, V, 0.15)};
  if (!in_place) c.args.push_back(out("dlogits", {N, V}));
  c.run = [in_place](Env& e) {
    e.be.crossentropy_backward(in_place ? e["logits"] : e["dlogits"], e["logits"], e["targets"], 1.0 / 29.0);
  };
  if (!in_place) {
    c.loss = [N](Env& e) {
      Tensor losses = e.be.empty({N}, e.float_dtype());
      Tensor none;
      e.be.crossentropy_forward(losses, none, e["logits"], e["targets"]);
      return e.be.sum(losses) / 29.0;
    };
    c.wrt = {{"logits", "dlogits"}};
  }
  return c;
}

Case argmax(int64_t N, int64_t V) {
  Case c{"argmax", nv(N, V)};
  Arg index = ids("out", {N}, 2, 0, Role::out);
  index.host = false;  // on the device, as generation keeps it
  c.args = {index, in("logits", {N, V}, -6, 6)};
  c.run = [](Env& e) { e.be.argmax(e["out"], e["logits"]); };
  return c;
}

// The vocabulary-parallel pieces over a shard [v0, v0 + Vs) of a vocabulary of 4 Vs.
Case logits_row_max(int64_t N, int64_t Vs) {
  Case c{"logits_row_max", nv(N, Vs)};
  c.args = {out("row_max", {N}), in("logits", {N, Vs}, -6, 6)};
  c.run = [](Env& e) { e.be.logits_row_max(e["row_max"], e["logits"]); };
  return c;
}

// The row max each backend computed (rounded to its dtype) is what the sum uses.
void shard_row_stats(Env& e, bool sum_exp) {
  const int64_t N = e["logits"].size(0);
  e.t["row_max"] = e.be.empty({N}, e.float_dtype());
  e.be.logits_row_max(e["row_max"], e["logits"]);
  if (!sum_exp) return;
  e.t["sum_exp"] = e.be.empty({N}, e.float_dtype());
  e.be.logits_sum_exp(e["sum_exp"], e["logits"], e["row_max"]);
}

Case logits_sum_exp(int64_t N, int64_t Vs) {
  Case c{"logits_sum_exp", nv(N, Vs)};
  c.args = {out("sum_exp", {N}), in("logits", {N, Vs}, -6, 6)};
  c.setup = [](Env& e) { shard_row_stats(e, false); };
  c.shared = {"row_max"};
  c.run = [](Env& e) { e.be.logits_sum_exp(e["sum_exp"], e["logits"], e["row_max"]); };
  return c;
}

Case logits_pick(int64_t N, int64_t Vs) {
  Case c{"logits_pick", nv(N, Vs) + ",v0=" + str_of(Vs)};
  c.args = {out("picked", {N}), in("logits", {N, Vs}, -6, 6), ids("targets", {N}, 4 * Vs, 0.15)};
  c.run = [Vs](Env& e) { e.be.logits_pick(e["picked"], e["logits"], e["targets"], Vs); };
  return c;
}

Case crossentropy_backward_sharded(int64_t N, int64_t Vs) {
  Case c{"crossentropy_backward_sharded", nv(N, Vs) + ",v0=" + str_of(Vs)};
  c.args = {out("dlogits", {N, Vs}), in("logits", {N, Vs}, -6, 6), ids("targets", {N}, 4 * Vs, 0.15)};
  c.setup = [](Env& e) { shard_row_stats(e, true); };
  c.shared = {"row_max", "sum_exp"};
  c.run = [Vs](Env& e) {
    e.be.crossentropy_backward_sharded(e["dlogits"], e["logits"], e["targets"], e["row_max"], e["sum_exp"], Vs,
                                       1.0 / 29.0);
  };
  // With this shard's own row statistics the op is the gradient of the shard's cross-entropy:
  // the sum over rows with a target of log(sum_exp) + row_max - picked.
  c.loss = [N, Vs](Env& e) {
    shard_row_stats(e, true);
    Tensor picked = e.be.empty({N}, e.float_dtype());
    e.be.logits_pick(picked, e["logits"], e["targets"], Vs);
    double loss = 0;
    for (int64_t r = 0; r < N; ++r)
      if (e["targets"].data<int32_t>()[r] >= 0)
        loss += std::log(e["sum_exp"].data<double>()[r]) + e["row_max"].data<double>()[r] - picked.data<double>()[r];
    return loss / 29.0;
  };
  c.wrt = {{"logits", "dlogits"}};
  return c;
}

// --- optimizers --------------------------------------------------------------------------------

// master: f32 parameters and state under 16-bit gradients (mixed precision).
std::vector<DType> optimizer_dtypes(bool master) {
  return master ? std::vector<DType>{D::bf16, D::f16} : std::vector<DType>{D::f32, D::bf16, D::f16};
}

Case adamw_step(int64_t n, bool master) {
  Case c{"adamw_step", "n=" + str_of(n) + (master ? ",f32_master" : "")};
  const Type state = master ? Type::f32 : Type::op;
  // The update is small next to the parameters: in f32 it must be right by itself too.
  c.args = {inout("param", {n}).as(state).check_delta(1e-4), in("grad", {n}, -0.1, 0.1),
            inout("m", {n}, -0.01, 0.01).as(state), inout("v", {n}, 0.0, 1e-3).as(state)};
  c.dtypes = optimizer_dtypes(master);
  c.run = [](Env& e) {
    AdamWParams p;
    p.lr = 3e-3;
    p.weight_decay = 0.1;
    p.step = 7;
    p.grad_scale = 0.8;
    e.be.adamw_step(e["param"], e["grad"], e["m"], e["v"], p);
  };
  return c;
}

Case sgd_step(int64_t n, bool master, bool nesterov) {
  Case c{"sgd_step", "n=" + str_of(n) + (master ? ",f32_master" : "") + (nesterov ? ",nesterov" : "")};
  const Type state = master ? Type::f32 : Type::op;
  c.args = {inout("param", {n}).as(state), in("grad", {n}), inout("momentum", {n}).as(state)};
  c.dtypes = optimizer_dtypes(master);
  c.run = [nesterov](Env& e) {
    SgdParams p;
    p.lr = 0.05;
    p.momentum = 0.9;
    p.dampening = 0.1;
    p.weight_decay = 0.01;
    p.nesterov = nesterov;
    p.grad_scale = 0.5;
    e.be.sgd_step(e["param"], e["grad"], e["momentum"], p);
  };
  return c;
}

// --- reductions to a double --------------------------------------------------------------------

// plant: a NaN or -Inf at one element, which must come out (the fp16 loss scaler's overflow check).
Case reduction(bool squares, int64_t n, double plant = 0) {
  std::string what = plant == 0 ? "" : std::isnan(plant) ? ",nan" : ",-inf";
  Case c{squares ? "sum_squares" : "sum", "n=" + str_of(n) + what};
  Arg x = in("x", {n});
  if (plant != 0) x = x.with([plant, n](int64_t i, double u) { return i == n / 3 ? plant : u; });
  c.args = {x};
  if (squares) c.run = [](Env& e) { e.result = e.be.sum_squares(e["x"]); };
  else c.run = [](Env& e) { e.result = e.be.sum(e["x"]); };
  c.scalar = true;
  // Both sum in double what is exact in double: only the order of the additions differs.
  c.tol = Tolerance::all({squares ? 1e-12 : 1e-9, 0});
  return c;
}

}  // namespace

std::vector<Case> all_cases(Mode mode) {
  const bool test = mode == Mode::test;
  std::vector<Case> cs;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();

  const int64_t n = test ? 10007 : int64_t{1} << 24;
  for (auto [src_host, dst_host] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}})
    cs.push_back(copy(n, src_host, dst_host));
  cs.push_back(convert(n, Type::f32, Type::op, "f32->dt"));
  cs.push_back(convert(n, Type::op, Type::f32, "dt->f32"));
  cs.push_back(convert(n, Type::op, Type::other, "dt->other"));
  if (test) {
    // f16 overflows to Inf (what fp16 loss scaling detects): 65504 is the largest f16, 65519
    // rounds down to it, 65520 is halfway and rounds to even, which is Inf; 6e-8 rounds to the
    // smallest subnormal.
    const double special[] = {65504.0, 65519.0, 65520.0, -70000.0, 1e6, 6e-8, 3e38, -3e38};
    cs.push_back(convert(8, Type::f32, Type::op, "f32->dt,edges", [special](int64_t i, double) { return special[i]; }));
  }
  cs.push_back(zero(n));
  cs.push_back(scale(n, test ? -0.37 : -1.0));

  const int64_t B = test ? 3 : 2, T = test ? 37 : 1024, C = test ? 72 : 768, V = test ? 50 : 50257;
  for (int64_t v0 : {int64_t{0}, V / 2}) {
    if (!test && v0) continue;
    cs.push_back(encoder_forward(B, T, C, V, v0, true, true));
    cs.push_back(encoder_backward(B, T, C, V, v0, true));
  }
  if (test) {
    cs.push_back(encoder_forward(B, T, C, V, 0, false, false));
    cs.push_back(encoder_backward(B, T, C, V, 0, false));
  }

  const int64_t N = B * T;
  for (int64_t c : test ? std::vector<int64_t>{96, 773} : std::vector<int64_t>{768}) {
    const int64_t rows = test ? 61 : N;
    cs.push_back(layernorm_forward(rows, c));
    for (bool acc : {false, true}) cs.push_back(layernorm_backward(rows, c, acc));
  }

  if (test) {
    for (WeightLayout layout : {WeightLayout::in_out, WeightLayout::out_in})
      for (bool bias : {true, false})
        for (bool misaligned : {false, true}) {
          cs.push_back(matmul_forward(50, 96, 72, layout, bias, misaligned));
          for (bool acc : {false, true}) cs.push_back(matmul_backward(50, 96, 72, layout, bias, misaligned, acc));
        }
  } else {
    // GPT-2's four GEMMs: qkv, attention projection, MLP up and down, and the tied LM head.
    struct Gemm {
      int64_t ic, oc;
      WeightLayout layout;
      bool bias;
    };
    for (Gemm g : {Gemm{C, 3 * C, WeightLayout::in_out, true}, Gemm{C, C, WeightLayout::in_out, true},
                   Gemm{C, 4 * C, WeightLayout::in_out, true}, Gemm{4 * C, C, WeightLayout::in_out, true},
                   Gemm{C, V, WeightLayout::out_in, false}}) {
      cs.push_back(matmul_forward(N, g.ic, g.oc, g.layout, g.bias, false));
      cs.push_back(matmul_backward(N, g.ic, g.oc, g.layout, g.bias, false, true));
    }
  }

  // Head sizes 32, 64, 80 (no multiple of 32) and 128 (the limit); T no multiple of the tiles.
  struct Attn {
    int64_t B, T, C;
    int H;
  };
  for (Attn a : test ? std::vector<Attn>{{2, 67, 96, 3}, {1, 130, 256, 4}, {2, 45, 160, 2}, {1, 70, 256, 2}}
                     : std::vector<Attn>{{B, T, C, 12}}) {
    cs.push_back(attention_forward(a.B, a.T, a.C, a.H));
    cs.push_back(attention_backward(a.B, a.T, a.C, a.H));
  }

  // The Llama ops: odd rows and widths; GQA 4:2 and MQA 4:1; head sizes 32 and 64 (Llama's 128 in perf).
  for (int64_t c : test ? std::vector<int64_t>{96, 773} : std::vector<int64_t>{C}) {
    const int64_t rows = test ? 61 : N;
    cs.push_back(rmsnorm_forward(rows, c));
    for (bool acc : {false, true}) cs.push_back(rmsnorm_backward(rows, c, acc));
  }
  struct Rope {
    int64_t B, T;
    int H;
    int64_t hs;
  };
  for (Rope r : test ? std::vector<Rope>{{2, 37, 3, 32}, {1, 70, 2, 64}} : std::vector<Rope>{{B, T, 6, 128}})
    for (bool in_place : {false, true}) {
      cs.push_back(rope_forward(r.B, r.T, r.H, r.hs, in_place));
      cs.push_back(rope_backward(r.B, r.T, r.H, r.hs, in_place));
    }
  cs.push_back(swiglu_forward(test ? 131 : N, test ? 77 : 4 * C));
  cs.push_back(swiglu_backward(test ? 131 : N, test ? 77 : 4 * C));
  for (int hkv : {2, 1}) {
    cs.push_back(qkv_pack(test ? 2 : B, test ? 19 : T, 4, hkv, test ? 24 : 128));
    cs.push_back(qkv_unpack(test ? 2 : B, test ? 19 : T, 4, hkv, test ? 24 : 128));
  }

  const int64_t pn = test ? 131 : N, pc = test ? 77 : 4 * C;
  for (bool gelu : {true, false}) {
    cs.push_back(activation_forward(gelu, pn, pc));
    for (bool acc : {false, true}) cs.push_back(activation_backward(gelu, pn, pc, acc, false));
    if (gelu) cs.push_back(activation_backward(gelu, pn, pc, false, true));
  }
  cs.push_back(add(pn, test ? pc : C));
  cs.push_back(bias_add(pn, pc));

  // A GPT-2 sized vocabulary, and a small one with many rows.
  struct Ce {
    int64_t N, V;
  };
  for (Ce ce : test ? std::vector<Ce>{{7, 50257}, {33, 101}} : std::vector<Ce>{{N, V}}) {
    cs.push_back(crossentropy_forward(ce.N, ce.V));
    cs.push_back(crossentropy_backward(ce.N, ce.V, false));
    cs.push_back(crossentropy_backward(ce.N, ce.V, true));
    cs.push_back(argmax(ce.N, ce.V));
  }
  const int64_t sn = test ? 37 : N, vs = test ? 3001 : V / 2;
  cs.push_back(logits_row_max(sn, vs));
  cs.push_back(logits_sum_exp(sn, vs));
  cs.push_back(logits_pick(sn, vs));
  cs.push_back(crossentropy_backward_sharded(sn, vs));

  const int64_t on = test ? 10007 : int64_t{1} << 24;
  for (bool master : {false, true}) {
    cs.push_back(adamw_step(on, master));
    for (bool nesterov : {false, true})
      if (test || !nesterov) cs.push_back(sgd_step(test ? 5001 : on, master, nesterov));
  }

  const int64_t rn = test ? 65537 : int64_t{1} << 24;
  for (bool squares : {false, true}) cs.push_back(reduction(squares, rn));
  if (test) {
    cs.push_back(reduction(true, rn, nan));
    cs.push_back(reduction(true, rn, -inf));
  }
  return cs;
}

}  // namespace dl::ops
