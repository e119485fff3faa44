// dl-train gives the same bits under DL_NUM_THREADS=1, 2, 3 and 4: losses, gradient norms and
// evaluations of a GPT (fp32 and bf16), a Llama and an MLP, and a run resumed on another thread count.
// The shapes are odd sizes just large enough that the pool and BLAS split the work (when OpenBLAS
// threaded its own GEMMs, each of these runs differed between 1 and 2 threads).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dl/core/rng.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"
#include "train/run_files.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

const std::string kThreadsGpt = threads_gpt();

// An MLP over 129 features and 67 classes (hidden 600 and 50), batches of 1000 rows.
std::string threads_mlp(const fs::path& csv) {
  return "[model]\ntype = \"mlp\"\nhidden = [600, 50]\n[data]\nsource = \"csv:" + csv.string() +
         "\"\nval_fraction = 0.1\nlabel_column = -1\n[optim]\nname = \"adamw\"\nlr = 1e-2\n"
         "[train]\nsteps = 4\nbatch_size = 1000\nthreads = 0\neval_every = 0\ncheckpoint_every = 0\n"
         "[log]\nevery = 1\nprogress = \"none\"\ntensorboard = false\nenv_lock = false\n";
}

void write_random_csv(const fs::path& file, int rows, int features, int classes) {
  std::string text;
  for (int c = 0; c < features; ++c) text += "f" + std::to_string(c) + ",";
  text += "label\n";
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < features; ++c)
      text += std::to_string(2 * dl::uniform_at(7, static_cast<uint64_t>(r * features + c)) - 1) + ",";
    text += std::to_string(static_cast<int>(dl::uniform_at(8, static_cast<uint64_t>(r)) * classes)) + "\n";
  }
  write_file(file, text);
}

// dl-train's metric lines without the ones that measure time: what must be the same bits.
json numbers_of(const std::string& jsonl) {
  json out = json::array();
  for (const auto& line : lines(jsonl)) {
    if (line.empty()) continue;
    json j = json::parse(line);
    for (const char* k : {"tokens_per_sec", "elapsed_s", "step_s", "time_data_s", "time_compute_s", "time_comm_s",
                          "time_pipeline_wait_s", "time_optimizer_s"})
      j.erase(k);
    out.push_back(j);
  }
  return out;
}

RunResult train_on_threads(int threads, const std::vector<std::string>& args) {
  return run(tool("dl-train"), args, "", {"DL_NUM_THREADS=" + std::to_string(threads)});
}

// Trains `config` with 1, 2, 3 and 4 threads; every metric line equals the one-thread run's.
void same_metrics_on_every_thread_count(const TempDir& d, const std::string& name, const std::string& config,
                                        const std::vector<std::string>& sets = {}) {
  write_file(d / (name + ".toml"), config);
  json ref;
  for (int t = 1; t <= 4; ++t) {
    std::vector<std::string> args = {(d / (name + ".toml")).string(), "--run-dir",
                                     (d / (name + "-" + std::to_string(t))).string(), "--json", "-q"};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    RunResult r = train_on_threads(t, args);
    INFO(name, " with ", t, " threads: ", r.err);
    REQUIRE(r.exit_code == 0);
    json got = numbers_of(r.out);
    REQUIRE(got.size() == 5);  // 4 steps and the final evaluation
    if (t == 1) {
      ref = got;
      continue;
    }
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("line ", i, ": 1 thread ", ref[i].dump(), "; ", t, " threads ", got[i].dump());
      CHECK(got[i] == ref[i]);
    }
  }
}

}  // namespace

TEST_CASE("GPT fp32 and bf16, Llama, MLP: the same losses, gradient norms and evaluations with 1, 2, 3 and 4 threads") {
  TempDir d("threads");
  SUBCASE("GPT fp32") { same_metrics_on_every_thread_count(d, "gpt", kThreadsGpt); }
  SUBCASE("GPT bf16") { same_metrics_on_every_thread_count(d, "gpt16", kThreadsGpt, {"train.precision=\"bf16\""}); }
  // Head size 64: the attention tiles of four vectors per row; grouped K/V, RoPE, RMSNorm, SwiGLU.
  SUBCASE("Llama fp32") {
    same_metrics_on_every_thread_count(d, "llama",
                                       threads_gpt({{"model.type", "\"llama\""}, {"model.n_embd", "256"},
                                                    {"model.n_kv_head", "2"}, {"model.ffn_hidden", "300"}}));
  }
  SUBCASE("MLP") {
    write_random_csv(d / "wide.csv", 1200, 129, 67);
    same_metrics_on_every_thread_count(d, "mlp", threads_mlp(d / "wide.csv"));
  }
}

TEST_CASE("a run resumed on another thread count continues bit for bit") {
  TempDir d("threads-resume");
  write_file(d / "c.toml", kThreadsGpt);
  for (const char* precision : {"fp32", "bf16"}) {
    CAPTURE(precision);
    const std::string set = std::string("train.precision=\"") + precision + "\"";
    const std::string full = std::string("full-") + precision, split = std::string("split-") + precision;
    RunResult whole = train_on_threads(1, {(d / "c.toml").string(), "--run-dir", (d / full).string(), "--json", "-q",
                                           "--set", set});
    REQUIRE(whole.exit_code == 0);
    RunResult first = train_on_threads(1, {(d / "c.toml").string(), "--run-dir", (d / split).string(), "--steps", "2",
                                           "--json", "-q", "--set", set});
    REQUIRE(first.exit_code == 0);
    RunResult rest = train_on_threads(3, {"--resume", (d / split).string(), "--steps", "4", "--json", "-q"});
    INFO(rest.err);
    REQUIRE(rest.exit_code == 0);
    // Steps 1-2 from the first part, 3-4 and the final evaluation from the resumed one.
    json a = numbers_of(whole.out), b = numbers_of(first.out), c = numbers_of(rest.out);
    REQUIRE(a.size() == 5);
    REQUIRE(b.size() == 3);
    REQUIRE(c.size() == 3);
    json joined = {b[0], b[1], c[0], c[1], c[2]};
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("line ", i, ": uninterrupted ", a[i].dump(), "; resumed ", joined[i].dump());
      CHECK(joined[i] == a[i]);
    }
  }
}
