// dl-train on the emulated CUDA device (DL_CUDA_EMULATION builds only, ctest `cuda_emulated`):
// the CUDA backend's host code, its kernels (under the warp emulator) and its cuBLASLt calls (the
// emulated runtime) train a small GPT as the CPU backend does, checkpoints move between the two,
// and data-parallel and ZeRO ranks on the emulated device give the one-rank losses. Small shapes:
// the emulator runs each GPU thread as a fiber, so speed is not the point (docs/CUDA.md). A tiny
// Llama too (its kernels inside dl-train's steps), alone and with two ranks.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dl/checkpoint/checkpoint.hpp"
#include "dl/data/dataset.hpp"
#include "dl/dist/comm.hpp"
#include "dl/device/select.hpp"
#include "dl/train/run.hpp"
#include "support/device_runs.hpp"
#include "support/support.hpp"

using namespace dl::test;

namespace {

// A 1-layer GPT (32 wide, 2 heads) on the built-in addition task, 4 sequences of 12 tokens a step.
std::vector<std::string> small_gpt(const fs::path& run_dir, const std::string& device, int steps) {
  return tiny_run("configs/addition.toml", run_dir, device, steps,
                  {"model.n_layer=1", "model.n_embd=32", "model.n_head=2", "train.batch_size=4"});
}

// Loads RUN's newest checkpoint into a one-process trainer on `device` (model, optimizer state,
// trainer state, through load_checkpoint as --resume does) and writes it again under `out` (as the
// next checkpoint would be written). Returns the directory written.
fs::path rewrite_checkpoint(const fs::path& run_dir, const std::string& device, const fs::path& out) {
  const dl::Config cfg = dl::load_run_config(run_dir, {"train.device=" + device});
  dl::Backend& be = dl::select_backend(cfg, false);
  REQUIRE(be.name() == device);
  dl::DataSplits data = dl::open_datasets(cfg.data, cfg.model.block_size, static_cast<uint64_t>(cfg.train.seed));
  dl::parallel::Mesh mesh(dl::parallel::MeshShape{}, dl::dist::make_self_comm());
  std::unique_ptr<dl::Model> model = dl::build_model(cfg, *data.train, be, &mesh);
  dl::parallel::ZeroEngine engine(model->params(), model->param_groups(), mesh.dp(), cfg.parallel, cfg.optim,
                                  cfg.dist.bucket_mb, true);
  model->set_hooks(&engine);
  const dl::TrainerState state = dl::load_checkpoint(dl::latest_good_checkpoint(run_dir / "checkpoints"), *model, &engine);
  dl::CheckpointSource src{*model, engine, mesh.world(), dl::CheckpointLayout{}, {}};
  return dl::save_checkpoint(out, src, state, cfg, 1);
}

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f.good());
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("a checkpoint crosses between the emulated device and the CPU bit for bit (fp32)") {
  TempDir dir("emu-bits");
  // 6 steps on the emulated device: weights and AdamW moments that the device's kernels wrote.
  const fs::path run_dir = dir / "cuda";
  train(with(small_gpt(run_dir, "cuda", 6), {"--set", "train.checkpoint_every=6"}));
  const fs::path original = dl::latest_good_checkpoint(run_dir / "checkpoints");
  // Loaded on the CPU and written from there (as a CPU --resume's next checkpoint would be); that,
  // in a run directory of its own, loaded on the device and written again. Every byte survives:
  // weights, both AdamW moments, the step, data position, RNG and loss-scale state.
  const fs::path on_cpu = rewrite_checkpoint(run_dir, "cpu", dir / "on-cpu");
  const fs::path cpu_run = dir / "cpu-run";
  fs::create_directories(cpu_run / "checkpoints");
  fs::copy(run_dir / "config.toml", cpu_run / "config.toml");
  fs::copy(on_cpu, cpu_run / "checkpoints" / on_cpu.filename(), fs::copy_options::recursive);
  const fs::path back = rewrite_checkpoint(cpu_run, "cuda", dir / "back-on-cuda");
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"}) {
    CAPTURE(file);
    const std::string want = file_bytes(original / file);
    CHECK(file_bytes(on_cpu / file) == want);
    CHECK(file_bytes(back / file) == want);
  }
}

TEST_CASE("20 steps of dl-train --device cuda on the emulated device equal the CPU backend's") {
  TempDir dir("emu-train");
  // fp32 to 1e-5 relative; bf16 and fp16 (loss scaling) within 2%.
  check_20_steps(dir.path(), [](const fs::path& run_dir, const std::string& device) {
    return small_gpt(run_dir, device, 20);
  }, {{"fp32", 1e-5}, {"bf16", 0.02}, {"fp16", 0.02}});
}

// The Llama family's kernels (RMSNorm, RoPE, SwiGLU, the GQA pack/unpack around the attention)
// inside dl-train's steps, untied GQA 4:2 in fp32 and bf16; the tied MQA 4:1 shape in fp32.
TEST_CASE("20 steps of a tiny llama on the emulated device equal the CPU backend's (GQA, untied; MQA, tied)") {
  TempDir dir("emu-llama");
  check_tiny_llama_20_steps(dir.path(), 1e-5);
}

TEST_CASE("a checkpoint written on the emulated device resumes on the CPU, and the CPU's on the emulated device") {
  TempDir dir("emu-resume");
  // cuda 0-4, cpu 5-8, cuda 9-12 in one run directory, against 12 steps on each device alone.
  const fs::path mixed = dir / "mixed";
  auto part = train(small_gpt(mixed, "cuda", 4));
  for (const auto& [device, steps] : std::vector<std::pair<std::string, int>>{{"cpu", 8}, {"cuda", 12}}) {
    const RunResult r = run(tool("dl-train"), {"--resume", mixed.string(), "--device", device, "--steps",
                                               std::to_string(steps), "--json", "-q"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto more = losses_of(r.out);
    REQUIRE(more.begin()->first == steps - 3);  // continues where the other device stopped
    part.insert(more.begin(), more.end());
  }
  const auto cpu = train(small_gpt(dir / "cpu", "cpu", 12));
  const auto cuda = train(small_gpt(dir / "cuda", "cuda", 12));
  REQUIRE(part.size() == 12);
  const double d_cpu = largest_relative_difference(part, cpu), d_cuda = largest_relative_difference(part, cuda);
  MESSAGE("cuda -> cpu -> cuda against cpu alone " << d_cpu << ", against cuda alone " << d_cuda);
  CHECK(d_cpu < 1e-5);
  CHECK(d_cuda < 1e-5);
}

namespace {

// `run` with two ranks (dp=2, each with half of the one rank's batch of 4) at each ZeRO stage
// against one rank: every loss within 1e-5.
void check_two_ranks(const fs::path& dir, const RunArgs& run, const std::vector<int>& zero_stages) {
  const auto one = train(run(dir / "one", "cuda"));
  for (const int zero : zero_stages) {
    CAPTURE(zero);
    const auto two = train(with(run(dir / ("zero" + std::to_string(zero)), "cuda"),
                                {"--nproc-per-node", "2", "--set", "parallel.dp=2", "--set", "train.batch_size=2",
                                 "--set", "parallel.zero=" + std::to_string(zero)}));
    const double d = largest_relative_difference(two, one);
    MESSAGE("zero " << zero << ": largest relative loss difference from one rank " << d);
    CHECK(d < 1e-5);
  }
}

}  // namespace

TEST_CASE("dp=2 and ZeRO 1, 2, 3 with two ranks on the emulated device give the one-rank losses") {
  TempDir dir("emu-dp");
  // train.batch_size is per rank: two ranks of 2 sequences are one rank's batch of 4.
  check_two_ranks(dir.path(), [](const fs::path& run_dir, const std::string& device) {
    return small_gpt(run_dir, device, 6);
  }, {0, 1, 2, 3});
}

TEST_CASE("a tiny llama with two ranks (dp=2; ZeRO-3) on the emulated device gives the one-rank losses") {
  TempDir dir("emu-llama-dp");
  check_two_ranks(dir.path(), [](const fs::path& run_dir, const std::string& device) {
    return small_llama(run_dir, device, 6);
  }, {0, 3});
}
