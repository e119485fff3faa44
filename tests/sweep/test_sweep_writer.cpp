// One process runs a sweep directory (io/dir_lock.hpp): a second `sweep --resume`, a new sweep
// there, or a --resume of a running trial exits 2 naming the holder; the trials, child
// processes, hold their own run directories' locks and never the sweep's; after kill -9 of the
// sweep, --resume takes over at once.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

using namespace dl::test;

namespace {

RunResult run_sweep_tool(const std::vector<std::string>& args) { return run(tool("dl-train"), args, "", {kNoProbes}, 60); }

// The PID written in DIR/.lock by its holder; 0 while there is none.
int lock_holder_pid(const fs::path& dir) {
  std::ifstream in(dir / ".lock");
  int pid = 0;
  in >> pid;
  return pid;
}

// Waits (up to 60 s) for a trial process to hold the run directory: its PID, other than `not_pid`.
int wait_for_trial(const fs::path& run_dir, int not_pid) {
  for (int i = 0; i < 6000; ++i) {
    const int pid = lock_holder_pid(run_dir);
    if (pid != 0 && pid != not_pid && ::kill(pid, 0) == 0 && fs::exists(run_dir / "metrics.jsonl")) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

// Whether any open descriptor of process `pid` is `file`.
bool holds_open(int pid, const fs::path& file) {
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec))
    if (fs::read_symlink(fd.path(), ec) == fs::absolute(file)) return true;
  return false;
}

}  // namespace

TEST_CASE("a running sweep's directory: sweep --resume and a new sweep there exit 2 naming its PID; after kill -9, "
          "--resume takes over at once") {
  TempDir d("sweep-writer");
  // One trial that trains until stopped.
  write_file(d / "base.toml", tiny_gpt({{"train.steps", "100000"}, {"train.checkpoint_every", "5"}}));
  write_file(d / "s.toml", "base = \"base.toml\"\n[method]\nname = \"grid\"\n[parameters]\n\"optim.lr\" = [1e-3]\n");
  const fs::path dir = d / "sweep", trial = dir / "trial-0000";
  Process sweep(tool("dl-train"), {"sweep", (d / "s.toml").string(), "--dir", dir.string(), "-q"}, {kNoProbes});
  const int trial_pid = wait_for_trial(trial, 0);
  REQUIRE(trial_pid != 0);
  const std::string sweep_pid = std::to_string(sweep.pid());

  RunResult resume = run_sweep_tool({"sweep", "--resume", dir.string(), "-q"});
  CHECK(resume.exit_code == 2);
  CHECK(has(resume.err, "sweep directory " + dir.string() + " is in use by process " + sweep_pid + ","));
  RunResult fresh = run_sweep_tool({"sweep", (d / "s.toml").string(), "--dir", dir.string(), "-q"});
  CHECK(fresh.exit_code == 2);
  CHECK(has(fresh.err, "sweep directory " + dir.string() + " is in use by process " + sweep_pid + ","));
  RunResult trial_resume = run_sweep_tool({"--resume", trial.string(), "--steps", "3"});
  CHECK(trial_resume.exit_code == 2);
  CHECK(has(trial_resume.err, "is in use by process " + std::to_string(trial_pid) + ","));
  // The sweep's lock stays with the sweep: its trial never inherited the descriptor.
  CHECK(holds_open(sweep.pid(), dir / ".lock"));
  CHECK_FALSE(holds_open(trial_pid, dir / ".lock"));
  CHECK(holds_open(trial_pid, trial / ".lock"));

  sweep.send_signal(SIGKILL);
  CHECK(sweep.wait(30) == 128 + SIGKILL);
  // The trial goes with it (parent-death signal); the kernel drops both locks.
  for (int i = 0; i < 500 && ::kill(trial_pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto t0 = std::chrono::steady_clock::now();
  Process resumed(tool("dl-train"), {"sweep", "--resume", dir.string(), "-q"}, {kNoProbes});
  const int again = wait_for_trial(trial, trial_pid);
  CHECK(again != 0);
  MESSAGE("the resumed sweep's trial trains "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s after kill -9");
  resumed.send_signal(SIGINT);
  CHECK(resumed.wait(60) == 130);
  const auto state = nlohmann::json::parse(read_file(dir / "sweep.json"));
  CHECK(state["trials"][0]["status"] == "interrupted");
}
