// backend-ops: one op harness for every backend, in the manner of llama.cpp's test-backend-ops.
//
// Why here (tests/backend/ops/): the harness tests dl::Backend (lib/backend/), so it sits with
// the backend's tests, in a folder of its own because it is a program with a command line
// (`backend-ops test|perf [-o OP] [-b BACKEND]`), not a doctest suite: scripts/gpu-check.sh runs
// it on a GPU and prints its per-kernel table, and ctest runs `backend-ops test` on every backend
// the build has (the CPU always; CUDA when built and a device answers, an emulated one included).
// It is not a tool: nothing a user trains with depends on it, and it links the library as the
// tests do.
//
// Each op of dl::Backend is ONE Case description (cases.cpp): its tensors (shapes, dtypes, the
// ranges that keep the op well-conditioned), its parameters, the call, and the tolerance per
// dtype. The harness (harness.cpp) runs every case on every backend in every dtype the case lists,
// against the CPU backend in f64 on the same inputs rounded to the dtype first (the reference sees
// what the backend sees), with every output poisoned with NaN before the call (an element the op
// forgot to write fails); a backward op's own gradient is also checked against central
// differences of its forward. Adding an op means adding one case function and listing it in
// all_cases().
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dl/backend/backend.hpp"

namespace dl::ops {

// How far an output may be from the f64 reference: rel bounds ||got - ref|| / ||ref|| over the
// tensor, elem bounds max |got - ref| / max |ref| (one wrong column passes a norm, not this).
struct Tol {
  double rel, elem;
};
struct Tolerance {
  // f32: 1e-5 norm-relative; per element 168 u (u = 2^-24), the f32 bar for sums of hundreds of
  // terms. bf16 (u = 2^-8) and f16 (u = 2^-11): inputs are exact in the dtype and arithmetic f32,
  // so the error is the output's rounding, at most two roundings where a result is rounded and
  // then used: 2u per element; 4u per element allowed, 1e-2 and 2e-3 over the norm.
  Tol f32{1e-5, 168 * 0x1p-24}, bf16{1e-2, 4 * 0x1p-8}, f16{2e-3, 4 * 0x1p-11};
  const Tol& of(DType dt) const { return dt == DType::bf16 ? bf16 : dt == DType::f16 ? f16 : f32; }
  static Tolerance all(Tol t) { return {t, t, t}; }
};

enum class Role {
  in,     // random values in [lo, hi)
  out,    // poisoned with NaN (i32: -7) before the call; compared
  inout,  // random starting values (gradients that are added to, in-place ops); compared
};
enum class Type {
  op,    // the dtype the case runs in
  f32,   // always f32 (f32 master weights under 16-bit gradients, f32 sources of a conversion)
  i32,   // token ids, targets, argmax indices
  loss,  // f32 under 16-bit ops, else the op's dtype (cross-entropy losses)
  other, // the other 16-bit dtype (bf16 <-> f16 conversions)
};

struct Arg {
  Arg(std::string name_, Shape shape_) : name(std::move(name_)), shape(std::move(shape_)) {}
  std::string name;
  Shape shape;
  Role role = Role::in;
  Type type = Type::op;
  double lo = -1, hi = 1;  // float values: uniform in [lo, hi)
  int64_t ids = 0;         // i32 values: uniform in [0, ids)
  double ignored = 0;      // i32 values: this fraction set to -1 (ignored targets)
  bool host = false;       // lives on the host rather than on the backend's device
  // Replaces the uniform value u at element i (planted NaN/Inf, special values).
  std::function<double(int64_t i, double u)> fill;
  // For f32 tensors that are updated in place (optimizer parameters): the update itself, got - start
  // against ref - start, must be within this norm-relative error too (0: not checked), since the
  // update is small next to the values.
  double delta_rel = 0;

  Arg as(Type t) const { Arg a = *this; a.type = t; return a; }
  Arg on_host() const { Arg a = *this; a.host = true; return a; }
  Arg with(std::function<double(int64_t, double)> f) const { Arg a = *this; a.fill = std::move(f); return a; }
  Arg check_delta(double rel) const { Arg a = *this; a.delta_rel = rel; return a; }
};
Arg in(std::string name, Shape shape, double lo = -1, double hi = 1);
Arg out(std::string name, Shape shape);
Arg inout(std::string name, Shape shape, double lo = -1, double hi = 1);
// i32 ids in [0, n), a fraction `ignored` of them -1; on the host unless .host is cleared.
Arg ids(std::string name, Shape shape, int64_t n, double ignored = 0, Role role = Role::in);

// The tensors of one run of a case on one backend: the tested backend's in the case's dtype, or
// the reference's (the CPU backend, every float tensor f64).
struct Env {
  Env(Backend& be_, DType dtype_, bool reference_) : be(be_), dtype(dtype_), reference(reference_) {}
  Backend& be;
  DType dtype;     // the case's dtype (also in the reference's Env)
  bool reference;  // the f64 reference run
  std::map<std::string, Tensor> t;
  std::map<std::string, DType> declared;  // each arg's dtype on the tested backend
  double result = 0;  // a scalar result (sum, sum_squares)

  Tensor& operator[](const std::string& name);
  // The float dtype tensors made here (setup's own tensors): f64 in the reference, else the case's.
  DType float_dtype() const { return reference ? DType::f64 : dtype; }
};

struct Case {
  Case(std::string op_, std::string params_) : op(std::move(op_)), params(std::move(params_)) {}
  std::string op;      // the dl::Backend op it calls (what -o selects)
  std::string params;  // shapes and parameters, as printed
  std::vector<Arg> args;
  std::vector<DType> dtypes{DType::f32, DType::bf16, DType::f16};
  // Runs on each backend before the op, neither compared nor timed: what the op takes from an
  // earlier op (LayerNorm's mean and rstd, attention's state). The tensors named in `shared` are
  // then taken from the tested backend into the reference, so it sees the same (rounded) values.
  std::function<void(Env&)> setup;
  std::vector<std::string> shared;
  std::function<void(Env&)> run;  // the op
  // The reference, where the f64 CPU op is not the answer (a conversion rounds to its dtype).
  std::function<void(Env&)> reference;
  // Backward ops: the gradient the op computes, checked against central differences of the
  // forward in f64 on the CPU (catches a wrong term that the CPU's f32 and f64 paths share, which
  // no comparison between backends can). `loss` is the scalar the op differentiates, computed
  // from the Env's inputs; `wrt` pairs each input with the arg that receives its gradient.
  std::function<double(Env&)> loss;
  std::vector<std::pair<std::string, std::string>> wrt;
  Tolerance tol;
  // Backends that have no kernel for the op yet: there the op must be refused by name (an error
  // "<op>: not implemented on the <backend> backend"), which the harness checks instead.
  std::vector<std::string> refused_on;
  bool scalar = false;  // compares Env::result (relative to max(|ref|, 1)) with tol.rel
  double flops = 0;     // per call, for perf (0: bytes/s from the tensors' sizes)
};

enum class Mode { test, perf };
// Every case: small, odd shapes for test (seconds in CI); GPT-2 124M's shapes for perf.
std::vector<Case> all_cases(Mode mode);

}  // namespace dl::ops
