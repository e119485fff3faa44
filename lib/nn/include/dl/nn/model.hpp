// Model: what the training loop, evaluation and sampling see of a network.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dl/config/choice.hpp"
#include "dl/core/batch.hpp"
#include "dl/nn/params.hpp"

namespace dl {

// Sums over the micro-batch, so callers can normalise over any number of micro-batches/ranks.
struct ForwardStats {
  double loss_sum = 0.0;  // sum of per-target cross-entropy losses
  int64_t targets = 0;    // number of targets >= 0
  int64_t correct = 0;    // targets whose argmax prediction is right
};

// Called around every use of a parameter group (embeddings, each block, the head) so a ZeRO-3
// engine can gather parameters before and release them after; after_backward means the group's
// gradients for this micro-batch are complete.
class ParamGroupHooks {
 public:
  virtual ~ParamGroupHooks() = default;
  virtual void before_forward(int group) {}
  virtual void after_forward(int group) {}
  virtual void before_backward(int group) {}
  virtual void after_backward(int group) {}
};

class Model {
 public:
  virtual ~Model() = default;
  virtual ModelType type() const = 0;
  std::string kind() const { return std::string(choice_name(type())); }  // "gpt", for messages
  virtual ParamSet& params() = 0;
  // Runs forward and keeps what backward needs. Per-row correctness stays in correct().
  virtual ForwardStats forward(const Batch& batch) = 0;
  // Adds d(dloss * sum of losses)/d(param) to params().grad for the last forward.
  virtual void backward(double dloss) = 0;
  // i32, one entry per target row of the last forward: 1 where the argmax is the target.
  virtual const Tensor& correct() const = 0;
  // Logits of the last forward, [rows, classes].
  virtual const Tensor& logits() const = 0;
  // Bytes held for activations (forward state and backward scratch) at the last batch shape.
  virtual int64_t activation_bytes() const = 0;
  // Parameter groups, [first, last) indices, in the order forward uses them; and the hooks the
  // model calls around each use.
  virtual std::vector<std::pair<size_t, size_t>> param_groups() const = 0;
  virtual void set_hooks(ParamGroupHooks* hooks) = 0;

  // Sequence models (gpt): the longest context and the vocabulary, what generation needs; 0 for
  // a model that does not read token sequences.
  virtual int64_t context_length() const { return 0; }
  virtual int64_t vocab_size() const { return 0; }

  // Pipeline stages. A model built for a pipeline of num_stages() holds one contiguous stage of
  // it; the defaults describe a model of one stage, which forward() and backward() run.
  virtual int num_stages() const { return 1; }
  virtual bool first_stage() const { return true; }
  virtual bool last_stage() const { return true; }
  // Shape of the hidden state passed between stages for a micro-batch with these inputs.
  virtual Shape hidden_shape(const Tensor& inputs) const;
  // Forward of one micro-batch kept in activation slot `slot`. The first stage reads
  // batch.inputs, other stages `hidden_in` from the previous stage; non-last stages write their
  // output to `hidden_out`, the last stage computes the loss against batch.targets (when defined)
  // and returns its sums.
  virtual ForwardStats forward_stage(const Batch& batch, const Tensor& hidden_in, int slot, Tensor* hidden_out);
  // Backward of a slot: the last stage starts from the loss (dloss per target), other stages from
  // `dhidden_out`; non-first stages write d(hidden_in) to `dhidden_in`. Frees the slot.
  virtual void backward_stage(int slot, double dloss, const Tensor& dhidden_out, Tensor* dhidden_in);
  // The gradient of a parameter two stages share (the token embedding the first stage looks up
  // and the last stage's head reuses), flat, for the pipeline to sum across them; undefined on a
  // stage that shares none.
  virtual Tensor tied_embedding_grad() { return Tensor(); }
};

}  // namespace dl
