// Running a sweep: each trial is an ordinary dl-train run directory under the sweep directory,
// started as a child process (no shell) with its parameters as --set overrides; --jobs N run at
// once, each with 1/N of the cores. The state (every trial's parameters, rung results and
// status) is rewritten atomically after every event, so `--resume DIR` continues after a kill -9:
// finished trials are not re-run, interrupted ones resume from their checkpoints, and the
// remaining trials are those an uninterrupted sweep would have run (the sampler and the ASHA
// rule are pure functions of earlier results: sampler.hpp, asha.hpp). docs/SWEEPS.md.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "dl/cli/table.hpp"
#include "dl/config/choice.hpp"
#include "dl/sweep/spec.hpp"

namespace dl::sweep {

struct SweepOptions {
  std::filesystem::path sweep_file;  // a new sweep (ignored with resume)
  std::filesystem::path dir;         // the sweep directory (must be new or empty unless resume)
  bool resume = false;
  int64_t jobs = 0;                  // 0: the sweep file's `jobs`
  int64_t steps = 0;                 // > 0: every trial's train.steps (a new sweep; kept for its resume)
  std::filesystem::path trainer;     // the dl-train executable the trials run
  bool quiet = false;                // no per-trial log lines
  bool progress = false;             // the one-line progress display (a terminal)
};

// Where a trial stands; the names are the state file's and the table's.
enum class TrialStatus { pending, ready, running, paused, done, completed, stopped, failed, diverged, interrupted };
inline constexpr std::string_view kTrialStatusNames[] = {"pending", "ready",    "running",  "paused",   "done",
                                                         "completed", "stopped", "failed", "diverged", "interrupted"};
constexpr std::span<const std::string_view> choice_names(TrialStatus) { return kTrialStatusNames; }

struct TrialRecord {
  int64_t id = 0;
  std::vector<std::string> values;  // TOML literals, one per spec param
  std::vector<double> results;      // the metric at each rung reached (one rung without asha)
  bool ended = false;               // failed or diverged
  TrialStatus status = TrialStatus::pending;
  std::string reason;               // why it failed or diverged
  int64_t steps = 0;                // optimizer steps the run has trained
  double seconds = 0;               // wall time of its processes
  bool started() const { return status != TrialStatus::pending; }
};

struct SweepResult {
  SweepSpec spec;
  std::filesystem::path dir;
  std::vector<TrialRecord> trials;
  bool interrupted = false;
};

// Runs (or resumes) a sweep to the end. Throws dl::Error(interrupted) after SIGINT/SIGTERM once
// every trial has saved its checkpoint; usage errors before any trial starts.
SweepResult run_sweep(const SweepOptions& options);

// A sweep directory's state as last written (for `dl-train runs` and tests).
SweepResult read_sweep(const std::filesystem::path& dir);
bool is_sweep_dir(const std::filesystem::path& dir);
std::filesystem::path sweep_state_file(const std::filesystem::path& dir);  // dir/sweep.json
std::filesystem::path trial_dir(const std::filesystem::path& sweep_dir, int64_t id);

// Ranked trials (best first): trial, parameters, metric, steps, time, status, reason.
Table sweep_table(const SweepResult& result);
// The best trial (rank 1), or nullptr when no trial reported the metric (all failed or diverged).
const TrialRecord* best_trial(const SweepResult& result);
// The base config with the best trial's parameters, resolved as dl-train --print-config shows it.
std::string best_config_toml(const SweepResult& result);

}  // namespace dl::sweep
