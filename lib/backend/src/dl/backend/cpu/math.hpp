// Vectorisable transcendental functions for the CPU kernels. glibc's expf/tanhf do not
// vectorise without -ffast-math (which would also break NaN detection), so f32 uses a Cody-Waite
// range reduction with a degree-7 Taylor polynomial (relative error < 2e-7 over the float range);
// f64 keeps the libm functions, since the f64 path exists for exact finite-difference tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace dl::cpu {

inline float fast_expf(float x) {
  // Rows of softmax inputs are shifted by their max, so x <= 0 almost always; clamp both ends.
  const float hi = 88.3762626647949f, lo = -87.3365447505531f;
  // Written so that NaN clamps to lo: converting NaN to int below is undefined (UBSan found it in
  // a diverging run); the NaN itself is returned at the end, as std::exp would.
  float xc = x > lo ? (x < hi ? x : hi) : lo;
  // Round to nearest by the 1.5 * 2^23 trick: vectorises, unlike nearbyint.
  const float magic = 12582912.0f;
  float n = (xc * 1.44269504088896341f + magic) - magic;
  float r = xc - n * 0.693145751953125f;  // ln2 split in a high part exact in float
  r = r - n * 1.42860682030941723212e-6f;  // and the low part
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof scale);
  float out = p * scale;
  return x < lo ? 0.0f : (x == x ? out : x);
}

template <class T>
inline T vexp(T x) {
  if constexpr (sizeof(T) == 4) {
    return fast_expf(x);
  } else {
    return std::exp(x);
  }
}

template <class T>
inline T vtanh(T x) {
  if constexpr (sizeof(T) == 4) {
    // tanh(x) = 1 - 2 / (exp(2x) + 1): exact limits at both ends, no branches.
    return 1.0f - 2.0f / (fast_expf(2.0f * x) + 1.0f);
  } else {
    return std::tanh(x);
  }
}

}  // namespace dl::cpu
