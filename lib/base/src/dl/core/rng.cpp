#include "dl/core/rng.hpp"

#include <cmath>
#include <numbers>

namespace dl {

namespace {
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round) {
      k[0] += kW0;
      k[1] += kW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, c[0], hi0, lo0);
    mulhilo(kM1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t mix64(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t stream_key(uint64_t seed, std::string_view name) { return mix64(seed, fnv1a64(name)); }

PhiloxCounter random_block(uint64_t key, uint64_t index, uint32_t lane) {
  PhiloxCounter ctr{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), lane, 0};
  PhiloxKey k{static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)};
  return philox4x32_10(ctr, k);
}

namespace {
inline double u53(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}
}  // namespace

double uniform_at(uint64_t key, uint64_t index, uint32_t lane) {
  PhiloxCounter r = random_block(key, index, lane);
  return u53(r[0], r[1]);
}

double normal_at(uint64_t key, uint64_t index, uint32_t lane) {
  PhiloxCounter r = random_block(key, index, lane);
  double u1 = 1.0 - u53(r[0], r[1]);  // (0, 1]: log never sees 0
  double u2 = u53(r[2], r[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t below_at(uint64_t key, uint64_t index, uint64_t n, uint32_t lane) {
  PhiloxCounter r = random_block(key, index, lane);
  uint64_t x = static_cast<uint64_t>(r[0]) << 32 | r[1];
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
}

}  // namespace dl
