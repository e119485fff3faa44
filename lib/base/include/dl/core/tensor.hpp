// Tensor: a contiguous, typed view into reference-counted storage on one device.
// dlkit keeps every tensor contiguous; views are flat ranges of a storage (how parameters live
// inside one flat buffer), never strided.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dl/core/dtype.hpp"
#include "dl/core/error.hpp"

namespace dl {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[16,128,384]"

class Storage {
 public:
  // Host memory, 64-byte aligned so SIMD loads never straddle a line.
  static std::shared_ptr<Storage> host(size_t bytes);
  // Memory owned elsewhere (a device allocator, an mmap) with the deleter that frees it.
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void(void*)> deleter_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype);

  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype);  // host only

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t byte_offset() const { return offset_; }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <class T>
  T* data() const {
    if (dtype_ != dtype_of<T>())
      throw_runtime("tensor ", describe(), " accessed as ", dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Same storage, new shape with the same element count.
  Tensor view(Shape shape) const;
  // Elements [offset, offset + numel(shape)) of this tensor's flat range, as a new shape.
  Tensor flat_slice(int64_t offset, Shape shape) const;
  // Rows [begin, begin + count) along dimension 0.
  Tensor rows(int64_t begin, int64_t count) const;

  std::string describe() const;  // "f32[16,128,384]"

  void zero_();                            // host only
  void copy_from(const Tensor& src);       // host only; same dtype and numel
  Tensor clone() const;                    // host only

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
  int64_t numel_ = 0;
};

}  // namespace dl
