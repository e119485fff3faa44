// Dynamic loss scaling for fp16 training (Micikevicius et al. 2018, "Mixed Precision
// Training"; the policy of torch.cuda.amp.GradScaler): the loss is multiplied by `scale` before
// backward so small gradients survive fp16; a step whose gradients overflow is skipped and the
// scale halved; after `window` good steps in a row the scale doubles. bf16 and fp32 need no
// scaling (scale stays 1, every step is applied).
#pragma once
#include <cstdint>

namespace dl {

// What a checkpoint keeps of the scaler (scale 0: no dynamic scaling in this run).
struct LossScaleState {
  double scale = 0;
  int64_t good_steps = 0, skipped_steps = 0;
};

class LossScaler {
 public:
  LossScaler() = default;  // disabled: scale 1
  LossScaler(double initial_scale, int64_t window) : enabled_(true), scale_(initial_scale), window_(window) {}

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t good_steps() const { return good_; }
  int64_t skipped_steps() const { return skipped_; }

  // After backward: whether the step's gradients were finite. Returns true when the optimizer
  // should step; on overflow the step is skipped and the scale halved.
  bool update(bool finite) {
    if (!enabled_) return true;
    if (!finite) {
      scale_ *= 0.5;
      good_ = 0;
      ++skipped_;
      return false;
    }
    if (++good_ >= window_) {
      scale_ *= 2.0;
      good_ = 0;
    }
    return true;
  }
  // Below fp16's smallest subnormal no scale can help: the gradients are not finite for another
  // reason, and the run has diverged.
  bool exhausted() const { return enabled_ && scale_ < 0x1p-24; }

  // Checkpointed state.
  LossScaleState state() const { return enabled_ ? LossScaleState{scale_, good_, skipped_} : LossScaleState{}; }
  void restore(const LossScaleState& s) {
    if (!enabled_ || s.scale <= 0) return;
    scale_ = s.scale;
    good_ = s.good_steps;
    skipped_ = s.skipped_steps;
  }

 private:
  bool enabled_ = false;
  double scale_ = 1.0;
  int64_t window_ = 2000;
  int64_t good_ = 0, skipped_ = 0;
};

}  // namespace dl
