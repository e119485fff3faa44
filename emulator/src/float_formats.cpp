#include "emulator/float_formats.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace dl::cuda_emu {
namespace {

// v rounded to a binary format with `mantissa` fraction bits whose smallest normal exponent is
// `min_exp` (subnormals below it keep that quantum); the result is exact in a double.
double quantize(double v, int mantissa, int min_exp) {
  if (!std::isfinite(v) || v == 0) return v;
  const int e = std::max(std::ilogb(v), min_exp);
  const double q = std::ldexp(1.0, e - mantissa);
  return std::nearbyint(v / q) * q;  // the default rounding mode: nearest, ties to even
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

double decode_bf16(uint16_t bits) {
  const uint32_t u = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double decode_f16(uint16_t bits) {
  const int sign = bits >> 15, exp = (bits >> 10) & 0x1f, frac = bits & 0x3ff;
  double v;
  if (exp == 0x1f) v = frac ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0) v = std::ldexp(frac, -24);
  else v = std::ldexp(1024 + frac, exp - 25);
  return sign ? -v : v;
}

uint16_t encode_bf16(double v) {
  if (std::isnan(v)) return static_cast<uint16_t>((std::signbit(v) ? 0x8000 : 0) | 0x7fc0);
  const double r = quantize(v, 7, -126);
  if (std::fabs(r) >= 0x1p128) return std::signbit(v) ? 0xff80 : 0x7f80;
  return static_cast<uint16_t>(bits_of(static_cast<float>(r)) >> 16);  // r is exact in f32
}

uint16_t encode_f16(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return sign | 0x7e00;
  const double r = std::fabs(quantize(v, 10, -14));
  if (r > 65504) return sign | 0x7c00;
  if (r == 0) return sign;
  if (r < 0x1p-14) return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(r, 24)));
  const int e = std::ilogb(r);
  const auto frac = static_cast<uint16_t>(std::ldexp(r, 10 - e) - 1024);
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | frac);
}

float encode_f32(double v) { return static_cast<float>(v); }

float round_tf32(float v) { return static_cast<float>(quantize(v, 10, -126)); }

}  // namespace dl::cuda_emu
