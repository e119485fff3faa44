// bf16 and IEEE fp16 on the host: round-to-nearest-even conversions (what the GPU's
// __float2bfloat16_rn / __float2half_rn do), so host and device round a value the same way.
#pragma once
#include <cstdint>
#include <cstring>

#include "dl/core/tensor.hpp"

namespace dl {

inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round half to even
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);  // overflow gives +-Inf, like the device conversion

// Float dtypes a tensor may be converted between: f32, f64, bf16, f16.
bool is_float_dtype(DType t);
inline bool is_16bit_float(DType t) { return t == DType::bf16 || t == DType::f16; }
// dst = src converted element by element (host tensors, same element count, float dtypes);
// the same dtype is a copy.
void convert_host(Tensor& dst, const Tensor& src);

}  // namespace dl
