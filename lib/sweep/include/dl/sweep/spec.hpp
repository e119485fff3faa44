// A sweep file (TOML): the base config, the metric and its goal, the search method, the
// parameters (config keys with a list of values or a distribution) and early stopping.
// load_sweep() validates all of it before any trial runs; every error names the file, the line
// and the key (docs/SWEEPS.md has the format).
#pragma once
#include "dl/cli/table.hpp"
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dl/config/choice.hpp"

namespace dl {
struct Config;
}

namespace dl::sweep {

// The sweep file's choices; each table is the file's spelling (goal, method.name, early_stopping.type).
enum class Goal { minimize, maximize };
enum class Method { grid, random, tpe };
enum class EarlyStopping { none, asha };
inline constexpr std::string_view kGoalNames[] = {"minimize", "maximize"};
inline constexpr std::string_view kMethodNames[] = {"grid", "random", "tpe"};
inline constexpr std::string_view kEarlyStoppingNames[] = {"none", "asha"};
constexpr std::span<const std::string_view> choice_names(Goal) { return kGoalNames; }
constexpr std::span<const std::string_view> choice_names(Method) { return kMethodNames; }
constexpr std::span<const std::string_view> choice_names(EarlyStopping) { return kEarlyStoppingNames; }
// values: a list (grid points; sampled methods pick one uniformly). The rest are distributions.
enum class Distribution { values, uniform, log_uniform, int_uniform, choice };

std::string method_name(Method m);
std::string distribution_name(Distribution d);

struct Param {
  std::string key;                  // config key, "optim.lr"
  Distribution distribution = Distribution::values;
  std::vector<std::string> values;  // values / choice: each as a TOML literal ("0.001", "\"sgd\"")
  double min = 0, max = 0;          // uniform, log_uniform, int_uniform (inclusive)
  bool is_int = false;              // the config key holds an integer
  std::string where;                // "sweep.toml:12", for errors
  bool categorical() const { return distribution == Distribution::values || distribution == Distribution::choice; }
};

struct Asha {
  int64_t min_steps = 0;  // the first rung
  int64_t eta = 3;        // rungs at min_steps x eta^k; the top 1/eta continue
  int64_t max_steps = 0;  // the last rung (default: the base config's train.steps)
  // min_steps, min_steps*eta, ... below max_steps, then max_steps.
  std::vector<int64_t> rungs() const;
};

// The most trials a sweep may run (a grid's points or method.trials): each is a dl-train process
// with its own run directory, and the sweep's state keeps a record per trial.
inline constexpr int64_t kMaxTrials = 100000;
// The most trials at once (jobs, --jobs) and ranks per trial (nproc_per_node): dl-train's limits.
inline constexpr int64_t kMaxJobs = 1024;
inline constexpr int64_t kMaxRanksPerTrial = 4096;

struct SweepSpec {
  std::filesystem::path file;         // the sweep file as given (errors name it)
  std::filesystem::path base_config;  // absolute
  std::string metric = "val_loss";
  Goal goal = Goal::minimize;
  Method method = Method::grid;
  uint64_t seed = 0;
  int64_t trials = 0;       // grid: the grid's size
  int64_t startup = 10;     // tpe: random trials before the model is used
  int64_t batch = 4;        // tpe: trials sampled from the same observations (see docs/SWEEPS.md)
  std::vector<Param> params;
  std::optional<Asha> asha;
  int64_t jobs = 1;          // trials at once (--jobs overrides)
  int64_t nproc_per_node = 1;  // ranks per trial (dl-train --nproc-per-node)
  int64_t base_steps = 0;    // the base config's train.steps, or the steps given to load_sweep
  int64_t steps_override = 0;  // dl-train sweep --steps: every trial's train.steps (0: the base config's)
  bool base_decay_steps_set = false;  // the base config fixes schedule.decay_steps itself

  // Steps a trial trains when it is not stopped early.
  int64_t full_steps() const { return asha ? asha->max_steps : base_steps; }
  bool better(double a, double b) const { return goal == Goal::minimize ? a < b : a > b; }
};

// Reads and validates a sweep file. `text` replaces the file's content when given (a sweep
// resumed from its state file); relative paths still resolve against the file's folder.
// `steps` > 0 (dl-train sweep --steps) replaces the base config's train.steps for every trial, and
// with asha early_stopping.max_steps, the last rung (a usage error naming {steps} when it is below
// min_steps), as dl-train --steps replaces train.steps.
SweepSpec load_sweep(const std::filesystem::path& file, const std::optional<std::string>& text = std::nullopt,
                     int64_t steps = 0);

// True when a TOML file is a sweep file (it has a [parameters] table), not a training config.
bool is_sweep_file(const std::filesystem::path& file);

// The metrics a dl-train run with this config writes to metrics.jsonl (step records and, with a
// validation split, evaluation records). Guarded against drift by tests/sweep/test_sweep_cli.cpp.
std::vector<std::string> reported_metrics(const Config& base);

// A parameter's value as shown to people: "0.001", "sgd".
std::string display_value(const std::string& toml_literal);

// A parameter's value as a table cell: a number keeps its full value for json and csv and shows
// 4 significant digits in a table (0.013172493938307108 as "0.01317"; integers as written);
// anything else its display_value().
Cell value_cell(const std::string& toml_literal);

}  // namespace dl::sweep
