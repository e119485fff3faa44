// The harness that runs backend-ops' cases (op_case.hpp): `test` compares every case with the f64
// CPU reference, `perf` times it. Both print one line per case, dtype and backend on stdout.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "op_case.hpp"

namespace dl::ops {

struct NamedBackend {
  std::string name;  // "cpu", "cuda"
  Backend* backend;
};
// The backends this build and machine have, by the library's device selection (train.device =
// auto): the CPU always, the CUDA backend when built and a device answers. `why_not` says why
// CUDA is not among them (empty when it is).
std::vector<NamedBackend> available_backends(std::string& why_not);

struct Filter {
  std::vector<std::string> ops;       // empty: every op
  std::vector<std::string> backends;  // empty: every available backend
  bool wants_op(const std::string& op) const;
  bool wants_backend(const std::string& name) const;
};

// Each case on each backend in each of its dtypes against the reference, then each backward
// case's gradient against central differences (dtype f64, backend cpu): op, params, dtype,
// backend, the worst output's norm-relative and largest element error, OK or FAIL (and why).
struct TestTotals {
  int run = 0, failed = 0;
  int gradients = 0;  // of `run`: the backward ops' checks against central differences
};
TestTotals run_test(const std::vector<Case>& cases, const std::vector<NamedBackend>& backends, const Filter& filter,
             std::ostream& out);

struct PerfOptions {
  int warmup = 2;
  int min_repeats = 3, max_repeats = 20;
  double budget_s = 1.0;  // per case and dtype: repeats stop after this (min_repeats at least)
};
// TSV: op, params, dtype, backend, repeats, median microseconds per call, GFLOP/s (ops with a
// FLOP count) or GB/s (the rest: every tensor read once, outputs written once, in-place twice).
void run_perf(const std::vector<Case>& cases, const std::vector<NamedBackend>& backends, const Filter& filter,
              const PerfOptions& options, std::ostream& out);

}  // namespace dl::ops
