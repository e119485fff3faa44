// Optimizer steps over flat buffers, element-wise, in the CPU backend's order of operations
// (torch.optim.AdamW: decay, lerp of the first moment, sqrt(v) / sqrt(bc2) + eps) with the same
// f32 constants, so both backends agree to rounding.
#include "common.cuh"

namespace dl::cuda {

namespace {

template <class P, class G>
__global__ void adamw_kernel(P* p, const G* g, P* m, P* v, int64_t n, AdamWConsts k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float gi = to_f32(g[i]) * k.grad_scale;
    float pi = to_f32(p[i]) * k.decay;
    float mo = to_f32(m[i]);
    float mi = mo + k.one_minus_beta1 * (gi - mo);
    float vi = k.beta2 * to_f32(v[i]) + k.one_minus_beta2 * gi * gi;
    m[i] = from_f32<P>(mi);
    v[i] = from_f32<P>(vi);
    p[i] = from_f32<P>(pi - k.step_size * mi / (sqrtf(vi) / k.bc2_sqrt + k.eps));
  }
}

template <class T, class G>
__global__ void sgd_kernel(T* p, const G* g, T* buf, int64_t n, SgdConsts k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float pi = to_f32(p[i]);
    float d = to_f32(g[i]) * k.grad_scale + k.weight_decay * pi;
    if (k.momentum != 0.0f) {
      float b = k.first_step ? d : k.momentum * to_f32(buf[i]) + k.one_minus_dampening * d;
      buf[i] = from_f32<T>(b);
      d = k.nesterov ? d + k.momentum * b : b;
    }
    p[i] = from_f32<T>(pi - k.lr * d);
  }
}

}  // namespace

void adamw_step(DType param_t, DType grad_t, void* param, const void* grad, void* m, void* v, int64_t n,
                const AdamWConsts& k, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(param_t, "adamw_step", [&](auto zp) {
    using P = decltype(zp);
    dispatch_float(grad_t, "adamw_step (grad)", [&](auto zg) {
      using G = decltype(zg);
      launch("adamw_kernel", adamw_kernel<P, G>, grid_for(n, 256), 256, 0, stream, static_cast<P*>(param),
             static_cast<const G*>(grad), static_cast<P*>(m), static_cast<P*>(v), n, k);
    });
  });
  DL_KERNEL_CHECK("adamw_kernel", "n=", n, " param ", dtype_name(param_t), " grad ", dtype_name(grad_t));
}

void sgd_step(DType param_t, DType grad_t, void* param, const void* grad, void* momentum_buf, int64_t n,
              const SgdConsts& k, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(param_t, "sgd_step", [&](auto zp) {
    using T = decltype(zp);
    dispatch_float(grad_t, "sgd_step (grad)", [&](auto zg) {
      using G = decltype(zg);
      launch("sgd_kernel", sgd_kernel<T, G>, grid_for(n, 256), 256, 0, stream, static_cast<T*>(param),
             static_cast<const G*>(grad), static_cast<T*>(momentum_buf), n, k);
    });
  });
  DL_KERNEL_CHECK("sgd_kernel", "n=", n, " param ", dtype_name(param_t), " grad ", dtype_name(grad_t));
}

}  // namespace dl::cuda
