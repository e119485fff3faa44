// A rank for the collective tests: joins the group from DL_* variables, runs the scenario named
// by argv[1], and prints JSON lines of results for the test to check.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/core/half.hpp"
#include "dl/dist/device_comm.hpp"
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

// Every collective of the Comm interface; `place` puts a host tensor where the comm works
// (host or "device"), `fetch` brings it back to read.
int run_collectives(Comm& c, const std::function<Tensor(Tensor)>& place, const std::function<Tensor(Tensor)>& fetch) {
  const int r = c.rank(), n = c.size();
  for (DType dt : {DType::f32, DType::f64, DType::i64}) {
    Tensor t = place(filled(5, dt, 10.0 * r));
    c.allreduce(t);
    emit({{"op", "allreduce_sum"}, {"dtype", dtype_name(dt)}, {"v", values(fetch(t))}});
  }
  Tensor m = place(filled(3, DType::f32, r));
  c.allreduce(m, ReduceOp::max);
  emit({{"op", "allreduce_max"}, {"v", values(fetch(m))}});
  // reduce_scatter: rank r contributes in[i] = 100 r + i over n chunks of 4.
  Tensor in = place(filled(4 * n, DType::f64, 100.0 * r)), out = place(Tensor::zeros({4}, DType::f64));
  c.reduce_scatter(in, out);
  emit({{"op", "reduce_scatter"}, {"v", values(fetch(out))}});
  Tensor g = place(filled(2, DType::f32, 7.0 * r)), all = place(Tensor::zeros({2 * n}, DType::f32));
  c.allgather(g, all);
  emit({{"op", "allgather"}, {"v", values(fetch(all))}});
  Tensor b = place(filled(3, DType::i64, r == 1 ? 42 : -1));
  c.broadcast(b, 1);
  emit({{"op", "broadcast"}, {"v", values(fetch(b))}});
  // A ring of point-to-point messages, both directions posted before waiting.
  Tensor to_next = place(filled(4, DType::f32, 1000.0 * r)), from_prev = place(Tensor::zeros({4}, DType::f32));
  auto rq = c.irecv(from_prev, (r + n - 1) % n);
  auto sq = c.isend(to_next, (r + 1) % n);
  sq->wait();
  rq->wait();
  emit({{"op", "ring"}, {"v", values(fetch(from_prev))}});
  // Subgroups: even and odd ranks.
  std::vector<int> members;
  for (int i = r % 2; i < n; i += 2) members.push_back(i);
  auto sub = c.subgroup(members, r % 2 ? "odd" : "even");
  Tensor s = place(filled(1, DType::i64, r));
  sub->allreduce(s);
  emit({{"op", "subgroup"}, {"size", sub->size()}, {"rank", sub->rank()}, {"v", values(fetch(s))}});
  c.barrier();
  emit({{"op", "done"}, {"comm_s", c.seconds_in_comm()}});
  return 0;
}

int scenario(const std::string& which) {
  LaunchEnv env = detect_launch_env(process_environment());
  double timeout = which == "timeout" ? 2.0 : 60.0;
  auto world = make_gloo_world(env, timeout);
  const int r = world->rank();
  if (which == "collectives") return run_collectives(*world, [](Tensor t) { return t; }, [](Tensor t) { return t; });
  if (which == "device_staged") {
    // DeviceComm's path for ranks that share a GPU, without a GPU: tensors labelled cuda:0 over
    // host memory, moved by memcpy, so every collective goes device -> host -> Gloo -> device.
    auto copy = [](Tensor& d, const Tensor& s) { std::memcpy(d.raw(), s.raw(), d.nbytes()); };
    std::string path;
    auto dev = make_device_comm(std::move(world), copy, nullptr, &path);
    emit({{"op", "path"}, {"path", path}});
    auto place = [&](Tensor h) {
      auto storage = std::make_shared<Storage>(std::malloc(h.nbytes()), h.nbytes(), Device::cuda(0), [](void* q) { std::free(q); });
      Tensor d(std::move(storage), 0, h.shape(), h.dtype());
      copy(d, h);
      return d;
    };
    auto fetch = [&](Tensor d) {
      Tensor h = Tensor::empty(d.shape(), d.dtype());
      copy(h, d);
      return h;
    };
    // bf16 sums travel as bf16 and are added in f32 by the host communicator.
    Tensor b16 = Tensor::empty({5}, DType::bf16), f = filled(5, DType::f32, 10.0 * r);
    convert_host(b16, f);
    Tensor on_dev = place(b16);
    dev->allreduce(on_dev);
    Tensor back = Tensor::empty({5}, DType::f32);
    convert_host(back, fetch(on_dev));
    emit({{"op", "allreduce_sum"}, {"dtype", "bf16"}, {"v", values(back)}});
    return run_collectives(*dev, place, fetch);
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
