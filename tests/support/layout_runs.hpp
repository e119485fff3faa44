// dl-train runs of one config under parallel layouts, read back as per-step curves (loss and
// gradient norm from --json stdout), and the single-process run they are compared with: what the
// layout tests of tests/parallel, tests/checkpoint and tests/train share.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

namespace dl::test {

// 20 steps of the layouts' GPT at lr 3e-3: the config every layout is compared on.
inline const std::string kLayoutGpt = layout_gpt({{"optim.lr", "3e-3"}, {"schedule.warmup_steps", "4"},
                                                  {"schedule.decay_steps", "20"}, {"train.steps", "20"}});

// Per-step training curves from --json stdout lines.
struct Curves {
  std::map<int64_t, double> loss, grad_norm;
  std::map<int64_t, double> val_loss;  // the evaluations' (the final one at least, with a val split)
};

inline Curves curves_of(const std::vector<std::string>& out_lines) {
  Curves c;
  for (const auto& l : out_lines) {
    if (l.empty() || l[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(l);
    if (j.contains("val_loss")) c.val_loss[j["step"].get<int64_t>()] = j["val_loss"].get<double>();
    if (!j.contains("loss")) continue;
    const int64_t step = j["step"].get<int64_t>();
    c.loss[step] = j["loss"].get<double>();
    // Every step record carries the norm; a non-finite one is written as null.
    REQUIRE_MESSAGE(j.contains("grad_norm"), l);
    c.grad_norm[step] = j["grad_norm"].is_number() ? j["grad_norm"].get<double>() : NAN;
  }
  return c;
}

// A resumed run's curves after the first part's: the steps must follow on.
inline void append(Curves& first, const Curves& rest) {
  REQUIRE(!rest.loss.empty());
  REQUIRE((first.loss.empty() || rest.loss.begin()->first == first.loss.rbegin()->first + 1));
  first.loss.insert(rest.loss.begin(), rest.loss.end());
  first.grad_norm.insert(rest.grad_norm.begin(), rest.grad_norm.end());
  first.val_loss = rest.val_loss;  // the first part's closing evaluation is no uninterrupted run's
}

struct Run : Curves {
  int code = -1;
  std::string err;
};

inline Run run_of(const RunResult& r) {
  Run out;
  static_cast<Curves&>(out) = curves_of(lines(r.out));
  out.code = r.exit_code;
  out.err = r.err;
  return out;
}

inline Run train(const fs::path& cfg, const fs::path& run_dir, int nproc, const std::vector<std::string>& sets,
                 const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = with_nproc({cfg.string(), "--run-dir", run_dir.string(), "--json"}, nproc, sets);
  args.insert(args.end(), extra.begin(), extra.end());
  return run_of(run(tool("dl-train"), args, "", {}, 300));
}

inline Run resume(const fs::path& run_dir, int nproc, const std::vector<std::string>& sets) {
  return run_of(run(tool("dl-train"), with_nproc({"--resume", run_dir.string(), "--json"}, nproc, sets), "", {}, 300));
}

// Infinite unless both curves have the same steps and every difference is finite.
inline double max_rel_diff(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (auto [s, v] : a) {
    auto it = b.find(s);
    if (it == b.end()) return INFINITY;
    const double d = std::fabs(v - it->second) / std::fabs(it->second);
    if (!std::isfinite(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

// The same steps and bits; NaN (a non-finite value logged as null) matches NaN.
inline bool identical(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.first == y.first && (x.second == y.second || (std::isnan(x.second) && std::isnan(y.second)));
  });
}

// Loss and gradient norm agree with `want` at every one of its steps, within `tol` relative
// (`norm_tol` for the norm, if given).
inline void check_curves(const std::string& name, const Curves& got, const Curves& want, double tol,
                         double norm_tol = 0) {
  const double dl = max_rel_diff(got.loss, want.loss), dg = max_rel_diff(got.grad_norm, want.grad_norm);
  MESSAGE(name << ": over " << got.loss.size() << " steps, max relative difference: loss " << dl << ", grad_norm "
               << dg);
  CHECK(dl < tol);
  CHECK(dg < (norm_tol > 0 ? norm_tol : tol));
  // The evaluation covers the same examples under every layout (train.eval_batches global
  // batches): dp=2 at batch 4 evaluated half of them before.
  const double dv = max_rel_diff(got.val_loss, want.val_loss);
  CHECK_MESSAGE(dv < tol, name << ": val_loss differs by " << dv << " (" << got.val_loss.size() << " evaluations, want "
                                << want.val_loss.size() << ")");
}

// The single-process reference, computed once per test binary.
inline const Curves& reference() {
  static Curves ref;
  static TempDir dir("layout-ref");
  if (ref.loss.empty()) {
    write_file(dir / "c.toml", kLayoutGpt);
    Run r = train(dir / "c.toml", dir / "run", 1, {});
    REQUIRE_MESSAGE(r.code == 0, r.err);
    REQUIRE(r.loss.size() == 20);
    ref = r;
  }
  return ref;
}

struct Layout {
  std::string name;
  int nproc;
  std::vector<std::string> sets;
};

// Trains `cfg` under each layout (runs in dir/run0, run1, ...) and checks its `steps` losses and
// gradient norms against `ref` within 1e-5.
inline void check_layouts(const fs::path& cfg, const fs::path& dir, const std::vector<Layout>& layouts,
                          const Curves& ref, size_t steps, const std::string& what = "") {
  int i = 0;
  for (const auto& l : layouts) {
    CAPTURE(l.name);
    Run r = train(cfg, dir / ("run" + std::to_string(i++)), l.nproc, l.sets);
    INFO(r.err);
    REQUIRE(r.code == 0);
    REQUIRE(r.loss.size() == steps);
    check_curves(what + l.name, r, ref, 1e-5);
  }
}


}  // namespace dl::test
