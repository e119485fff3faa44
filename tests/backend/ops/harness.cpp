#include "harness.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>

#include "dl/core/error.hpp"
#include "dl/core/half.hpp"
#include "dl/core/rng.hpp"
#include "dl/device/select.hpp"

#ifdef DL_HAVE_CUDA
#include "dl/device/cuda/cuda_backend.hpp"
#endif

namespace dl::ops {

Arg in(std::string name, Shape shape, double lo, double hi) {
  Arg a(std::move(name), std::move(shape));
  a.lo = lo;
  a.hi = hi;
  return a;
}
Arg out(std::string name, Shape shape) {
  Arg a(std::move(name), std::move(shape));
  a.role = Role::out;
  return a;
}
Arg inout(std::string name, Shape shape, double lo, double hi) {
  Arg a = in(std::move(name), std::move(shape), lo, hi);
  a.role = Role::inout;
  return a;
}
Arg ids(std::string name, Shape shape, int64_t n, double ignored, Role role) {
  Arg a(std::move(name), std::move(shape));
  a.role = role;
  a.type = Type::i32;
  a.ids = n;
  a.ignored = ignored;
  a.host = true;
  return a;
}

Tensor& Env::operator[](const std::string& name) {
  auto it = t.find(name);
  if (it == t.end()) throw_runtime("backend-ops: the case has no tensor '", name, "'");
  return it->second;
}

std::vector<NamedBackend> available_backends(std::string& why_not) {
  Config auto_device;
  auto_device.train.device = DeviceChoice::automatic;
  std::vector<NamedBackend> bes{{"cpu", &cpu_backend()}};
  Backend& chosen = select_backend(auto_device, false);
  if (&chosen != &cpu_backend()) {
    bes.push_back({chosen.name(), &chosen});
    why_not.clear();
  } else {
#ifdef DL_HAVE_CUDA
    why_not = "no usable CUDA device (" + cuda_probe().reason + ")";
#else
    why_not = "this build has no CUDA backend";
#endif
  }
  return bes;
}

bool Filter::wants_op(const std::string& op) const {
  return ops.empty() || std::find(ops.begin(), ops.end(), op) != ops.end();
}
bool Filter::wants_backend(const std::string& name) const {
  return backends.empty() || std::find(backends.begin(), backends.end(), name) != backends.end();
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int32_t kIntPoison = -7;

DType dtype_of(const Arg& a, DType dt) {
  switch (a.type) {
    case Type::op: return dt;
    case Type::f32: return DType::f32;
    case Type::i32: return DType::i32;
    case Type::loss: return is_16bit_float(dt) ? DType::f32 : dt;
    case Type::other: return dt == DType::bf16 ? DType::f16 : DType::bf16;
  }
  return dt;
}

// The values of one arg on the host: f64 rounded to its dtype on the tested backend (i32 as is).
// Each (case, arg) has its own key, so the reference and the backend get the same values.
Tensor host_values(const Arg& a, DType dt, uint64_t key) {
  const DType want = dtype_of(a, dt);
  if (want == DType::i32) {
    Tensor t = Tensor::empty(a.shape, DType::i32);
    int32_t* p = t.data<int32_t>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (a.role == Role::out) {
        p[i] = kIntPoison;
        continue;
      }
      const double u = uniform_at(key, static_cast<uint64_t>(2 * i));
      p[i] = static_cast<int32_t>(std::min<int64_t>(a.ids - 1, static_cast<int64_t>(u * double(a.ids))));
      if (a.ignored > 0 && uniform_at(key, static_cast<uint64_t>(2 * i + 1)) < a.ignored) p[i] = -1;
    }
    return t;
  }
  Tensor exact = Tensor::empty(a.shape, DType::f64);
  double* p = exact.data<double>();
  for (int64_t i = 0; i < exact.numel(); ++i) {
    const double u = a.lo + (a.hi - a.lo) * uniform_at(key, static_cast<uint64_t>(i));
    p[i] = a.role == Role::out ? kNaN : a.fill ? a.fill(i, u) : u;
  }
  Tensor narrow = Tensor::empty(a.shape, want), rounded = Tensor::empty(a.shape, DType::f64);
  convert_host(narrow, exact);
  convert_host(rounded, narrow);
  return rounded;
}

// A host tensor (f64 or i32) onto `be` in dtype `dt` (on the host when `host`).
Tensor place(Backend& be, const Tensor& values, DType dt, bool host) {
  Tensor narrow = values;
  if (dt != values.dtype()) {
    narrow = Tensor::empty(values.shape(), dt);
    convert_host(narrow, values);
  }
  if (host || be.device().is_cpu()) return narrow.dtype() == values.dtype() ? narrow.clone() : narrow;
  Tensor dev = be.empty(values.shape(), dt);
  be.copy(dev, narrow);
  return dev;
}

// A tensor of `be` back on the host: f64 for floats, i32 as is.
Tensor fetch(Backend& be, const Tensor& t) {
  Tensor host = t;
  if (!t.device().is_cpu()) {
    host = Tensor::empty(t.shape(), t.dtype());
    be.copy(host, t);
  }
  if (t.dtype() == DType::i32) return host.clone();
  Tensor wide = Tensor::empty(t.shape(), DType::f64);
  convert_host(wide, host);
  return wide;
}

struct Run {
  Env tested, ref;
};

// The case's tensors on the tested backend (values rounded to each arg's dtype, outputs poisoned)
// and, when `ref` is given, the same values in f64 for the reference. Each (case, arg) has its own
// key, so both get the same values. Returns the bytes the args take on the tested backend.
double fill_args(const Case& c, size_t case_index, Env& tested, Env* ref) {
  double bytes = 0;
  for (size_t i = 0; i < c.args.size(); ++i) {
    const Arg& a = c.args[i];
    const Tensor values = host_values(a, tested.dtype, 0xB0E5ull * 1000003ull + case_index * 64 + i);
    const DType want = dtype_of(a, tested.dtype);
    tested.t[a.name] = place(tested.be, values, want, a.host);
    tested.declared[a.name] = want;
    bytes += double(values.numel()) * double(dtype_size(want));
    if (ref) {
      ref->t[a.name] = values;
      ref->declared[a.name] = want;
    }
  }
  return bytes;
}

// Both Envs of one case in one dtype, set up (and the shared tensors copied into the reference).
Run prepare(const Case& c, size_t case_index, Backend& be, DType dt) {
  Run r{Env(be, dt, false), Env(cpu_backend(), dt, true)};
  fill_args(c, case_index, r.tested, &r.ref);
  if (c.setup) {
    c.setup(r.tested);
    c.setup(r.ref);
    for (const std::string& name : c.shared) r.ref.t[name] = fetch(be, r.tested[name]);
  }
  return r;
}

struct Errors {
  double rel = 0, elem = 0;  // norm-relative, and largest element error over max |ref|
  int64_t bad = 0;           // elements NaN, or Inf where the reference is not the same Inf
  int64_t wrong_ints = 0;    // i32 outputs that differ
};

Errors compare(const Tensor& got, const Tensor& ref, const Tensor* start) {
  Errors e;
  if (ref.dtype() == DType::i32) {
    for (int64_t i = 0; i < ref.numel(); ++i) e.wrong_ints += got.data<int32_t>()[i] != ref.data<int32_t>()[i];
    return e;
  }
  const double* g = got.data<double>();
  const double* r = ref.data<double>();
  const double* s = start ? start->data<double>() : nullptr;
  double num = 0, den = 0, maxerr = 0, maxref = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double gv = g[i], rv = r[i];
    if (!std::isfinite(rv) || !std::isfinite(gv)) {
      // NaN is never an answer here (the poison, or the reference's own op left an element
      // unwritten); Inf is, where the reference has it too (f16 overflow).
      e.bad += std::isnan(rv) || gv != rv;
      continue;
    }
    if (s) {
      gv -= s[i];
      rv -= s[i];
    }
    num += (gv - rv) * (gv - rv);
    den += rv * rv;
    maxerr = std::max(maxerr, std::fabs(gv - rv));
    maxref = std::max(maxref, std::fabs(rv));
  }
  e.rel = num == 0 ? 0 : std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
  e.elem = maxerr == 0 ? 0 : maxerr / std::max(maxref, 1e-300);
  return e;
}

// How far past its tolerance an error is (> 1: fails).
double ratio(double err, double tol) { return err == 0 ? 0 : tol == 0 ? std::numeric_limits<double>::infinity() : err / tol; }

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s;
}

struct Verdict {
  bool ok = true;
  double rel = 0, elem = 0;
  std::string worst;  // the output with the largest error against its tolerance
  std::string why;    // what failed
};

void judge(Verdict& v, const std::string& what, const Errors& e, const Tol& tol) {
  if (e.bad > 0 || e.wrong_ints > 0) {
    v.ok = false;
    if (!v.why.empty()) v.why += "; ";
    v.why += e.bad ? what + ": " + std::to_string(e.bad) + " elements NaN/Inf (unwritten?) here or in the reference"
                   : what + ": " + std::to_string(e.wrong_ints) + " indices differ";
  }
  const double r = std::max(ratio(e.rel, tol.rel), ratio(e.elem, tol.elem));
  const double worst = std::max(ratio(v.rel, tol.rel), ratio(v.elem, tol.elem));
  if (v.worst.empty() || r > worst) {
    v.rel = e.rel;
    v.elem = e.elem;
    v.worst = what;
  }
  if (r > 1) {
    v.ok = false;
    if (!v.why.empty()) v.why += "; ";
    v.why += what + ": rel " + sci(e.rel) + " (tol " + sci(tol.rel) + "), max " + sci(e.elem) + " (tol " +
             sci(tol.elem) + ")";
  }
}

Verdict check(const Case& c, Run& r) {
  Verdict v;
  if (c.scalar) {
    const double got = r.tested.result, want = r.ref.result;
    const Tol tol = c.tol.of(r.tested.dtype);
    Errors e;
    if (!std::isfinite(want) || !std::isfinite(got)) e.bad = !((std::isnan(want) && std::isnan(got)) || got == want);
    else e.rel = std::fabs(got - want) / std::max(std::fabs(want), 1.0);
    judge(v, "result", e, {tol.rel, std::numeric_limits<double>::infinity()});
    return v;
  }
  for (const Arg& a : c.args) {
    if (a.role == Role::in) continue;
    const DType dt = r.tested.declared.at(a.name);
    const Tensor got = fetch(r.tested.be, r.tested[a.name]);
    const Tensor& want = r.ref[a.name];
    judge(v, a.name, compare(got, want, nullptr), c.tol.of(dt));
    if (a.delta_rel > 0 && dt == DType::f32) {
      const Tensor& start = r.ref.t.at(a.name + "@start");
      judge(v, a.name + " update", compare(got, want, &start), {a.delta_rel, std::numeric_limits<double>::infinity()});
    }
  }
  return v;
}

// A backward op's gradient against central differences of c.loss, in f64 on the CPU, at up to 40
// elements of each input spread over it. An input the op itself does not take (the embedding
// tables of encoder_backward) is made with its gradient's shape.
Verdict grad_check(const Case& c, size_t case_index) {
  constexpr double h = 1e-4;  // the truncation error (h^2) and the rounding (2^-53 |loss| / h) both far below 1e-5
  constexpr int64_t kSamples = 40;
  Env e(cpu_backend(), DType::f64, true);
  fill_args(c, case_index, e, nullptr);
  for (size_t i = 0; i < c.wrt.size(); ++i) {
    const auto& [x, g] = c.wrt[i];
    if (!e.t.count(x)) e.t[x] = host_values(in(x, e[g].shape()), DType::f64, 0x6AADull * 1000003ull + case_index * 64 + i);
  }
  if (c.setup) c.setup(e);
  std::map<std::string, Tensor> start;
  for (const Arg& a : c.args)
    if (a.role == Role::inout) start[a.name] = e[a.name].clone();
  c.run(e);
  Verdict v;
  for (const auto& [x, g] : c.wrt) {
    Tensor& xt = e[x];
    const Tensor& gt = e[g];
    const int64_t n = std::min(kSamples, gt.numel());
    Tensor got = Tensor::empty({n}, DType::f64), fd = Tensor::empty({n}, DType::f64);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = k * gt.numel() / n;
      double* xi = xt.data<double>() + i;
      const double orig = *xi;
      *xi = orig + h;
      const double up = c.loss(e);
      *xi = orig - h;
      const double down = c.loss(e);
      *xi = orig;
      fd.data<double>()[k] = (up - down) / (2 * h);
      got.data<double>()[k] = gt.data<double>()[i] - (start.count(g) ? start[g].data<double>()[i] : 0.0);
    }
    judge(v, g + " vs fd", compare(got, fd, nullptr), {1e-5, 1e-4});
  }
  return v;
}

std::string line(const std::string& op, const std::string& params, const std::string& dtype,
                 const std::string& backend, const Verdict& v) {
  return pad(op, 30) + ' ' + pad(params, 44) + ' ' + pad(dtype, 5) + ' ' + pad(backend, 5) + " rel " + sci(v.rel) +
         " max " + sci(v.elem) + ' ' + pad(v.worst.empty() ? "-" : v.worst, 8) + ' ' +
         (v.ok ? "OK" : "FAIL " + v.why) + '\n';
}

void run_op(const Case& c, Env& e) {
  if (e.reference && c.reference) c.reference(e);
  else c.run(e);
}

// A backend without the op's kernel: the call must throw, naming the op and the backend.
Verdict check_refused(const Case& c, size_t case_index, Backend& be, DType dt) {
  Verdict v;
  v.worst = "refused";
  // The setup may call an op of the same family first (a backward's forward): it may refuse too.
  const std::string suffix = ": not implemented on the " + be.name() + " backend";
  try {
    Run r = prepare(c, case_index, be, dt);
    c.run(r.tested);
    v.ok = false;
    v.why = "ran, but the case lists the backend in refused_on: take it out of the list";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.size() <= suffix.size() || what.compare(what.size() - suffix.size(), suffix.size(), suffix) != 0) {
      v.ok = false;
      v.why = "threw '" + what + "', expected '<op>" + suffix + "'";
    }
  }
  return v;
}

// One line of the table: the check's verdict, or FAIL with what it threw.
void record(TestTotals& totals, std::ostream& out, const Case& c, const std::string& dtype, const std::string& backend,
            const std::function<Verdict()>& check) {
  Verdict v;
  try {
    v = check();
  } catch (const std::exception& e) {
    v.ok = false;
    v.why = std::string("threw: ") + e.what();
  }
  ++totals.run;
  totals.failed += !v.ok;
  out << line(c.op, c.params, dtype, backend, v);
}

}  // namespace

TestTotals run_test(const std::vector<Case>& cases, const std::vector<NamedBackend>& backends, const Filter& filter,
                    std::ostream& out) {
  TestTotals totals;
  for (const NamedBackend& nb : backends) {
    if (!filter.wants_backend(nb.name)) continue;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      if (!filter.wants_op(c.op)) continue;
      const bool refused = std::find(c.refused_on.begin(), c.refused_on.end(), nb.name) != c.refused_on.end();
      for (DType dt : c.dtypes)
        record(totals, out, c, std::string(dtype_name(dt)), nb.name, [&] {
          if (refused) return check_refused(c, ci, *nb.backend, dt);
          Run r = prepare(c, ci, *nb.backend, dt);
          for (const Arg& a : c.args)
            if (a.delta_rel > 0) r.ref.t[a.name + "@start"] = r.ref[a.name].clone();
          run_op(c, r.tested);
          run_op(c, r.ref);
          return check(c, r);
        });
    }
  }
  // The gradient checks run on the CPU in f64, once per backward case.
  if (filter.wants_backend("cpu")) {
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      if (!c.loss || !filter.wants_op(c.op)) continue;
      record(totals, out, c, "f64", "cpu", [&] { return grad_check(c, ci); });
      ++totals.gradients;
    }
  }
  out.flush();
  return totals;
}

void run_perf(const std::vector<Case>& cases, const std::vector<NamedBackend>& backends, const Filter& filter,
              const PerfOptions& o, std::ostream& out) {
  using clock = std::chrono::steady_clock;
  out << "op\tparams\tdtype\tbackend\trepeats\tus_per_call\tGFLOP/s\tGB/s\n";
  for (const NamedBackend& nb : backends) {
    if (!filter.wants_backend(nb.name)) continue;
    Backend& be = *nb.backend;
    auto sync = [&be] {
#ifdef DL_HAVE_CUDA
      if (auto* cuda = dynamic_cast<CudaBackend*>(&be)) cuda->synchronize("backend-ops perf");
#else
      (void)be;
#endif
    };
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      if (!filter.wants_op(c.op)) continue;
      if (std::find(c.refused_on.begin(), c.refused_on.end(), nb.name) != c.refused_on.end()) continue;
      for (DType dt : c.dtypes) {
        Env e(be, dt, false);
        double bytes = fill_args(c, ci, e, nullptr);
        for (const Arg& a : c.args)  // read and written
          if (a.role == Role::inout) bytes += double(e[a.name].nbytes());
        if (c.setup) c.setup(e);
        for (int w = 0; w < o.warmup; ++w) c.run(e);
        sync();
        std::vector<double> times;
        const auto begin = clock::now();
        while (int(times.size()) < o.max_repeats &&
               (int(times.size()) < o.min_repeats ||
                std::chrono::duration<double>(clock::now() - begin).count() < o.budget_s)) {
          const auto t0 = clock::now();
          c.run(e);
          sync();
          times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
        }
        std::sort(times.begin(), times.end());
        const double median = times[times.size() / 2];
        char rates[64];
        if (c.flops > 0) std::snprintf(rates, sizeof rates, "%.1f\t%.2f", c.flops / median * 1e-9, bytes / median * 1e-9);
        else std::snprintf(rates, sizeof rates, "-\t%.2f", bytes / median * 1e-9);
        char time[32];
        std::snprintf(time, sizeof time, "%.1f", median * 1e6);
        out << c.op << '\t' << c.params << '\t' << dtype_name(dt) << '\t' << nb.name << '\t' << times.size() << '\t'
            << time << '\t' << rates << std::endl;
      }
    }
  }
}

}  // namespace dl::ops
