// The tensor-core attention kernels (kernels/attention_mma.cuh), run on the CPU by the warp
// emulator: the same source nvcc compiles, its fragment indexing, masking, tiling and online
// softmax checked against the CPU backend in f64 on inputs rounded to bf16 / f16, every output
// poisoned with NaN first. Each case runs in three thread orders (lib/emulator/warp_emulator.hpp)
// and must give the same bits; its errors must stay within about twice what the emulator gives,
// over the whole tensor and element by element.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention_mma.cuh"
#include "dl/backend/backend.hpp"
#include "emulator/warp_emulator.hpp"
#include "dl/core/half.hpp"
#include "launch_failure.hpp"
#include "support/numeric.hpp"

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
// u: half the distance from 1 to the next value (2^-8 in bf16, 2^-11 in f16).
double unit_roundoff(DType dt) { return dt == DType::f16 ? 0x1p-11 : 0x1p-8; }

// Bars on ||got - ref|| / ||ref|| (out, dqkv) for one dtype: about twice what the emulator gives.
struct Bars {
  double out, dqkv;
};
struct Case {
  int64_t B, T;
  int H, hs;
  Bars bf16, f16;
};

// What kernels/attention.cu's allow_smem does on the device: raise a kernel's dynamic shared-memory
// limit when it needs more than the default 48 KiB.
const auto prepare = [](auto kernel, size_t bytes, const char*) {
  if (bytes > dl::emu::kDefaultDynamicShared) dl::emu::func_set_max_dynamic_shared(dl::emu::kernel_key(kernel), bytes);
};
const auto no_check = [](const char*) {};

// What one run writes; the vectors start as NaN so that an unwritten element shows.
struct Outputs {
  std::vector<uint16_t> out, dqkv;
  std::vector<float> lse, delta;
};
bool same_bits(const Outputs& a, const Outputs& b) {
  return a.out == b.out && a.dqkv == b.dqkv &&
         std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0 &&
         std::memcmp(a.delta.data(), b.delta.data(), a.delta.size() * sizeof(float)) == 0;
}

template <class E>
Outputs run_kernels(const Input& qkv, const Input& dout, int64_t B, const attn::Dims& dm) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto n = static_cast<size_t>(B * dm.T * dm.C);
  Outputs o{std::vector<uint16_t>(n, 0xFFFF), std::vector<uint16_t>(3 * n, 0xFFFF),
            std::vector<float>(static_cast<size_t>(B * dm.H * dm.T), nan), {}};
  o.delta = o.lse;
  const auto* q = reinterpret_cast<const E*>(qkv.bits.data());
  attn::forward(reinterpret_cast<E*>(o.out.data()), o.lse.data(), q, B, dm, 0, prepare, no_check);
  attn::backward(reinterpret_cast<E*>(o.dqkv.data()), o.delta.data(), reinterpret_cast<const E*>(dout.bits.data()),
                 q, reinterpret_cast<const E*>(o.out.data()), o.lse.data(), B, dm, 0, prepare, no_check);
  return o;
}

// max |got - ref| in units of u * max |ref|: each output is rounded to dt once, after f32 sums.
double element_error(const Tensor& got, const Tensor& ref, DType dt) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    err = std::max(err, std::fabs(get(got, i) - get(ref, i)));
    scale = std::max(scale, std::fabs(get(ref, i)));
  }
  return err == 0 ? 0 : err / (unit_roundoff(dt) * scale);
}
// k of |got - ref| <= k u max|ref|, both dtypes: about twice the largest the emulator gives over
// the cases below (out 0.73, dqkv 0.91).
constexpr Bars kElementBound{1.5, 2.0};

// Forward and backward of one shape in one dtype under the emulator, against the CPU in f64, in
// every thread order.
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
  dl::emu::set_order(dl::emu::Order::index);
  const Outputs first = run_kernels<E>(qkv, dout, B, dm);
  for (auto order : {dl::emu::Order::reversed, dl::emu::Order::shuffled}) {
    dl::emu::set_order(order, key);
    CHECK_MESSAGE(same_bits(run_kernels<E>(qkv, dout, B, dm), first), "thread order ",
                  std::string(dl::emu::order_name(order)),
                  " gives other bits than index order: a race between threads that no barrier orders");
  }
  dl::emu::set_order(dl::emu::Order::index);

  Tensor got = to_f64(first.out, {B, T, C}, dt), dgot = to_f64(first.dqkv, {B, T, 3 * C}, dt);
  CHECK(all_finite(got));
  CHECK(all_finite(dgot));
  const double err_out = rel_error(got, out_ref), err_d = rel_error(dgot, dqkv_ref);
  const Bars& bar = dt == DType::bf16 ? c.bf16 : c.f16;
  CHECK_MESSAGE(err_out <= bar.out, "forward: rel error ", err_out, " (bar ", bar.out, ")");
  CHECK_MESSAGE(err_d <= bar.dqkv, "backward: rel error ", err_d, " (bar ", bar.dqkv, ")");
  // Element by element as well: a norm over the whole tensor lets one wrong column through.
  const double el_out = element_error(got, out_ref, dt), el_d = element_error(dgot, dqkv_ref, dt);
  CHECK_MESSAGE(el_out <= kElementBound.out, "forward: an element off by ", el_out, " u max|out| (bound ",
                kElementBound.out, ")");
  CHECK_MESSAGE(el_d <= kElementBound.dqkv, "backward: an element off by ", el_d, " u max|dqkv| (bound ",
                kElementBound.dqkv, ")");
  MESSAGE(dl::dtype_name(dt), " B=", B, " T=", T, " H=", c.H, " hs=", c.hs, ": rel error out ", err_out, ", dqkv ",
          err_d, "; largest element error in u max|ref|: out ", el_out, ", dqkv ", el_d);
}

// Each head size; T below one tile, at a tile boundary and past one with a ragged end. The emulator
// gives bf16 out 1.8e-3-1.9e-3, dqkv 2.4e-3-2.6e-3; f16 out 2.2e-4-2.4e-4, dqkv 3.1e-4-3.5e-4. At
// T = 1 the output is v exactly (one key: p = 1) and dqkv within 4.3e-8 (bf16) and 0 (f16).
constexpr Bars kBf16{4e-3, 5e-3}, kF16{5e-4, 7e-4};
const Case kCases[] = {{2, 70, 2, 32, kBf16, kF16},
                       {1, 130, 2, 64, kBf16, kF16},
                       {1, 64, 1, 64, kBf16, kF16},
                       {2, 1, 2, 64, {0, 1e-7}, {0, 1e-7}},
                       {1, 67, 1, 128, kBf16, kF16}};

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

  // Whichever thread gets there first: a thread that returns before a barrier the others wait at,
  // and a shuffle that half the warp skips (a divergent __shfl_xor_sync with the full mask).
  for (auto order : {dl::emu::Order::index, dl::emu::Order::reversed, dl::emu::Order::shuffled}) {
    CAPTURE(std::string(dl::emu::order_name(order)));
    dl::emu::set_order(order, 3);
    CHECK_THROWS_WITH_AS(dl::emu::launch(dim3(1), dim3(64), 0,
                                         [&] {
                                           if (dl::emu::thread_idx().x == 3) return;
                                           dl::emu::sync_block();
                                         }),
                         doctest::Contains("left the kernel without reaching"), std::runtime_error);
    CHECK_THROWS_WITH_AS(dl::emu::launch(dim3(1), dim3(32), 0,
                                         [&] {
                                           if (dl::emu::lane() < 16) (void)dl::cuda::warp::shfl_xor(1.0f, 1);
                                         }),
                         doctest::Contains("warp-wide operation"), std::runtime_error);
  }
  dl::emu::set_order(dl::emu::Order::index);
}

namespace {
using dl::test::failure;
using dl::test::has;
void some_kernel() {}
}  // namespace

TEST_CASE("the emulator faults where a GPU does: misaligned moves, shared memory out of range or over the limit") {
  using dl::emu::launch;
  namespace warp = dl::cuda::warp;
  // 16- and 4-byte moves at addresses that are not multiples of their size.
  std::string e = failure([] {
    launch(dim3(1), dim3(32), 64, [] { (void)warp::load_u128(dl::emu::shared_memory() + 8); });
  });
  CHECK_MESSAGE(has(e, "misaligned address: 16-byte load"), e);
  e = failure([] { launch(dim3(1), dim3(32), 64, [] { warp::store_u32(dl::emu::shared_memory() + 2, 1u); }); });
  CHECK_MESSAGE(has(e, "misaligned address: 32-bit store"), e);
  CHECK(failure([] { launch(dim3(1), dim3(32), 64, [] { warp::store_u128(dl::emu::shared_memory() + 16, uint4{}); }); })
            .empty());

  // Shared memory: the requested bytes are there, one past them is not.
  CHECK(failure([] { launch(dim3(2), dim3(32), 100, [] { dl::emu::shared_memory()[99] = 1; }); }).empty());
  e = failure([] {
    launch(dim3(2), dim3(64), 4000, [] {
      if (dl::emu::thread_idx().x == 37) dl::emu::shared_memory()[4000 + 16] = 1;
    });
  });
  CHECK_MESSAGE(has(e, "thread (37,0,0) of block (0,0,0) of kernel touched dynamic shared memory at byte 4016 of the 4000"),
                e);
  // The fault ended that launch only: the next one runs.
  CHECK(failure([] { launch(dim3(1), dim3(32), 16, [] { dl::emu::shared_memory()[15] = 1; }); }).empty());

  // 48 KiB of dynamic shared memory unless the kernel's limit was raised, and 227 KiB at most.
  const void* k = dl::emu::kernel_key(some_kernel);
  e = failure([&] { launch("some_kernel", k, dim3(1), dim3(32), (48 << 10) + 16, [] {}); });
  CHECK_MESSAGE(has(e, "launch of some_kernel (emulated device)"), e);
  CHECK_MESSAGE(has(e, "49168 bytes of dynamic shared memory: cudaErrorInvalidValue (too many resources requested for "
                       "launch: the kernel may have 49152 bytes"),
                e);
  dl::emu::func_set_max_dynamic_shared(k, 100 << 10);
  CHECK(failure([&] { launch("some_kernel", k, dim3(1), dim3(32), 100 << 10, [] {}); }).empty());
  CHECK_FALSE(failure([&] { launch("some_kernel", k, dim3(1), dim3(32), (100 << 10) + 16, [] {}); }).empty());
  CHECK_THROWS_WITH_AS(dl::emu::func_set_max_dynamic_shared(k, (227 << 10) + 1),
                       doctest::Contains("sm_90 allows at most 232448 bytes"), std::runtime_error);
}

TEST_CASE("the emulator's thread orders: a race no barrier orders gives other bits in another order") {
  // Thread 0 writes a shared byte that thread 40 (the second warp) reads: without a barrier
  // between, what thread 40 sees depends on which warp runs first.
  using dl::emu::Order;
  auto run = [](Order order, bool barrier) {
    dl::emu::set_order(order, 7);
    unsigned char seen = 0;
    dl::emu::launch(dim3(1), dim3(64), 16, [&] {
      unsigned char* s = dl::emu::shared_memory();
      if (dl::emu::thread_idx().x == 0) s[0] = 7;
      if (barrier) dl::emu::sync_block();
      if (dl::emu::thread_idx().x == 40) seen = s[0];
    });
    dl::emu::set_order(Order::index);
    return seen;
  };
  CHECK(run(Order::index, false) == 7);
  CHECK(run(Order::reversed, false) == 0xFF);  // shared memory starts as 0xFF bytes
  for (Order order : {Order::index, Order::reversed, Order::shuffled}) CHECK(run(order, true) == 7);

  // A shuffled order differs from the others and varies with the seed; each is reproducible.
  auto first_to_arrive = [](Order order, uint64_t seed) {
    dl::emu::set_order(order, seed);
    std::vector<int> arrivals;
    dl::emu::launch(dim3(1), dim3(128), 0, [&] {
      dl::emu::sync_block();
      arrivals.push_back(static_cast<int>(dl::emu::thread_idx().x));
    });
    dl::emu::set_order(Order::index);
    return arrivals;
  };
  const std::vector<int> a = first_to_arrive(Order::shuffled, 1), b = first_to_arrive(Order::shuffled, 2);
  CHECK(a.size() == 128);
  CHECK(a == first_to_arrive(Order::shuffled, 1));
  CHECK(a != b);
  CHECK(first_to_arrive(Order::index, 0).front() == 0);
  CHECK(first_to_arrive(Order::reversed, 0).front() == 127);
  CHECK(a != first_to_arrive(Order::index, 0));
  CHECK(a != first_to_arrive(Order::reversed, 0));
}

TEST_CASE("the emulator's mma sums as the tensor cores do: exact products, aligned and cut toward zero, f32") {
  auto hex = [](float v) {  // so that a failure shows the bits
    char s[32];
    std::snprintf(s, sizeof(s), "%a", static_cast<double>(v));
    return std::string(s);
  };
  float a[16] = {}, b[16] = {};
  // Products are exact: (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20, not rounded to 16 bits.
  a[0] = b[0] = 0x1.004p0f;
  CHECK(hex(dl::emu::fused_dot_add(0.0f, a, b)) == hex(0x1.00801p0f));
  // A product below the largest term's 25 bits is cut: 1 + (2^-24 + 2^-30) gives 1 + 2^-24 before
  // the final cut to f32, so 1 (a double sum rounded once to nearest gives 1 + 2^-23).
  a[0] = 0x1.04p0f;  // 1 + 2^-6, a bf16 value
  b[0] = 0x1p-24f;
  CHECK(hex(dl::emu::fused_dot_add(1.0f, a, b)) == hex(1.0f));
  // 2^24 + 16 x 0.5: each 0.5 lies below the 25 bits kept of 2^24 and is dropped (exactly: 2^24 + 8).
  for (int k = 0; k < 16; ++k) {
    a[k] = 0.5f;
    b[k] = 1.0f;
  }
  CHECK(hex(dl::emu::fused_dot_add(0x1p24f, a, b)) == hex(0x1p24f));
  // With the accumulator at 2^23 the halves are kept (2^23 + 8, exact in f32).
  CHECK(hex(dl::emu::fused_dot_add(0x1p23f, a, b)) == hex(0x1p23f + 8.0f));
  // A negative product below those bits is dropped too: 1 - (2^-25 + 2^-31) gives 1 (rounded once
  // to nearest: the f32 below 1).
  for (int k = 0; k < 16; ++k) a[k] = b[k] = 0.0f;
  a[0] = -0x1.04p0f;
  b[0] = 0x1p-25f;
  CHECK(hex(dl::emu::fused_dot_add(1.0f, a, b)) == hex(1.0f));
  // The sum is cut to f32 toward zero: (2^24 - 1) + 0.75 keeps 0.5 of the product (25 bits below
  // 2^23), and 2^24 - 0.5 is cut to 2^24 - 1 (rounded once to nearest: 2^24).
  a[0] = 0.75f;
  b[0] = 1.0f;
  CHECK(hex(dl::emu::fused_dot_add(0x1p24f - 1.0f, a, b)) == hex(0x1p24f - 1.0f));
}
