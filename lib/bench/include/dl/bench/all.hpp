// dl-bench all: the machine's card, every benchmark at short sizes: gemm, memory, an all-reduce
// sweep over 2 ranks, and dl-train's step on a config (dl-train's built-in defaults without one).
#pragma once
#include <string>

#include "dl/bench/common.hpp"

namespace dl::bench {

struct AllOptions {
  std::string config_path;  // "" : dl-train's built-in defaults
  int nproc = 2;            // ranks of the all-reduce sweep
};

// The collective runs as ranks of this same program (`<this program> collective allreduce ...`
// through dlkit's launcher), so call it from dl-bench.
Report run_all(const AllOptions& options, const CommonOptions& common);

}  // namespace dl::bench
