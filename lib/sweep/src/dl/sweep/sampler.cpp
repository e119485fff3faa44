#include "dl/sweep/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "dl/config/config.hpp"
#include "dl/core/error.hpp"
#include "dl/core/rng.hpp"

namespace dl::sweep {

namespace {

// A numeric parameter lives in an internal space where its prior is uniform: log x for
// log_uniform, [min - 0.5, max + 0.5] for integers (rounded on the way out).
struct Space {
  double lo = 0, hi = 1;
  bool log = false, integer = false;
};

Space space_of(const Param& p) {
  Space s;
  s.log = p.distribution == Distribution::log_uniform;
  s.integer = p.is_int;
  s.lo = s.log ? std::log(p.min) : p.min;
  s.hi = s.log ? std::log(p.max) : p.max;
  if (s.integer && !s.log) s.lo -= 0.5, s.hi += 0.5;
  return s;
}

double to_internal(const Space& s, double x) { return s.log ? std::log(x) : x; }

std::string from_internal(const Param& p, const Space& s, double y) {
  double x = s.log ? std::exp(y) : y;
  x = std::clamp(x, p.min, p.max);
  if (s.integer) return std::to_string(std::llround(x));
  return toml_float(x);
}

double phi(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// A one-dimensional Parzen estimator on [lo, hi]: truncated normals at the observations plus a
// prior (centre, width hi - lo) with Optuna's bandwidth rule (the larger gap to a neighbour,
// clipped to [(hi - lo) / min(100, 1 + n), hi - lo]).
struct Parzen {
  std::vector<double> mu, sigma, weight, log_norm;

  Parzen(std::vector<double> xs, const std::vector<double>& w_obs, double lo, double hi) {
    const double width = hi - lo;
    std::vector<size_t> order(xs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return xs[a] < xs[b]; });
    std::vector<double> sigmas(xs.size());
    for (size_t r = 0; r < order.size(); ++r) {
      const double x = xs[order[r]];
      const double left = r > 0 ? x - xs[order[r - 1]] : x - lo;
      const double right = r + 1 < order.size() ? xs[order[r + 1]] - x : hi - x;
      sigmas[order[r]] = std::max(left, right);
    }
    const double min_sigma = width / std::min(100.0, 1.0 + static_cast<double>(xs.size()));
    double total = 1.0;  // the prior's weight
    for (double w : w_obs) total += w;
    for (size_t i = 0; i < xs.size(); ++i) add(xs[i], std::clamp(sigmas[i], min_sigma, width), w_obs[i] / total, lo, hi);
    add(0.5 * (lo + hi), width, 1.0 / total, lo, hi);
  }

  void add(double m, double s, double w, double lo, double hi) {
    mu.push_back(m), sigma.push_back(s), weight.push_back(w);
    log_norm.push_back(std::log(std::max(phi((hi - m) / s) - phi((lo - m) / s), 1e-300)));
  }

  double log_pdf(double x) const {
    double best = -std::numeric_limits<double>::infinity();
    std::vector<double> terms(mu.size());
    for (size_t i = 0; i < mu.size(); ++i) {
      const double z = (x - mu[i]) / sigma[i];
      terms[i] = std::log(weight[i]) - 0.5 * z * z - std::log(sigma[i] * std::sqrt(2 * M_PI)) - log_norm[i];
      best = std::max(best, terms[i]);
    }
    double sum = 0;
    for (double t : terms) sum += std::exp(t - best);
    return best + std::log(sum);
  }

  double sample(RandomStream& rng, double lo, double hi) const {
    double u = rng.uniform(), acc = 0;
    size_t k = mu.size() - 1;
    for (size_t i = 0; i < mu.size(); ++i) {
      acc += weight[i];
      if (u < acc) {
        k = i;
        break;
      }
    }
    for (int tries = 0; tries < 1000; ++tries) {
      const double x = mu[k] + sigma[k] * rng.normal();
      if (x >= lo && x <= hi) return x;
    }
    return std::clamp(mu[k], lo, hi);
  }
};

// Optuna's default weights: equal below 25 observations, else the oldest ramp up to 1.
std::vector<double> observation_weights(size_t n) {
  std::vector<double> w(n, 1.0);
  if (n < 25) return w;
  const size_t ramp = n - 25;
  for (size_t i = 0; i < ramp; ++i)
    w[i] = ramp == 1 ? 1.0 / static_cast<double>(n) : 1.0 / static_cast<double>(n) +
                                                       (1.0 - 1.0 / static_cast<double>(n)) * static_cast<double>(i) /
                                                           static_cast<double>(ramp - 1);
  return w;
}

size_t index_of(const Param& p, const std::string& v) {
  for (size_t i = 0; i < p.values.size(); ++i)
    if (p.values[i] == v) return i;
  throw_runtime("sweep: value ", v, " of ", p.key, " is not one of its choices");
}

}  // namespace

int64_t Sampler::visible(int64_t trial) const {
  if (spec_.method != Method::tpe || trial < spec_.startup) return 0;
  return spec_.startup + (trial - spec_.startup) / spec_.batch * spec_.batch;
}

std::vector<std::string> Sampler::suggest(int64_t trial, const std::vector<Observation>& history) const {
  DL_CHECK(static_cast<int64_t>(history.size()) <= visible(trial), "trial ", trial, " sees ", history.size(),
           " observations, more than the ", visible(trial), " it may");
  switch (spec_.method) {
    case Method::grid: return grid_point(trial);
    case Method::random: return random_point(trial);
    case Method::tpe: return trial < spec_.startup || history.empty() ? random_point(trial) : tpe_point(trial, history);
  }
  return {};
}

std::vector<std::string> Sampler::grid_point(int64_t trial) const {
  // The last parameter varies fastest, like nested loops in the file's order.
  std::vector<std::string> v(spec_.params.size());
  int64_t rest = trial;
  for (size_t i = spec_.params.size(); i-- > 0;) {
    const auto& p = spec_.params[i];
    const auto n = static_cast<int64_t>(p.values.size());
    v[i] = p.values[static_cast<size_t>(rest % n)];
    rest /= n;
  }
  return v;
}

std::vector<std::string> Sampler::random_point(int64_t trial) const {
  // One stream per parameter keyed by its name: adding a parameter leaves the others' draws.
  std::vector<std::string> v;
  for (const auto& p : spec_.params) {
    const uint64_t key = stream_key(spec_.seed, "sweep/random/" + p.key);
    const auto i = static_cast<uint64_t>(trial);
    if (p.categorical()) {
      v.push_back(p.values[below_at(key, i, p.values.size())]);
    } else if (p.distribution == Distribution::int_uniform) {
      const auto span = static_cast<uint64_t>(p.max - p.min) + 1;
      v.push_back(std::to_string(static_cast<int64_t>(p.min) + static_cast<int64_t>(below_at(key, i, span))));
    } else {
      const Space s = space_of(p);
      v.push_back(from_internal(p, s, s.lo + uniform_at(key, i) * (s.hi - s.lo)));
    }
  }
  return v;
}

std::vector<std::string> Sampler::tpe_point(int64_t trial, const std::vector<Observation>& history) const {
  constexpr int kCandidates = 24;  // Optuna's n_ei_candidates
  // Best first (a diverged trial's non-finite metric is the worst); ties keep trial order.
  std::vector<size_t> order(history.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](size_t i) {
    const double m = history[i].metric;
    if (!std::isfinite(m)) return std::numeric_limits<double>::infinity();
    return spec_.goal == Goal::minimize ? m : -m;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  // Optuna's default gamma: the best ceil(0.1 n), at most 25, are "good".
  const size_t n_good = std::min<size_t>(25, static_cast<size_t>(std::ceil(0.1 * static_cast<double>(history.size()))));
  std::vector<size_t> good(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_good));
  std::vector<size_t> bad(order.begin() + static_cast<std::ptrdiff_t>(n_good), order.end());
  // Weights follow trial age (older trials weigh less past 25), so restore trial order.
  std::sort(good.begin(), good.end());
  std::sort(bad.begin(), bad.end());
  const auto w_good = observation_weights(good.size()), w_bad = observation_weights(bad.size());

  RandomStream rng(mix64(stream_key(spec_.seed, "sweep/tpe"), static_cast<uint64_t>(trial)));
  std::vector<std::vector<std::string>> cand(kCandidates, std::vector<std::string>(spec_.params.size()));
  std::vector<double> score(kCandidates, 0.0);
  for (size_t pi = 0; pi < spec_.params.size(); ++pi) {
    const Param& p = spec_.params[pi];
    if (p.categorical()) {
      // Smoothed counts: the prior's weight 1 spread over the choices plus each observation's weight.
      const size_t k = p.values.size();
      auto counts = [&](const std::vector<size_t>& idx, const std::vector<double>& w) {
        std::vector<double> c(k, 1.0 / static_cast<double>(k));
        double total = 1.0;
        for (size_t j = 0; j < idx.size(); ++j) c[index_of(p, history[idx[j]].values[pi])] += w[j], total += w[j];
        for (double& x : c) x /= total;
        return c;
      };
      const auto l = counts(good, w_good), g = counts(bad, w_bad);
      for (int c = 0; c < kCandidates; ++c) {
        double u = rng.uniform(), acc = 0;
        size_t pick = k - 1;
        for (size_t j = 0; j < k; ++j) {
          acc += l[j];
          if (u < acc) {
            pick = j;
            break;
          }
        }
        cand[c][pi] = p.values[pick];
        score[c] += std::log(l[pick]) - std::log(g[pick]);
      }
      continue;
    }
    const Space s = space_of(p);
    auto xs = [&](const std::vector<size_t>& idx) {
      std::vector<double> v;
      for (size_t j : idx) v.push_back(to_internal(s, std::stod(history[j].values[pi])));
      return v;
    };
    const Parzen l(xs(good), w_good, s.lo, s.hi), g(xs(bad), w_bad, s.lo, s.hi);
    for (int c = 0; c < kCandidates; ++c) {
      const double y = l.sample(rng, s.lo, s.hi);
      cand[c][pi] = from_internal(p, s, y);
      // Score the value actually used (rounded integers, clamped bounds).
      const double used = to_internal(s, std::stod(cand[c][pi]));
      score[c] += l.log_pdf(used) - g.log_pdf(used);
    }
  }
  const auto best = std::max_element(score.begin(), score.end()) - score.begin();
  return cand[static_cast<size_t>(best)];
}

}  // namespace dl::sweep
