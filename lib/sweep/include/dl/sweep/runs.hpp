// Comparing runs: `dl-train runs DIR...` reads run directories (config.toml, metrics.jsonl) or
// sweep directories (each trial's run), and shows one row per run with the config keys that
// differ between them and the final metrics, or draws one metric against step for every run as
// a standalone SVG.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dl/cli/table.hpp"

namespace dl::sweep {

struct RunData {
  std::string name;                           // the directory as given ("sweeps/lr/trial-0003")
  std::filesystem::path dir;
  std::map<std::string, std::string> config;  // "optim.lr" -> "0.001" (resolved config.toml)
  std::vector<nlohmann::json> records;        // metrics.jsonl, in order

  // Defined in runs.cpp, where json is complete: this header declares it with json_fwd only.
  RunData();
  RunData(RunData&&) noexcept;
  RunData& operator=(RunData&&) noexcept;
  ~RunData();
};

// Reads each directory: a run, or a sweep whose started trials are read in trial order.
std::vector<RunData> read_runs(const std::vector<std::filesystem::path>& dirs);
// The files read_runs reads for them: each sweep's state file, each run's config.toml and
// metrics.jsonl (what `runs --plot -o FILE` must not overwrite).
std::vector<std::filesystem::path> runs_input_files(const std::vector<std::filesystem::path>& dirs,
                                                    const std::vector<RunData>& runs);

// One row per run: run, the config keys whose values differ, steps, the final value of loss and
// of every val_* metric; with `sparkline`, a column drawing loss against step.
Table runs_table(const std::vector<RunData>& runs, bool sparkline);

// "▁▂▄█": the values scaled into eight levels, at most `width` characters (evenly resampled).
std::string sparkline(const std::vector<double>& values, size_t width = 24);

// The metric against step for every run: axes with ticks and labels, a legend, one <path> per run.
// Each path carries data-run, data-steps and data-values (the metrics file's values, exact),
// and its points are x = left + (step - x_min) / (x_max - x_min) * width,
// y = top + height - (f(value) - f(y_min)) / (f(y_max) - f(y_min)) * height with f = log10 under
// log_y, else the identity; the <svg> element records left, top, width, height, x_min, x_max,
// y_min, y_max and log_y as data-* attributes (docs/SWEEPS.md).
std::string runs_svg(const std::vector<RunData>& runs, const std::string& metric, bool log_y);

}  // namespace dl::sweep
