#include "dl/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <future>
#include <cmath>
#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/core/parallel.hpp"
#include "dl/core/rng.hpp"
#include "dl/core/version.hpp"
#include "dl/env/env.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/io/tensorboard.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/mlp.hpp"
#include "dl/optim/optimizer.hpp"
#include "dl/train/checkpoint.hpp"
#include "dl/train/generate.hpp"

namespace dl {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// ---------------------------------------------------------------------------------------------
// Building a run from a config.

Backend& select_backend(const TrainConfig& t) {
  if (t.device == "cuda")
    throw_usage("train.device = \"cuda\": this build of dlkit has no CUDA backend; use \"cpu\" (or \"auto\")");
  if (t.precision != "fp32")
    throw_usage("train.precision = \"", t.precision, "\" needs the CUDA backend; the CPU backend trains in fp32");
  if (t.device == "auto") log_info("device auto: no CUDA backend in this build, training on the CPU");
  return cpu_backend();
}

void check_single_process_layout(const ParallelConfig& p) {
  int64_t dp = p.dp < 0 ? 1 : p.dp;
  if (dp * p.tp * p.pp != 1)
    throw_usage("parallel: dp x tp x pp = ", dp * p.tp * p.pp,
                " ranks, but this dl-train runs a single process (multi-process launch is not part of this build)");
  if (p.activation_checkpointing)
    throw_usage("parallel.activation_checkpointing is not supported by this build");
}

std::unique_ptr<Model> build_model(const Config& c, const Dataset& train, Backend& be) {
  if (c.model.type == "gpt") {
    if (!train.is_sequence())
      throw_usage("model.type = \"gpt\" needs token data, but data.source ", c.data.source, " holds feature rows (use model.type = \"mlp\")");
    if (c.model.vocab_size < train.min_vocab_size())
      throw_usage("model.vocab_size = ", c.model.vocab_size, " is smaller than the data's vocabulary (",
                  train.min_vocab_size(), " ids); set model.vocab_size >= ", train.min_vocab_size());
    return std::make_unique<GptModel>(gpt_config_from(c.model), be);
  }
  if (train.is_sequence())
    throw_usage("model.type = \"mlp\" needs feature rows (csv:...), but data.source ", c.data.source, " holds tokens");
  MlpConfig m;
  m.n_inputs = static_cast<int>(train.n_features());
  m.n_classes = static_cast<int>(train.n_classes());
  m.hidden.assign(c.model.hidden.begin(), c.model.hidden.end());
  m.activation = c.model.activation;
  return std::make_unique<MlpModel>(m, be);
}

// Tokens (gpt) or examples (mlp) in one micro-batch row.
int64_t units_per_example(const Model& m, const Config& c) { return m.kind() == "gpt" ? c.model.block_size : 1; }

// ---------------------------------------------------------------------------------------------
// Evaluation and samples.

EvalResult evaluate(Model& model, const Dataset& data, int64_t batch_size, int64_t max_batches) {
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t n = data.size();
  int64_t batches = (n + batch_size - 1) / batch_size;
  if (max_batches > 0) batches = std::min(batches, max_batches);
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<int64_t> ids;
    for (int64_t i = b * batch_size; i < std::min(n, (b + 1) * batch_size); ++i) ids.push_back(i);
    Batch batch = data.make_batch(ids);
    ForwardStats st = model.forward(batch);
    loss_sum += st.loss_sum;
    r.targets += st.targets;
    correct += st.correct;
    if (auto s = data.score(batch, model.correct())) {
      if (!r.task) r.task = TaskScore{s->name, 0, 0};
      r.task->hits += s->hits;
      r.task->total += s->total;
    }
  }
  r.loss = r.targets ? loss_sum / static_cast<double>(r.targets) : 0.0;
  r.accuracy = r.targets ? static_cast<double>(correct) / static_cast<double>(r.targets) : 0.0;
  return r;
}

// Generations for a person to read: the data's own prompts (greedy), or for plain text a
// continuation of the start of a validation window.
std::vector<std::string> demo_samples(Model& model, const Dataset& val, const Tokenizer* tok, int64_t count,
                                      RandomStream& rng) {
  std::vector<std::string> out;
  auto* gpt = dynamic_cast<GptModel*>(&model);
  if (!gpt || !tok || count <= 0) return out;
  auto prompts = val.prompts(count);
  GenerateOptions go;
  if (!prompts.empty()) {
    for (const auto& p : prompts) {
      go.max_tokens = static_cast<int64_t>(p.expected.size()) + 2;
      go.stop = val.stop_text();
      auto ids = generate(*gpt, tok->encode(p.prompt), go, rng);
      out.push_back(val.render(p.prompt, tok->decode(ids)));
    }
    return out;
  }
  if (tok->name() != "bytes") return out;
  Batch b = val.make_batch({0});
  int64_t plen = std::min<int64_t>(24, b.inputs.numel());
  std::vector<int32_t> prompt(b.inputs.data<int32_t>(), b.inputs.data<int32_t>() + plen);
  go.max_tokens = 80;
  go.temperature = 0.8;
  auto ids = generate(*gpt, prompt, go, rng);
  std::string text = tok->decode(prompt) + tok->decode(ids);
  for (char& ch : text)
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  out.push_back(text);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Metrics sinks: metrics.jsonl, TensorBoard, and stdout with --json.

class Metrics {
 public:
  Metrics(const fs::path& run_dir, bool tensorboard, bool to_stdout) : to_stdout_(to_stdout) {
    jsonl_.open(run_dir / "metrics.jsonl");
    if (tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir);
  }
  void record(const ojson& rec) {
    jsonl_.write_ordered(rec);
    if (to_stdout_) {
      std::fputs((rec.dump() + "\n").c_str(), stdout);
      std::fflush(stdout);
    }
    if (tb_) {
      int64_t step = rec.value("step", int64_t{0});
      std::string prefix = rec.contains("val_loss") ? "" : "train/";
      for (const auto& [k, v] : rec.items())
        if (k != "step" && v.is_number()) tb_->add_scalar(prefix + k, static_cast<float>(v.get<double>()), step);
      tb_->flush();
    }
  }

 private:
  JsonlWriter jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
  bool to_stdout_;
};

ojson eval_record(int64_t step, const EvalResult& e) {
  ojson r{{"step", step}, {"val_loss", e.loss}, {"val_accuracy", e.accuracy}};
  if (e.task) r["val_" + e.task->name] = e.task->total ? double(e.task->hits) / double(e.task->total) : 0.0;
  return r;
}

std::string eval_line(int64_t step, const EvalResult& e) {
  std::string s = "eval step " + std::to_string(step) + ": val_loss " + format_fixed(e.loss, 4) + ", accuracy " +
                  format_fixed(100 * e.accuracy, 1) + "%";
  if (e.task && e.task->total)
    s += ", " + e.task->name + " " + format_fixed(100.0 * e.task->hits / e.task->total, 1) + "% (" +
         std::to_string(e.task->hits) + "/" + std::to_string(e.task->total) + ")";
  return s;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool dir_is_empty_or_missing(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return true;
  return fs::is_directory(p, ec) && fs::directory_iterator(p, ec) == fs::directory_iterator();
}

}  // namespace

Config load_run_config(const fs::path& run_dir, const std::vector<std::string>& overrides) {
  fs::path cfg = run_dir / "config.toml";
  if (!fs::exists(cfg)) throw_usage(run_dir.string(), " is not a dl-train run directory (no config.toml)");
  return load_config(cfg, overrides);
}

TrainSummary run_training(const TrainOptions& opt) {
  const Config& cfg = opt.config;
  set_log_quiet(opt.quiet);
  set_num_threads(static_cast<int>(cfg.train.threads));
  Backend& be = select_backend(cfg.train);
  check_single_process_layout(cfg.parallel);
  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);

  // Everything that can reject the run happens before the run directory exists.
  if (!opt.env_lock.empty()) {
    EnvCheckResult env = check_env_lock(opt.env_lock);
    if (env.breaking)
      throw_usage("this machine does not match ", opt.env_lock.string(), " (breaking drift):\n", env.table,
                  "fix the environment or re-lock it with `dl-envlock snapshot -o ", opt.env_lock.string(), "`");
    if (env.drift) log_warn("environment differs from " + opt.env_lock.string() + " (not breaking):\n" + env.table);
  }
  DataSplits data = open_datasets(cfg.data, cfg.model.block_size, seed);
  std::unique_ptr<Model> model = build_model(cfg, *data.train, be);
  Optimizer optimizer(cfg.optim, model->params());
  if (!opt.resume && !dir_is_empty_or_missing(opt.run_dir))
    throw_usage("run directory ", opt.run_dir.string(),
                " already exists and is not empty: continue it with --resume ", opt.run_dir.string(),
                ", or choose another --run-dir");

  TrainerState state;
  state.rng_key = stream_key(seed, "trainer/samples");
  const fs::path ckpt_root = opt.run_dir / "checkpoints";
  fs::path last_ckpt;
  if (opt.resume) {
    last_ckpt = latest_good_checkpoint(ckpt_root);
    state = load_checkpoint(last_ckpt, *model, &optimizer);
    log_info("resumed from " + last_ckpt.string() + " at step " + std::to_string(state.step));
    const int64_t at = state.step;
    // Metrics after the checkpoint were produced by the lost part of the run: drop them.
    if (fs::exists(opt.run_dir / "metrics.jsonl"))
      rewrite_jsonl_keep(opt.run_dir / "metrics.jsonl",
                         [at](const nlohmann::json& j) { return j.value("step", int64_t{0}) <= at; });
  } else {
    model->params().initialize(seed);
    fs::create_directories(ckpt_root);
  }
  write_file_atomic(opt.run_dir / "config.toml", config_to_toml(cfg));
  // The environment snapshot probes the machine (about half a second) while training starts.
  std::future<void> env_snapshot;
  if (opt.env_snapshot) {
    env_snapshot = std::async(std::launch::async, [dir = opt.run_dir] {
      EnvSnapshotOptions eo;
      eo.hash_libraries = false;
      eo.created_by = "dl-train " + version_string();
      try {
        write_env_snapshot(dir / "env.lock", eo);
      } catch (const std::exception& e) {
        log_warn(std::string("could not write the environment snapshot: ") + e.what());
      }
    });
  }
  // Joined on every way out of this function (the future's destructor waits).

  ParamSet& P = model->params();
  const int64_t B = cfg.train.batch_size, A = cfg.train.grad_accum, total = cfg.train.steps;
  const int64_t units = units_per_example(*model, cfg);
  log_info(str(model->kind(), " model, ", P.numel(), " parameters; train data: ", data.train->describe(),
               data.val ? "; val: " + data.val->describe() : ""));
  log_info(str("global batch ", B * A, " x ", units, " = ", B * A * units, model->kind() == "gpt" ? " tokens" : " examples",
               " per step, ", num_threads(), " CPU threads, run directory ", opt.run_dir.string()));

  install_interrupt_handlers();
  Metrics metrics(opt.run_dir, cfg.log.tensorboard, opt.json);
  Sampler sampler(data.train->size(), seed, "data/train");
  RandomStream rng(state.rng_key, state.rng_index);
  const bool bar_wanted = !opt.quiet && (cfg.log.progress == "bar" || cfg.log.progress == "auto");
  ProgressBar bar(total, bar_wanted);
  const bool lines = !opt.quiet && !bar.enabled() && cfg.log.progress != "none";

  TrainSummary summary;
  summary.run_dir = opt.run_dir;
  summary.params = P.numel();
  std::vector<double> rates;
  int64_t last_saved = opt.resume ? state.step : -1;
  int64_t last_eval = -1;
  double session_start = monotonic_seconds();
  const double seconds_before = state.train_seconds;

  auto checkpoint = [&]() {
    if (state.step == last_saved) return;
    state.rng_index = rng.index();
    state.train_seconds = seconds_before + (monotonic_seconds() - session_start);
    bar.finish();
    last_ckpt = save_checkpoint(ckpt_root, *model, &optimizer, state, cfg, cfg.train.keep_checkpoints);
    last_saved = state.step;
    log_info("checkpoint " + last_ckpt.filename().string());
  };
  auto run_eval_now = [&]() {
    if (!data.val || state.step == last_eval) return;
    EvalResult e = evaluate(*model, *data.val, B, cfg.train.eval_batches);
    e.samples = demo_samples(*model, *data.val, data.tokenizer.get(), cfg.log.samples, rng);
    last_eval = state.step;
    ojson rec = eval_record(state.step, e);
    if (!e.samples.empty()) rec["samples"] = e.samples;
    metrics.record(rec);
    bar.finish();
    log_info(eval_line(state.step, e));
    for (const auto& s : e.samples) log_info("  sample: " + s);
    summary.eval = std::move(e);
  };

  double loss = 0;
  while (state.step < total) {
    const double t0 = monotonic_seconds();
    std::vector<Batch> micro;
    int64_t targets = 0;
    for (int64_t a = 0; a < A; ++a) {
      micro.push_back(data.train->make_batch(sampler.examples(state.data_position + a * B, B)));
      const int32_t* t = micro.back().targets.data<int32_t>();
      for (int64_t i = 0; i < micro.back().targets.numel(); ++i) targets += t[i] >= 0;
    }
    const double t1 = monotonic_seconds();
    P.zero_grad();
    double loss_sum = 0;
    for (auto& mb : micro) {
      ForwardStats st = model->forward(mb);
      loss_sum += st.loss_sum;
      // The loss is the mean over every target of the step, so each micro-batch's gradient is
      // scaled by 1 / (targets in the whole step).
      model->backward(targets ? 1.0 / static_cast<double>(targets) : 0.0);
    }
    loss = targets ? loss_sum / static_cast<double>(targets) : 0.0;
    const double gnorm = grad_norm(P);
    const double t2 = monotonic_seconds();
    const int64_t step_no = state.step + 1;
    if (!std::isfinite(loss) || !std::isfinite(gnorm)) {
      bar.finish();
      std::string what = !std::isfinite(loss) ? "loss is " + std::string(std::isnan(loss) ? "NaN" : "Inf")
                                              : "gradient norm is " + std::string(std::isnan(gnorm) ? "NaN" : "Inf");
      // The weights before this step are the last good state, if they are finite.
      if (std::isfinite(be.sum_squares(P.flat_values())) && state.step > 0) checkpoint();
      throw Error(ErrorKind::diverged,
                  str(what, " at step ", step_no, "; the last good checkpoint is ",
                      last_ckpt.empty() ? std::string("(none)") : last_ckpt.string(),
                      " (lower optim.lr, raise schedule.warmup_steps or set optim.grad_clip)"));
    }
    const double lr = learning_rate(cfg.schedule, cfg.optim.lr, state.step, total);
    optimizer.step(lr, clip_scale(gnorm, cfg.optim.grad_clip));
    const double t3 = monotonic_seconds();
    state.step = step_no;
    state.data_position += A * B;
    state.tokens_seen += A * B * units;
    const double step_s = t3 - t0;
    const double rate = static_cast<double>(A * B * units) / step_s;
    rates.push_back(rate);
    const double elapsed = seconds_before + (t3 - session_start);

    if (step_no % cfg.log.every == 0 || step_no == 1 || step_no == total) {
      ojson rec{{"step", step_no},
                {"loss", loss},
                {"lr", lr},
                {"grad_norm", gnorm},
                {"tokens_per_sec", rate},
                {"elapsed_s", elapsed},
                {"time_data_s", t1 - t0},
                {"time_compute_s", t2 - t1},
                {"time_optimizer_s", t3 - t2}};
      metrics.record(rec);
      if (lines)
        log_info(str("step ", step_no, "/", total, " loss ", format_fixed(loss, 4), " lr ", format_si(lr, "", 3),
                     " grad_norm ", format_fixed(gnorm, 3), " ", format_si(rate, model->kind() == "gpt" ? "tok/s" : "ex/s", 3)));
    }
    bar.update(step_no, "loss " + format_fixed(loss, 4) + " | " + format_si(rate, model->kind() == "gpt" ? "tok/s" : "ex/s", 3));

    if (cfg.train.eval_every > 0 && step_no % cfg.train.eval_every == 0 && step_no < total) run_eval_now();
    if (cfg.train.checkpoint_every > 0 && step_no % cfg.train.checkpoint_every == 0) checkpoint();
    if (interrupt_requested()) {
      checkpoint();
      summary.interrupted = true;
      break;
    }
  }
  bar.finish();
  if (!summary.interrupted) run_eval_now();
  checkpoint();

  summary.checkpoint = last_ckpt;
  summary.steps = state.step;
  summary.train_loss = loss;
  summary.tokens_per_sec = median(rates);
  summary.train_seconds = state.train_seconds;

  ojson s{{"status", summary.interrupted ? "interrupted" : "completed"},
          {"steps", summary.steps},
          {"params", summary.params},
          {"final_train_loss", summary.train_loss},
          {"median_tokens_per_sec", summary.tokens_per_sec},
          {"train_seconds", summary.train_seconds},
          {"checkpoint", last_ckpt.string()}};
  if (summary.eval) s["final_eval"] = eval_record(summary.steps, *summary.eval);
  write_file_atomic(opt.run_dir / "summary.json", s.dump(2) + "\n");
  if (summary.interrupted)
    throw Error(ErrorKind::interrupted, str("interrupted by signal ", interrupt_signal(), " at step ", state.step,
                                            "; checkpoint ", last_ckpt.string(), " (continue with --resume ",
                                            opt.run_dir.string(), ")"));
  return summary;
}

// ---------------------------------------------------------------------------------------------
// eval and sample: a model rebuilt from the run's config and its newest good checkpoint.

namespace {
struct LoadedRun {
  Config config;
  DataSplits data;
  std::unique_ptr<Model> model;
  fs::path checkpoint;
  TrainerState state;
};

LoadedRun load_run(const fs::path& run_dir, const std::vector<std::string>& overrides) {
  LoadedRun r;
  r.config = load_run_config(run_dir, overrides);
  set_num_threads(static_cast<int>(r.config.train.threads));
  Backend& be = select_backend(r.config.train);
  r.data = open_datasets(r.config.data, r.config.model.block_size, static_cast<uint64_t>(r.config.train.seed));
  r.model = build_model(r.config, *r.data.train, be);
  r.checkpoint = latest_good_checkpoint(run_dir / "checkpoints");
  r.state = load_checkpoint(r.checkpoint, *r.model, nullptr);
  return r;
}
}  // namespace

EvalReport run_eval(const EvalOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  LoadedRun r = load_run(o.run_dir, overrides);
  EvalReport rep;
  rep.checkpoint = r.checkpoint;
  rep.step = r.state.step;
  const Dataset* target = r.data.val.get();
  DataSplits other;
  if (!o.data.empty()) {
    DataConfig dc = r.config.data;
    dc.source = o.data;
    dc.val_source.clear();
    dc.val_fraction = 0.0;
    other = open_datasets(dc, r.config.model.block_size, static_cast<uint64_t>(r.config.train.seed));
    target = other.train.get();
    rep.data = o.data;
  } else {
    if (!target) throw_usage("the run's data has no validation split (data.val_fraction = 0); pass --data SPEC");
    rep.data = r.config.data.val_source.empty() ? r.config.data.source + " (validation split)" : r.config.data.val_source;
  }
  rep.result = evaluate(*r.model, *target, r.config.train.batch_size, o.max_batches);
  return rep;
}

SampleReport run_sample(const SampleOptions& o) {
  LoadedRun r = load_run(o.run_dir, {});
  auto* gpt = dynamic_cast<GptModel*>(r.model.get());
  if (!gpt) throw_usage("dl-train sample needs a gpt run; ", o.run_dir.string(), " trained a ", r.model->kind(), " model");
  const Tokenizer& tok = *r.data.tokenizer;
  SampleReport rep;
  rep.checkpoint = r.checkpoint;
  rep.step = r.state.step;
  const Dataset* val = r.data.val ? r.data.val.get() : r.data.train.get();
  if (!o.prompt.empty()) {
    rep.prompts.push_back(o.prompt);
  } else {
    for (const auto& p : val->prompts(o.data_prompts)) rep.prompts.push_back(p.prompt);
    if (rep.prompts.empty()) rep.prompts.push_back(tok.name() == "bytes" ? "\n" : "0");
  }
  RandomStream rng(stream_key(o.seed ? o.seed : static_cast<uint64_t>(r.config.train.seed), "sample"));
  GenerateOptions go;
  go.max_tokens = o.tokens;
  go.temperature = o.temperature;
  go.top_k = o.top_k;
  go.stop = val->stop_text();
  for (const auto& p : rep.prompts) {
    std::vector<int32_t> ids = tok.encode(p);
    for (int64_t c = 0; c < std::max<int64_t>(1, o.count); ++c) {
      std::string completion = tok.decode(generate(*gpt, ids, go, rng));
      rep.completions.push_back(completion);
      rep.rendered.push_back(val->render(p, completion));
    }
  }
  return rep;
}

}  // namespace dl
