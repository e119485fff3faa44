// The machine's OpenBLAS sgemm peak: the best GFLOP/s over square sizes, median of repeats,
// with the thread count given (the training benchmark compares against this); with a size N, that
// size alone (the plain reference dl-bench gemm is compared with).
// Usage: bench_sgemm_peak [THREADS [N]]   -> one JSON line on stdout
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cblas.h>

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  if (threads > 0) openblas_set_num_threads(threads);
  const int only = argc > 2 ? std::atoi(argv[2]) : 0;
  const std::vector<int> sizes = only > 0 ? std::vector<int>{only} : std::vector<int>{512, 1024, 2048, 3072};
  double best = 0, best_time = 0;
  int best_n = 0;
  for (int n : sizes) {
    std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = float((i * 7919) % 1000) / 1000.0f - 0.5f;
      b[i] = float((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    const double flop = 2.0 * n * n * n;
    int reps = std::max(3, int(4e10 / flop));
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      auto t1 = std::chrono::steady_clock::now();
      if (r) t.push_back(std::chrono::duration<double>(t1 - t0).count());  // first run warms up
    }
    std::sort(t.begin(), t.end());
    double gflops = flop / t[t.size() / 2] / 1e9;
    if (gflops > best) {
      best = gflops;
      best_n = n;
      best_time = t[t.size() / 2];
    }
  }
  std::printf("{\"sgemm_gflops\": %.2f, \"n\": %d, \"time_s\": %.9f, \"threads\": %d}\n", best, best_n, best_time,
              openblas_get_num_threads());
  return 0;
}
