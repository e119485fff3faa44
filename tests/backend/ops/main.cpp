// backend-ops: every dl::Backend op on every backend this build and machine have (op_case.hpp).
//
//   backend-ops test [-o OP[,OP...]] [-b BACKEND]   correctness against the CPU in f64 (and backward
//                                                   ops against central differences); exit 1 on a FAIL
//   backend-ops perf [-o OP[,OP...]] [-b BACKEND]   time per op (TSV on stdout)
//
// stdout is the table; stderr says which backends ran (and why CUDA did not) and the totals.
#include <chrono>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

#include "dl/core/error.hpp"
#include "harness.hpp"

namespace {

constexpr const char* kUsage =
    "usage: backend-ops test|perf [-o OP[,OP...]] [-b BACKEND[,BACKEND...]]\n"
    "  test  every case against the CPU backend in f64, one line per case, dtype and backend, and every\n"
    "        backward op against central differences of its forward; exit 1 on a FAIL\n"
    "  perf  median time per call, GFLOP/s or GB/s, as TSV\n"
    "  -o    only these ops (dl::Backend's names: layernorm_forward, matmul_backward, ...)\n"
    "  -b    only these backends (cpu, cuda)\n";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, ',');)
    if (!p.empty()) parts.push_back(p);
  return parts;
}

int usage_error(const std::string& message) {
  std::cerr << "backend-ops: " << message << "\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dl::ops;
  std::string mode;
  Filter filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "-o" || a == "-b") {
      if (i + 1 >= argc) return usage_error(a + " needs a value");
      (a == "-o" ? filter.ops : filter.backends) = split(argv[++i]);
    } else if (mode.empty() && (a == "test" || a == "perf")) {
      mode = a;
    } else {
      return usage_error("unknown argument '" + a + "'");
    }
  }
  if (mode.empty()) return usage_error("say test or perf");
  try {
    const std::vector<Case> cases = all_cases(mode == "test" ? Mode::test : Mode::perf);
    std::set<std::string> ops;
    for (const Case& c : cases) ops.insert(c.op);
    for (const std::string& op : filter.ops)
      if (!ops.count(op)) {
        std::string known;
        for (const std::string& o : ops) known += (known.empty() ? "" : ", ") + o;
        return usage_error("-o " + op + ": no such op; the ops: " + known);
      }
    std::string why_not;
    const std::vector<NamedBackend> backends = available_backends(why_not);
    std::string names;
    for (const NamedBackend& b : backends) names += (names.empty() ? "" : ", ") + b.name;
    for (const std::string& b : filter.backends) {
      bool found = false;
      for (const NamedBackend& nb : backends) found = found || nb.name == b;
      if (!found)
        return usage_error("-b " + b + ": not available here (backends: " + names +
                           (why_not.empty() ? "" : "; cuda: " + why_not) + ")");
    }
    std::cerr << "backend-ops " << mode << ": backends " << names << (why_not.empty() ? "" : " (cuda: " + why_not + ")")
              << "\n";
    const auto start = std::chrono::steady_clock::now();
    if (mode == "perf") {
      run_perf(cases, backends, filter, PerfOptions{}, std::cout);
      return 0;
    }
    const TestTotals t = run_test(cases, backends, filter, std::cout);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << "backend-ops test: " << t.run << " runs (case x dtype x backend, and " << t.gradients
              << " gradients against central differences), " << t.failed << " failed, " << secs << " s\n";
    return t.failed ? 1 : 0;
  } catch (const dl::Error& e) {
    std::cerr << "backend-ops: " << e.what() << "\n";
    return dl::exit_code(e.kind());
  }
}
