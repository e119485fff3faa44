#include "dl/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include <cblas.h>

// OpenBLAS's pthread build starts one worker per core when it loads, and each worker spins on
// sched_yield for about 0.1 s (THREAD_TIMEOUT, 2^28 cycles) before it sleeps. dlkit runs OpenBLAS
// on one thread inside its own pool, so the workers are never used: stopping them gives the cores
// back (a tiny dl-train run: 0.20 s of CPU with them, 0.08 s without). Weak: the OpenMP and serial
// builds of libopenblas.so.0 (Debian's alternatives) do not export it, and then nothing is called.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));

#include "dl/core/error.hpp"
#include "dl/core/limits.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#define DL_PAUSE() _mm_pause()
#else
#define DL_PAUSE() std::this_thread::yield()
#endif

namespace dl {

namespace {

// Workers spin briefly on the job generation (loops come in quick succession inside a step),
// then sleep on a condition variable, so an idle pool costs no CPU.
class Pool {
 public:
  explicit Pool(int threads) {
    try {
      for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::system_error& e) {  // the process's thread limit (ulimit -u, pids.max)
      const int started = size();
      stop_workers();
      throw_runtime("could not start CPU thread ", started + 1, " of ", threads, " (", e.what(),
                    "): lower train.threads or DL_NUM_THREADS to what this machine allows");
    }
  }
  ~Pool() { stop_workers(); }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard<std::mutex> lock(run_mutex_);  // one parallel loop at a time
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    next_.store(0);
    busy_.store(static_cast<int>(workers_.size()));
    publish();
    drain();
    while (busy_.load(std::memory_order_acquire) != 0) DL_PAUSE();
  }

 private:
  void stop_workers() {
    stop_.store(true);
    publish();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }
  void publish() {
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    if (sleepers_.load() > 0) wake_.notify_all();
  }
  void drain() {
    for (;;) {
      int64_t lo = next_.fetch_add(chunk_);
      if (lo >= n_) return;
      (*fn_)(lo, std::min(n_, lo + chunk_));
    }
  }
  void work() {
    // Generation 0 is the pool's birth; a job may be published before this thread first runs.
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      int spins = 0;
      while ((g = generation_.load(std::memory_order_acquire)) == seen) {
        if (++spins < 4000) {
          DL_PAUSE();
        } else {
          std::unique_lock<std::mutex> lock(sleep_mutex_);
          sleepers_.fetch_add(1);
          wake_.wait(lock, [&] { return generation_.load() != seen; });
          sleepers_.fetch_sub(1);
        }
      }
      seen = g;
      if (stop_.load()) return;
      drain();
      busy_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> next_{0};
  std::atomic<int> busy_{0};
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
};

int default_threads() {
  if (const int n = env_thread_count(); n > 0) return n;
  return std::max(1u, std::thread::hardware_concurrency());
}

void single_threaded_blas() {
  openblas_set_num_threads(1);
  if (blas_thread_shutdown_) blas_thread_shutdown_();
}
// At start-up too, not only when the first pool is made: the workers would spin while the program
// reads its config and data. (libopenblas, a dependency, is initialized before this program.)
[[maybe_unused]] const bool g_blas_at_start = (single_threaded_blas(), true);

std::mutex g_pool_mutex;
std::unique_ptr<Pool> g_pool;
int g_threads = 0;

Pool& pool() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pool) {
    if (g_threads <= 0) g_threads = default_threads();
    g_pool = std::make_unique<Pool>(g_threads);
    single_threaded_blas();
  }
  return *g_pool;
}

}  // namespace

void set_num_threads(int n) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  g_threads = n > 0 ? check_thread_count(n, "the thread count") : default_threads();
  g_pool.reset();
  g_pool = std::make_unique<Pool>(g_threads);
  single_threaded_blas();
}

int num_threads() { return pool().size(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Pool& p = pool();
  if (p.size() == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balance uneven work without much claiming overhead.
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, static_cast<int64_t>(p.size()) * 4);
  int64_t chunk = (n + chunks - 1) / chunks;
  p.run(n, chunk, fn);
}

double parallel_sum(int64_t n, int64_t block, const std::function<double(int64_t, int64_t)>& fn) {
  if (n <= 0) return 0.0;
  block = std::max<int64_t>(block, 1);
  int64_t blocks = (n + block - 1) / block;
  std::vector<double> partial(static_cast<size_t>(blocks));
  parallel_for(blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) partial[b] = fn(b * block, std::min(n, (b + 1) * block));
  });
  double s = 0.0;
  for (double x : partial) s += x;
  return s;
}

}  // namespace dl
