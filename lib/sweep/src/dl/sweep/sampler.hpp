// Where a sweep's trials come from: the grid's points in order, seeded random draws, or a
// tree-structured Parzen estimator (Bergstra et al. 2011, as Optuna's TPESampler: observations
// split at the gamma quantile into good and bad, a Parzen estimator per parameter for each, the
// candidate drawn from the good one that maximises l(x)/g(x)). Pure functions of the spec, the
// trial index and the observations it may see, so a sweep is reproducible and testable without
// running any process.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dl/sweep/spec.hpp"

namespace dl::sweep {

// A finished trial as the sampler sees it: its parameters (TOML literals, one per spec param)
// and its metric (non-finite for a diverged trial: the worst possible).
struct Observation {
  std::vector<std::string> values;
  double metric = 0;
};

class Sampler {
 public:
  explicit Sampler(const SweepSpec& spec) : spec_(spec) {}

  // Observations trial `trial` is allowed to see: those of trials [0, visible(trial)). Random
  // and grid trials see none; tpe trial i >= startup sees every trial before its batch, so the
  // same trials come out whatever order or concurrency the earlier ones finished in.
  int64_t visible(int64_t trial) const;

  // Trial `trial`'s parameters (TOML literals, one per spec.params); `history` holds the
  // observations of the trials [0, visible(trial)) that have a metric (failed ones have none),
  // in trial order.
  std::vector<std::string> suggest(int64_t trial, const std::vector<Observation>& history) const;

 private:
  std::vector<std::string> grid_point(int64_t trial) const;
  std::vector<std::string> random_point(int64_t trial) const;
  std::vector<std::string> tpe_point(int64_t trial, const std::vector<Observation>& history) const;

  const SweepSpec& spec_;
};

}  // namespace dl::sweep
