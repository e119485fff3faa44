// dl-train runs on the CUDA device (a GPU, or the emulated device) against the CPU backend, read
// back as per-step losses: what tests/cuda_emulated and tests/cuda share.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "support/support.hpp"

namespace dl::test {

// dl-train's arguments for CONFIG on `device`: `steps` steps, a loss line every step, nothing
// else written (no evals, checkpoints, samples or TensorBoard), then the `shape` overrides.
inline std::vector<std::string> tiny_run(const std::string& config, const fs::path& run_dir,
                                         const std::string& device, int steps, const std::vector<std::string>& shape) {
  std::vector<std::string> args = {source_path(config).string(), "--device", device, "--steps", std::to_string(steps),
                                   "--run-dir", run_dir.string(), "--json", "-q",
                                   "--set", "train.eval_every=0", "--set", "train.checkpoint_every=0",
                                   "--set", "log.every=1", "--set", "log.samples=0", "--set", "log.tensorboard=false"};
  for (const std::string& s : shape) args.insert(args.end(), {"--set", s});
  return args;
}

// configs/llama-tiny.toml cut to 1 layer, 32 wide: 4 query heads over 2 K/V heads (GQA 4:2) of
// size 8, SwiGLU 48 wide, an untied head over the 256 bytes, 4 sequences of 16 bytes a step.
// `more` changes the shape (the tied MQA case).
inline std::vector<std::string> small_llama(const fs::path& run_dir, const std::string& device, int steps,
                                            const std::vector<std::string>& more = {}) {
  std::vector<std::string> shape = {"model.n_layer=1", "model.n_embd=32", "model.n_head=4", "model.n_kv_head=2",
                                    "model.ffn_hidden=48", "model.block_size=16", "train.batch_size=4",
                                    "schedule.warmup_steps=2"};
  shape.insert(shape.end(), more.begin(), more.end());
  return tiny_run("configs/llama-tiny.toml", run_dir, device, steps, shape);
}

inline std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// step -> loss from dl-train's JSON lines (stdout; under the launcher each line may carry a
// "[rank r] " prefix).
inline std::map<int64_t, double> losses_of(const std::string& out) {
  std::map<int64_t, double> losses;
  for (std::string l : lines(out)) {
    const size_t brace = l.find('{');
    if (brace == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(l.substr(brace));
    if (j.contains("loss")) losses[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return losses;
}

inline std::map<int64_t, double> train(const std::vector<std::string>& args) {
  const RunResult r = run(tool("dl-train"), args, "", {}, 600);
  INFO("dl-train ", args[2], ": ", r.err);
  REQUIRE(r.exit_code == 0);
  return losses_of(r.out);
}

// Largest |a - b| / |b| over the steps both have; every step of `b` must be in `a`.
inline double largest_relative_difference(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  double worst = 0;
  for (const auto& [step, want] : b) {
    REQUIRE(a.count(step) == 1);
    worst = std::max(worst, std::fabs(a.at(step) - want) / std::fabs(want));
  }
  return worst;
}

// A run's arguments for a run directory and a device.
using RunArgs = std::function<std::vector<std::string>(const fs::path& run_dir, const std::string& device)>;

// 20 steps of `run` on the CPU and on the CUDA device in each precision: every step's loss within
// the precision's bar (relative to the CPU's), and the CPU's falls. In bf16 and fp16 the CPU
// rounds 16-bit activations at other places than the CUDA kernels and cuBLASLt.
inline void check_20_steps(const fs::path& dir, const RunArgs& run,
                           const std::vector<std::pair<std::string, double>>& precision_bars) {
  for (const auto& [precision, bar] : precision_bars) {
    CAPTURE(precision);
    const std::vector<std::string> p = {"--set", "train.precision=" + precision};
    const auto cpu = train(with(run(dir / ("cpu-" + precision), "cpu"), p));
    const auto cuda = train(with(run(dir / ("cuda-" + precision), "cuda"), p));
    REQUIRE(cpu.size() == 20);
    const double d = largest_relative_difference(cuda, cpu);
    MESSAGE(precision << ": largest relative loss difference over 20 steps " << d << " (bar " << bar << "), loss "
                      << cpu.rbegin()->second << " -> cpu, " << cuda.rbegin()->second << " -> cuda");
    CHECK(d < bar);
    CHECK(cpu.rbegin()->second < cpu.begin()->second);  // it learns
  }
}

// The tiny llama's 20 steps on the CUDA device against the CPU: GQA 4:2 with an untied head in
// fp32 (within `fp32_bar`) and bf16 (2%), MQA 4:1 with a tied head in fp32.
inline void check_tiny_llama_20_steps(const fs::path& dir, double fp32_bar) {
  check_20_steps(dir / "gqa", [](const fs::path& run_dir, const std::string& device) {
    return small_llama(run_dir, device, 20);
  }, {{"fp32", fp32_bar}, {"bf16", 0.02}});
  check_20_steps(dir / "mqa", [](const fs::path& run_dir, const std::string& device) {
    return small_llama(run_dir, device, 20, {"model.n_kv_head=1", "model.tie_embeddings=true"});
  }, {{"fp32", fp32_bar}});
}

}  // namespace dl::test
