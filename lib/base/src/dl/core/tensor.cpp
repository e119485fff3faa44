#include "dl/core/tensor.hpp"

#include <cstdlib>
#include <cstring>

namespace dl {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) throw_runtime("negative dimension in shape ", shape_str(s));
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::shared_ptr<Storage> Storage::host(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p) throw_runtime("out of host memory allocating ", bytes, " bytes");
  return std::make_shared<Storage>(p, bytes, Device::cpu(), [](void* q) { std::free(q); });
}

Storage::Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter)
    : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (deleter_ && data_) deleter_(data_);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(byte_offset), shape_(std::move(shape)), dtype_(dtype) {
  numel_ = shape_numel(shape_);
  DL_CHECK(!storage_ || offset_ + nbytes() <= storage_->bytes(), "view ", describe(),
           " at byte ", offset_, " exceeds storage of ", storage_->bytes(), " bytes");
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  if (!device.is_cpu()) throw_runtime("Tensor::empty on ", device.name(), " needs a device backend");
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(Storage::host(bytes), 0, std::move(shape), dtype);
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  t.zero_();
  return t;
}

int64_t Tensor::size(int dim) const {
  int n = ndim();
  int d = dim < 0 ? dim + n : dim;
  DL_CHECK(d >= 0 && d < n, "dimension ", dim, " of ", describe());
  return shape_[d];
}

Tensor Tensor::view(Shape shape) const {
  if (shape_numel(shape) != numel_)
    throw_runtime("cannot view ", describe(), " as ", shape_str(shape));
  return Tensor(storage_, offset_, std::move(shape), dtype_);
}

Tensor Tensor::flat_slice(int64_t offset, Shape shape) const {
  int64_t n = shape_numel(shape);
  DL_CHECK(offset >= 0 && offset + n <= numel_, "flat slice [", offset, ", ", offset + n, ") of ",
           describe());
  return Tensor(storage_, offset_ + static_cast<size_t>(offset) * dtype_size(dtype_), std::move(shape),
                dtype_);
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  DL_CHECK(ndim() >= 1 && begin >= 0 && begin + count <= shape_[0], "rows [", begin, ", ",
           begin + count, ") of ", describe());
  Shape s = shape_;
  s[0] = count;
  int64_t row = numel_ / (shape_[0] ? shape_[0] : 1);
  return flat_slice(begin * row, std::move(s));
}

std::string Tensor::describe() const { return std::string(dtype_name(dtype_)) + shape_str(shape_); }

void Tensor::zero_() {
  DL_CHECK(device().is_cpu(), "zero_ on ", device().name());
  if (nbytes()) std::memset(raw(), 0, nbytes());
}

void Tensor::copy_from(const Tensor& src) {
  DL_CHECK(device().is_cpu() && src.device().is_cpu(), "copy_from needs host tensors");
  if (src.dtype_ != dtype_ || src.numel_ != numel_)
    throw_runtime("cannot copy ", src.describe(), " into ", describe());
  if (nbytes()) std::memmove(raw(), src.raw(), nbytes());
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_);
  t.copy_from(*this);
  return t;
}

}  // namespace dl
