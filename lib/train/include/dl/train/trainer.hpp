// The training loop and the two things done with its checkpoints: evaluation and sampling.
// dl-train's main() parses flags into these option structs and calls one function.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <functional>
#include <map>

#include <nlohmann/json_fwd.hpp>

#include "dl/config/config.hpp"
#include "dl/data/dataset.hpp"
#include "dl/nn/model.hpp"

namespace dl {

struct TrainOptions {
  Config config;
  // Created for a new run (missing or empty); a previous run's when resuming. One process writes
  // it at a time: rank 0 holds RUN/.lock (io/dir_lock.hpp) from before the first file is written
  // to the end, and a second writer is refused (usage error naming the holder's PID).
  std::filesystem::path run_dir;
  // Continue run_dir from its newest good checkpoint; a run that has none (it failed before its
  // first) is trained again from step 0 with its config, its old metrics dropped.
  bool resume = false;
  bool json = false;   // metrics records also go to stdout (JSON lines)
  bool quiet = false;  // no progress bar, no info logs
  // A dl-envlock lock this machine must match: breaking drift (CUDA or driver major) refuses to
  // start (usage error with the drift table); other drift is a warning.
  std::filesystem::path env_lock;
  bool env_snapshot = true;  // write RUN/env.lock (dl-envlock's format) describing this machine
  // For programs that drive training (dl-bench): every metrics record rank 0 writes is also
  // passed here, and checkpoints and evaluations can be turned off.
  std::function<void(const nlohmann::ordered_json&)> on_record;
  bool checkpoints = true;
  bool evaluation = true;
  // At most this many steps in this process (-1: up to train.steps), as if the run were stopped
  // there: the learning-rate schedule still follows train.steps and a --resume continues it.
  // dl-train sets it from DL_EXAMPLE_MAX_STEPS (core/limits.hpp), for the examples' test.
  int64_t max_steps_here = -1;
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // fraction of targets predicted exactly (argmax)
  int64_t targets = 0;
  std::optional<TaskScore> task;  // e.g. exact-match of whole answers
  std::vector<std::string> samples;  // rendered generations (gpt with prompts)
};

struct TrainSummary {
  int rank = 0;  // this process's rank; rank 0 reports
  std::filesystem::path run_dir;
  std::filesystem::path checkpoint;  // the last checkpoint written
  int64_t steps = 0;
  int64_t params = 0;
  double train_loss = 0;        // loss of the last step
  double tokens_per_sec = 0;    // median over the run's steps
  double train_seconds = 0;
  std::optional<EvalResult> eval;  // the final evaluation
  bool interrupted = false;
};

// Runs (or resumes) training. Throws dl::Error: usage for bad config/data/checkpoints, diverged
// when the loss or gradients become NaN/Inf (after keeping the last good checkpoint), and
// interrupted after SIGINT/SIGTERM once a checkpoint is written.
TrainSummary run_training(const TrainOptions& options);

// What dl-train's launcher checks once before it starts `world` ranks, `local` of them on this
// node, so that a config every rank would refuse is reported once, not once per rank: the layout
// (parallel.dp x tp x pp against the world size) and this machine's limits (threads, memory).
void check_launch(const Config& config, int world, int local);

// The resolved config of an existing run directory (RUN/config.toml) with overrides applied.
Config load_run_config(const std::filesystem::path& run_dir, const std::vector<std::string>& overrides = {});

// The run directory when none is given: runs/<config stem>-slurm-<job id>[.<step id>] inside a
// Slurm job, the same on every rank of the job step (and the next srun of the job gets its own),
// else runs/<config stem>-<local time, to the second>.
std::filesystem::path default_run_dir(const std::string& config_path, const std::map<std::string, std::string>& env);
// Whether every rank computes the same default_run_dir (Slurm's job id), so ranks started by an
// outside launcher need no --run-dir.
bool default_run_dir_is_shared(const std::map<std::string, std::string>& env);
// <root>/<file's stem>-<local time, to the second>: a fresh directory name for a run or a sweep.
std::filesystem::path timestamped_dir(const std::filesystem::path& root, const std::string& file);

struct EvalOptions {
  std::filesystem::path run_dir;
  std::string data;             // empty: the run's validation split; else a data source spec
  int64_t max_batches = 0;      // 0: the whole split
  std::vector<std::string> overrides;
};
struct EvalReport {
  std::filesystem::path checkpoint;
  int64_t step = 0;
  std::string data;
  EvalResult result;
};
EvalReport run_eval(const EvalOptions& options);

struct SampleOptions {
  std::filesystem::path run_dir;
  std::string prompt;       // empty: the data's own prompts (synthetic tasks) or a newline
  int64_t tokens = 64;      // tokens to generate per prompt
  double temperature = 0;   // 0: greedy
  int64_t top_k = 0;        // 0: no top-k filter
  int64_t count = 1;        // samples per prompt
  int64_t data_prompts = 4; // without a prompt: this many of the data's own prompts
  uint64_t seed = 0;
};
struct SampleReport {
  std::filesystem::path checkpoint;
  int64_t step = 0;
  std::vector<std::string> prompts;
  std::vector<std::string> completions;  // decoded, same order as prompts (count per prompt)
  std::vector<std::string> rendered;     // prompt + completion as the data renders it
};
SampleReport run_sample(const SampleOptions& options);

}  // namespace dl
