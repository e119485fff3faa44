// Sampler: a keyed pseudo-random permutation of [0, n) per epoch, computable at any position.
//
// Construction (Black & Rogaway, "Ciphers with arbitrary finite domains", CT-RSA 2002): a
// balanced Feistel network on 2h bits, where 2h is the smallest even width with 2^(2h) >= n,
// is a bijection of [0, 4^h); "cycle-walking" (re-encrypting until the value lands below n)
// restricts it to a bijection of [0, n). Since 4^h < 4n, at most ~4 walks are expected. Each of
// the kRounds round functions is one Philox block keyed by (sampler key, epoch) with the round
// as the lane, so the whole order is a pure function of (seed, stream, epoch, position).
#include <bit>

#include "dl/core/rng.hpp"
#include "dl/data/dataset.hpp"

namespace dl {

namespace {
constexpr int kRounds = 4;  // Luby-Rackoff: 4 rounds give a strong pseudo-random permutation

inline uint64_t feistel(uint64_t x, uint64_t epoch_key, int half_bits) {
  const uint64_t mask = half_bits >= 64 ? ~0ull : (1ull << half_bits) - 1;
  uint64_t left = x >> half_bits, right = x & mask;
  for (int r = 0; r < kRounds; ++r) {
    PhiloxCounter f = random_block(epoch_key, right, static_cast<uint32_t>(r));
    uint64_t fr = (static_cast<uint64_t>(f[1]) << 32 | f[0]) & mask;
    uint64_t next = left ^ fr;
    left = right;
    right = next;
  }
  return left << half_bits | right;
}
}  // namespace

Sampler::Sampler(int64_t n, uint64_t seed, std::string_view stream) : n_(n), key_(stream_key(seed, stream)) {
  if (n <= 0) throw_usage("a data split needs at least one example to sample from (got ", n, ")");
  // Smallest even bit width covering [0, n), at least 2 (one bit per half).
  int bits = static_cast<int>(std::bit_width(static_cast<uint64_t>(n - 1)));
  if (bits < 2) bits = 2;
  bits += bits & 1;
  half_bits_ = bits / 2;
}

int64_t Sampler::example_at(int64_t position) const {
  if (position < 0) throw_runtime("sampler position ", position, " is negative");
  const uint64_t epoch = static_cast<uint64_t>(position / n_);
  uint64_t x = static_cast<uint64_t>(position % n_);
  const uint64_t epoch_key = mix64(key_, epoch);
  do {
    x = feistel(x, epoch_key, half_bits_);
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

std::vector<int64_t> Sampler::examples(int64_t first, int64_t count) const {
  if (count < 0) throw_runtime("sampler count ", count, " is negative");
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out[static_cast<size_t>(i)] = example_at(first + i);
  return out;
}

}  // namespace dl
