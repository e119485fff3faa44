#include "dl/bench/train.hpp"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "dl/bench/cuda_bench.hpp"
#include "dl/bench/peaks.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/config/config.hpp"
#include "dl/core/error.hpp"
#include "dl/core/limits.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/parallel.hpp"
#include "dl/dist/launch_env.hpp"
#include "dl/train/trainer.hpp"

namespace dl::bench {

namespace fs = std::filesystem;

namespace {

// A private temporary folder, removed with everything in it when the benchmark ends (also on errors).
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "dlkit-bench-train-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw_runtime("cannot create a temporary run directory under ", fs::temp_directory_path().string());
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

double mean_of(const std::vector<nlohmann::ordered_json>& recs, const char* key) {
  double s = 0;
  for (const auto& r : recs) s += r.value(key, 0.0);
  return recs.empty() ? 0.0 : s / static_cast<double>(recs.size());
}

}  // namespace

double model_flops_utilization(double tokens_per_sec, double flops_per_token, double peak_flops, int64_t devices) {
  if (peak_flops <= 0 || devices <= 0) return 0;
  return tokens_per_sec * flops_per_token / (peak_flops * static_cast<double>(devices));
}

Report run_train_bench(const TrainBenchOptions& o, const CommonOptions& common) {
  const DeviceKind kind = select_device(common.device);
  // --repeat runs of warm-up + --steps steps each; the row reports the median run.
  const int64_t steps = std::min(o.steps == -1 ? 10 : o.steps, example_cap("DL_EXAMPLE_MAX_STEPS").value_or(std::numeric_limits<int64_t>::max()));
  const int64_t warmup = warmup_or(common, 2);
  const int runs = repeat_or(common, 1);
  if (steps < 1 || steps > 1000000) throw_option_error("{steps} ", steps, ": time 1 to 1000000 steps");

  std::vector<std::string> sets = o.overrides;
  if (common.threads > 0) sets.push_back("train.threads=" + std::to_string(common.threads));
  // The benchmark's own settings come last so they win: the step count, a record every step,
  // and no side outputs.
  sets.push_back("train.steps=" + std::to_string(warmup + steps));
  sets.push_back("log.every=1");
  sets.push_back("log.progress=\"none\"");
  sets.push_back("log.tensorboard=false");
  sets.push_back(str("train.device=\"", kind, "\""));
  Config cfg = o.config_path.empty() ? parse_config("", "built-in defaults", fs::current_path(), sets)
                                     : load_config(o.config_path, sets);

  ScratchDir scratch;
  TrainOptions to;
  to.config = cfg;
  to.quiet = true;
  to.env_snapshot = false;
  to.checkpoints = false;
  to.evaluation = false;
  std::vector<nlohmann::ordered_json> timed;  // every run's timed steps
  std::vector<double> run_medians;            // each run's median step time
  TrainSummary summary;
  for (int run = 0; run < runs; ++run) {
    std::vector<double> step_times;
    to.run_dir = scratch.path() / ("run" + std::to_string(run));
    to.on_record = [&](const nlohmann::ordered_json& rec) {
      if (!rec.contains("step_s") || rec.value("step", int64_t{0}) <= warmup) return;
      timed.push_back(rec);
      step_times.push_back(rec.value("step_s", 0.0));
    };
    log_info(str("train: ", o.config_path.empty() ? std::string("built-in config") : o.config_path, ", run ", run + 1,
                 " of ", runs, ": ", warmup, " warm-up + ", steps, " timed steps (dl-train's training loop)"));
    summary = run_training(to);
    set_log_quiet(common.quiet);  // the trainer silenced logs for its run
    if (summary.rank != 0) return {};
    if (step_times.empty()) throw_runtime("train benchmark: the trainer reported no timed steps");
    run_medians.push_back(summarize(step_times).median);
  }

  std::vector<double> step_times;
  for (const auto& r : timed) step_times.push_back(r.value("step_s", 0.0));
  Timing t = summarize(step_times);
  t.median = summarize(run_medians).median;  // the median run's median step
  const double batch_tokens = std::round(timed.front().value("tokens_per_sec", 0.0) * timed.front().value("step_s", 0.0));
  const double tokens_per_sec = batch_tokens / t.median;
  const double units = is_token_model(cfg.model.type) ? static_cast<double>(cfg.model.block_size) : 1.0;
  const plan::ModelShape shape = plan::model_from_config(cfg, o.config_path);
  const double fpt = plan::flops_per_token(shape, o.formula);
  const int64_t world = dist::detect_launch_env(dist::process_environment()).world;

  DeviceInfo dev = cpu_device_info();  // after the run: the thread count the trainer used
  dev.library = openblas_library().first;
  dev.library_config = openblas_library().second;
#ifdef DL_HAVE_CUDA
  if (kind == DeviceKind::cuda) {
    dev = cuda_bench_device().info;
    dev.library = "dlkit CUDA backend (kernels/, cuBLASLt)";
  }
#endif
  dev.num_devices = world;
  const Peak peak = compute_peak(dev, math_precision(cfg.train.precision));

  Report report;
  Row r = common_row("train", dev, runs, static_cast<int>(warmup));
  r["steps"] = steps;
  r["config"] = o.config_path.empty() ? std::string("(built-in defaults)") : o.config_path;
  r["model"] = cfg.model.type;
  r["model_params"] = summary.params;
  r["flops_per_token"] = fpt;
  r["flop_formula"] = plan::flop_formula_name(o.formula);
  r["precision"] = cfg.train.precision;
  r["world"] = world;
  r["batch_tokens"] = static_cast<int64_t>(batch_tokens);
  r["tokens_per_sec"] = tokens_per_sec;
  r["samples_per_sec"] = tokens_per_sec / units;
  r["mfu"] = peak.value ? Row(model_flops_utilization(tokens_per_sec, fpt, *peak.value, world)) : Row(nullptr);
  r["peak_flops"] = peak.value ? Row(*peak.value) : Row(nullptr);
  r["peak_source"] = peak.source;
  r["step_s"] = t.median;
  r["step_min_s"] = t.min;
  r["step_max_s"] = t.max;
  r["compute_s"] = mean_of(timed, "time_compute_s");
  r["comm_s"] = mean_of(timed, "time_comm_s");
  r["data_s"] = mean_of(timed, "time_data_s");
  r["pipeline_wait_s"] = mean_of(timed, "time_pipeline_wait_s");
  r["optimizer_s"] = mean_of(timed, "time_optimizer_s");
  report.rows.push_back(std::move(r));
  report.notes.push_back(str("train: MFU = tokens/s x FLOPs per token / (peak x devices), FLOPs per token by ",
                             plan::flop_formula_name(o.formula), " = ", format_si(fpt, "FLOP"), "; peak: ", peak.source,
                             "; step split = mean seconds per timed step"));
  return report;
}

}  // namespace dl::bench
