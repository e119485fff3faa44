// CPU kernels of the Llama family's ops (RMSNorm, RoPE, SwiGLU, the grouped K/V pack), templated
// on the element type like kernels.hpp, each forward beside its backward. Rows or (b, t)
// positions are split across threads so each output element is written by one thread; the
// weight gradient's sum over rows goes through fixed blocks (kReduceRows), so the result does
// not depend on the thread count.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "dl/backend/cpu/kernels.hpp"

namespace dl::cpu {

// ---------------------------------------------------------------------------------------------
// RMSNorm over the last dimension.

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, int64_t N, int64_t C, double eps) {
  parallel_for(N, row_grain(C), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* x = inp + r * C;
      T ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
      const T rs = T(1) / std::sqrt(ss / T(C) + T(eps));
      T* o = out + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = x[c] * rs * w[c];
      rstd[r] = rs;
    }
  });
}

// y = w * x * r with r = (mean(x^2) + eps)^-1/2: dx = r * (w dy) - x r^3 mean(w dy x), dw += dy x r.
template <class T>
void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd, int64_t N, int64_t C,
                      bool accumulate) {
  const int64_t nblocks = (N + kReduceRows - 1) / kReduceRows;
  std::vector<T> partial(static_cast<size_t>(nblocks * C), T(0));
  parallel_for(nblocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      T* pdw = partial.data() + blk * C;
      const int64_t r1 = std::min(N, (blk + 1) * kReduceRows);
      for (int64_t r = blk * kReduceRows; r < r1; ++r) {
        const T* x = inp + r * C;
        const T* d = dout + r * C;
        const T rs = rstd[r];
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < C; ++c) dot += w[c] * d[c] * x[c];
        const T k = dot / T(C) * rs * rs * rs;
        T* dx = dinp + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const T g = rs * w[c] * d[c] - x[c] * k;
          dx[c] = accumulate ? dx[c] + g : g;
          pdw[c] += d[c] * x[c] * rs;
        }
      }
    }
  });
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const T* pdw = partial.data() + blk * C;
    for (int64_t c = 0; c < C; ++c) dw[c] += pdw[c];
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE, rotate-half convention: for each head, the pair (i, i + hs/2) rotates by t * inv_freq[i].
// `sign` +1 rotates forward, -1 back (the transpose: backward). One cos/sin table [T, hs/2] per
// call, the angle formed in f32 as transformers' LlamaRotaryEmbedding does.

template <class T>
void rope(T* out, const T* inp, const float* inv_freq, int64_t B, int64_t Tn, int64_t H, int64_t hs, T sign) {
  const int64_t half = hs / 2;
  std::vector<T> cs(static_cast<size_t>(Tn * half)), sn(static_cast<size_t>(Tn * half));
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[i];
      cs[static_cast<size_t>(t * half + i)] = static_cast<T>(std::cos(static_cast<T>(angle)));
      sn[static_cast<size_t>(t * half + i)] = sign * static_cast<T>(std::sin(static_cast<T>(angle)));
    }
  const int64_t row = H * hs;
  parallel_for(B * Tn, row_grain(row), [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const int64_t t = bt % Tn;
      const T* c = cs.data() + t * half;
      const T* s = sn.data() + t * half;
      for (int64_t h = 0; h < H; ++h) {
        const T* x = inp + bt * row + h * hs;
        T* o = out + bt * row + h * hs;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const T x1 = x[i], x2 = x[i + half];  // read both first: out may be inp
          o[i] = x1 * c[i] - x2 * s[i];
          o[i + half] = x2 * c[i] + x1 * s[i];
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// SwiGLU: out = silu(gate) * up. The sigmoid goes through vexp (math.hpp) so the loops vectorise
// (glibc's expf does not): the MLP's element-wise pass was 5% of a Llama step through scalar expf.

template <class T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + vexp(-x));
}

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
  parallel_for(n, 16384, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const T g = gate[i];
      out[i] = g * sigmoid(g) * up[i];
    }
  });
}

// d silu(g) / dg = s (1 + g (1 - s)) with s = sigmoid(g).
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  parallel_for(n, 16384, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const T g = gate[i], u = up[i], d = dout[i], s = sigmoid(g);
      dgate[i] = d * u * s * (T(1) + g * (T(1) - s));
      dup[i] = d * g * s;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Grouped K/V: pack q, k, v into attention's qkv[B,T,3C] (C = H*hs), query head h reading K/V head
// h / (H / Hkv); unpack sums each K/V head's group.

template <class T>
void qkv_pack(T* qkv, const T* q, const T* k, const T* v, int64_t BT, int64_t H, int64_t Hkv, int64_t hs) {
  const int64_t C = H * hs, Ckv = Hkv * hs, group = H / Hkv;
  parallel_for(BT, row_grain(3 * C), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* dst = qkv + r * 3 * C;
      std::copy(q + r * C, q + (r + 1) * C, dst);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / group;
        std::copy(k + r * Ckv + g * hs, k + r * Ckv + (g + 1) * hs, dst + C + h * hs);
        std::copy(v + r * Ckv + g * hs, v + r * Ckv + (g + 1) * hs, dst + 2 * C + h * hs);
      }
    }
  });
}

template <class T>
void qkv_unpack(T* dq, T* dk, T* dv, const T* dqkv, int64_t BT, int64_t H, int64_t Hkv, int64_t hs) {
  const int64_t C = H * hs, Ckv = Hkv * hs, group = H / Hkv;
  parallel_for(BT, row_grain(3 * C), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* src = dqkv + r * 3 * C;
      std::copy(src, src + C, dq + r * C);
      for (int64_t g = 0; g < Hkv; ++g) {
        T* k = dk + r * Ckv + g * hs;
        T* v = dv + r * Ckv + g * hs;
        for (int64_t d = 0; d < hs; ++d) k[d] = v[d] = T(0);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const T* sk = src + C + h * hs;
          const T* sv = src + 2 * C + h * hs;
#pragma omp simd
          for (int64_t d = 0; d < hs; ++d) {
            k[d] += sk[d];
            v[d] += sv[d];
          }
        }
      }
    }
  });
}

}  // namespace dl::cpu
