// dl-bench gemm: size parsing, the error bound and the checked result. Its rate against a plain
// timed cblas_sgemm is measured by make bench (scripts/bench.sh), not here: a speed ratio under
// ctest -j on shared cores says more about the neighbours than about the benchmark.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "dl/bench/gemm.hpp"
#include "dl/bench/peaks.hpp"
#include "dl/core/error.hpp"
#include "support/support.hpp"

using namespace dl::bench;

TEST_CASE("--sizes: squares and MxNxK, comma-separated; malformed items are usage errors naming them") {
  CHECK(parse_gemm_sizes("1024") == std::vector<GemmShape>{{1024, 1024, 1024}});
  CHECK(parse_gemm_sizes("1024,4096,8192") ==
        std::vector<GemmShape>{{1024, 1024, 1024}, {4096, 4096, 4096}, {8192, 8192, 8192}});
  CHECK(parse_gemm_sizes("4096x2048x1024, 512") == std::vector<GemmShape>{{4096, 2048, 1024}, {512, 512, 512}});
  for (const char* bad : {"", "12x", "1024,", "axb", "1x2", "1x2x3x4", "0", "-5", "64x0x8", "1e3"}) {
    CAPTURE(bad);
    const std::string error = dl::test::named_option_error([&] { parse_gemm_sizes(bad); }, {{"sizes", "--sizes"}});
    CHECK(error.find("--sizes") != std::string::npos);
  }
  CHECK(parse_gemm_dtype("bf16") == dl::MathPrecision::bf16);
  CHECK_THROWS_WITH_AS(parse_gemm_dtype("int8"), doctest::Contains("fp32, tf32, bf16 or fp16"), dl::Error);
}

TEST_CASE("FLOPs and the error bound") {
  CHECK(gemm_flops({8192, 8192, 8192}) == doctest::Approx(2.0 * 8192.0 * 8192.0 * 8192.0));
  CHECK(gemm_flops({4096, 2048, 1024}) == doctest::Approx(2.0 * 4096 * 2048 * 1024));
  // gamma_k for fp32: k u / (1 - k u), u = 2^-24.
  const double u = std::ldexp(1.0, -24);
  CHECK(gemm_error_bound(1024, dl::MathPrecision::fp32) == doctest::Approx(1024 * u / (1 - 1024 * u)));
  CHECK(gemm_error_bound(1024, dl::MathPrecision::bf16) > gemm_error_bound(1024, dl::MathPrecision::tf32));
  CHECK(gemm_error_bound(1024, dl::MathPrecision::tf32) > gemm_error_bound(1024, dl::MathPrecision::fp32));
}

TEST_CASE("a CPU gemm row: schema keys, FLOP/s = 2MNK / time, every sampled entry within the bound") {
  CommonOptions c;
  c.repeat = 3;
  c.warmup = 1;
  c.threads = 1;
  apply_common(c);
  GemmOptions o;
  o.sizes = {{96, 80, 64}};
  Report r = run_gemm(o, c);
  CHECK(r.failures.empty());
  REQUIRE(r.rows.size() == 1);
  const Row& row = r.rows[0];
  CHECK(row["schema"] == "dlkit-bench/1");
  CHECK(row["benchmark"] == "gemm");
  CHECK(row["device_type"] == "cpu");
  CHECK(row["gpu_model"] == "");
  CHECK(row["library"].get<std::string>().find("OpenBLAS") == 0);
  CHECK(row["dtype"] == "fp32");
  CHECK(row["m"] == 96);
  CHECK(row["n"] == 80);
  CHECK(row["k"] == 64);
  CHECK(row["repeat"] == 3);
  CHECK(row["warmup"] == 1);
  CHECK(row["flops"].get<double>() == doctest::Approx(2.0 * 96 * 80 * 64 / row["time_s"].get<double>()));
  CHECK(row["time_min_s"].get<double>() <= row["time_s"].get<double>());
  CHECK(row["time_s"].get<double>() <= row["time_max_s"].get<double>());
  CHECK(row["checked"] == 64);
  CHECK(row["wrong"] == 0);
  CHECK(row["max_rel_error"].get<double>() <= row["error_bound"].get<double>());
  CHECK(row["max_rel_error"].get<double>() > 0);  // inputs are not zeros: rounding shows
  REQUIRE(row["peak_flops"].is_number());
  CHECK(row["pct_peak"].get<double>() ==
        doctest::Approx(100.0 * row["flops"].get<double>() / row["peak_flops"].get<double>()));
}

TEST_CASE("GPU peaks come from the datasheet table; the CPU's from its measured sgemm") {
  DeviceInfo h100;
  h100.device_type = dl::DeviceKind::cuda;
  h100.device = "NVIDIA H100 80GB HBM3";
  CHECK(*compute_peak(h100, dl::MathPrecision::bf16).value == doctest::Approx(989.4e12));
  CHECK(*compute_peak(h100, dl::MathPrecision::fp32).value == doctest::Approx(66.9e12));
  CHECK(*memory_peak(h100).value == doctest::Approx(3.35e12));
  DeviceInfo pcie = h100;
  pcie.device = "NVIDIA H100 PCIe";
  CHECK(*compute_peak(pcie, dl::MathPrecision::fp16).value == doctest::Approx(756e12));
  DeviceInfo h200 = h100;
  h200.device = "NVIDIA H200";
  CHECK(*compute_peak(h200, dl::MathPrecision::bf16).value == doctest::Approx(989.4e12));
  CHECK(*memory_peak(h200).value == doctest::Approx(4.8e12));
  DeviceInfo a100 = h100;
  a100.device = "NVIDIA A100-SXM4-80GB";
  CHECK(*compute_peak(a100, dl::MathPrecision::tf32).value == doctest::Approx(156e12));
  DeviceInfo unknown = h100;
  unknown.device = "Some Future GPU";
  CHECK_FALSE(compute_peak(unknown, dl::MathPrecision::bf16).value);
  DeviceInfo cpu;
  cpu.device_type = dl::DeviceKind::cpu;
  CHECK(compute_peak(cpu, dl::MathPrecision::fp32).source.find("measured") == 0);
  CHECK_FALSE(compute_peak(cpu, dl::MathPrecision::bf16).value);
}
