// A multi-layer perceptron classifier: Linear -> activation, repeated, then a Linear to class
// logits and softmax cross-entropy. Parameters use torch.nn.Linear's names and [out,in] layout
// ("layers.{i}.weight", "layers.{i}.bias").
#pragma once
#include <vector>

#include "dl/config/choice.hpp"
#include "dl/nn/model.hpp"

namespace dl {

struct MlpConfig {
  int n_inputs = 2;
  std::vector<int> hidden = {64, 64};
  int n_classes = 2;
  Choice<Activation> activation = Activation::relu;
  double init_std = 0.0;  // 0: Kaiming normal, sqrt(2 / fan_in)
};

int64_t mlp_param_count(const MlpConfig& c);
// The parameters MlpModel declares, unallocated (one group: the whole network).
ParamSet mlp_param_declarations(const MlpConfig& c);

class MlpModel final : public Model {
 public:
  MlpModel(const MlpConfig& config, Backend& backend, DType dtype = DType::f32);
  ModelType type() const override { return ModelType::mlp; }
  ParamSet& params() override { return params_; }
  const MlpConfig& config() const { return cfg_; }

  ForwardStats forward(const Batch& batch) override;
  void backward(double dloss) override;
  const Tensor& correct() const override { return correct_; }
  const Tensor& logits() const override { return zs_.back(); }
  int64_t activation_bytes() const override;
  // One group: the whole network.
  std::vector<std::pair<size_t, size_t>> param_groups() const override { return {{0, params_.size()}}; }
  void set_hooks(ParamGroupHooks* hooks) override { hooks_ = hooks; }

 private:
  void ensure_buffers(int64_t B);
  std::vector<int> widths() const;  // inputs, hidden..., classes

  MlpConfig cfg_;
  Backend& be_;
  DType dtype_;
  ParamSet params_;
  bool gelu_ = false;
  ParamGroupHooks* hooks_ = nullptr;
  int64_t B_ = 0;
  Tensor inputs_, targets_;
  std::vector<Tensor> zs_, hs_;  // pre-activations and activations per layer
  Tensor losses_, correct_, dh_, dz_;
};

}  // namespace dl
