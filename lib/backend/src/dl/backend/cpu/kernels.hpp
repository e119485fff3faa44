// CPU kernels, templated on the element type (float for training, double for the
// finite-difference tests). Every forward is written next to its backward, llm.c style.
// Parallel loops split rows (or heads, or channel blocks) so each output element is written by
// one thread; reductions across rows use fixed blocks so results do not depend on thread count.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <cblas.h>

#include "dl/backend/cpu/math.hpp"
#include "dl/core/parallel.hpp"

namespace dl::cpu {

// Rows per block in cross-row reductions (LayerNorm dweight/dbias). Fixed, never derived from the
// thread count, so the summation order is the same on every machine.
inline constexpr int64_t kReduceRows = 64;

// One BLAS call, on BLAS's single thread (core/parallel.cpp keeps OpenBLAS at one).
inline void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}
inline void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                      const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

// GEMMs are split here, not by OpenBLAS: its threads cut the work by their count, and the cut
// changes the summation order (K is blocked differently on one thread and on several, and partial
// tiles go to other kernels), so the loss moved in the 8th digit with DL_NUM_THREADS. Here C is
// cut along its longer side into strips whose width is a function of the shape alone, each strip
// one single-threaded BLAS call over the whole K on the pool: every element of C gets the same sum
// on any pool. Each call packs the other operand again, a cost of about 1/width of the
// multiply-adds: strips are 256 wide where the side is long enough for 4 of them, down to 64.
struct GemmStrips {
  bool rows;      // strips of rows of C (else of columns)
  int64_t width;  // rows (or columns) per strip
  int64_t count;
};
inline constexpr int64_t kGemmStrips = 4;             // at least, where the side and the work allow
inline constexpr int64_t kGemmMinWidth = 64, kGemmMaxWidth = 256;
inline constexpr double kGemmMinStripWork = 1 << 20;  // multiply-adds per strip, so a call is worth it

inline GemmStrips gemm_strips(int64_t M, int64_t N, int64_t K) {
  const bool rows = M >= N;
  const int64_t len = rows ? M : N;
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const int64_t count = std::clamp<int64_t>(static_cast<int64_t>(work / kGemmMinStripWork), 1, kGemmStrips);
  // Whole 16s (the kernels' register tiles).
  const int64_t width = std::clamp<int64_t>(((len + count - 1) / count + 15) / 16 * 16, kGemmMinWidth, kGemmMaxWidth);
  if (count == 1 || width >= len) return {rows, len, 1};
  return {rows, width, (len + width - 1) / width};
}

// C[M,N] = alpha op(A) op(B) + beta C, row-major; op(A) is [M,K], op(B) is [K,N].
template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const GemmStrips s = gemm_strips(M, N, K);
  parallel_for(s.count, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t o = i * s.width, w = std::min(s.width, (s.rows ? M : N) - o);
      if (s.rows) {
        blas_gemm(ta, tb, w, N, K, alpha, ta ? A + o : A + o * lda, lda, B, ldb, beta, C + o * ldc, ldc);
      } else {
        blas_gemm(ta, tb, M, w, K, alpha, A, lda, tb ? B + o * ldb : B + o, ldb, beta, C + o, ldc);
      }
    }
  });
}

// Grain sizes: enough work per chunk that claiming it costs little next to doing it.
inline int64_t row_grain(int64_t row_len) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(row_len, 1)); }

// ---------------------------------------------------------------------------------------------
// Encoder: token + position embeddings.

// Rows of wte are [v0, v0 + rows); tokens outside contribute zero (vocabulary-parallel shards).
// wpe may be null.
template <class T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B, int64_t Tn,
                     int64_t C, int64_t v0, int64_t rows) {
  parallel_for(B * Tn, row_grain(C), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      int64_t tok = static_cast<int64_t>(tokens[r]) - v0;
      const T* te = tok >= 0 && tok < rows ? wte + tok * C : nullptr;
      const T* pe = wpe ? wpe + (r % Tn) * C : nullptr;
      T* o = out + r * C;
      if (te && pe) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) o[c] = te[c] + pe[c];
      } else if (te) {
        for (int64_t c = 0; c < C; ++c) o[c] = te[c];
      } else if (pe) {
        for (int64_t c = 0; c < C; ++c) o[c] = pe[c];
      } else {
        for (int64_t c = 0; c < C; ++c) o[c] = T(0);
      }
    }
  });
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t Tn,
                      int64_t C, int64_t v0, int64_t rows) {
  // Split channels so scattered token rows never collide between threads; rows are visited in
  // order, so the sums are deterministic.
  int64_t cblock = 16;
  int64_t nblocks = (C + cblock - 1) / cblock;
  parallel_for(nblocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      int64_t c0 = blk * cblock, c1 = std::min(C, c0 + cblock);
      for (int64_t r = 0; r < B * Tn; ++r) {
        const T* d = dout + r * C;
        int64_t tok = static_cast<int64_t>(tokens[r]) - v0;
        if (tok >= 0 && tok < rows) {
          T* te = dwte + tok * C;
          for (int64_t c = c0; c < c1; ++c) te[c] += d[c];
        }
        if (dwpe) {
          T* pe = dwpe + (r % Tn) * C;
          for (int64_t c = c0; c < c1; ++c) pe[c] += d[c];
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// LayerNorm over the last dimension, eps 1e-5 (GPT-2).

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t N,
                       int64_t C) {
  const T eps = T(1e-5);
  parallel_for(N, row_grain(C), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* x = inp + r * C;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += x[c];
      T m = s / T(C);
      T v = 0;
#pragma omp simd reduction(+ : v)
      for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
      T rs = T(1) / std::sqrt(v / T(C) + eps);
      T* o = out + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * rs * w[c] + b[c];
      mean[r] = m;
      rstd[r] = rs;
    }
  });
}

template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                        const T* rstd, int64_t N, int64_t C, bool accumulate) {
  int64_t nblocks = (N + kReduceRows - 1) / kReduceRows;
  std::vector<T> partial(static_cast<size_t>(nblocks * 2 * C), T(0));
  parallel_for(nblocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      T* pdw = partial.data() + blk * 2 * C;
      T* pdb = pdw + C;
      int64_t r1 = std::min(N, (blk + 1) * kReduceRows);
      for (int64_t r = blk * kReduceRows; r < r1; ++r) {
        const T* x = inp + r * C;
        const T* d = dout + r * C;
        T m = mean[r], rs = rstd[r];
        T dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
        for (int64_t c = 0; c < C; ++c) {
          T norm = (x[c] - m) * rs;
          T dnorm = w[c] * d[c];
          dnorm_mean += dnorm;
          dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= T(C);
        dnorm_norm_mean /= T(C);
        T* dx = dinp + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          T norm = (x[c] - m) * rs;
          T dnorm = w[c] * d[c];
          T g = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
          dx[c] = accumulate ? dx[c] + g : g;
          pdw[c] += d[c] * norm;
          pdb[c] += d[c];
        }
      }
    }
  });
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const T* pdw = partial.data() + blk * 2 * C;
    const T* pdb = pdw + C;
    for (int64_t c = 0; c < C; ++c) {
      dw[c] += pdw[c];
      db[c] += pdb[c];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Matmul: out[N,OC] = inp[N,IC] x W (+ bias). in_out: W is [IC,OC]; otherwise W is [OC,IC].

template <class T>
void add_bias(T* out, const T* bias, int64_t N, int64_t OC) {
  parallel_for(N, row_grain(OC), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* o = out + r * OC;
#pragma omp simd
      for (int64_t c = 0; c < OC; ++c) o[c] += bias[c];
    }
  });
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int64_t N, int64_t IC, int64_t OC,
                    bool in_out) {
  if (in_out) {
    gemm(false, false, N, OC, IC, T(1), inp, IC, w, OC, T(0), out, OC);
  } else {
    gemm(false, true, N, OC, IC, T(1), inp, IC, w, IC, T(0), out, OC);
  }
  if (bias) add_bias(out, bias, N, OC);
}

// Column sums of dout[N,OC] added to dbias: channel blocks per thread, rows in order.
template <class T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t OC) {
  int64_t cblock = 64;
  int64_t nblocks = (OC + cblock - 1) / cblock;
  parallel_for(nblocks, 1, [&](int64_t lo, int64_t hi) {
    T acc[64];
    for (int64_t blk = lo; blk < hi; ++blk) {
      int64_t c0 = blk * cblock, n = std::min(OC - c0, cblock);
      for (int64_t c = 0; c < n; ++c) acc[c] = 0;
      for (int64_t r = 0; r < N; ++r) {
        const T* d = dout + r * OC + c0;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) acc[c] += d[c];
      }
      for (int64_t c = 0; c < n; ++c) dbias[c0 + c] += acc[c];
    }
  });
}

template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int64_t N,
                     int64_t IC, int64_t OC, bool in_out, bool accumulate) {
  T beta = accumulate ? T(1) : T(0);
  if (in_out) {
    if (dinp) gemm(false, true, N, IC, OC, T(1), dout, OC, w, OC, beta, dinp, IC);
    gemm(true, false, IC, OC, N, T(1), inp, IC, dout, OC, T(1), dw, OC);
  } else {
    if (dinp) gemm(false, false, N, IC, OC, T(1), dout, OC, w, IC, beta, dinp, IC);
    gemm(true, false, OC, IC, N, T(1), dout, OC, inp, IC, T(1), dw, IC);
  }
  if (dbias) bias_backward(dbias, dout, N, OC);
}

// ---------------------------------------------------------------------------------------------
// Causal self-attention. qkv[B,T,3C] holds q | k | v; head h owns columns [h*hs, (h+1)*hs) of
// each. The CPU state is the softmax matrix att[B,H,T,T] (zeros above the diagonal). Each (b,h)
// pair is one task: its operands are copied into zero-padded contiguous buffers, and every
// product is C = A x B with B row-major, computed by a register-tiled kernel that skips the
// blocks the causal mask makes zero.

// Vector of 64 bytes (16 floats or 8 doubles) through GCC vector extensions, so the same code
// compiles to AVX-512, AVX2 or SSE.
template <class T>
struct Vec {
  typedef T type __attribute__((vector_size(64), aligned(sizeof(T))));
  static constexpr int64_t width = 64 / sizeof(T);
};

inline constexpr int64_t kTileRows = 4;

// C[r][0..N) = sum_{k in [k0, k1)} A[r][k] * B[k][0..N) for r < kTileRows. N is a multiple of
// 2 vector widths; A, B, C rows are lda/ldb/ldc elements apart. a_transposed: A is stored
// transposed, A[r][k] at A[k * lda + r] (backward reads dS^T and P^T from dS and P in place).
// Columns [n0, n0 + V * W) of the tile: V vectors per row in registers, every element summed over k
// in order, so the result does not depend on V.
template <class T, bool a_transposed, int64_t NV>
inline void tile_gemm_cols(const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t n0,
                           int64_t k0, int64_t k1) {
  using V = typename Vec<T>::type;
  constexpr int64_t W = Vec<T>::width;
  V acc[kTileRows][NV];
  for (int64_t r = 0; r < kTileRows; ++r)
    for (int64_t v = 0; v < NV; ++v) acc[r][v] = V{};
  for (int64_t k = k0; k < k1; ++k) {
    V b[NV];
    for (int64_t v = 0; v < NV; ++v) b[v] = *reinterpret_cast<const V*>(B + k * ldb + n0 + v * W);
    for (int64_t r = 0; r < kTileRows; ++r) {
      const T a = a_transposed ? A[k * lda + r] : A[r * lda + k];
      for (int64_t v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
  }
  for (int64_t r = 0; r < kTileRows; ++r)
    for (int64_t v = 0; v < NV; ++v) *reinterpret_cast<V*>(C + r * ldc + n0 + v * W) = acc[r][v];
}

// C[r][0..N) = sum_{k in [k0, k1)} A[r][k] * B[k][0..N) for r < kTileRows. N is a multiple of
// 2 vector widths; A, B, C rows are lda/ldb/ldc elements apart. a_transposed: A is stored
// transposed, A[r][k] at A[k * lda + r] (backward reads dS^T and P^T from dS and P in place).
// Four vectors per row where N allows (a head of 64 floats in one pass: half the loads of A per
// multiply-add), else two.
template <class T, bool a_transposed = false>
inline void tile_gemm(const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc, int64_t N, int64_t k0,
                      int64_t k1) {
  constexpr int64_t W = Vec<T>::width;
  int64_t n0 = 0;
  for (; n0 + 4 * W <= N; n0 += 4 * W) tile_gemm_cols<T, a_transposed, 4>(A, lda, B, ldb, C, ldc, n0, k0, k1);
  for (; n0 < N; n0 += 2 * W) tile_gemm_cols<T, a_transposed, 2>(A, lda, B, ldb, C, ldc, n0, k0, k1);
}

// Per-task scratch: padded sizes and buffers, reused across the tasks of one thread.
template <class T>
struct AttnScratch {
  int64_t Tp = 0, Dp = 0;  // T and hs rounded up to 2 vector widths
  std::vector<T> q, k, kt, v, vt, s, o, dO;

  AttnScratch(int64_t seq, int64_t hs) {
    int64_t step = 2 * Vec<T>::width;
    Tp = (seq + step - 1) / step * step;
    Dp = (hs + step - 1) / step * step;
    for (auto* b : {&q, &k, &v, &o, &dO}) b->assign(static_cast<size_t>(Tp * Dp), T(0));
    for (auto* b : {&kt, &vt}) b->assign(static_cast<size_t>(Dp * Tp), T(0));
    s.assign(static_cast<size_t>(Tp * Tp), T(0));
  }
  // Copies head columns [col, col + hs) of rows with stride `ld` into a [Tp][Dp] buffer
  // (optionally scaled) and its transpose [Dp][Tp]; padding stays zero.
  void load(std::vector<T>& dst, std::vector<T>* dst_t, const T* src, int64_t ld, int64_t T_, int64_t hs,
            T scale = T(1)) {
    for (int64_t i = 0; i < T_; ++i)
      for (int64_t d = 0; d < hs; ++d) {
        T x = src[i * ld + d] * scale;
        dst[i * Dp + d] = x;
        if (dst_t) (*dst_t)[d * Tp + i] = x;
      }
  }
};

// Rounds the causal column bound of row block [i0, i0 + kTileRows) up to whole vector pairs.
template <class T>
inline int64_t causal_cols(int64_t i0, int64_t Tp) {
  int64_t step = 2 * Vec<T>::width;
  return std::min(Tp, (i0 + kTileRows + step - 1) / step * step);
}

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int64_t B, int64_t Tn, int64_t C, int64_t H) {
  const int64_t hs = C / H;
  const int64_t C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    AttnScratch<T> w(Tn, hs);
    const int64_t Tp = w.Tp, Dp = w.Dp;
    for (int64_t task = lo; task < hi; ++task) {
      int64_t b = task / H, h = task % H;
      const T* base = qkv + b * Tn * C3 + h * hs;
      w.load(w.q, nullptr, base, C3, Tn, hs, scale);
      w.load(w.k, &w.kt, base + C, C3, Tn, hs);
      w.load(w.v, nullptr, base + 2 * C, C3, Tn, hs);
      for (int64_t i0 = 0; i0 < Tp; i0 += kTileRows) {
        // Scores for the causal columns of this row block, then a masked softmax per row.
        int64_t ncols = causal_cols<T>(i0, Tp);
        tile_gemm(w.q.data() + i0 * Dp, Dp, w.kt.data(), Tp, w.s.data() + i0 * Tp, Tp, ncols, 0, Dp);
        for (int64_t i = i0; i < std::min(i0 + kTileRows, Tn); ++i) {
          T* a = w.s.data() + i * Tp;
          int64_t n = i + 1;
          T mx = a[0];
          for (int64_t j = 1; j < n; ++j) mx = std::max(mx, a[j]);
          T sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < n; ++j) {
            a[j] = vexp(a[j] - mx);
            sum += a[j];
          }
          T inv = T(1) / sum;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) a[j] *= inv;
          for (int64_t j = n; j < ncols; ++j) a[j] = 0;
          T* dst = att + (task * Tn + i) * Tn;
          for (int64_t j = 0; j < Tn; ++j) dst[j] = a[j < ncols ? j : 0] * T(j < n);
        }
        for (int64_t i = std::max(i0, Tn); i < i0 + kTileRows; ++i)
          for (int64_t j = 0; j < ncols; ++j) w.s[i * Tp + j] = 0;
        // O = P V over the non-zero columns of P.
        tile_gemm(w.s.data() + i0 * Tp, Tp, w.v.data(), Dp, w.o.data() + i0 * Dp, Dp, Dp, 0,
                  std::min(i0 + kTileRows, Tn));
      }
      for (int64_t i = 0; i < Tn; ++i) {
        T* o = out + (b * Tn + i) * C + h * hs;
        for (int64_t d = 0; d < hs; ++d) o[d] = w.o[i * Dp + d];
      }
    }
  });
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t B, int64_t Tn,
                        int64_t C, int64_t H, bool accumulate) {
  const int64_t hs = C / H;
  const int64_t C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    AttnScratch<T> w(Tn, hs);
    const int64_t Tp = w.Tp, Dp = w.Dp;
    // P (padded), dP -> dS in place; results dQ, dK, dV. dK and dV read dS and P transposed in
    // place (tile_gemm's a_transposed): no transposed copies.
    std::vector<T> p(static_cast<size_t>(Tp * Tp), T(0));
    std::vector<T> dq(static_cast<size_t>(Tp * Dp)), dk(static_cast<size_t>(Tp * Dp)), dv(static_cast<size_t>(Tp * Dp));
    for (int64_t task = lo; task < hi; ++task) {
      int64_t b = task / H, h = task % H;
      const T* base = qkv + b * Tn * C3 + h * hs;
      w.load(w.q, nullptr, base, C3, Tn, hs);
      w.load(w.k, nullptr, base + C, C3, Tn, hs);
      w.load(w.v, &w.vt, base + 2 * C, C3, Tn, hs);
      w.load(w.dO, nullptr, dout + b * Tn * C + h * hs, C, Tn, hs);
      for (int64_t i = 0; i < Tn; ++i) {
        const T* a = att + (task * Tn + i) * Tn;
        std::copy(a, a + i + 1, p.data() + i * Tp);
      }
      for (int64_t i0 = 0; i0 < Tp; i0 += kTileRows) {
        // dP = dO V^T on the causal columns, then dS = P * (dP - rowsum(P * dP)) / sqrt(hs).
        int64_t ncols = causal_cols<T>(i0, Tp);
        tile_gemm(w.dO.data() + i0 * Dp, Dp, w.vt.data(), Tp, w.s.data() + i0 * Tp, Tp, ncols, 0, Dp);
        for (int64_t i = i0; i < i0 + kTileRows; ++i) {
          T* ds = w.s.data() + i * Tp;
          const T* pi = p.data() + i * Tp;
          int64_t n = i < Tn ? i + 1 : 0;
          T dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t j = 0; j < n; ++j) dot += pi[j] * ds[j];
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) ds[j] = pi[j] * (ds[j] - dot) * scale;
          for (int64_t j = n; j < ncols; ++j) ds[j] = 0;
        }
        // dQ = dS K over the non-zero columns of dS.
        tile_gemm(w.s.data() + i0 * Tp, Tp, w.k.data(), Dp, dq.data() + i0 * Dp, Dp, Dp, 0,
                  std::min(i0 + kTileRows, Tn));
      }
      // dK = dS^T Q and dV = P^T dO: row j of dS^T and P^T is non-zero from column j on. The
      // entries of dS and P read here above the diagonal are zero: dS's up to its row block's
      // causal bound (set above), P's never written.
      for (int64_t j0 = 0; j0 < Tp; j0 += kTileRows) {
        int64_t k0 = std::min(j0, Tn);
        tile_gemm<T, true>(w.s.data() + j0, Tp, w.q.data(), Dp, dk.data() + j0 * Dp, Dp, Dp, k0, Tn);
        tile_gemm<T, true>(p.data() + j0, Tp, w.dO.data(), Dp, dv.data() + j0 * Dp, Dp, Dp, k0, Tn);
      }
      for (int64_t i = 0; i < Tn; ++i) {
        T* dqi = dqkv + (b * Tn + i) * C3 + h * hs;
        T* dki = dqi + C;
        T* dvi = dqi + 2 * C;
        for (int64_t d = 0; d < hs; ++d) {
          T gq = dq[i * Dp + d], gk = dk[i * Dp + d], gv = dv[i * Dp + d];
          dqi[d] = accumulate ? dqi[d] + gq : gq;
          dki[d] = accumulate ? dki[d] + gk : gk;
          dvi[d] = accumulate ? dvi[d] + gv : gv;
        }
      }
      // p's non-zero pattern is the same lower triangle in every task: no clearing needed.
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Activations.

template <class T>
inline T gelu_inner_k() {
  return T(0.7978845608028654);  // sqrt(2/pi)
}

template <class T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  const T k = gelu_inner_k<T>();
  parallel_for(n, 8192, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      T x = inp[i];
      T u = k * (x + T(0.044715) * x * x * x);
      out[i] = T(0.5) * x * (T(1) + vtanh(u));
    }
  });
}

template <class T>
void gelu_backward(T* dinp, const T* dout, const T* inp, int64_t n, bool accumulate) {
  const T k = gelu_inner_k<T>();
  parallel_for(n, 8192, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      T x = inp[i];
      T u = k * (x + T(0.044715) * x * x * x);
      T th = vtanh(u);
      T sech2 = T(1) - th * th;
      T grad = T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * k * (T(1) + T(3 * 0.044715) * x * x);
      T g = grad * dout[i];
      dinp[i] = accumulate ? dinp[i] + g : g;
    }
  });
}

template <class T>
void relu_forward(T* out, const T* inp, int64_t n) {
  parallel_for(n, 16384, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) out[i] = inp[i] > T(0) ? inp[i] : T(0);
  });
}

template <class T>
void relu_backward(T* dinp, const T* dout, const T* inp, int64_t n, bool accumulate) {
  parallel_for(n, 16384, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      T g = inp[i] > T(0) ? dout[i] : T(0);
      dinp[i] = accumulate ? dinp[i] + g : g;
    }
  });
}

template <class T>
void add(T* out, const T* a, const T* b, int64_t n) {
  parallel_for(n, 16384, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
  });
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy.

template <class T>
void crossentropy_forward(T* losses, int32_t* correct, const T* logits, const int32_t* targets, int64_t N,
                          int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* l = logits + r * V;
      int32_t t = targets[r];
      int64_t am = 0;
      T mx = l[0];
      for (int64_t j = 1; j < V; ++j) {
        if (l[j] > mx) {
          mx = l[j];
          am = j;
        }
      }
      if (correct) correct[r] = (t >= 0 && am == t) ? 1 : 0;
      if (t < 0) {
        losses[r] = 0;
        continue;
      }
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < V; ++j) s += vexp(l[j] - mx);
      losses[r] = std::log(s) + mx - l[t];
    }
  });
}

template <class T>
void crossentropy_backward(T* dlogits, const T* logits, const int32_t* targets, int64_t N, int64_t V,
                           T dloss) {
  parallel_for(N, row_grain(V), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* l = logits + r * V;
      T* d = dlogits + r * V;
      int32_t t = targets[r];
      if (t < 0) {
        for (int64_t j = 0; j < V; ++j) d[j] = 0;
        continue;
      }
      T mx = l[0];
      for (int64_t j = 1; j < V; ++j) mx = std::max(mx, l[j]);
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < V; ++j) {
        d[j] = vexp(l[j] - mx);
        s += d[j];
      }
      T inv = dloss / s;
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) d[j] *= inv;
      d[t] -= dloss;
    }
  });
}

template <class T>
void argmax(int32_t* out, const T* logits, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* l = logits + r * V;
      int64_t am = 0;
      for (int64_t j = 1; j < V; ++j)
        if (l[j] > l[am]) am = j;
      out[r] = static_cast<int32_t>(am);
    }
  });
}

// Vocabulary-sharded cross-entropy pieces (tensor parallel).
template <class T>
void logits_row_max(T* row_max, const T* logits, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* l = logits + r * V;
      T mx = l[0];
      for (int64_t j = 1; j < V; ++j) mx = std::max(mx, l[j]);
      row_max[r] = mx;
    }
  });
}

template <class T>
void logits_sum_exp(T* sum_exp, const T* logits, const T* row_max, int64_t N, int64_t V) {
  parallel_for(N, row_grain(V), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* l = logits + r * V;
      T mx = row_max[r], s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < V; ++j) s += vexp(l[j] - mx);
      sum_exp[r] = s;
    }
  });
}

template <class T>
void logits_pick(T* picked, const T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t v0) {
  for (int64_t r = 0; r < N; ++r) {
    int64_t t = static_cast<int64_t>(targets[r]) - v0;
    picked[r] = targets[r] >= 0 && t >= 0 && t < V ? logits[r * V + t] : T(0);
  }
}

template <class T>
void crossentropy_backward_sharded(T* dlogits, const T* logits, const int32_t* targets, const T* row_max,
                                   const T* sum_exp, int64_t N, int64_t V, int64_t v0, T dloss) {
  parallel_for(N, row_grain(V), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* l = logits + r * V;
      T* d = dlogits + r * V;
      if (targets[r] < 0) {
        for (int64_t j = 0; j < V; ++j) d[j] = 0;
        continue;
      }
      T mx = row_max[r], scale = dloss / sum_exp[r];
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) d[j] = vexp(l[j] - mx) * scale;
      int64_t t = static_cast<int64_t>(targets[r]) - v0;
      if (t >= 0 && t < V) d[t] -= dloss;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Optimizers, element-wise over flat ranges. AdamW follows torch.optim.AdamW's order of
// operations (decay, lerp of the first moment, sqrt(v)/sqrt(bc2) + eps) so the two agree to
// rounding.

template <class T>
void adamw_step(T* p, const T* g, T* m, T* v, int64_t n, double lr, double beta1, double beta2,
                double eps, double wd, int64_t step, double gscale) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const T decay = T(1.0 - lr * wd);
  const T step_size = T(lr / bc1);
  const T bc2_sqrt = T(std::sqrt(bc2));
  const T b1 = T(beta1), b2 = T(beta2), one_b1 = T(1.0 - beta1), one_b2 = T(1.0 - beta2);
  const T e = T(eps), gs = T(gscale);
  parallel_for(n, 8192, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      T gi = g[i] * gs;
      T pi = p[i] * decay;
      T mi = m[i] + one_b1 * (gi - m[i]);
      T vi = b2 * v[i] + one_b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = pi - step_size * mi / (std::sqrt(vi) / bc2_sqrt + e);
    }
  });
  (void)b1;
}

template <class T>
void sgd_step(T* p, const T* g, T* buf, int64_t n, double lr, double momentum, double dampening,
              double wd, bool nesterov, bool first_step, double gscale) {
  const T lr_t = T(lr), mom = T(momentum), damp = T(1.0 - dampening), wd_t = T(wd), gs = T(gscale);
  parallel_for(n, 8192, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      T d = g[i] * gs + wd_t * p[i];
      if (mom != T(0)) {
        T b = first_step ? d : mom * buf[i] + damp * d;
        buf[i] = b;
        d = nesterov ? d + mom * b : b;
      }
      p[i] -= lr_t * d;
    }
  });
}

}  // namespace dl::cpu
