// The language-model loss the decoders share (GptModel, LlamaModel): softmax cross-entropy of the
// head's logits against the next tokens, whole or split by vocabulary across tensor-parallel
// ranks (Megatron's vocabulary-parallel loss: a global row max, then global sums).
#pragma once
#include <cstdint>
#include <string_view>

#include "dl/nn/model.hpp"

namespace dl {

namespace dist {
class Comm;
}

// The per-row statistics of one micro-batch's loss: losses [N] (f32 under 16-bit compute: a bf16
// loss keeps 3 significant digits), correct [N] i32 in host memory on every backend (read there:
// stats, scores), and under a vocabulary-parallel head the row max, the sum of exponentials and
// the target's logit.
struct LossRows {
  Tensor losses, correct, row_max, sum_exp, picked;
  void allocate(Backend& be, DType compute, int64_t N, bool vocab_parallel);
  int64_t bytes() const;
};

// Cross-entropy of logits [N, V_local] against targets [N] (negative: ignored). With `tp` the
// logits are vocabulary rows [v0, v0 + V_local) of the group's whole vocabulary. `model` names
// the model in errors.
ForwardStats lm_loss_forward(Backend& be, LossRows& rows, const Tensor& logits, const Tensor& targets, dist::Comm* tp,
                             int64_t v0, std::string_view model);
// d(dloss * sum of losses)/d(logits), written over the logits (not needed after the loss).
void lm_loss_backward(Backend& be, LossRows& rows, Tensor& logits, const Tensor& targets, bool vocab_parallel,
                      int64_t v0, double dloss);

}  // namespace dl
