#include "dl/core/half.hpp"

#include "dl/core/parallel.hpp"

namespace dl {

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // Inf / NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while ((man & 0x400u) == 0);
    u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: Inf
  if (abs >= 0x38800000u) {                        // normal half (>= 2^-14)
    uint32_t r = abs - (112u << 23);                 // rebias exponent
    r += 0xfffu + ((r >> 13) & 1u);                  // round half to even
    return sign | static_cast<uint16_t>(r >> 13);
  }
  if (abs < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): zero
  // Subnormal half: value = man * 2^-24. Shift the full significand into place, rounding to even.
  const uint32_t e = abs >> 23, man = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24 for e in [102, 112]
  uint32_t q = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

bool is_float_dtype(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16; }

namespace {

template <class F>
void for_float_dtype(DType t, F&& fn) {
  switch (t) {
    case DType::f32: fn([](const void* p, int64_t i) { return static_cast<double>(static_cast<const float*>(p)[i]); },
                        [](void* p, int64_t i, double v) { static_cast<float*>(p)[i] = static_cast<float>(v); });
      break;
    case DType::f64: fn([](const void* p, int64_t i) { return static_cast<const double*>(p)[i]; },
                        [](void* p, int64_t i, double v) { static_cast<double*>(p)[i] = v; });
      break;
    case DType::bf16:
      fn([](const void* p, int64_t i) { return static_cast<double>(bf16_to_float(static_cast<const uint16_t*>(p)[i])); },
         [](void* p, int64_t i, double v) { static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); });
      break;
    case DType::f16:
      fn([](const void* p, int64_t i) { return static_cast<double>(f16_to_float(static_cast<const uint16_t*>(p)[i])); },
         [](void* p, int64_t i, double v) { static_cast<uint16_t*>(p)[i] = float_to_f16(static_cast<float>(v)); });
      break;
    default: throw_runtime("convert: ", dtype_name(t), " is not a float dtype");
  }
}

}  // namespace

void convert_host(Tensor& dst, const Tensor& src) {
  if (!dst.device().is_cpu() || !src.device().is_cpu())
    throw_runtime("convert_host: ", dst.describe(), " <- ", src.describe(), ": host tensors only");
  if (dst.numel() != src.numel())
    throw_runtime("convert: ", dst.describe(), " and ", src.describe(), " differ in element count");
  if (dst.dtype() == src.dtype()) {
    dst.copy_from(src.view(dst.shape()));
    return;
  }
  const void* s = src.raw();
  void* d = dst.raw();
  const int64_t n = src.numel();
  // f64 -> f32 -> 16-bit would round twice; every path below goes through double once, and a
  // double holds every f32/bf16/f16 value exactly, so x -> 16-bit rounds exactly once from f32.
  // (f64 -> 16-bit rounds via f32 like torch's .to(); the difference is below 16-bit resolution.)
  for_float_dtype(src.dtype(), [&](auto load, auto) {
    for_float_dtype(dst.dtype(), [&](auto, auto store) {
      parallel_for(n, 1 << 14, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) store(d, i, load(s, i));
      });
    });
  });
}

}  // namespace dl
