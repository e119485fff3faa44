#include <doctest/doctest.h>

#include <cmath>

#include "dl/nn/params.hpp"
#include "dl/optim/optimizer.hpp"
#include "support/numeric.hpp"

using namespace dl;
using namespace dl::test;

TEST_CASE("learning-rate schedule: warm-up, cosine, linear, constant") {
  ScheduleConfig s;
  s.warmup_steps = 10;
  s.min_lr_ratio = 0.1;
  s.decay = Decay::cosine;
  CHECK(learning_rate(s, 1.0, 0, 110) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 1.0, 9, 110) == doctest::Approx(1.0));
  CHECK(learning_rate(s, 1.0, 10, 110) == doctest::Approx(1.0));
  CHECK(learning_rate(s, 1.0, 60, 110) == doctest::Approx(0.55));  // halfway: min + (max-min)/2
  CHECK(learning_rate(s, 1.0, 110, 110) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 1.0, 500, 110) == doctest::Approx(0.1));  // stays at the floor
  s.decay = Decay::linear;
  CHECK(learning_rate(s, 2.0, 35, 110) == doctest::Approx(2.0 - 1.8 * 0.25));
  s.decay = Decay::constant;
  CHECK(learning_rate(s, 2.0, 100, 110) == 2.0);
  s.decay = Decay::cosine;
  s.decay_steps = 60;  // explicit horizon, independent of train.steps
  CHECK(learning_rate(s, 1.0, 35, 1000) == doctest::Approx(0.55));
}

TEST_CASE("clip_scale follows clip_grad_norm_") {
  CHECK(clip_scale(0.5, 1.0) == 1.0);
  CHECK(clip_scale(4.0, 1.0) == doctest::Approx(1.0 / (4.0 + 1e-6)));
  CHECK(clip_scale(4.0, 0.0) == 1.0);
}

TEST_CASE("AdamW decays only parameters marked for decay") {
  ParamSet ps;
  ps.declare("w", {3}, ParamInit::ones, 0, true);
  ps.declare("b", {2}, ParamInit::ones, 0, false);
  ps.allocate(cpu_backend(), DType::f64);
  ps.initialize(1);
  ps.zero_grad();  // zero gradient: only decay moves a parameter
  OptimConfig oc;
  oc.lr = 0.1;
  oc.weight_decay = 0.5;
  Optimizer opt(oc);
  REQUIRE(opt.state_names() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  opt.begin_step();
  std::vector<Tensor> sw{Tensor::zeros({3}, DType::f64), Tensor::zeros({3}, DType::f64)};
  std::vector<Tensor> sb{Tensor::zeros({2}, DType::f64), Tensor::zeros({2}, DType::f64)};
  opt.update(cpu_backend(), ps.value(0), ps.grad(0), sw, ps.info(0).decay, 0.1, 1.0);
  opt.update(cpu_backend(), ps.value(1), ps.grad(1), sb, ps.info(1).decay, 0.1, 1.0);
  CHECK(get(ps.value(0), 0) == doctest::Approx(1.0 - 0.1 * 0.5));
  CHECK(get(ps.value(1), 0) == 1.0);
  CHECK(opt.step_count() == 1);
  OptimConfig sgd;
  sgd.name = OptimizerKind::sgd;
  sgd.momentum = 0;
  CHECK(Optimizer(sgd).state_names().empty());
  sgd.momentum = 0.9;
  CHECK(Optimizer(sgd).state_names() == std::vector<std::string>{"momentum_buffer"});
}

TEST_CASE("SGD with momentum, dampening or Nesterov matches torch.optim.SGD step for step") {
  // Expected values from torch 1.13 (/usr/bin/python3), float64: torch.optim.SGD([p], lr=0.1,
  // momentum=0.9, weight_decay=0.01, dampening=d, nesterov=n) from p = p0, each row of `grads`
  // set as p.grad before a step; p after each step and the final momentum_buffer, printed by repr().
  const double p0[4] = {0.5, -1.25, 2.0, 0.0625};
  const double grads[3][4] = {{0.1, -0.2, 0.3, -0.4}, {-0.5, 0.25, 0.125, 1.0}, {0.75, -0.375, -1.5, 0.0}};
  struct Case {
    const char* name;
    double dampening;
    bool nesterov;
    double p[3][4];
    double buf[4];
  };
  const Case cases[] = {
      {"nesterov", 0.0, true,
       {{0.48005, -1.209625, 1.9392, 0.13838125},
        {0.565632905, -1.2376142125, 1.88584552, -0.019532299375000017},
        {0.45451486198049995, -1.16779169924625, 2.132238661512, -0.07149283931868752}},
       {0.39502677905, -0.345387767125, -1.0919887448, 0.57755635825625}},
      {"dampening 0.3", 0.3, false,
       {{0.4895, -1.22875, 1.968, 0.1024375},
        {0.51470735, -1.226264875, 1.9290724, 0.06830954375},
        {0.484533669855, -1.1969198770875, 1.99768720932, 0.037546566444375006}},
       {0.30173680145, -0.29344997912500004, -0.6861480931999999, 0.30762977305625}},
      {"momentum", 0.0, false,
       {{0.4895, -1.22875, 1.968, 0.1024375},
        {0.5295605, -1.23339625, 1.9247319999999999, 0.038278812499999995},
        {0.49008538949999997, -1.1988444787499999, 2.033866068, -0.019502285062500013}},
       {0.39475110500000005, -0.3455177125000001, -1.0913406799999998, 0.5778109756250001}},
  };
  for (const Case& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    OptimConfig oc;
    oc.name = OptimizerKind::sgd;
    oc.momentum = 0.9;
    oc.dampening = c.dampening;
    oc.nesterov = c.nesterov;
    oc.weight_decay = 0.01;
    Optimizer opt(oc);
    REQUIRE(opt.state_names() == std::vector<std::string>{"momentum_buffer"});
    Tensor p = Tensor::empty({4}, DType::f64), g = Tensor::empty({4}, DType::f64);
    std::vector<Tensor> state{Tensor::zeros({4}, DType::f64)};
    for (int64_t i = 0; i < 4; ++i) set(p, i, p0[i]);
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      // Twice the gradient with grad_scale 0.5 (what clipping passes): torch's gradient exactly.
      for (int64_t i = 0; i < 4; ++i) set(g, i, 2 * grads[step][i]);
      opt.begin_step();
      opt.update(cpu_backend(), p, g, state, true, 0.1, 0.5);
      for (int64_t i = 0; i < 4; ++i) CHECK(get(p, i) == doctest::Approx(c.p[step][i]).epsilon(1e-14));
    }
    for (int64_t i = 0; i < 4; ++i) CHECK(get(state[0], i) == doctest::Approx(c.buf[i]).epsilon(1e-14));
  }
}
