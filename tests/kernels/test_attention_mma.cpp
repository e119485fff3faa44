// The tensor-core attention kernels (kernels/attention_mma.cuh), run on the CPU by the warp
// emulator: the same source nvcc compiles, its fragment indexing, masking, tiling and online
// softmax checked against the CPU backend in f64 on inputs rounded to bf16 / f16, every output
// poisoned with NaN first. Tolerances are tests/cuda's (bf16 1e-2, f16 2e-3), so a kernel that
// passes here is held to the same bar on the GPU, where tests/cuda runs the compiled kernels.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "attention_mma.cuh"
#include "dl/backend/backend.hpp"
#include "dl/core/half.hpp"
#include "support/numeric.hpp"
#include "warp_emulator.hpp"

using dl::DType;
using dl::Tensor;
using dl::test::get;
using dl::test::rel_error;
using dl::test::random_tensor;
namespace attn = dl::cuda::attention_mma;

namespace {

constexpr DType F64 = DType::f64;

uint16_t to_bits(double v, DType dt) {
  return dt == DType::bf16 ? dl::float_to_bf16(static_cast<float>(v)) : dl::float_to_f16(static_cast<float>(v));
}
double from_bits(uint16_t b, DType dt) { return dt == DType::bf16 ? dl::bf16_to_float(b) : dl::f16_to_float(b); }

// f64 values rounded to dt, as a host tensor (the reference) and as 16-bit patterns (the kernel's).
struct Input {
  Tensor ref;
  std::vector<uint16_t> bits;
};
Input make_input(dl::Shape shape, DType dt, uint64_t key, double lo, double hi) {
  Input in{random_tensor(std::move(shape), F64, key, lo, hi), {}};
  in.bits.resize(static_cast<size_t>(in.ref.numel()));
  for (int64_t i = 0; i < in.ref.numel(); ++i) {
    in.bits[static_cast<size_t>(i)] = to_bits(get(in.ref, i), dt);
    in.ref.data<double>()[i] = from_bits(in.bits[static_cast<size_t>(i)], dt);
  }
  return in;
}
Tensor to_f64(const std::vector<uint16_t>& bits, dl::Shape shape, DType dt) {
  Tensor t = Tensor::empty(std::move(shape), F64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = from_bits(bits[static_cast<size_t>(i)], dt);
  return t;
}
bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(get(t, i))) return false;
  return true;
}
double tolerance(DType dt) { return dt == DType::f16 ? 2e-3 : 1e-2; }

struct Case {
  int64_t B, T;
  int H, hs;
};

const auto no_prepare = [](auto, size_t, const char*) {};
const auto no_check = [](const char*) {};

// Forward and backward of one shape in one dtype under the emulator, against the CPU in f64.
template <class E>
void check_case(const Case& c, DType dt, uint64_t key) {
  const int64_t B = c.B, T = c.T, C = static_cast<int64_t>(c.H) * c.hs;
  Input qkv = make_input({B, T, 3 * C}, dt, key, -2, 2), dout = make_input({B, T, C}, dt, key + 1, -1, 1);
  dl::Backend& cpu = dl::cpu_backend();
  Tensor out_ref = Tensor::empty({B, T, C}, F64);
  Tensor state_ref = Tensor::empty(cpu.attention_state_shape(B, T, C, c.H), F64);
  cpu.attention_forward(out_ref, state_ref, qkv.ref, c.H);
  Tensor dqkv_ref = Tensor::empty({B, T, 3 * C}, F64);
  cpu.attention_backward(dqkv_ref, dout.ref, qkv.ref, out_ref, state_ref, c.H);

  const attn::Dims dm{static_cast<int>(T), static_cast<int>(C), c.H};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint16_t> out(static_cast<size_t>(B * T * C), 0xFFFF), dqkv(static_cast<size_t>(B * T * 3 * C), 0xFFFF);
  std::vector<float> lse(static_cast<size_t>(B * c.H * T), nan), delta(lse.size(), nan);
  const auto* q = reinterpret_cast<const E*>(qkv.bits.data());
  attn::forward(reinterpret_cast<E*>(out.data()), lse.data(), q, B, dm, 0, no_prepare, no_check);
  Tensor got = to_f64(out, {B, T, C}, dt);
  CHECK(all_finite(got));
  const double err_out = rel_error(got, out_ref);
  CHECK_MESSAGE(err_out < tolerance(dt), "forward: rel error ", err_out);

  attn::backward(reinterpret_cast<E*>(dqkv.data()), delta.data(), reinterpret_cast<const E*>(dout.bits.data()), q,
                 reinterpret_cast<const E*>(out.data()), lse.data(), B, dm, 0, no_prepare, no_check);
  Tensor dgot = to_f64(dqkv, {B, T, 3 * C}, dt);
  CHECK(all_finite(dgot));
  const double err_d = rel_error(dgot, dqkv_ref);
  CHECK_MESSAGE(err_d < tolerance(dt), "backward: rel error ", err_d);
  MESSAGE(dl::dtype_name(dt), " B=", B, " T=", T, " H=", c.H, " hs=", c.hs, ": out rel error ", err_out,
          ", dqkv rel error ", err_d);
}

// Each head size; T below one tile, at a tile boundary and past one with a ragged end.
const Case kCases[] = {{2, 70, 2, 32}, {1, 130, 2, 64}, {1, 64, 1, 64}, {2, 1, 2, 64}, {1, 67, 1, 128}};

}  // namespace

TEST_CASE("tensor-core attention under the warp emulator matches the f64 CPU backend (bf16, f16)") {
  uint64_t key = 0xa77e;
  for (const Case& c : kCases) {
    CAPTURE(c.T);
    CAPTURE(c.hs);
    check_case<__nv_bfloat16>(c, DType::bf16, key += 2);
    check_case<__half>(c, DType::f16, key += 2);
  }
}

TEST_CASE("delta = rowsum(dout * out) per (b, h, t) in f32, as the f32 kernels' backward reads it") {
  const int64_t B = 2, T = 37;
  const int H = 3, hs = 80;  // a head size only the f32 kernels take; rows not a multiple of 4 warps
  const int64_t C = H * hs;
  Tensor dout = random_tensor({B, T, C}, DType::f32, 71), out = random_tensor({B, T, C}, DType::f32, 72);
  std::vector<float> delta(static_cast<size_t>(B * H * T), std::numeric_limits<float>::quiet_NaN());
  attn::delta(delta.data(), dout.data<float>(), out.data<float>(), B, attn::Dims{static_cast<int>(T), static_cast<int>(C), H},
              0, no_check);
  int wrong = 0;  // entries off by 1e-5 or more, or unwritten (NaN)
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        double want = 0;
        for (int d = 0; d < hs; ++d) {
          const int64_t i = (b * T + t) * C + h * hs + d;
          want += static_cast<double>(dout.data<float>()[i]) * out.data<float>()[i];
        }
        wrong += !(std::fabs(delta[static_cast<size_t>((b * H + h) * T + t)] - want) < 1e-5);
      }
  CHECK(wrong == 0);
}

TEST_CASE("head sizes the tensor-core kernels take") {
  for (int64_t hs : {32, 64, 128}) CHECK(attn::supports_head_size(hs));
  for (int64_t hs : {16, 48, 80, 96, 256}) CHECK_FALSE(attn::supports_head_size(hs));
}

TEST_CASE("the emulator: mma.m16n8k16 against a plain product, shuffles, and the errors a GPU would hang on") {
  // D = A B for A[16][16], B[16][8] with small integers (exact in bf16 and f32), each lane
  // building its fragments from the layout in warp_ops.cuh and writing its part of D.
  float A[16][16], Bm[16][8], D[16][8] = {};
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) A[r][k] = static_cast<float>((r * 7 + k * 3) % 11 - 5);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) Bm[k][n] = static_cast<float>((k * 5 + n * 2) % 9 - 4);
  dl::emu::launch(dim3(1), dim3(32), 0, [&] {
    const int lane = dl::emu::lane(), g = lane / 4, t = lane % 4;
    using dl::cuda::warp::pack2;
    using E = __nv_bfloat16;
    const uint32_t a[4] = {pack2<E>(A[g][2 * t], A[g][2 * t + 1]), pack2<E>(A[g + 8][2 * t], A[g + 8][2 * t + 1]),
                           pack2<E>(A[g][2 * t + 8], A[g][2 * t + 9]),
                           pack2<E>(A[g + 8][2 * t + 8], A[g + 8][2 * t + 9])};
    const uint32_t b[2] = {pack2<E>(Bm[2 * t][g], Bm[2 * t + 1][g]), pack2<E>(Bm[2 * t + 8][g], Bm[2 * t + 9][g])};
    float d[4] = {};
    dl::emu::mma_16816(d, a, b, true);
    D[g][2 * t] = d[0];
    D[g][2 * t + 1] = d[1];
    D[g + 8][2 * t] = d[2];
    D[g + 8][2 * t + 1] = d[3];
  });
  int wrong = 0;
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float want = 0;
      for (int k = 0; k < 16; ++k) want += A[r][k] * Bm[k][n];
      wrong += D[r][n] != want;
    }
  CHECK(wrong == 0);

  std::vector<float> seen(64);
  dl::emu::launch(dim3(1), dim3(64), 0, [&] {
    const int i = static_cast<int>(dl::emu::thread_idx().x);
    seen[static_cast<size_t>(i)] = dl::cuda::warp::shfl_xor(static_cast<float>(i), 5);
  });
  for (int i = 0; i < 64; ++i) CHECK(seen[static_cast<size_t>(i)] == static_cast<float>((i & ~31) | ((i & 31) ^ 5)));

  // A thread that returns before a barrier the others wait at.
  CHECK_THROWS_AS(dl::emu::launch(dim3(1), dim3(64), 0,
                                  [&] {
                                    if (dl::emu::thread_idx().x == 3) return;
                                    dl::emu::sync_block();
                                  }),
                  std::runtime_error);
  // A shuffle that half the warp skips (a divergent __shfl_xor_sync with the full mask).
  CHECK_THROWS_AS(dl::emu::launch(dim3(1), dim3(32), 0,
                                  [&] {
                                    if (dl::emu::lane() < 16) (void)dl::cuda::warp::shfl_xor(1.0f, 1);
                                  }),
                  std::runtime_error);
}
