// The calibrated speed model (lib/plan/include/dl/plan/speed.hpp): its fit recomputed by hand from the
// published figures, the MFU rising with model size, and every calibration run within 25%.
#include <doctest/doctest.h>

#include <cmath>

#include "dl/plan/gpus.hpp"
#include "dl/plan/speed.hpp"

using namespace dl::plan;

namespace {

const GpuSpec& gpu(const std::string& model) {
  static std::vector<GpuSpec> keep;
  keep.push_back(*gpu_spec(model));
  return keep.back();
}

}  // namespace

TEST_CASE("the published runs as quoted, and llm.c's MFU from its minutes") {
  const auto& runs = published_runs();
  REQUIRE(runs.size() == 10);
  // llm.c GPT-2 124M: 18,865 x 524,288 tokens x (6N + 12LDT = 859,885,056 FLOPs) in 94.3 min on
  // 8 x 312 TFLOP/s, and in 45 min on 8 x 989.4 TFLOP/s.
  const double work = 18865.0 * 524288.0 * 859885056.0;
  CHECK(run_mfu(runs[0]) == doctest::Approx(work / (94.3 * 60 * 8 * 312e12)));
  CHECK(run_mfu(runs[0]) == doctest::Approx(0.6022).epsilon(1e-3));
  CHECK(run_mfu(runs[1]) == doctest::Approx(work / (45.0 * 60 * 8 * 989.4e12)));
  CHECK(run_mfu(runs[1]) == doctest::Approx(0.3979).epsilon(1e-3));
  // llm-foundry's rows as issue 21 quotes them.
  double sum = 0;
  for (size_t i = 2; i < runs.size(); ++i) sum += run_mfu(runs[i]);
  CHECK(sum == doctest::Approx(0.448 + 0.599 + 0.642 + 0.533 + 0.418 + 0.464 + 0.398 + 0.426));
}

TEST_CASE("beta and the knots, recomputed from the published figures") {
  const SpeedCalibration& c = speed_calibration();
  // H100 / A100 in the same run: llm.c 124M, MPT 1B, 7B, 70B.
  const double llmc_a = 18865.0 * 524288.0 * 859885056.0 / (94.3 * 60 * 8 * 312e12);
  const double llmc_h = 18865.0 * 524288.0 * 859885056.0 / (45.0 * 60 * 8 * 989.4e12);
  const double ratio = std::pow(llmc_h / llmc_a * 0.418 / 0.599 * 0.464 / 0.642 * 0.426 / 0.533, 0.25);
  const double i_a100 = 312e12 / 2.039e12, i_h100 = 989.4e12 / 3.35e12;
  CHECK(c.beta == doctest::Approx(std::log(ratio) / std::log(i_a100 / i_h100)));
  CHECK(c.beta == doctest::Approx(0.503).epsilon(2e-3));
  CHECK(gpu_mfu_factor(gpu("A100-SXM-80GB")) == doctest::Approx(1.0));
  CHECK(gpu_mfu_factor(gpu("H100-SXM")) == doctest::Approx(std::pow(i_a100 / i_h100, c.beta)));
  // The 124M knot: llm.c on both GPUs and MPT 125M, each on the A100's scale, geometric mean.
  const double f_h = std::pow(i_a100 / i_h100, c.beta);
  REQUIRE(c.knots.size() == 5);
  CHECK(c.knots[0].second == doctest::Approx(std::cbrt(llmc_a * (llmc_h / f_h) * 0.448)));
  CHECK(c.knots[1].second == doctest::Approx(std::sqrt(0.599 * 0.418 / f_h)));
  CHECK(c.knots[4].first == doctest::Approx(70e9));
}

TEST_CASE("MFU rises with model size from 125M to 7B, and a bandwidth-starved GPU reaches less of its peak") {
  CHECK(size_mfu(30e6) < size_mfu(124e6));
  CHECK(size_mfu(124e6) < size_mfu(1e9));
  CHECK(size_mfu(1e9) < size_mfu(7e9));
  CHECK(size_mfu(1e12) == size_mfu(70e9));  // flat above the largest run
  CHECK(size_mfu(1e3) < size_mfu(30e6));  // the first segment's slope continues below 124M
  CHECK(size_mfu(1e3) >= kMinMfu);
  const double h100 = calibrated_mfu(gpu("H100-SXM"), 7e9), a100 = calibrated_mfu(gpu("A100-SXM-80GB"), 7e9);
  CHECK(h100 < a100);
  CHECK(calibrated_mfu(gpu("H200"), 7e9) > h100);  // same peak, 4.8 instead of 3.35 TB/s
  CHECK(calibrated_mfu(gpu("L40S"), 7e9) < a100);  // 362 TFLOP/s on 864 GB/s
  CHECK(has_published_runs("H100-SXM"));
  CHECK_FALSE(has_published_runs("L40S"));
}

TEST_CASE("every calibration run within 25% of the model, which spans the range") {
  const SpeedCalibration& c = speed_calibration();
  double lo = 1, hi = 1;
  for (const auto& r : published_runs()) {
    CAPTURE(r.name);
    CAPTURE(r.gpu);
    const double ratio = run_mfu(r) / calibrated_mfu(gpu(r.gpu), r.params);
    CHECK(std::fabs(1 / ratio - 1) <= 0.25);
    lo = std::min(lo, ratio), hi = std::max(hi, ratio);
  }
  CHECK(c.low == doctest::Approx(lo));
  CHECK(c.high == doctest::Approx(hi));
  CHECK(c.low < 1);
  CHECK(c.high > 1);
}
