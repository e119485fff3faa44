// Early stopping by successive halving with rungs at min_steps x eta^k (ASHA's rungs and keep
// rate; Li et al. 2020): of the trials that reach rung k, the best max(1, floor(n / eta))
// continue to rung k+1, the others stop.
//
// Deterministic by construction: a trial is promoted as soon as it is certain to be in that top
// set whatever the trials still running at rung k report (fewer than `keep` trials can beat it),
// and stopped once every trial's rung-k outcome is known. So promotions start before a rung is
// complete, as in ASHA, but never speculatively: the decisions are a pure function of the
// results, identical for --jobs 1, --jobs 4 and a resumed sweep. ASHA's speculative rule (top
// 1/eta of the trials seen so far) depends on arrival order and, on the 9-point learning-rate grid
// of the tests, trained 58% of the grid's steps against 26% here (docs/SWEEPS.md).
#pragma once
#include <cstdint>
#include <vector>

#include "dl/sweep/spec.hpp"

namespace dl::sweep {

struct TrialProgress {
  std::vector<double> results;  // the metric at rungs 0 .. results.size()-1 (non-finite: diverged)
  bool ended = false;           // failed or diverged: reaches no further rung
};

struct AshaDecision {
  std::vector<int> target;     // per trial: the rung it is to train to
  std::vector<bool> stopped;   // per trial: at its last rung for good (stopped early or ended)
};

// `trials` has one entry per trial of the sweep (trials not started yet: no results, not ended).
AshaDecision asha_decide(const std::vector<TrialProgress>& trials, int rungs, int64_t eta, Goal goal);

// What a sweep trains, in optimizer steps summed over trials. Without early stopping: trials x
// steps. With asha the rule fixes how many trials reach each rung, so the budget does not depend
// on the results: worst and expected are equal unless trials fail, which only lowers it.
// `expected` and `worst` are kept apart for the pricing (dl-cost estimate) all the same.
struct StepBudget {
  int64_t trials = 0;
  int64_t steps_per_trial = 0;  // a trial that is never stopped
  double worst = 0;
  double expected = 0;
  std::vector<int64_t> rungs;   // asha's rungs (steps), empty without early stopping
};
StepBudget step_budget(const SweepSpec& spec);

}  // namespace dl::sweep
