// ParamSet: a model's named parameters as views into one flat buffer per role (values,
// gradients). Flat buffers make gradient clipping, the optimizer, bucketed all-reduce, ZeRO
// sharding and checkpoints simple range operations.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dl/backend/backend.hpp"
#include "dl/core/slice.hpp"

namespace dl {

enum class ParamInit { normal, zeros, ones };

struct ParamInfo {
  std::string name;  // Hugging Face name for GPT-2 ("h.0.attn.c_attn.weight")
  Shape shape;         // this rank's (local) shape
  Shape global_shape;  // the whole-model shape (equal to shape unless sliced)
  TensorSlice slice;   // where the local tensor sits in the whole one (tensor parallel)
  // A copy of a parameter another pipeline stage owns (the tied token embedding on the last
  // stage): kept in sync by the engine, not written to checkpoints, counted once in norms.
  bool tied_copy = false;
  int64_t offset = 0;  // element offset in the flat buffers
  ParamInit init = ParamInit::zeros;
  double init_std = 0.0;  // for ParamInit::normal (mean 0)
  bool decay = false;     // AdamW weight decay applies (matrices and embeddings, not biases or norms)
  int64_t numel() const { return shape_numel(shape); }
};

class ParamSet {
 public:
  // Declares a parameter; call before allocate(). A sliced parameter gives its whole-model shape
  // and the slice this rank holds.
  void declare(std::string name, Shape shape, ParamInit init, double init_std, bool decay);
  void declare_slice(std::string name, Shape global_shape, TensorSlice slice, ParamInit init, double init_std,
                     bool decay, bool tied_copy = false);
  // Allocates the flat value and gradient buffers on the backend's device.
  void allocate(Backend& backend, DType dtype);

  // Fills every value from the counter-based generator keyed by (seed, name, element index):
  // the same seed gives the same weights on every device and layout.
  void initialize(uint64_t seed);
  void zero_grad();

  // For engines that keep parameters elsewhere (ZeRO-3): free the flat buffers, then point each
  // parameter's value and gradient at storage the engine owns (undefined tensors while released).
  void drop_storage();
  void bind(size_t i, Tensor value, Tensor grad);

  size_t size() const { return infos_.size(); }
  const ParamInfo& info(size_t i) const { return infos_[i]; }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  // Index of a parameter by name; throws naming the parameter when absent.
  size_t index(const std::string& name) const;
  bool contains(const std::string& name) const;

  Tensor& value(size_t i) { return values_[i]; }
  Tensor& grad(size_t i) { return grads_[i]; }
  const Tensor& value(size_t i) const { return values_[i]; }
  const Tensor& grad(size_t i) const { return grads_[i]; }
  Tensor& flat_values() { return flat_values_; }
  Tensor& flat_grads() { return flat_grads_; }
  const Tensor& flat_values() const { return flat_values_; }
  const Tensor& flat_grads() const { return flat_grads_; }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }  // also after drop_storage()
  Backend& backend() const { return *backend_; }

 private:
  std::vector<ParamInfo> infos_;
  std::vector<Tensor> values_, grads_;
  Tensor flat_values_, flat_grads_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Backend* backend_ = nullptr;
};

// Generates the initial values of one parameter on the host (f32 or f64), the reference every
// device and shard reproduces: values are keyed by the element's index in the whole tensor.
void init_param_values(const ParamInfo& info, uint64_t seed, Tensor& host_out);

}  // namespace dl
