// Mixed precision (bf16/fp16 compute, f32 master weights), emulated on the CPU with the CUDA
// kernels' rounding: the same trainer code as on a GPU follows the fp32 losses. Under ZeRO:
// tests/parallel/test_layouts.cpp; its checkpoints: tests/checkpoint/test_layout_checkpoints.cpp.
#include <doctest/doctest.h>

#include <cmath>

#include "support/layout_runs.hpp"
#include "support/support.hpp"

using namespace dl::test;

namespace {

// The loss at the last of `steps` steps, from a run logging step 1 and every 100th.
double final_train_loss(const Run& r, int64_t steps) {
  REQUIRE(r.loss.size() == static_cast<size_t>(steps / 100 + 1));
  REQUIRE(r.loss.rbegin()->first == steps);
  return r.loss.rbegin()->second;
}

}  // namespace

TEST_CASE("bf16 and fp16 follow the fp32 losses: within 2% over 20 steps and at the end of 500") {
  const auto& ref = reference();
  TempDir dir("mixed-precision");
  write_file(dir / "c.toml", kLayoutGpt);
  for (std::string p : {"bf16", "fp16"}) {
    CAPTURE(p);
    Run r = train(dir / "c.toml", dir / p, 1, {"train.precision=" + p});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.err.find("emulated") != std::string::npos);
    REQUIRE(r.loss.size() == 20);
    const double d = max_rel_diff(r.loss, ref.loss);
    MESSAGE(p << " vs fp32 over 20 steps: max relative loss difference " << d);
    CHECK(d < 0.02);
    CHECK(d > 0);  // 16-bit compute really ran: the numbers are not fp32's
  }
  const std::vector<std::string> long_run = {"train.steps=500", "schedule.decay_steps=500", "log.every=100"};
  Run f32 = train(dir / "c.toml", dir / "f32-500", 1, long_run);
  std::vector<std::string> bf16_long = long_run;
  bf16_long.push_back("train.precision=bf16");
  Run b16 = train(dir / "c.toml", dir / "bf16-500", 1, bf16_long);
  REQUIRE(f32.code == 0);
  REQUIRE(b16.code == 0);
  const double a = final_train_loss(f32, 500), b = final_train_loss(b16, 500);
  MESSAGE("500 steps: fp32 loss " << a << ", bf16 loss " << b);
  CHECK(a < ref.loss.begin()->second * 0.5);  // it learned
  CHECK(std::fabs(b - a) / a < 0.02);
}
