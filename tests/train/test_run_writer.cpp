// One process writes a run directory (io/dir_lock.hpp, train/build.cpp take_run_dir): two new
// runs started together on one --run-dir, --resume of a live run, kill -9 of the holder; and the
// ways a run ends that must say so: before its first checkpoint, past `ulimit -f`, at a second
// Ctrl-C; --steps below 0.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "dl/config/config.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"
#include "train/run_files.hpp"

using namespace dl::test;

namespace {

RunResult run_trainer(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  std::vector<std::string> e = {kNoProbes};  // env.lock's probes would be most of a tiny run's time
  e.insert(e.end(), env.begin(), env.end());
  return run(tool("dl-train"), args, "", e, 60);
}

std::unique_ptr<Process> start_trainer(const std::vector<std::string>& args) {
  return std::make_unique<Process>(tool("dl-train"), args, std::vector<std::string>{kNoProbes});
}

bool logged_step(const std::string& line, int64_t step) { return has(line, "\"step\":" + std::to_string(step) + ","); }

double elapsed_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Whether the process has a signal of `sig` pending (not yet delivered to its handler).
bool signal_pending(int pid, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("ShdPnd:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1;
  return false;
}

}  // namespace

TEST_CASE("two new runs started together on one --run-dir: exactly one trains, the other exits 2 having written nothing") {
  TempDir d("race");
  write_file(d / "c.toml", tiny_gpt({{"train.steps", "2"}}));
  // What a lone run leaves, by name.
  REQUIRE(run_trainer({(d / "c.toml").string(), "--run-dir", (d / "alone").string(), "-q"}).exit_code == 0);
  const auto alone = tree(d / "alone");
  // A shell starts each race's two runs (seeds 1 and 2) within a millisecond, every race of a
  // batch at once; DIR.outS, DIR.errS, DIR.pidS and DIR.codeS record run S.
  const char* races = R"(T=$0; C=$1; shift
for D in "$@"; do for S in 1 2; do
  "$T" "$C" --run-dir "$D" --set train.seed=$S --json -q > "$D.out$S" 2> "$D.err$S" & echo $! > "$D.pid$S"
done; done
for D in "$@"; do for S in 1 2; do read P < "$D.pid$S"; wait $P; echo $? > "$D.code$S"; done; done)";
  constexpr int kRaces = 50, kAtOnce = 10;
  int refused_live = 0, refused_done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int first = 0; first < kRaces; first += kAtOnce) {
    std::vector<std::string> args = {"-c", races, tool("dl-train"), (d / "c.toml").string()};
    for (int i = first; i < first + kAtOnce; ++i) args.push_back((d / ("r" + std::to_string(i))).string());
    REQUIRE(run("/bin/sh", args, "", {kNoProbes}, 120).exit_code == 0);
    for (int i = first; i < first + kAtOnce; ++i) {
      const std::string dir = (d / ("r" + std::to_string(i))).string();
      auto of = [&](const char* what, int s) { return read_file(dir + "." + what + std::to_string(s)); };
      CAPTURE(i);
      CAPTURE(of("err", 1));
      CAPTURE(of("err", 2));
      const int c1 = std::stoi(of("code", 1)), c2 = std::stoi(of("code", 2));
      REQUIRE(((c1 == 0 && c2 == 2) || (c1 == 2 && c2 == 0)));
      const int w = c1 == 0 ? 1 : 2, l = 3 - w;
      const std::string lost = of("err", l), winner = std::to_string(std::stoi(of("pid", w)));
      const bool live = has(lost, "is in use by process " + winner + ",");
      const bool done = has(lost, "already exists and is not empty: continue it with --resume");
      CHECK((live || done));
      refused_live += live, refused_done += done;
      CHECK(of("out", l).empty());
      // The directory holds the winner's seed, config and steps, and what a lone run writes.
      CHECK(dl::load_config(fs::path(dir) / "config.toml").train.seed == w);
      CHECK(read_file(fs::path(dir) / "metrics.jsonl") == of("out", w));
      CHECK(losses_of(of("out", w)).size() == 2);
      CHECK(tree(dir) == alone);
    }
  }
  MESSAGE(kRaces << " races in " << elapsed_since(t0) << " s; the loser found the winner running " << refused_live
                 << " times, finished " << refused_done << " times");
}

TEST_CASE("--resume of a live run exits 2 naming its PID; after kill -9 of that run, --resume starts at once") {
  TempDir d("live");
  write_file(d / "c.toml", tiny_gpt({{"train.steps", "100000"}, {"train.checkpoint_every", "2"}}));
  const fs::path run_dir = d / "run";
  auto live = start_trainer({(d / "c.toml").string(), "--run-dir", run_dir.string(), "--json", "-q"});
  REQUIRE(live->wait_for_line([](const std::string& l) { return logged_step(l, 3); }, 60));  // checkpoint 2 is in
  const std::string pid = std::to_string(live->pid());

  RunResult resume = run_trainer({"--resume", run_dir.string(), "--steps", "4"});
  CHECK(resume.exit_code == 2);
  CHECK(has(resume.err, "run directory " + run_dir.string() + " is in use by process " + pid + ","));
  CHECK(resume.out.empty());
  RunResult fresh = run_trainer({(d / "c.toml").string(), "--run-dir", run_dir.string()});
  CHECK(fresh.exit_code == 2);
  CHECK(has(fresh.err, "run directory " + run_dir.string() + " is in use by process " + pid + ","));

  live->send_signal(SIGKILL);
  CHECK(live->wait(30) == 128 + SIGKILL);
  const int64_t last = checkpoint_steps(run_dir).back();
  const auto t0 = std::chrono::steady_clock::now();
  RunResult after = run_trainer({"--resume", run_dir.string(), "--steps", std::to_string(last + 1), "--json"});
  INFO(after.err);
  CHECK(after.exit_code == 0);
  CHECK(has(after.err, "resumed from"));
  CHECK(losses_of(after.out).count(last + 1) == 1);
  MESSAGE("resume after kill -9: " << elapsed_since(t0) << " s");
}

TEST_CASE("a run that failed before its first checkpoint: a new run there exits 2, --resume trains it again from step 0") {
  TempDir d("nockpt");
  write_file(d / "c.toml", tiny_gpt({{"train.steps", "3"}}));
  const fs::path run_dir = d / "run";
  // Its only checkpoint, the final one, cannot be written.
  RunResult failed = run_trainer({(d / "c.toml").string(), "--run-dir", run_dir.string(), "-q"},
                                 {"DL_FAULT=op=open,file=*model.safetensors,err=ENOSPC"});
  REQUIRE(failed.exit_code == 1);
  REQUIRE(checkpoint_steps(run_dir).empty());
  REQUIRE(losses_of(read_file(run_dir / "metrics.jsonl")).size() == 3);

  RunResult again = run_trainer({(d / "c.toml").string(), "--run-dir", run_dir.string()});
  CHECK(again.exit_code == 2);
  CHECK(has(again.err, "already exists and is not empty: continue it with --resume " + run_dir.string()));

  RunResult resumed = run_trainer({"--resume", run_dir.string(), "--json"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(has(resumed.err, "has no checkpoint"));
  CHECK(checkpoint_steps(run_dir) == std::vector<int64_t>{3});
  // The same run as one that never failed: its records once, bit for bit.
  RunResult clean = run_trainer({(d / "c.toml").string(), "--run-dir", (d / "clean").string(), "--json"});
  REQUIRE(clean.exit_code == 0);
  CHECK(read_file(run_dir / "metrics.jsonl") == resumed.out);
  CHECK(losses_of(resumed.out) == losses_of(clean.out));
  CHECK(read_file(run_dir / "config.toml") == read_file(d / "clean" / "config.toml"));
}

TEST_CASE("--steps below 0 exits 2 naming --steps, before anything is written") {
  TempDir d("steps");
  write_file(d / "c.toml", kTinyGpt);
  RunResult r = run_trainer({(d / "c.toml").string(), "--run-dir", (d / "run").string(), "--steps", "-5"});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "--steps"));
  CHECK_FALSE(fs::exists(d / "run"));
}

TEST_CASE("past `ulimit -f` a run exits 1 naming the file it could not write, not silently by SIGXFSZ") {
  TempDir d("fsize");
  write_file(d / "c.toml", kTinyGpt);
  // 24 blocks (12 KiB in dash, 24 KiB in bash): the 8.3 KB config and the metrics fit, the 30 KB model does not.
  RunResult r = run("/bin/sh", {"-c", "ulimit -f 24 && exec \"$0\" \"$@\"", tool("dl-train"), (d / "c.toml").string(),
                                "--run-dir", (d / "run").string(), "-q"},
                    "", {kNoProbes}, 60);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(has(r.err, "dl-train: error: "));
  CHECK(has(r.err, "model.safetensors"));
  CHECK(has(r.err, "File too large"));
}

TEST_CASE("a second Ctrl-C stops at once, saying it leaves no checkpoint") {
  TempDir d("twice");
  // Steps of tens of milliseconds: the second signal lands while the first one's step is running.
  write_file(d / "c.toml", tiny_gpt({{"model.n_embd", "128"}, {"model.block_size", "64"}, {"train.batch_size", "32"},
                                     {"train.steps", "100000"}}));
  const fs::path run_dir = d / "run";
  auto p = start_trainer({(d / "c.toml").string(), "--run-dir", run_dir.string(), "--json"});
  REQUIRE(p->wait_for_line([](const std::string& l) { return logged_step(l, 2); }, 60));
  p->send_signal(SIGINT);
  // Two signals sent together would merge into one; the second goes once the first is handled.
  for (int i = 0; i < 2000 && signal_pending(p->pid(), SIGINT); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
  p->send_signal(SIGINT);
  CHECK(p->wait(30) == 130);
  INFO(p->err());
  CHECK(has(p->err(), "dl-train: interrupted again: stopping immediately, without a checkpoint"));
  CHECK(checkpoint_steps(run_dir).empty());
  CHECK_FALSE(fs::exists(run_dir / "summary.json"));
}
