// Host launchers of the CUDA kernels in kernels/*.cu. Each enqueues its kernels on `stream`,
// checks the launch (naming the kernel and sizes) and returns without waiting. Float tensors are
// f32, bf16 or f16 (`dt`); arithmetic is f32 throughout and 16-bit results are rounded once (to
// nearest even); reductions that the CPU backend does in fixed blocks are done here in fixed
// blocks too (deterministic: no atomics on float data). Pointers are device pointers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "dl/core/dtype.hpp"

namespace dl::cuda {

// Rows per partial sum in cross-row reductions (bias and LayerNorm parameter gradients).
inline constexpr int64_t kColumnChunkRows = 256;
inline int64_t column_chunks(int64_t N) { return (N + kColumnChunkRows - 1) / kColumnChunkRows; }
// Blocks in the whole-tensor double sums (fixed, so the summation order never changes).
inline constexpr int kSumBlocks = 512;

// --- encoder.cu -------------------------------------------------------------------------------
// out[r] = wte[tokens[r] - v0] (when in [0, rows)) + wpe[r % T] (when wpe is not null).
void encoder_forward(DType dt, void* out, const int32_t* tokens, const void* wte, const void* wpe, int64_t B,
                     int64_t T, int64_t C, int64_t v0, int64_t rows, cudaStream_t stream);
// dwte[row_ids[u]] += sum of dout rows rows_of[offsets[u] .. offsets[u+1]) for each of the
// n_unique token rows this shard holds (rows grouped on the host, in ascending order).
void encoder_backward_wte(DType dt, void* dwte, const void* dout, const int32_t* row_ids, const int32_t* offsets,
                          const int32_t* rows_of, int64_t n_unique, int64_t C, cudaStream_t stream);
// dwpe[t] += sum over b of dout[b, t].
void encoder_backward_wpe(DType dt, void* dwpe, const void* dout, int64_t B, int64_t T, int64_t C,
                          cudaStream_t stream);

// --- layernorm.cu -----------------------------------------------------------------------------
void layernorm_forward(DType dt, void* out, void* mean, void* rstd, const void* inp, const void* weight,
                       const void* bias, int64_t N, int64_t C, cudaStream_t stream);
// dinp (written, or added to when accumulate) and each row's f32 mean and rstd for the parameter
// gradients: read from mean/rstd, or recomputed from inp in f32 when recompute_stats (16-bit saved
// statistics are too coarse for the backward pass).
void layernorm_backward_input(DType dt, void* dinp, float* mean32, float* rstd32, const void* dout, const void* inp,
                              const void* weight, const void* mean, const void* rstd, bool recompute_stats,
                              int64_t N, int64_t C, bool accumulate, cudaStream_t stream);
// partial[k][0..C) = sum over chunk k's rows of dout * norm; partial[k][C..2C) = sum of dout.
void layernorm_backward_params_partial(DType dt, float* partial, const void* dout, const void* inp,
                                       const float* mean32, const float* rstd32, int64_t N, int64_t C,
                                       cudaStream_t stream);

// --- reduce.cu --------------------------------------------------------------------------------
// partial[k][c] = sum over chunk k's rows of x[r][c] (x is [N, C]).
void column_sum_partial(DType dt, float* partial, const void* x, int64_t N, int64_t C, cudaStream_t stream);
// dst[c] += sum over k of partial[k * ld + c], k in order.
void column_sum_finish(DType dt, void* dst, const float* partial, int64_t chunks, int64_t C, int64_t ld,
                       cudaStream_t stream);
// result[0] = sum of x (or of x^2), in double, in a fixed order; partial holds kSumBlocks doubles.
void sum_to_double(DType dt, double* result, double* partial, const void* x, int64_t n, bool squares,
                   cudaStream_t stream);

// --- attention.cu -----------------------------------------------------------------------------
// Causal attention over qkv[B,T,3C], flash style: each query row's softmax is computed online
// over key tiles, so no T x T matrix exists. lse[B,H,T] (f32) keeps each row's log-sum-exp.
// Head size C/H at most kMaxHeadSize.
inline constexpr int64_t kMaxHeadSize = 128;
void attention_forward(DType dt, void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t C, int H,
                       cudaStream_t stream);
// dqkv written (not accumulated). out: the forward's output for qkv. delta[B,H,T] (f32) is
// scratch for rowsum(dO * O).
void attention_backward(DType dt, void* dqkv, float* delta, const void* dout, const void* qkv, const void* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int H, cudaStream_t stream);

// --- elementwise.cu ---------------------------------------------------------------------------
void gelu_forward(DType dt, void* out, const void* inp, int64_t n, cudaStream_t stream);
void gelu_backward(DType dt, void* dinp, const void* dout, const void* inp, int64_t n, bool accumulate,
                   cudaStream_t stream);
void relu_forward(DType dt, void* out, const void* inp, int64_t n, cudaStream_t stream);
void relu_backward(DType dt, void* dinp, const void* dout, const void* inp, int64_t n, bool accumulate,
                   cudaStream_t stream);
void add(DType dt, void* out, const void* a, const void* b, int64_t n, cudaStream_t stream);
void bias_add(DType dt, void* out, const void* bias, int64_t N, int64_t C, cudaStream_t stream);
void scale(DType dt, void* x, float s, int64_t n, cudaStream_t stream);
// dst = src converted between any two of f32, bf16 and f16 (through f32, rounded once to nearest
// even; an f16 beyond its range becomes +-Inf).
void convert(DType dst_t, void* dst, DType src_t, const void* src, int64_t n, cudaStream_t stream);

// --- llama.cu ---------------------------------------------------------------------------------
// RMSNorm over the last dimension C of [N, C]: rstd [N] saved in the op's dtype.
void rmsnorm_forward(DType dt, void* out, void* rstd, const void* inp, const void* weight, int64_t N, int64_t C,
                     float eps, cudaStream_t stream);
// dinp written (or added to when accumulate; it may be dout when not), dweight added to through
// `partial` (column_chunks(N) * C floats of scratch), with the saved rstd.
void rmsnorm_backward(DType dt, void* dinp, float* partial, void* dweight, const void* dout, const void* inp,
                      const void* weight, const void* rstd, int64_t N, int64_t C, bool accumulate,
                      cudaStream_t stream);
// Rotate-half RoPE of x[B,T,H*hs] at positions 0..T-1 by t * inv_freq[i] (inv_freq [hs/2] f32,
// as the backend's front requires); sign +1 forward, -1 backward. out may be inp.
void rope(DType dt, void* out, const void* inp, const float* inv_freq, int64_t B, int64_t T, int64_t H, int64_t hs,
          int sign, cudaStream_t stream);
void swiglu_forward(DType dt, void* out, const void* gate, const void* up, int64_t n, cudaStream_t stream);
void swiglu_backward(DType dt, void* dgate, void* dup, const void* dout, const void* gate, const void* up, int64_t n,
                     cudaStream_t stream);
// q[BT,H*hs], k and v [BT,Hkv*hs] into qkv[BT,3*H*hs], query head h reading K/V head h / (H / Hkv);
// unpack is its transpose (dk, dv: each K/V head's group summed in head order).
void qkv_pack(DType dt, void* qkv, const void* q, const void* k, const void* v, int64_t BT, int64_t H, int64_t Hkv,
              int64_t hs, cudaStream_t stream);
void qkv_unpack(DType dt, void* dq, void* dk, void* dv, const void* dqkv, int64_t BT, int64_t H, int64_t Hkv,
                int64_t hs, cudaStream_t stream);

// --- crossentropy.cu --------------------------------------------------------------------------
// One block per row over the whole vocabulary. losses have dtype loss_t (f32, or the logits').
void crossentropy_forward(DType dt, DType loss_t, void* losses, int32_t* correct, const void* logits,
                          const int32_t* targets, int64_t N, int64_t V, cudaStream_t stream);
// May run in place (dlogits == logits).
void crossentropy_backward(DType dt, void* dlogits, const void* logits, const int32_t* targets, int64_t N,
                           int64_t V, float dloss, cudaStream_t stream);
void argmax(DType dt, int32_t* out, const void* logits, int64_t N, int64_t V, cudaStream_t stream);
void logits_row_max(DType dt, void* row_max, const void* logits, int64_t N, int64_t V, cudaStream_t stream);
void logits_sum_exp(DType dt, void* sum_exp, const void* logits, const void* row_max, int64_t N, int64_t V,
                    cudaStream_t stream);
void logits_pick(DType dt, void* picked, const void* logits, const int32_t* targets, int64_t N, int64_t V,
                 int64_t v0, cudaStream_t stream);
void crossentropy_backward_sharded(DType dt, void* dlogits, const void* logits, const int32_t* targets,
                                   const void* row_max, const void* sum_exp, int64_t N, int64_t V, int64_t v0,
                                   float dloss, cudaStream_t stream);

// --- optimizer.cu -----------------------------------------------------------------------------
// Constants computed on the host in double and rounded to f32, as the CPU backend does.
struct AdamWConsts {
  float decay, step_size, bc2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps, grad_scale;
};
// param_t for param, m and v; grad_t for grad (the same, or bf16/f16 under f32 master weights).
void adamw_step(DType param_t, DType grad_t, void* param, const void* grad, void* m, void* v, int64_t n,
                const AdamWConsts& k, cudaStream_t stream);
struct SgdConsts {
  float lr, momentum, one_minus_dampening, weight_decay, grad_scale;
  bool nesterov, first_step;
};
// param_t for param and momentum_buf; grad_t for grad, as in adamw_step.
void sgd_step(DType param_t, DType grad_t, void* param, const void* grad, void* momentum_buf, int64_t n,
              const SgdConsts& k, cudaStream_t stream);

}  // namespace dl::cuda
