#include "dl/nn/lm_loss.hpp"

#include <cmath>

#include "dl/dist/comm.hpp"

namespace dl {

void LossRows::allocate(Backend& be, DType compute, int64_t N, bool vocab_parallel) {
  auto make_rows = [&] { return be.empty({N}, compute == DType::f64 ? DType::f64 : DType::f32); };
  losses = make_rows();
  correct = Tensor::empty({N}, DType::i32);
  if (vocab_parallel) {
    row_max = make_rows();
    sum_exp = make_rows();
    picked = make_rows();
  }
}

int64_t LossRows::bytes() const {
  int64_t n = 0;
  for (const Tensor* t : {&losses, &correct, &row_max, &sum_exp, &picked})
    n += t->defined() ? static_cast<int64_t>(t->nbytes()) : 0;
  return n;
}

ForwardStats lm_loss_forward(Backend& be, LossRows& s, const Tensor& logits, const Tensor& targets, dist::Comm* tp,
                             int64_t v0, std::string_view model) {
  const int64_t N = logits.size(0);
  ForwardStats st;
  if (!targets.defined()) return st;
  if (targets.numel() != N) throw_runtime(model, " forward: targets ", targets.describe(), " do not match ", N, " positions");
  if (!tp) {
    be.crossentropy_forward(s.losses, s.correct, logits, targets);
  } else {
    // Vocabulary-parallel loss (Megatron): global row max, then global sum of exponentials and
    // the target's logit from whichever rank holds it.
    be.logits_row_max(s.row_max, logits);
    tp->allreduce(s.row_max, dist::ReduceOp::max);
    be.logits_sum_exp(s.sum_exp, logits, s.row_max);
    be.logits_pick(s.picked, logits, targets, v0);
    tp->allreduce(s.sum_exp);
    tp->allreduce(s.picked);
    // Host arithmetic on [N] rows: the CPU backend's tensors are host memory.
    const int32_t* t = targets.data<int32_t>();
    int32_t* c = s.correct.data<int32_t>();
    auto rows = [&](auto* loss, const auto* mx, const auto* se, const auto* pk) {
      for (int64_t i = 0; i < N; ++i) {
        bool valid = t[i] >= 0;
        loss[i] = valid ? std::log(se[i]) + mx[i] - pk[i] : 0;
        c[i] = valid && pk[i] >= mx[i];  // the target's logit is the row maximum
      }
    };
    if (s.losses.dtype() == DType::f32)
      rows(s.losses.data<float>(), s.row_max.data<float>(), s.sum_exp.data<float>(), s.picked.data<float>());
    else
      rows(s.losses.data<double>(), s.row_max.data<double>(), s.sum_exp.data<double>(), s.picked.data<double>());
  }
  st.loss_sum = be.sum(s.losses);
  const int32_t* t = targets.data<int32_t>();
  const int32_t* c = s.correct.data<int32_t>();
  for (int64_t i = 0; i < N; ++i) {
    st.targets += t[i] >= 0;
    st.correct += c[i];
  }
  return st;
}

void lm_loss_backward(Backend& be, LossRows& s, Tensor& logits, const Tensor& targets, bool vocab_parallel, int64_t v0,
                      double dloss) {
  if (!vocab_parallel)
    be.crossentropy_backward(logits, logits, targets, dloss);
  else
    be.crossentropy_backward_sharded(logits, logits, targets, s.row_max, s.sum_exp, v0, dloss);
}

}  // namespace dl
