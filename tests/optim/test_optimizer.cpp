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
  s.decay = "cosine";
  CHECK(learning_rate(s, 1.0, 0, 110) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 1.0, 9, 110) == doctest::Approx(1.0));
  CHECK(learning_rate(s, 1.0, 10, 110) == doctest::Approx(1.0));
  CHECK(learning_rate(s, 1.0, 60, 110) == doctest::Approx(0.55));  // halfway: min + (max-min)/2
  CHECK(learning_rate(s, 1.0, 110, 110) == doctest::Approx(0.1));
  CHECK(learning_rate(s, 1.0, 500, 110) == doctest::Approx(0.1));  // stays at the floor
  s.decay = "linear";
  CHECK(learning_rate(s, 2.0, 35, 110) == doctest::Approx(2.0 - 1.8 * 0.25));
  s.decay = "constant";
  CHECK(learning_rate(s, 2.0, 100, 110) == 2.0);
  s.decay = "cosine";
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
  sgd.name = "sgd";
  sgd.momentum = 0;
  CHECK(Optimizer(sgd).state_names().empty());
  sgd.momentum = 0.9;
  CHECK(Optimizer(sgd).state_names() == std::vector<std::string>{"momentum_buffer"});
}
