// Byte-pair merging shared by the GPT-2 (gpt2_tokenizer.cpp) and tokenizer.json
// (hf_tokenizer.cpp) tokenizers: the table of merges and the lowest-rank-first merge of a piece.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace dl::data {

// (left, right) token pair -> (rank, merged token): open addressing with linear probing.
struct BpePairTable {
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = std::numeric_limits<uint64_t>::max();
  std::vector<Slot> slots;
  uint64_t mask = 0;
  int shift = 0;

  explicit BpePairTable(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots.resize(cap);
    mask = cap - 1;
    shift = 64 - std::countr_zero(cap);
  }
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  size_t home(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift); }
  // Sets the pair's entry; false when it was already listed (then it takes the new rank).
  bool insert(int32_t a, int32_t b, uint32_t rank, int32_t merged) {
    const uint64_t k = key(a, b);
    for (size_t s = home(k);; s = (s + 1) & mask) {
      if (slots[s].key == k || slots[s].key == kEmpty) {
        const bool fresh = slots[s].key == kEmpty;
        slots[s] = {k, rank, merged};
        return fresh;
      }
    }
  }
  const Slot* find(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (size_t s = home(k);; s = (s + 1) & mask) {
      if (slots[s].key == k) return &slots[s];
      if (slots[s].key == kEmpty) return nullptr;
    }
  }
};

// Merges `parts` in place: repeatedly the lowest-ranked adjacent pair, the leftmost of equal
// ranks, a scan per merge (quick for short pieces). `ranks` is scratch.
inline void merge_lowest_rank_first(std::vector<int32_t>& parts, std::vector<uint32_t>& ranks, const BpePairTable& pairs) {
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  auto rank_at = [&](size_t k) {
    const BpePairTable::Slot* s = pairs.find(parts[k], parts[k + 1]);
    return s ? s->rank : kNone;
  };
  if (parts.size() < 2) return;
  ranks.resize(parts.size() - 1);
  for (size_t k = 0; k + 1 < parts.size(); ++k) ranks[k] = rank_at(k);
  while (parts.size() > 1) {
    size_t best = 0;
    for (size_t k = 1; k < ranks.size(); ++k)
      if (ranks[k] < ranks[best]) best = k;
    if (ranks[best] == kNone) break;
    parts[best] = pairs.find(parts[best], parts[best + 1])->merged;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(best));
    if (best < ranks.size()) ranks[best] = rank_at(best);
    if (best > 0) ranks[best - 1] = rank_at(best - 1);
  }
}

}  // namespace dl::data
