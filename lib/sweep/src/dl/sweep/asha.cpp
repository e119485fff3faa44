#include "dl/sweep/asha.hpp"

#include <algorithm>
#include <functional>
#include <cmath>
#include <limits>


namespace dl::sweep {

AshaDecision asha_decide(const std::vector<TrialProgress>& trials, int rungs, int64_t eta, Goal goal) {
  const size_t n = trials.size();
  AshaDecision d;
  d.target.assign(n, 0);
  d.stopped.assign(n, false);
  // Smaller is better after this; a non-finite result (diverged) is the worst.
  auto badness = [&](double v) {
    if (!std::isfinite(v)) return std::numeric_limits<double>::infinity();
    return goal == Goal::minimize ? v : -v;
  };
  std::vector<bool> complete(static_cast<size_t>(rungs), false);
  for (int k = 0; k + 1 < rungs; ++k) {
    const auto kk = static_cast<size_t>(k);
    const bool prev_complete = k == 0 || complete[kk - 1];
    std::vector<size_t> results;  // trials with a rung-k result
    size_t unknown = 0;           // trials that may still bring one
    for (size_t j = 0; j < n; ++j) {
      const TrialProgress& t = trials[j];
      if (t.results.size() > kk) results.push_back(j);
      else if (t.ended || (d.target[j] < k && prev_complete)) continue;  // never reaches rung k
      else ++unknown;
    }
    complete[kk] = unknown == 0;
    if (results.empty()) continue;
    // However the unknown trials turn out, at least this many continue from rung k.
    const size_t keep = std::max<size_t>(1, results.size() / static_cast<size_t>(eta));
    std::vector<size_t> ranked = results;
    std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) {
      return badness(trials[a].results[kk]) < badness(trials[b].results[kk]);
    });
    // The trial at rank r (r trials are better) is in the final top `keep` even if every
    // unknown trial beats it: r + unknown < keep.
    for (size_t r = 0; r + unknown < keep && r < ranked.size(); ++r) {
      const TrialProgress& t = trials[ranked[r]];
      if (std::isfinite(t.results[kk]) && !t.ended) d.target[ranked[r]] = k + 1;
    }
  }
  for (size_t j = 0; j < n; ++j) {
    const TrialProgress& t = trials[j];
    const int reached = static_cast<int>(t.results.size()) - 1;
    d.stopped[j] = t.ended || reached == rungs - 1 ||
                   (reached >= 0 && reached == d.target[j] && complete[static_cast<size_t>(reached)]);
  }
  return d;
}

namespace {

// Steps all trials train when every rung's results come in the order `value(trial, rung)` gives.
double simulate(int64_t n, const std::vector<int64_t>& rungs, int64_t eta, const std::function<double(int64_t, int)>& value) {
  std::vector<TrialProgress> t(static_cast<size_t>(n));
  const int r = static_cast<int>(rungs.size());
  for (;;) {
    AshaDecision d = asha_decide(t, r, eta, Goal::minimize);
    bool changed = false;
    for (int64_t j = 0; j < n; ++j) {
      auto& tr = t[static_cast<size_t>(j)];
      while (static_cast<int>(tr.results.size()) <= d.target[static_cast<size_t>(j)]) {
        tr.results.push_back(value(j, static_cast<int>(tr.results.size())));
        changed = true;
      }
    }
    if (!changed) break;
  }
  double steps = 0;
  for (const auto& tr : t) steps += static_cast<double>(rungs[tr.results.size() - 1]);
  return steps;
}

}  // namespace

StepBudget step_budget(const SweepSpec& spec) {
  StepBudget b;
  b.trials = spec.trials;
  b.steps_per_trial = spec.full_steps();
  if (!spec.asha) {
    b.worst = b.expected = static_cast<double>(b.trials) * static_cast<double>(b.steps_per_trial);
    return b;
  }
  b.rungs = spec.asha->rungs();
  // Any results do: the rule fixes how many trials reach each rung.
  b.expected = b.worst = simulate(b.trials, b.rungs, spec.asha->eta, [](int64_t j, int) { return static_cast<double>(j); });
  return b;
}

}  // namespace dl::sweep
