// A rank for the collective tests: joins the group from DL_* variables, runs the scenario named
// by argv[1], and prints JSON lines of results for the test to check.
#include <cstdio>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/dist/gloo_comm.hpp"

using namespace dl;
using namespace dl::dist;
using nlohmann::json;

namespace {

void emit(const json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

json values(const Tensor& t) {
  json a = json::array();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::f32) a.push_back(t.data<float>()[i]);
    else if (t.dtype() == DType::f64) a.push_back(t.data<double>()[i]);
    else a.push_back(t.data<int64_t>()[i]);
  }
  return a;
}

Tensor filled(int64_t n, DType dt, double base) {
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) {
    double v = base + static_cast<double>(i);
    if (dt == DType::f32) t.data<float>()[i] = static_cast<float>(v);
    else if (dt == DType::f64) t.data<double>()[i] = v;
    else t.data<int64_t>()[i] = static_cast<int64_t>(v);
  }
  return t;
}

int scenario(const std::string& which) {
  LaunchEnv env = detect_launch_env(process_environment());
  double timeout = which == "timeout" ? 2.0 : 60.0;
  auto world = make_gloo_world(env, timeout);
  const int r = world->rank(), n = world->size();
  if (which == "collectives") {
    for (DType dt : {DType::f32, DType::f64, DType::i64}) {
      Tensor t = filled(5, dt, 10.0 * r);
      world->allreduce(t);
      emit({{"op", "allreduce_sum"}, {"dtype", dtype_name(dt)}, {"v", values(t)}});
    }
    Tensor m = filled(3, DType::f32, r);
    world->allreduce(m, ReduceOp::max);
    emit({{"op", "allreduce_max"}, {"v", values(m)}});
    // reduce_scatter: rank r contributes in[i] = 100 r + i over n chunks of 4.
    Tensor in = filled(4 * n, DType::f64, 100.0 * r), out = Tensor::empty({4}, DType::f64);
    world->reduce_scatter(in, out);
    emit({{"op", "reduce_scatter"}, {"v", values(out)}});
    Tensor g = filled(2, DType::f32, 7.0 * r), all = Tensor::empty({2 * n}, DType::f32);
    world->allgather(g, all);
    emit({{"op", "allgather"}, {"v", values(all)}});
    Tensor b = filled(3, DType::i64, r == 1 ? 42 : -1);
    world->broadcast(b, 1);
    emit({{"op", "broadcast"}, {"v", values(b)}});
    // A ring of point-to-point messages, both directions posted before waiting.
    Tensor to_next = filled(4, DType::f32, 1000.0 * r), from_prev = Tensor::empty({4}, DType::f32);
    auto rq = world->irecv(from_prev, (r + n - 1) % n);
    auto sq = world->isend(to_next, (r + 1) % n);
    sq->wait();
    rq->wait();
    emit({{"op", "ring"}, {"v", values(from_prev)}});
    // Subgroups: even and odd ranks.
    std::vector<int> members;
    for (int i = r % 2; i < n; i += 2) members.push_back(i);
    auto sub = world->subgroup(members, r % 2 ? "odd" : "even");
    Tensor s = filled(1, DType::i64, r);
    sub->allreduce(s);
    emit({{"op", "subgroup"}, {"size", sub->size()}, {"rank", sub->rank()}, {"v", values(s)}});
    world->barrier();
    emit({{"op", "done"}, {"comm_s", world->seconds_in_comm()}});
    return 0;
  }
  if (which == "timeout") {
    // Rank 1 never joins the all-reduce: rank 0 must fail within the timeout, naming it.
    if (r == 1) {
      ::sleep(6);
      return 0;
    }
    Tensor t = filled(4, DType::f32, 0);
    world->allreduce(t);
    return 0;
  }
  throw_usage("unknown scenario ", which);
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = argc > 1 ? argv[1] : "collectives";
  return run_tool("collectives_worker", [&] { return scenario(which); });
}
