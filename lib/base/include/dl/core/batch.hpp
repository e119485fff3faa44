// One micro-batch on the host: what datasets produce and models consume. It lives in core/ so
// data/ and nn/ share it without either including the other.
#pragma once
#include "dl/core/tensor.hpp"

namespace dl {

// GPT: inputs i32[B,T] token ids, targets i32[B,T]. MLP: inputs f32[B,F] features, targets
// i32[B] class ids. A negative target is ignored.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

}  // namespace dl
