// A small fixed thread pool for element-wise loops, reductions and GEMMs. OpenBLAS runs on one
// thread: the CPU backend cuts a GEMM into tiles fixed by its shape and runs them on this pool,
// since OpenBLAS's own threads sum in an order that depends on their count.
//
// Every result computed on the pool is the same bits for any thread count: work is cut into
// pieces whose bounds do not depend on it (fixed blocks, rows, tiles), each output written by
// one piece, and partial results combined in a fixed order (parallel_sum).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace dl {

// Threads used by parallel loops (BLAS stays at one). n <= 0: DL_NUM_THREADS, else all hardware
// threads; more than max_threads() (core/limits.hpp), from n or DL_NUM_THREADS, is a usage error.
void set_num_threads(int n);
int num_threads();

// Calls fn(lo, hi) over [0, n) split into chunks of at least `grain` elements, on the pool.
// Chunks are contiguous and each element is visited once; chunk-to-thread mapping is dynamic, and
// chunk bounds depend on the thread count: fn must compute each element alone (no state carried
// from one element to the next that changes a result), never accumulate across its chunk.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Deterministic blocked reduction: [0, n) is cut into fixed blocks of `block` elements
// (independent of the thread count), fn(lo, hi) returns each block's partial, and the partials
// are summed in block order. The same inputs give the same bits with 1 or 16 threads.
double parallel_sum(int64_t n, int64_t block, const std::function<double(int64_t, int64_t)>& fn);

}  // namespace dl
