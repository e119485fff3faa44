// Numeric helpers for tests: seeded random tensors, finite differences, error norms.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

#include "dl/core/rng.hpp"
#include "dl/core/tensor.hpp"

namespace dl::test {

// Fills a host f32/f64 tensor with uniform values in [lo, hi) from the counter-based RNG.
inline Tensor random_tensor(Shape shape, DType dt, uint64_t key, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(std::move(shape), dt);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double u = lo + (hi - lo) * uniform_at(key, static_cast<uint64_t>(i));
    if (dt == DType::f32) t.data<float>()[i] = static_cast<float>(u);
    else t.data<double>()[i] = u;
  }
  return t;
}

inline double get(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f32 ? t.data<float>()[i] : t.data<double>()[i];
}
inline void set(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::f32) t.data<float>()[i] = static_cast<float>(v);
  else t.data<double>()[i] = v;
}

inline Tensor to_dtype(const Tensor& t, DType dt) {
  Tensor out = Tensor::empty(t.shape(), dt);
  for (int64_t i = 0; i < t.numel(); ++i) set(out, i, get(t, i));
  return out;
}

// ||a - b|| / max(||b||, tiny): the relative error of a whole tensor.
inline double rel_error(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double d = get(a, i) - get(b, i);
    num += d * d;
    den += get(b, i) * get(b, i);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// Equal dtypes, sizes and bytes: the same bits.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(get(a, i) - get(b, i)));
  return m;
}

// Central finite difference of scalar f() with respect to every element of x (double).
inline Tensor numeric_grad(Tensor& x, const std::function<double()>& f, double h = 1e-6) {
  Tensor g = Tensor::empty(x.shape(), DType::f64);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double orig = get(x, i);
    set(x, i, orig + h);
    double fp = f();
    set(x, i, orig - h);
    double fm = f();
    set(x, i, orig);
    g.data<double>()[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// sum(out * r): the scalar whose gradient with respect to out is r.
inline double dot(const Tensor& out, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += get(out, i) * get(r, i);
  return s;
}

}  // namespace dl::test
