// dl-train's sizes against the machine (lib/train/limits.cpp): a value beyond what this process
// may use exits 2 within seconds, naming the key and the limit, before the run directory exists.
// Each case runs under `ulimit -v 4000000` (support's run_limited), where the old trainer
// allocated until it was killed, started 100k threads, or hung building the model.
#include <doctest/doctest.h>

#include <chrono>

#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

using namespace dl::test;

namespace {

struct LimitCase {
  std::vector<std::string> sets;  // --set KEY=VALUE
  std::vector<std::string> env;
  std::string names;              // what the message must name
};

// Runs the tiny GPT with the case's settings under the address-space limit and checks exit 2,
// the key in the message, a few seconds, and nothing created beside the config.
void check_refused(const LimitCase& c) {
  TempDir d("limits");
  write_file(d / "c.toml", kTinyGpt);
  std::vector<std::string> args = {(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--set",
                                   "train.device=\"cpu\""};
  for (const auto& s : c.sets) args.insert(args.end(), {"--set", s});
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = run_limited(tool("dl-train"), args, c.env, 60);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAPTURE(r.err);
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, c.names));
  CHECK(seconds < 20);
  CHECK_FALSE(fs::exists(d / "run"));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d.path())) ++entries;
  CHECK(entries == 1);  // c.toml alone
}

}  // namespace

TEST_CASE("limits: a tiny run still trains under ulimit -v 4000000") {
  TempDir d("limits");
  write_file(d / "c.toml", kTinyGpt);
  const RunResult r = run_limited(tool("dl-train"), {(d / "c.toml").string(), "--run-dir", (d / "run").string(),
                                                     "--steps", "2", "-q"});
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(fs::exists(d / "run" / "summary.json"));
}

TEST_CASE("limits: memory the step would need beyond the machine exits 2 naming the key, before the run directory") {
  SUBCASE("train.batch_size = INT64_MAX") {
    check_refused({{"train.batch_size=9223372036854775807"}, {}, "lower train.batch_size"});
  }
  SUBCASE("train.grad_accum = 1e12: the step's micro-batches") {
    check_refused({{"train.grad_accum=1000000000000"}, {}, "lower train.grad_accum"});
  }
  SUBCASE("model.n_layer = 1e8") {
    check_refused({{"model.n_layer=100000000"}, {}, "model.n_layer"});
  }
  SUBCASE("model.n_layer = 2e6: fits no 4 GB process") {
    check_refused({{"model.n_layer=2000000"}, {}, "lower model.n_layer"});
  }
  SUBCASE("the message says how much the process may use and where that comes from") {
    check_refused({{"train.grad_accum=1000000000000"}, {}, "but this process can use at most"});
  }
}

TEST_CASE("limits: threads beyond the cap exit 2 naming train.threads or DL_NUM_THREADS") {
  SUBCASE("train.threads") { check_refused({{"train.threads=100000"}, {}, "train.threads = 100000 is beyond the thread cap"}); }
  SUBCASE("DL_NUM_THREADS") {
    check_refused({{"train.threads=0"}, {"DL_NUM_THREADS=100000"}, "DL_NUM_THREADS = 100000 is beyond the thread cap"});
  }
}

TEST_CASE("limits: a mixture of experts (model.n_experts) is refused by name, before the memory estimate counts its experts") {
  check_refused({{"model.n_experts=8", "model.n_experts_active=2", "model.n_layer=2000000"}, {},
                 "model.n_experts = 8: dl-train's models have no experts"});
}

TEST_CASE("limits: train.steps beyond 1e9 is refused by the schema") {
  check_refused({{"train.steps=9223372036854775807"}, {}, "train.steps"});
}
