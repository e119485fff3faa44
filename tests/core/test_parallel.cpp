// The thread pool: parallel_for covers each element once on any pool size, and parallel_sum's
// bits do not depend on the thread count.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dl/core/parallel.hpp"

using namespace dl;

namespace {

// Restores the pool's size when a test ends.
struct PoolSizeGuard {
  int saved = num_threads();
  ~PoolSizeGuard() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("set_num_threads sizes the pool; parallel_for visits every element once on 1 to 4 threads") {
  PoolSizeGuard guard;
  for (int t = 1; t <= 4; ++t) {
    CAPTURE(t);
    set_num_threads(t);
    CHECK(num_threads() == t);
    std::vector<int> visits(100003, 0);
    parallel_for(static_cast<int64_t>(visits.size()), 1000, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) ++visits[static_cast<size_t>(i)];
    });
    int wrong = 0;
    for (int v : visits) wrong += v != 1;
    CHECK(wrong == 0);
  }
}

TEST_CASE("parallel_sum: the partials of fixed blocks summed in block order, the same bits on 1 to 4 threads") {
  PoolSizeGuard guard;
  const int64_t n = 1000003, block = 4096;
  std::vector<double> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(0.001 * static_cast<double>(i)) * 1e3 + 1e-7 * i;
  auto partial = [&](int64_t lo, int64_t hi) {
    double s = 0;
    for (int64_t i = lo; i < hi; ++i) s += x[static_cast<size_t>(i)];
    return s;
  };
  double by_hand = 0;
  for (int64_t lo = 0; lo < n; lo += block) by_hand += partial(lo, std::min(n, lo + block));
  for (int t = 1; t <= 4; ++t) {
    CAPTURE(t);
    set_num_threads(t);
    const double s = parallel_sum(n, block, partial);
    CHECK(std::memcmp(&s, &by_hand, sizeof s) == 0);
  }
}
