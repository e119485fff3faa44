#include "dl/nn/model.hpp"

namespace dl {

// A model of one stage: no hidden state between stages, one micro-batch in flight.

Shape Model::hidden_shape(const Tensor&) const {
  throw_runtime(kind(), " model: one stage, no hidden state between stages");
}

ForwardStats Model::forward_stage(const Batch& batch, const Tensor&, int slot, Tensor*) {
  DL_CHECK(slot == 0, kind(), " model: one micro-batch in flight, asked for slot ", slot);
  return forward(batch);
}

void Model::backward_stage(int slot, double dloss, const Tensor&, Tensor*) {
  DL_CHECK(slot == 0, kind(), " model: one micro-batch in flight, asked for slot ", slot);
  backward(dloss);
}

}  // namespace dl
