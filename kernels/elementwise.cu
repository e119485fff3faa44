// Element-wise kernels: GELU (tanh approximation, GPT-2's gelu_new), ReLU, residual add, bias add,
// scale, dtype conversion. Grid-stride loops; f32 arithmetic.
#include "common.cuh"

namespace dl::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

template <class T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float x = to_f32(inp[i]);
    float u = kGeluK * (x + kGeluC * x * x * x);
    out[i] = from_f32<T>(0.5f * x * (1.0f + tanhf(u)));
  }
}

template <class T>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float x = to_f32(inp[i]);
    float u = kGeluK * (x + kGeluC * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluK * (1.0f + 3.0f * kGeluC * x * x);
    float g = grad * to_f32(dout[i]);
    // dinp may alias dout (the model does gelu_backward(d, d, ...)): each element is read
    // before it is written by the same thread.
    dinp[i] = from_f32<T>(accumulate ? to_f32(dinp[i]) + g : g);
  }
}

template <class T>
__global__ void relu_forward_kernel(T* out, const T* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float x = to_f32(inp[i]);
    out[i] = from_f32<T>(x > 0.0f ? x : 0.0f);
  }
}

template <class T>
__global__ void relu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float g = to_f32(inp[i]) > 0.0f ? to_f32(dout[i]) : 0.0f;
    dinp[i] = from_f32<T>(accumulate ? to_f32(dinp[i]) + g : g);
  }
}

template <class T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <class T>
__global__ void bias_add_kernel(T* out, const T* bias, int64_t n, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(to_f32(out[i]) + to_f32(bias[i % C]));
}

template <class T>
__global__ void scale_kernel(T* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = from_f32<T>(to_f32(x[i]) * s);
}

template <class D, class S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

}  // namespace

void gelu_forward(DType dt, void* out, const void* inp, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, "gelu_forward", [&](auto z) {
    using T = decltype(z);
    launch("gelu_forward_kernel", gelu_forward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream,
           static_cast<T*>(out), static_cast<const T*>(inp), n);
  });
  DL_KERNEL_CHECK("gelu_forward_kernel", "n=", n);
}

void gelu_backward(DType dt, void* dinp, const void* dout, const void* inp, int64_t n, bool accumulate,
                   cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, "gelu_backward", [&](auto z) {
    using T = decltype(z);
    launch("gelu_backward_kernel", gelu_backward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream,
           static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp), n, accumulate);
  });
  DL_KERNEL_CHECK("gelu_backward_kernel", "n=", n);
}

void relu_forward(DType dt, void* out, const void* inp, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, "relu_forward", [&](auto z) {
    using T = decltype(z);
    launch("relu_forward_kernel", relu_forward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream,
           static_cast<T*>(out), static_cast<const T*>(inp), n);
  });
  DL_KERNEL_CHECK("relu_forward_kernel", "n=", n);
}

void relu_backward(DType dt, void* dinp, const void* dout, const void* inp, int64_t n, bool accumulate,
                   cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, "relu_backward", [&](auto z) {
    using T = decltype(z);
    launch("relu_backward_kernel", relu_backward_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream,
           static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp), n, accumulate);
  });
  DL_KERNEL_CHECK("relu_backward_kernel", "n=", n);
}

void add(DType dt, void* out, const void* a, const void* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, "add", [&](auto z) {
    using T = decltype(z);
    launch("add_kernel", add_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream, static_cast<T*>(out),
           static_cast<const T*>(a), static_cast<const T*>(b), n);
  });
  DL_KERNEL_CHECK("add_kernel", "n=", n);
}

void bias_add(DType dt, void* out, const void* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N * C == 0) return;
  dispatch_float(dt, "bias_add", [&](auto z) {
    using T = decltype(z);
    launch("bias_add_kernel", bias_add_kernel<T>, grid_for(N * C, kThreads), kThreads, 0, stream, static_cast<T*>(out),
           static_cast<const T*>(bias), N * C, C);
  });
  DL_KERNEL_CHECK("bias_add_kernel", "N=", N, " C=", C);
}

void scale(DType dt, void* x, float s, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, "scale", [&](auto z) {
    using T = decltype(z);
    launch("scale_kernel", scale_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream, static_cast<T*>(x), s, n);
  });
  DL_KERNEL_CHECK("scale_kernel", "n=", n);
}

void convert(DType dst_t, void* dst, DType src_t, const void* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dst_t, "convert", [&](auto d) {
    using D = decltype(d);
    dispatch_float(src_t, "convert", [&](auto s) {
      using S = decltype(s);
      launch("convert_kernel", convert_kernel<D, S>, grid_for(n, kThreads), kThreads, 0, stream, static_cast<D*>(dst),
             static_cast<const S*>(src), n);
    });
  });
  DL_KERNEL_CHECK("convert_kernel", dtype_name(src_t), " -> ", dtype_name(dst_t), " n=", n);
}

}  // namespace dl::cuda
