#include "dl/core/slice.hpp"

#include <cstring>

namespace dl {

Shape TensorSlice::local_shape(const Shape& global) const {
  if (whole()) return global;
  Shape s = global;
  int64_t n = 0;
  for (auto [start, len] : segments) n += len;
  s[static_cast<size_t>(dim)] = n;
  return s;
}

std::string TensorSlice::describe() const {
  if (whole()) return "whole";
  std::string s = "dim " + std::to_string(dim) + ":";
  for (auto [start, len] : segments) s += " [" + std::to_string(start) + "," + std::to_string(start + len) + ")";
  return s;
}

namespace {

// Walks the slice as (outer index, global offset, local offset, contiguous bytes) copies:
// dimensions before `dim` are outer, the rest form contiguous rows.
template <class F>
void for_each_run(const Shape& global, const TensorSlice& slice, size_t elem, F&& copy) {
  const int d = slice.dim;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= global[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(d) + 1; i < global.size(); ++i) inner *= global[i];
  const int64_t gdim = global[static_cast<size_t>(d)];
  int64_t ldim = 0;
  for (auto [start, len] : slice.segments) ldim += len;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t lpos = 0;
    for (auto [start, len] : slice.segments) {
      DL_CHECK(start >= 0 && start + len <= gdim, "slice segment [", start, ",", start + len, ") outside ", gdim);
      copy(static_cast<size_t>((o * gdim + start) * inner) * elem, static_cast<size_t>((o * ldim + lpos) * inner) * elem,
           static_cast<size_t>(len * inner) * elem);
      lpos += len;
    }
  }
}

}  // namespace

Tensor extract_slice(const Tensor& global, const TensorSlice& slice) {
  if (slice.whole()) return global.clone();
  Tensor local = Tensor::empty(slice.local_shape(global.shape()), global.dtype());
  const char* g = static_cast<const char*>(global.raw());
  char* l = static_cast<char*>(local.raw());
  for_each_run(global.shape(), slice, dtype_size(global.dtype()),
               [&](size_t goff, size_t loff, size_t n) { std::memcpy(l + loff, g + goff, n); });
  return local;
}

void insert_slice(Tensor& global, const Tensor& local, const TensorSlice& slice) {
  if (slice.whole()) {
    global.copy_from(local);
    return;
  }
  if (local.shape() != slice.local_shape(global.shape()) || local.dtype() != global.dtype())
    throw_runtime("insert_slice: local ", local.describe(), " does not match ", global.describe(), " ",
                  slice.describe());
  char* g = static_cast<char*>(global.raw());
  const char* l = static_cast<const char*>(local.raw());
  for_each_run(global.shape(), slice, dtype_size(global.dtype()),
               [&](size_t goff, size_t loff, size_t n) { std::memcpy(g + goff, l + loff, n); });
}

}  // namespace dl
