// A small fixed thread pool for element-wise and reduction loops. GEMMs use OpenBLAS's own
// threads; set_num_threads() sets both so the two never oversubscribe the cores.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace dl {

// Threads used by parallel loops and by BLAS. n <= 0 means DL_NUM_THREADS, else all hardware
// threads; more than max_threads() (core/limits.hpp), from n or DL_NUM_THREADS, is a usage error.
void set_num_threads(int n);
int num_threads();

// Calls fn(lo, hi) over [0, n) split into chunks of at least `grain` elements, on the pool.
// Chunks are contiguous and each element is visited once; chunk-to-thread mapping is dynamic.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Deterministic blocked reduction: [0, n) is cut into fixed blocks of `block` elements
// (independent of the thread count), fn(lo, hi) returns each block's partial, and the partials
// are summed in block order. The same inputs give the same bits with 1 or 16 threads.
double parallel_sum(int64_t n, int64_t block, const std::function<double(int64_t, int64_t)>& fn);

}  // namespace dl
