// dl-shard plan against the emulated device's arena (DL_CUDA_EMULATION builds, ctest
// `cuda_emulated`): the memory dl-shard plans for a small GPT on one GPU is what dl-train's device
// arena actually hands out, the check scripts/gpu-check.sh's `memory` stage makes on a real GPU
// (within 10%). The backend's own buffers (cuBLASLt workspace, reduction scratch) are in the
// plan's overhead allowance, so both sides leave them out.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/support.hpp"

using namespace dl::test;
using nlohmann::json;

TEST_CASE("dl-shard plan's memory for a small GPT matches the emulated device arena's peak (fp32, bf16)") {
  TempDir dir("emu-memory");
  // A byte-level GPT on text: activations, logits and model states all of a size that counts.
  const std::vector<std::string> shape = {"--set", "model.n_layer=2", "--set", "model.n_embd=64", "--set",
                                          "model.n_head=4", "--set", "model.block_size=64", "--set",
                                          "train.batch_size=8"};
  const std::string config = source_path("configs/text.toml").string();
  for (const std::string precision : {"fp32", "bf16"}) {
    CAPTURE(precision);
    const fs::path run_dir = dir / precision;
    std::vector<std::string> train = {config, "--device", "cuda", "--steps", "1", "--run-dir", run_dir.string(), "-q",
                                      "--set", "train.precision=" + precision, "--set", "train.eval_every=0", "--set",
                                      "train.eval_batches=1", "--set", "train.checkpoint_every=0", "--set",
                                      "log.tensorboard=false", "--set", "log.samples=0"};
    train.insert(train.end(), shape.begin(), shape.end());
    const RunResult t = run(tool("dl-train"), train, "", {}, 600);
    INFO(t.err);
    REQUIRE(t.exit_code == 0);
    std::vector<std::string> plan = {"plan", config, "--gpus", "1", "--gpu-mem", "80GB", "--precision", precision,
                                     "--zero", "0", "--attention", "flash", "--format", "json"};
    plan.insert(plan.end(), shape.begin(), shape.end());
    const RunResult p = run(tool("dl-shard"), plan);
    INFO(p.err);
    REQUIRE(p.exit_code == 0);

    const json measured = json::parse(std::ifstream(run_dir / "memory.json"))["ranks"][0];
    const json planned = json::parse(p.out)[0];
    // Model states are the same bytes on both sides; activations are the plan's formula.
    CHECK(measured["params_bytes"].get<double>() == planned["params_bytes"].get<double>());
    CHECK(measured["grads_bytes"].get<double>() == planned["grads_bytes"].get<double>());
    CHECK(measured["optimizer_bytes"].get<double>() == planned["optimizer_bytes"].get<double>());
    const double peak = measured["device_peak_bytes"].get<double>() - measured["device_backend_bytes"].get<double>();
    const double want = planned["total_bytes"].get<double>() - planned["overhead_bytes"].get<double>();
    REQUIRE(want > 0);
    const double ratio = peak / want;
    MESSAGE(precision << ": arena peak " << peak << " bytes (less the backend's own "
                      << measured["device_backend_bytes"].get<double>() << ") against the plan's " << want
                      << ": ratio " << ratio);
    CHECK(std::fabs(ratio - 1) <= 0.10);
  }
}
