// How a tensor-parallel shard sits inside a whole tensor: along one dimension, the local tensor
// is the concatenation of segments of the global one. Column-parallel c_attn, for example, holds
// three segments of columns (its heads' q, k and v). Host-side copies between the two.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dl/core/tensor.hpp"

namespace dl {

struct TensorSlice {
  int dim = -1;  // < 0: the whole tensor
  std::vector<std::pair<int64_t, int64_t>> segments;  // (global start, length) along dim, in local order
  bool whole() const { return dim < 0; }
  // The local shape of a tensor with this global shape.
  Shape local_shape(const Shape& global) const;
  std::string describe() const;  // "dim 1: [0,64) [256,64) [512,64)" or "whole"
  bool operator==(const TensorSlice&) const = default;
};

// local = global restricted to the slice (host tensors of one dtype).
Tensor extract_slice(const Tensor& global, const TensorSlice& slice);
// global[slice] = local.
void insert_slice(Tensor& global, const Tensor& local, const TensorSlice& slice);

}  // namespace dl
