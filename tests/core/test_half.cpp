// bf16 and fp16 host conversions: every 16-bit pattern round-trips, and rounding from f32 is
// round-to-nearest-even, checked against the compiler's own _Float16 and against the bf16
// definition (the top 16 bits of an f32, rounded).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "dl/core/half.hpp"

using namespace dl;

namespace {
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST_CASE("every bf16 and fp16 pattern round-trips through f32") {
  int nans = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto x = static_cast<uint16_t>(h);
    const float b = bf16_to_float(x), f = f16_to_float(x);
    if (std::isnan(b)) {
      CHECK(std::isnan(bf16_to_float(float_to_bf16(b))));
    } else {
      CHECK(float_to_bf16(b) == x);
    }
    if (std::isnan(f)) {
      ++nans;
      CHECK(std::isnan(f16_to_float(float_to_f16(f))));
    } else {
      CHECK(float_to_f16(f) == x);
    }
  }
  CHECK(nans == 2 * 1023);
  CHECK(f16_to_float(0x3c00) == 1.0f);
  CHECK(f16_to_float(0x7bff) == 65504.0f);
  CHECK(f16_to_float(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(bf16_to_float(0x3f80) == 1.0f);
}

TEST_CASE("rounding from f32 is to nearest, ties to even") {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 and goes to 1 (even);
  // 1 + 3 * 2^-8 is a tie going up to 1 + 2^-6.
  CHECK(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  CHECK(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))) ==
        1.0f + std::ldexp(1.0f, -7));
  // fp16: 65504 is the largest finite; 65520 and above round to Inf.
  CHECK(f16_to_float(float_to_f16(65519.0f)) == 65504.0f);
  CHECK(std::isinf(f16_to_float(float_to_f16(65520.0f))));
  CHECK(std::isinf(f16_to_float(float_to_f16(1e10f))));
  CHECK(f16_to_float(float_to_f16(-1e10f)) < 0);
  // Half the smallest subnormal is a tie to zero; a hair above rounds up.
  CHECK(float_to_f16(std::ldexp(1.0f, -25)) == 0);
  CHECK(float_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 1);
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
}

TEST_CASE("fp16 rounding equals the compiler's _Float16 and bf16 the reference definition on random floats") {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> any;
  [[maybe_unused]] int compared = 0;  // clang 14 has no _Float16 on x86: only the bf16 half runs there
  for (int i = 0; i < 2000000; ++i) {
    // Every exponent that matters to fp16 (subnormals to overflow), random significands.
    uint32_t u = i % 2 ? any(gen) : ((any(gen) & 0x807fffffu) | ((96u + any(gen) % 48u) << 23));
    const float f = from_bits(u);
    if (std::isnan(f)) continue;
    // bf16 by definition: round the low 16 bits of the f32 to nearest even.
    const uint32_t low = u & 0xffffu, hi = u >> 16;
    uint32_t want_b = hi + (low > 0x8000u || (low == 0x8000u && (hi & 1u)));
    REQUIRE(float_to_bf16(f) == static_cast<uint16_t>(want_b));
#ifdef __FLT16_MAX__
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t want_h;
    std::memcpy(&want_h, &h, 2);
    REQUIRE(float_to_f16(f) == want_h);
    ++compared;
#endif
  }
#ifdef __FLT16_MAX__
  CHECK(compared > 1000000);
#else
  MESSAGE("this compiler has no _Float16: fp16 rounding checked by the exhaustive round trip only");
#endif
}

TEST_CASE("convert_host between every float dtype") {
  Tensor a = Tensor::empty({5}, DType::f32);
  const float v[5] = {1.0f, -2.5f, 3.14159f, 1e-3f, 70000.0f};
  std::memcpy(a.raw(), v, sizeof v);
  Tensor h = Tensor::empty({5}, DType::f16), b = Tensor::empty({5}, DType::bf16), d = Tensor::empty({5}, DType::f64);
  convert_host(h, a);
  convert_host(b, a);
  convert_host(d, h);
  CHECK(d.data<double>()[0] == 1.0);
  CHECK(d.data<double>()[1] == -2.5);
  CHECK(d.data<double>()[2] == doctest::Approx(3.14159).epsilon(1e-3));
  CHECK(std::isinf(d.data<double>()[4]));  // above fp16's range
  Tensor back = Tensor::empty({5}, DType::f32);
  convert_host(back, b);
  CHECK(back.data<float>()[4] == 70144.0f);  // bf16 keeps the range, not the digits
  Tensor wrong = Tensor::empty({4}, DType::f32);
  CHECK_THROWS_WITH(convert_host(wrong, a), doctest::Contains("element count"));
}
