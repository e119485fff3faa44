// The timing and input helpers every benchmark shares.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "dl/bench/common.hpp"
#include "dl/core/error.hpp"

using namespace dl::bench;

TEST_CASE("summarize: the median (upper middle for an even count), min and max") {
  Timing t = summarize({3.0, 1.0, 2.0});
  CHECK(t.median == 2.0);
  CHECK(t.min == 1.0);
  CHECK(t.max == 3.0);
  CHECK(t.samples == std::vector<double>{3.0, 1.0, 2.0});
  CHECK(summarize({4.0, 1.0, 3.0, 2.0}).median == 3.0);
  CHECK_THROWS_AS(summarize({}), dl::Error);
}

TEST_CASE("time_runs: warm-up calls are untimed, each timed call measured alone") {
  // Warm-ups return at once, timed calls sleep 2 ms (at least): a timing that missed the calls
  // it should measure, or measured the warm-ups in their place, gives samples under 2 ms.
  int calls = 0;
  Timing t = time_runs(2, 5, [&] {
    if (++calls > 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  CHECK(calls == 7);
  CHECK(t.samples.size() == 5);
  CHECK(t.min >= 0.002);
}

TEST_CASE("operand rotation exceeds twice the last-level cache, within bounds") {
  CHECK(rotation_count(1 << 20, 32 << 20, 1000) == 64);
  CHECK(rotation_count(3 << 20, 32 << 20, 1000) == 22);  // ceil(64 / 3)
  CHECK(rotation_count(100 << 20, 32 << 20, 1000) == 1);
  CHECK(rotation_count(1024, 32 << 20, 16) == 16);
  CHECK(rotation_count(0, 32 << 20, 16) == 1);
  CHECK(last_level_cache_bytes() > 0);
}

TEST_CASE("inputs are neither zeros nor the same across seeds, and depend only on (seed, index)") {
  std::vector<float> a(10000), b(10000), a2(10000);
  fill_uniform(a.data(), 10000, 1);
  fill_uniform(b.data(), 10000, 2);
  fill_uniform(a2.data(), 10000, 1);
  CHECK(a == a2);
  CHECK(a != b);
  CHECK(std::count(a.begin(), a.end(), 0.0f) < 10);
  CHECK(*std::min_element(a.begin(), a.end()) >= -1.0f);
  CHECK(*std::max_element(a.begin(), a.end()) < 1.0f);
  CHECK(uniform_value(1, 17) == a[17]);
}

TEST_CASE("common options: bad --repeat/--warmup/--threads are usage errors; --device cuda without a GPU says why") {
  CommonOptions c;
  c.repeat = 0;
  CHECK_THROWS_AS(apply_common(c), dl::Error);
  c.repeat = 5;
  c.warmup = -3;
  CHECK_THROWS_AS(apply_common(c), dl::Error);
  CHECK(select_device(dl::DeviceChoice::cpu) == DeviceKind::cpu);
  std::string why;
  if (gpu_usable(&why)) {
    CHECK(select_device(dl::DeviceChoice::cuda) == DeviceKind::cuda);
    CHECK(select_device(dl::DeviceChoice::automatic) == DeviceKind::cuda);
  } else {
    CHECK(select_device(dl::DeviceChoice::automatic) == DeviceKind::cpu);
#ifdef DL_HAVE_CUDA
    CHECK(why.find("no usable CUDA GPU") != std::string::npos);
#else
    CHECK(why.find("no CUDA backend") != std::string::npos);
#endif
    CHECK_THROWS_WITH_AS(select_device(dl::DeviceChoice::cuda), doctest::Contains(why.c_str()), dl::Error);
  }
  // One rank per online CPU, as the OS counts them, and never fewer than 2.
  CHECK(max_local_ranks() == std::max(2L, ::sysconf(_SC_NPROCESSORS_ONLN)));
}
