// dl-bench's GPU paths on the emulated CUDA device (DL_CUDA_EMULATION builds, ctest
// `cuda_emulated`): gemm (cuBLASLt), memory (cudaMemcpyAsync, pinned host memory) and train (the
// CUDA backend) produce their rows, checked as on a GPU (#wrong 0), marked "emulated": true with
// every rate and peak empty: the emulator's times are the CPU's, and a number that is no speed
// must never read as one (docs/CUDA.md).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/support.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

constexpr const char* kNoPeak = "none: the emulated device has no speed";

json bench(const std::vector<std::string>& args) {
  const RunResult r = run(tool("dl-bench"), args, "", {}, 600);
  INFO("dl-bench ", args[0], ": ", r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("the CUDA rows come from the emulated device") != std::string::npos);
  const json rows = json::parse(r.out);
  REQUIRE(rows.is_array());
  return rows;
}

// What every emulated row holds: the emulated device named, the flag, the keys given null, a
// time (the emulation's: positive, but no rate is derived from it).
void check_emulated(const json& row, const std::vector<std::string>& rates) {
  CAPTURE(row.dump());
  CHECK(row["device_type"] == "cuda");
  CHECK(row["device"].get<std::string>().find("(emulated)") != std::string::npos);
  CHECK(row["emulated"] == true);
  for (const std::string& k : rates) {
    CAPTURE(k);
    REQUIRE(row.contains(k));
    CHECK(row[k].is_null());
  }
  CHECK(row["peak_source"] == kNoPeak);
}

}  // namespace

TEST_CASE("dl-bench gemm --device cuda on the emulated device: checked rows in every dtype, no FLOP/s") {
  for (const std::string dtype : {"fp32", "bf16", "fp16"}) {
    CAPTURE(dtype);
    const json rows = bench({"gemm", "--device", "cuda", "--sizes", "64,96x80x72", "--dtype", dtype, "--repeat", "3",
                             "--warmup", "1", "--format", "json", "-q"});
    REQUIRE(rows.size() == 2);
    CHECK(rows[1]["m"] == 96);
    CHECK(rows[1]["n"] == 80);
    CHECK(rows[1]["k"] == 72);
    for (const json& row : rows) {
      check_emulated(row, {"flops", "peak_flops", "pct_peak"});
      CHECK(row["dtype"] == dtype);
      CHECK(row["checked"].get<int64_t>() > 0);
      CHECK(row["wrong"] == 0);
      CHECK(row["max_rel_error"].get<double>() <= row["error_bound"].get<double>());
      CHECK(row["time_s"].get<double>() > 0);
    }
  }
}

TEST_CASE("dl-bench gemm --device cuda's table on the emulated device prints no rate") {
  const RunResult r = run(tool("dl-bench"), {"gemm", "--device", "cuda", "--sizes", "64", "--repeat", "2", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  // Header, the row, a blank line and the method note: the row's FLOP/s, peak and % peak are "-".
  const auto out = lines(r.out);
  REQUIRE(out.size() >= 3);
  CHECK(out[0].find("(emulated)") != std::string::npos);
  CHECK(out[2].find(" -     -       - ") != std::string::npos);
  CHECK(r.out.find(std::string("peak: ") + kNoPeak) != std::string::npos);
}

TEST_CASE("dl-bench memory --device cuda on the emulated device: d2d, h2d and d2h checked, no bandwidth") {
  const json rows =
      bench({"memory", "--device", "cuda", "--bytes", "256KiB", "--repeat", "3", "--warmup", "1", "--format", "json", "-q"});
  REQUIRE(rows.size() == 3);
  std::vector<std::string> directions;
  for (const json& row : rows) {
    check_emulated(row, {"bytes_per_s", "peak_bytes_per_s", "pct_peak"});
    directions.push_back(row["direction"]);
    CHECK(row["bytes"] == 256 * 1024);
    CHECK(row["checked"].get<int64_t>() > 0);
    CHECK(row["wrong"] == 0);
  }
  CHECK(directions == std::vector<std::string>{"d2d", "h2d", "d2h"});
}

TEST_CASE("dl-bench train --device cuda on the emulated device: the step split, no tokens/s or MFU") {
  const json rows = bench({"train", source_path("configs/addition.toml").string(), "--device", "cuda", "--steps", "2",
                           "--warmup", "1", "--set", "model.n_layer=1", "--set", "model.n_embd=32", "--set",
                           "model.n_head=2", "--set", "train.batch_size=4", "--format", "json", "-q"});
  REQUIRE(rows.size() == 1);
  const json& row = rows[0];
  check_emulated(row, {"tokens_per_sec", "samples_per_sec", "mfu", "peak_flops"});
  CHECK(row["model"] == "gpt");
  CHECK(row["batch_tokens"] == 4 * 12);
  CHECK(row["model_params"].get<int64_t>() > 0);
  CHECK(row["step_s"].get<double>() > 0);
  CHECK(row["compute_s"].get<double>() > 0);
}
