// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11 "Parallel random numbers:
// as easy as 1, 2, 3"). A value is a pure function of (key, counter), so any element of any
// tensor can be generated on any device, in any order, by any rank: the root of dlkit's "one set
// of numbers" across CPU/GPU and every parallel layout.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace dl {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key);

// 64-bit FNV-1a of a name (parameter names, stream names).
uint64_t fnv1a64(std::string_view s);
// SplitMix64 finaliser: mixes a seed with a stream id into a well-spread 64-bit key.
uint64_t mix64(uint64_t a, uint64_t b);
// Key for a named stream: parameters ("h.3.attn.c_attn.weight"), data order ("data/train"), ...
uint64_t stream_key(uint64_t seed, std::string_view name);

// Four 32-bit words for (key, index, lane): lane selects an independent sub-stream.
PhiloxCounter random_block(uint64_t key, uint64_t index, uint32_t lane = 0);
// Uniform in [0, 1) with 53 random bits.
double uniform_at(uint64_t key, uint64_t index, uint32_t lane = 0);
// Standard normal by Box-Muller on one counter block (computed in double).
double normal_at(uint64_t key, uint64_t index, uint32_t lane = 0);
// Uniform integer in [0, n) (Lemire's multiply-shift on 64 bits; bias < n / 2^64).
uint64_t below_at(uint64_t key, uint64_t index, uint64_t n, uint32_t lane = 0);

// A sequential stream over the counter space; its whole state is (key, next index), so it is
// saved in checkpoints and restored exactly.
class RandomStream {
 public:
  RandomStream() = default;
  RandomStream(uint64_t key, uint64_t index = 0) : key_(key), index_(index) {}
  double uniform() { return uniform_at(key_, index_++); }
  double normal() { return normal_at(key_, index_++); }
  uint64_t below(uint64_t n) { return below_at(key_, index_++, n); }
  uint64_t key() const { return key_; }
  uint64_t index() const { return index_; }

 private:
  uint64_t key_ = 0;
  uint64_t index_ = 0;
};

}  // namespace dl
