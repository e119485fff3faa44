// Published model shapes as dl-shard's and dl-cost's flags give them (--params, --layers,
// --hidden, --heads, --seq, --vocab, --arch, --kv-heads, --ffn-hidden), for tests that plan or
// price them through plan::PlanInputs or cost::EstimateInputs alike.
#pragma once
#include <cstdint>

namespace dl::test {

struct PublishedShape {
  double params;
  const char* family;  // "llama" or "" (GPT-2's block)
  int64_t layers, hidden, heads, kv_heads, ffn, vocab, seq;
};

// Sets the model fields PlanInputs and EstimateInputs share.
template <class Inputs>
void set_shape(Inputs& in, const PublishedShape& s) {
  in.params = s.params;
  in.layers = s.layers, in.hidden = s.hidden, in.heads = s.heads, in.seq = s.seq, in.vocab = s.vocab;
  in.arch.family = s.family;
  in.arch.kv_heads = s.kv_heads;
  in.arch.ffn_hidden = s.ffn;
}

}  // namespace dl::test
