// The early-stopping rule without any process: rungs, who continues, that the decisions do not
// depend on the order results arrive in, and the step budget.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "dl/sweep/asha.hpp"

using namespace dl::sweep;

TEST_CASE("rungs at min_steps x eta^k, ending at max_steps") {
  CHECK(Asha{10, 3, 90}.rungs() == std::vector<int64_t>{10, 30, 90});
  CHECK(Asha{10, 3, 100}.rungs() == std::vector<int64_t>{10, 30, 90, 100});
  CHECK(Asha{10, 2, 10}.rungs() == std::vector<int64_t>{10});
}

TEST_CASE("rungs up to the largest max_steps stop before eta^k overflows") {
  const int64_t top = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> r = Asha{1, 3, top}.rungs();
  CHECK(r.size() == 41);  // 3^0 .. 3^39, then max_steps
  CHECK(r[39] == 4052555153018976267);
  CHECK(r.back() == top);
  CHECK(std::is_sorted(r.begin(), r.end()));
  CHECK(Asha{2, top, top}.rungs() == std::vector<int64_t>{2, top});
}

TEST_CASE("the top 1/eta continue from each rung, the rest stop once the rung is complete") {
  const std::vector<double> r0 = {5, 3, 9, 1, 7, 2, 8, 6, 4};  // trial 3, 5, 1 are the best three
  std::vector<TrialProgress> t(9);
  for (size_t i = 0; i < 9; ++i) t[i].results = {r0[i]};
  AshaDecision d = asha_decide(t, 3, 3, Goal::minimize);
  for (size_t i = 0; i < 9; ++i) {
    CAPTURE(i);
    const bool top = i == 3 || i == 5 || i == 1;
    CHECK(d.target[i] == (top ? 1 : 0));
    CHECK(d.stopped[i] == !top);
  }
  // Rung 1: of the three, the best one goes on to the last rung.
  t[1].results.push_back(0.5), t[3].results.push_back(0.9), t[5].results.push_back(0.7);
  d = asha_decide(t, 3, 3, Goal::minimize);
  CHECK(d.target[1] == 2);
  CHECK(d.target[3] == 1);
  CHECK(d.stopped[3]);
  CHECK_FALSE(d.stopped[1]);
  // maximize flips the order.
  std::vector<TrialProgress> m(3);
  for (size_t i = 0; i < 3; ++i) m[i].results = {double(i)};
  d = asha_decide(m, 2, 3, Goal::maximize);
  CHECK(d.target == std::vector<int>{0, 0, 1});
}

TEST_CASE("a trial is promoted before its rung completes only when no pending result can oust it") {
  std::vector<TrialProgress> t(9);
  // 6 of 9 results in: keep >= 2; with 3 pending, nobody is certain yet.
  for (size_t i = 0; i < 6; ++i) t[i].results = {double(i)};
  AshaDecision d = asha_decide(t, 2, 3, Goal::minimize);
  CHECK(std::count(d.target.begin(), d.target.end(), 1) == 0);
  CHECK(std::none_of(d.stopped.begin(), d.stopped.end(), [](bool b) { return b; }));
  // 8 in, 1 pending, keep >= 2: trial 0 is certain (at most one can beat it).
  for (size_t i = 6; i < 8; ++i) t[i].results = {double(i)};
  d = asha_decide(t, 2, 3, Goal::minimize);
  CHECK(d.target[0] == 1);
  CHECK(d.target[1] == 0);
  // A failed trial counts as known; a diverged one (non-finite) is never promoted.
  t[8].ended = true;
  t[0].results = {NAN};
  t[0].ended = true;
  d = asha_decide(t, 2, 3, Goal::minimize);
  CHECK(d.target[0] == 0);
  CHECK(d.target[1] == 1);
  CHECK(d.target[2] == 1);
  CHECK(d.stopped[3]);
}

TEST_CASE("the decisions depend on the results, not on the order they arrived in") {
  const std::vector<double> r0 = {5, 3, 9, 1, 7, 2, 8, 6, 4};
  std::vector<size_t> order(9);
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> first;
  int perms = 0;
  do {
    if (++perms % 997) continue;  // a spread of the 9! arrival orders
    std::vector<TrialProgress> t(9);
    std::vector<int> promoted_when_complete;
    for (size_t step = 0; step < 9; ++step) {
      t[order[step]].results = {r0[order[step]]};
      AshaDecision d = asha_decide(t, 2, 3, Goal::minimize);
      // Only trials of the final top 3 are ever promoted, whatever the order.
      for (size_t i = 0; i < 9; ++i)
        if (d.target[i] == 1) CHECK((i == 1 || i == 3 || i == 5));
      if (step == 8) promoted_when_complete = d.target;
    }
    if (first.empty()) first = promoted_when_complete;
    CHECK(promoted_when_complete == first);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST_CASE("step budget: what the rule trains, against trials x steps without early stopping") {
  SweepSpec s;
  s.trials = 9;
  s.base_steps = 90;
  StepBudget none = step_budget(s);
  CHECK(none.worst == 810);
  CHECK(none.expected == 810);
  s.asha = Asha{10, 3, 90};
  StepBudget b = step_budget(s);
  // 9 x 10 + 3 x 30 more... as steps trained in total: 6 x 10 + 2 x 30 + 1 x 90.
  CHECK(b.expected == 6 * 10 + 2 * 30 + 1 * 90);
  CHECK(b.worst == b.expected);
  CHECK(b.rungs == std::vector<int64_t>{10, 30, 90});
}
