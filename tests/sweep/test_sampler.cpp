// The samplers without any process: the grid's order, seeded random and tpe draws repeat
// exactly, tpe only looks at the trials its batch may see, and tpe beats random search on a
// synthetic objective with a known optimum.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dl/sweep/sampler.hpp"
#include "dl/sweep/spec.hpp"

using namespace dl::sweep;

namespace {

Param log_uniform(const std::string& key, double lo, double hi) {
  Param p;
  p.key = key;
  p.distribution = Distribution::log_uniform;
  p.min = lo, p.max = hi;
  return p;
}

Param uniform(const std::string& key, double lo, double hi) {
  Param p = log_uniform(key, lo, hi);
  p.distribution = Distribution::uniform;
  return p;
}

Param choice(const std::string& key, std::vector<std::string> values) {
  Param p;
  p.key = key;
  p.distribution = Distribution::choice;
  p.values = std::move(values);
  return p;
}

SweepSpec space(Method m, uint64_t seed, int64_t trials) {
  SweepSpec s;
  s.method = m;
  s.seed = seed;
  s.trials = trials;
  s.startup = 10;
  s.batch = 1;
  s.params = {log_uniform("optim.lr", 1e-6, 1.0), uniform("optim.beta1", 0.0, 0.99),
              choice("optim.name", {"\"adamw\"", "\"sgd\"", "\"lion\""})};
  return s;
}

// Known optimum 0 at lr = 1e-3, beta1 = 0.7, adamw.
double objective(const std::vector<std::string>& v) {
  const double lr = std::stod(v[0]), b = std::stod(v[1]);
  const double c = v[2] == "\"adamw\"" ? 0.0 : v[2] == "\"sgd\"" ? 0.5 : 1.0;
  return std::pow(std::log10(lr) + 3, 2) + 10 * std::pow(b - 0.7, 2) + c;
}

// Runs a sequential study; returns every trial's parameters and the best value.
std::vector<std::vector<std::string>> study(const SweepSpec& s, double* best) {
  Sampler sampler(s);
  std::vector<Observation> obs;
  std::vector<std::vector<std::string>> trials;
  *best = INFINITY;
  for (int64_t i = 0; i < s.trials; ++i) {
    std::vector<Observation> visible(obs.begin(), obs.begin() + sampler.visible(i));
    auto v = sampler.suggest(i, visible);
    const double f = objective(v);
    *best = std::min(*best, f);
    obs.push_back({v, f});
    trials.push_back(v);
  }
  return trials;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST_CASE("grid: every combination once, the last parameter fastest") {
  SweepSpec s;
  s.method = Method::grid;
  Param a = choice("optim.lr", {"0.1", "0.2"}), b = choice("train.seed", {"1", "2", "3"});
  a.distribution = b.distribution = Distribution::values;
  s.params = {a, b};
  s.trials = 6;
  Sampler g(s);
  std::vector<std::vector<std::string>> got;
  for (int i = 0; i < 6; ++i) got.push_back(g.suggest(i, {}));
  CHECK(got == std::vector<std::vector<std::string>>{{"0.1", "1"}, {"0.1", "2"}, {"0.1", "3"},
                                                      {"0.2", "1"}, {"0.2", "2"}, {"0.2", "3"}});
}

TEST_CASE("random and tpe: the same seed gives the same trials, another seed others") {
  for (Method m : {Method::random, Method::tpe}) {
    CAPTURE(method_name(m));
    double b1 = 0, b2 = 0, b3 = 0;
    const auto first = study(space(m, 7, 30), &b1);
    const auto again = study(space(m, 7, 30), &b2);
    const auto other = study(space(m, 8, 30), &b3);
    CHECK(first == again);
    CHECK(b1 == b2);
    CHECK(first != other);
    // Values stay inside their bounds and are valid TOML literals of the choices.
    for (const auto& v : first) {
      CHECK(std::stod(v[0]) >= 1e-6);
      CHECK(std::stod(v[0]) <= 1.0);
      CHECK(std::stod(v[1]) >= 0.0);
      CHECK(std::stod(v[1]) <= 0.99);
      CHECK((v[2] == "\"adamw\"" || v[2] == "\"sgd\"" || v[2] == "\"lion\""));
    }
  }
}

TEST_CASE("tpe: a batch sees only the trials before it, so concurrency cannot change it") {
  SweepSpec s = space(Method::tpe, 3, 20);
  s.startup = 4;
  s.batch = 3;
  Sampler t(s);
  CHECK(t.visible(0) == 0);
  CHECK(t.visible(3) == 0);
  CHECK(t.visible(4) == 4);
  CHECK(t.visible(6) == 4);
  CHECK(t.visible(7) == 7);
  // The startup trials are random search's trials.
  SweepSpec r = s;
  r.method = Method::random;
  Sampler rs(r);
  for (int i = 0; i < 4; ++i) CHECK(t.suggest(i, {}) == rs.suggest(i, {}));
}

TEST_CASE("tpe beats random search's median best on a synthetic objective (21 seeds, 40 trials)") {
  std::vector<double> tpe, rnd;
  for (uint64_t seed = 0; seed < 21; ++seed) {
    double bt = 0, br = 0;
    study(space(Method::tpe, seed, 40), &bt);
    study(space(Method::random, seed, 40), &br);
    tpe.push_back(bt);
    rnd.push_back(br);
  }
  MESSAGE("median best: tpe " << median(tpe) << ", random " << median(rnd));
  CHECK(median(tpe) < median(rnd));
}

TEST_CASE("a sampled value's table cell: 4 significant digits shown, the full value kept for json and csv") {
  const dl::Cell lr = dl::sweep::value_cell("0.013172493938307108");
  CHECK(lr.text == "0.01317");  // the table showed 0.013172493938307108
  CHECK(std::get<double>(lr.value) == 0.013172493938307108);
  CHECK(dl::sweep::value_cell("3e-4").text == "0.0003");
  CHECK(dl::sweep::value_cell("2048").text == "2048");
  CHECK(dl::sweep::value_cell("\"sgd\"").text == "sgd");
  CHECK(std::holds_alternative<std::string>(dl::sweep::value_cell("\"sgd\"").value));
}
