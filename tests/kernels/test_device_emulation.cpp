// kernels/device.cuh under the warp emulator: what every kernel of kernels/ relies on (2-D blocks,
// blockDim/gridDim, static __shared__ arrays, 64-bit shuffles, atomics) behaves as on a GPU, and
// what a GPU refuses or compute-sanitizer reports (launch limits, out-of-range shared accesses,
// barriers in divergent code, lanes a partial warp does not have) fails the launch, naming the
// kernel, the thread and the block.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "device.cuh"
#include "launch_failure.hpp"

namespace {

using dl::cuda::launch;

using dl::test::failure;
using dl::test::has;

// Each block sums its 32 inputs through a [4][8] shared tile filled by a (8, 4) block.
__global__ void tile_sum_kernel(float* out, uint32_t* first_seen, const float* in, unsigned* dims) {
  DL_SHARED_ARRAY(float, tile, [4][8]);
  const unsigned tx = threadIdx.x, ty = threadIdx.y;
  if (tx == 0 && ty == 0) std::memcpy(&first_seen[blockIdx.x], &tile[3][7], 4);  // before anyone writes
  __syncthreads();
  tile[ty][tx] = in[blockIdx.x * 32 + ty * 8 + tx];
  __syncthreads();
  if (tx == 0 && ty == 0) {
    float s = 0.0f;
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 8; ++c) s += tile[r][c];
    out[blockIdx.x] = s;
    dims[0] = blockDim.x, dims[1] = blockDim.y, dims[2] = gridDim.x;
  }
}

__global__ void shared_overrun_kernel(int past) {
  DL_SHARED_ARRAY(float, scratch, [32]);
  scratch[threadIdx.x] = 1.0f;
  if (threadIdx.x == 5) scratch[32 + past] = 2.0f;
}

__global__ void divergent_barrier_kernel(float* out) {
  DL_SHARED_ARRAY(float, scratch, [64]);
  scratch[threadIdx.x] = 1.0f;
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = scratch[63 - threadIdx.x];
}

// The warp's largest int64 and the lane that holds it, through 64-bit shuffles.
__global__ void warp_argmax_kernel(int64_t* out, const int64_t* in, int lanes_to_exchange) {
  int64_t v = in[threadIdx.x];
  for (int o = lanes_to_exchange / 2; o > 0; o >>= 1) {
    const int64_t other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  out[threadIdx.x] = v;
}

__global__ void count_kernel(unsigned long long* counter, double* total) {
  atomicAdd(counter, 1ull);
  atomicAdd(total, 0.5);
}

__global__ void empty_kernel() {}

}  // namespace

TEST_CASE("device.cuh on the emulator: 2-D blocks share a poisoned static __shared__ tile, blocks run apart") {
  const int blocks = 3;
  std::vector<float> in(blocks * 32), out(blocks, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  std::vector<uint32_t> first_seen(blocks, 0);
  std::vector<unsigned> dims(3, 0);
  launch("tile_sum_kernel", tile_sum_kernel, dim3(blocks), dim3(8, 4), 0, 0, out.data(), first_seen.data(),
         in.data(), dims.data());
  for (int b = 0; b < blocks; ++b) {
    CHECK(out[static_cast<size_t>(b)] == static_cast<float>(32 * 32 * b + 31 * 32 / 2));
    CHECK(first_seen[static_cast<size_t>(b)] == 0xFFFFFFFFu);  // poisoned again in every block
  }
  CHECK(dims == std::vector<unsigned>{8, 4, 3});
}

TEST_CASE("device.cuh on the emulator: 64-bit shuffles and atomics") {
  std::vector<int64_t> in(64), out(64, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = (int64_t{1} << 40) * static_cast<int64_t>((i * 37) % 64);
  launch("warp_argmax_kernel", warp_argmax_kernel, dim3(1), dim3(64), 0, 0, out.data(), in.data(), 32);
  for (size_t i = 0; i < 64; ++i) {
    int64_t want = 0;
    for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) want = in[j] > want ? in[j] : want;
    CHECK(out[i] == want);
  }
  unsigned long long counter = 0;
  double total = 0;
  launch("count_kernel", count_kernel, dim3(5, 2), dim3(96), 0, 0, &counter, &total);
  CHECK(counter == 960);
  CHECK(total == 480.0);
}

TEST_CASE("device.cuh on the emulator: launches a GPU refuses fail naming the kernel") {
  const auto refused = [](dim3 grid, dim3 block, size_t shared) {
    return failure([&] { launch("empty_kernel", empty_kernel, grid, block, shared, 0); });
  };
  std::string e = refused(dim3(1), dim3(1025), 0);
  CHECK_MESSAGE(has(e, "CUDA error in launch of empty_kernel (emulated device)"), e);
  CHECK_MESSAGE(has(e, "cudaErrorInvalidConfiguration (1025 threads per block; at most 1024"), e);
  e = refused(dim3(1), dim3(1, 1, 65), 0);
  CHECK_MESSAGE(has(e, "z <= 64"), e);
  e = refused(dim3(1, 65536), dim3(32), 0);
  CHECK_MESSAGE(has(e, "grid x must be < 2^31, y and z <= 65535"), e);
  e = refused(dim3(0), dim3(32), 0);
  CHECK_MESSAGE(has(e, "a grid or block dimension is 0"), e);
  e = refused(dim3(1), dim3(32), (48 << 10) + 4);
  CHECK_MESSAGE(has(e, "too many resources requested for launch"), e);
  CHECK(refused(dim3(1), dim3(1024), 48 << 10).empty());
  CHECK(refused(dim3(1, 65535), dim3(1), 0).empty());
}

TEST_CASE("device.cuh on the emulator: what compute-sanitizer reports fails the launch") {
  // One element past a static __shared__ array (compute-sanitizer: Invalid __shared__ write).
  std::string e = failure([] { launch("shared_overrun_kernel", shared_overrun_kernel, dim3(2), dim3(32), 0, 0, 0); });
  CHECK_MESSAGE(has(e, "thread (5,0,0) of block (0,0,0) of shared_overrun_kernel touched __shared__ scratch at byte "
                       "128 of its 128 (out of range)"),
                e);
  // A __syncthreads() inside a branch half the block takes (synccheck: divergent barrier).
  std::vector<float> out(64);
  e = failure([&] { launch("divergent_barrier_kernel", divergent_barrier_kernel, dim3(1), dim3(64), 0, 0, out.data()); });
  CHECK_MESSAGE(has(e, "barrier divergence in block (0,0,0) of divergent_barrier_kernel: thread 0 waits at the "
                       "__syncthreads() of "),
                e);
  CHECK_MESSAGE(has(e, "thread 32 at "), e);
  // A block of 48 threads: its second warp has 16 lanes, so a shuffle across 32 lanes reads one it lacks.
  std::vector<int64_t> in(48, 1), got(48);
  e = failure([&] {
    launch("warp_argmax_kernel", warp_argmax_kernel, dim3(1), dim3(48), 0, 0, got.data(), in.data(), 32);
  });
  CHECK_MESSAGE(has(e, "of warp_argmax_kernel reads lane"), e);
  CHECK_MESSAGE(has(e, "of a warp with fewer lanes"), e);
  CHECK(failure([&] {
          launch("warp_argmax_kernel", warp_argmax_kernel, dim3(1), dim3(48), 0, 0, got.data(), in.data(), 16);
        }).empty());
  // After a failed launch the next one runs.
  CHECK(failure([&] { launch("tile_sum_kernel", empty_kernel, dim3(4), dim3(256), 0, 0); }).empty());
}
