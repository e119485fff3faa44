// run_training: the loop around train_step (step.cpp), with checkpoints, evaluations and
// metrics on schedule.
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "dl/checkpoint/init_from.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/core/parallel.hpp"
#include "dl/core/rng.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/dir_lock.hpp"
#include "dl/io/input_file.hpp"
#include "dl/device/select.hpp"
#include "dl/train/limits.hpp"
#include "dl/train/run.hpp"

#ifdef DL_HAVE_CUDA
#include "dl/device/cuda/profiler.hpp"
#endif

namespace dl {

namespace fs = std::filesystem;
using parallel::Mesh;

namespace {

// DL_CUDA_PROFILE_STEP: the step to run inside the CUDA profiler's range; unset or empty: none.
int64_t profile_step_from_env() {
  const char* v = std::getenv("DL_CUDA_PROFILE_STEP");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end || n < 1) throw_usage("DL_CUDA_PROFILE_STEP=", v, ": give the number of the step to profile (1 or more)");
  return n;
}

// A new run's initial weights (from the counter-based generator, or model.init_from's folder:
// RUN/init_from.json records which), or a resumed run's state from the newest checkpoint every
// rank has (`last_ckpt`); metrics past that checkpoint were produced by the lost part of the run
// and are dropped.
// A resumed run already at (or past) train.steps: nothing is trained, evaluated or written; the
// summary is the run's own (summary.json said loss 0 and 0 tokens/s when it was rewritten, and the
// last evaluation was logged twice).
TrainSummary finished_run_summary(const TrainOptions& opt, const TrainerState& state, const fs::path& last_ckpt,
                                  int rank, int64_t params) {
  TrainSummary s;
  s.rank = rank;
  s.run_dir = opt.run_dir;
  s.checkpoint = last_ckpt;
  s.steps = state.step;
  s.params = params;
  s.train_seconds = state.train_seconds;
  const fs::path summary = opt.run_dir / "summary.json";
  std::error_code ec;
  if (fs::is_regular_file(summary, ec)) {
    try {
      const auto j = nlohmann::json::parse(read_input_file(summary, "cannot read the run's summary"));
      s.train_loss = j.value("final_train_loss", 0.0);
      s.tokens_per_sec = j.value("median_tokens_per_sec", 0.0);
    } catch (const std::exception& e) {
      log_warn(str(summary.string(), ": ", e.what(), "; the summary shows no loss"));
    }
  }
  if (rank == 0)
    log_info(str(opt.run_dir.string(), " is at step ", state.step, " and train.steps is ", opt.config.train.steps,
                 ": nothing to train (give a larger --steps to continue); ", summary.string(), " is kept"));
  return s;
}

TrainerState start_or_resume(const TrainOptions& opt, bool fresh, const InitFrom* init, Model& model,
                             parallel::ZeroEngine& engine, Mesh& mesh, fs::path* last_ckpt) {
  const uint64_t seed = static_cast<uint64_t>(opt.config.train.seed);
  const fs::path ckpt_root = opt.run_dir / "checkpoints", metrics = opt.run_dir / "metrics.jsonl";
  TrainerState state;
  state.rng_key = stream_key(seed, "trainer/samples");
  if (fresh) {
    // A run resumed before its first checkpoint starts again: what it logged is dropped.
    if (opt.resume && mesh.rank() == 0 && fs::exists(metrics))
      rewrite_jsonl_keep(metrics, [](const nlohmann::json&) { return false; });
    nlohmann::json source;
    if (init) {
      const double t0 = monotonic_seconds();
      init->load(model, engine);
      mesh.world().barrier();  // every rank's pieces are in: the time is the slowest rank's
      source = init->describe();
      source["load_seconds"] = monotonic_seconds() - t0;
      const double open_s = source["open_seconds"].get<double>(), load_s = source["load_seconds"].get<double>();
      log_info(str("loaded ", source["tensors"].get<int64_t>(), " tensors from ", opt.config.model.init_from, " (",
                   source["format"].get<std::string>(), ") in ", format_fixed(open_s + load_s, 3), " s (headers ",
                   format_fixed(open_s, 3), " s, weights ", format_fixed(load_s, 3), " s)"));
    } else {
      engine.initialize(seed);
    }
    if (mesh.rank() == 0) {
      fs::create_directories(ckpt_root);
      if (init) write_file_atomic(opt.run_dir / "init_from.json", source.dump(2) + "\n");
    }
    return state;
  }
  *last_ckpt = agree_on_checkpoint(ckpt_root, mesh.world());
  check_checkpoint_model(*last_ckpt, opt.config.model);  // a change the shapes would not show (n_head)
  state = load_checkpoint(*last_ckpt, model, &engine);
  log_info("resumed from " + last_ckpt->string() + " at step " + std::to_string(state.step));
  const int64_t at = state.step;
  if (mesh.rank() == 0 && fs::exists(metrics))
    rewrite_jsonl_keep(metrics, [at](const nlohmann::json& j) { return j.value("step", int64_t{0}) <= at; });
  return state;
}

// The loop's surroundings on every rank: the run's state, checkpoints and evaluations on
// schedule (collectives), what rank 0 records.
struct Session {
  Session(const TrainOptions& o, const DataSplits& d, Model& m, Mesh& me, parallel::ZeroEngine& e, const LossScaler& sc,
          TrainerState& st, TrainSummary& su, fs::path last, bool fresh)
      : opt(o), data(d), model(m), mesh(me), engine(e), scaler(sc), state(st), summary(su),
        rng(st.rng_key, st.rng_index),
        bar(o.config.train.steps, me.rank() == 0 && !o.quiet &&
                                      (o.config.log.progress == Progress::bar || o.config.log.progress == Progress::automatic)),
        last_ckpt(std::move(last)), last_saved(fresh ? -1 : st.step), seconds_before(st.train_seconds) {
    if (me.rank() != 0) return;
    metrics = std::make_unique<Metrics>(o.run_dir, o.config.log.tensorboard, o.json);
    metrics->on_record = o.on_record;
  }

  const TrainOptions& opt;
  const DataSplits& data;
  Model& model;
  Mesh& mesh;
  parallel::ZeroEngine& engine;
  const LossScaler& scaler;
  TrainerState& state;
  TrainSummary& summary;
  RandomStream rng;
  ProgressBar bar;
  std::unique_ptr<Metrics> metrics;  // rank 0
  fs::path last_ckpt;
  int64_t last_saved, last_eval = -1;
  double session_start = monotonic_seconds(), seconds_before;

  fs::path ckpt_root() const { return opt.run_dir / "checkpoints"; }

  CheckpointTokenizer checkpoint_tokenizer() const {
    if (!data.tokenizer) return {};
    return {data.tokenizer->files(), data.tokenizer->bos_token_id(), data.tokenizer->eos_token_id()};
  }

  void checkpoint() {
    if (state.step == last_saved || !opt.checkpoints) return;
    state.rng_index = rng.index();
    state.loss_scale = scaler.state();
    state.train_seconds = seconds_before + (monotonic_seconds() - session_start);
    bar.finish();
    const parallel::MeshShape& s = mesh.shape();
    CheckpointSource src{model, engine, mesh.world(),
                         CheckpointLayout{s.world(), s.dp, s.tp, s.pp, static_cast<int>(opt.config.parallel.zero)},
                         checkpoint_tokenizer()};
    last_ckpt = save_checkpoint(ckpt_root(), src, state, opt.config, opt.config.train.keep_checkpoints);
    last_saved = state.step;
    log_info("checkpoint " + last_ckpt.filename().string());
  }

  void evaluate_now() {
    if (!data.val || state.step == last_eval || !opt.evaluation) return;
    const Config& cfg = opt.config;
    // train.eval_batches global batches, however the layout cuts them: dp=2 at batch 4 sees the
    // examples dp=1 at batch 8 sees (it saw half, and its val_loss was another number).
    const int64_t examples = cfg.train.eval_batches * cfg.train.batch_size * micro_batches_per_step(cfg) * mesh.shape().dp;
    EvalResult e = evaluate(model, mesh, *data.val, cfg.train.batch_size, examples);
    if (mesh.shape().world() == 1)
      e.samples = demo_samples(model, *data.val, data.tokenizer.get(), cfg.log.samples, rng);
    last_eval = state.step;
    if (metrics) {
      ojson rec = eval_record(state.step, e);
      if (!e.samples.empty()) rec["samples"] = e.samples;
      metrics->record(rec);
      bar.finish();
      log_info(eval_line(state.step, e));
      for (const auto& s : e.samples) log_info("  sample: " + s);
    }
    summary.eval = std::move(e);
  }

  // Keeps the last good checkpoint (the weights before the step, if they are finite on every
  // rank) and throws the diverged error.
  [[noreturn]] void diverged(const StepRecord& r) {
    bar.finish();
    Tensor pn = Tensor::empty({1}, DType::f64);
    pn.data<double>()[0] = engine.param_norm_squared();
    mesh.world().allreduce(pn);
    if (std::isfinite(pn.data<double>()[0]) && state.step > 0) checkpoint();
    std::string what = !std::isfinite(r.loss) ? "loss is " + std::string(std::isnan(r.loss) ? "NaN" : "Inf")
                                              : "gradient norm is " + std::string(std::isnan(r.grad_norm) ? "NaN" : "Inf");
    if (scaler.enabled())
      what += str(" with the fp16 loss scale down to ", scaler.scale(), " after ", scaler.skipped_steps(), " skipped steps");
    throw Error(ErrorKind::diverged,
                str(what, " at step ", r.step, "; the last good checkpoint is ",
                    last_ckpt.empty() ? std::string("(none)") : last_ckpt.string(),
                    " (lower optim.lr, raise schedule.warmup_steps or set optim.grad_clip)"));
  }
};

// The mesh of this world. Every rank refuses a layout that does not fit the world for the same
// reason, so rank 0 alone says why (an outside launcher such as torchrun shows every rank's
// output; dlkit's launcher checks the layout before it starts ranks: check_launch).
parallel::MeshShape layout_for(const Config& cfg, const dist::LaunchEnv& env) {
  try {
    return parallel::resolve_mesh(cfg.parallel, cfg.model, env.world);
  } catch (const Error& e) {
    if (env.rank == 0 || e.kind() != ErrorKind::usage) throw;
    throw_usage("rank ", env.rank, " of ", env.world, ": the config's [parallel] layout is refused (rank 0 says why)");
  }
}

}  // namespace

TrainSummary run_training(const TrainOptions& opt) {
  const Config& cfg = opt.config;
  const dist::LaunchEnv env = dist::detect_launch_env(dist::process_environment());
  const bool root = env.rank == 0;
  const parallel::MeshShape shape = layout_for(cfg, env);
  check_run_limits(cfg, env);  // threads and memory against this machine, before anything is made
  set_log_quiet(opt.quiet || !root);
  set_num_threads(threads_for(cfg.train, env.local_world));
  Backend& be = select_backend(cfg, root);  // device selection: device_select.cpp
  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
  // Everything that can reject the run happens before the run directory exists.
  if (!opt.env_lock.empty() && root) check_machine_against(opt.env_lock);
  DataSplits data = open_datasets(cfg.data, cfg.model.block_size, seed);
  // A new run's pretrained weights, checked (headers only) before anything is written.
  std::unique_ptr<InitFrom> init =
      opt.resume || cfg.model.init_from.empty() ? nullptr : std::make_unique<InitFrom>(cfg.model.init_from, cfg.model);
  check_run_dir(opt);  // early and unlocked: take_run_dir decides

  Mesh mesh(shape, open_world(env, cfg, be, shape));
  std::unique_ptr<Model> model = build_model(cfg, *data.train, be, &mesh);
  parallel::ZeroEngine engine(model->params(), model->param_groups(), mesh.dp(), cfg.parallel, cfg.optim,
                              cfg.dist.bucket_mb, mesh.tp_rank() == 0);
  model->set_hooks(&engine);
  parallel::PipelineRunner runner(*model, mesh.pp(), cfg.parallel.schedule);
  // One writer per run directory: rank 0 holds it from here to the end (a new run's is created
  // and locked at once), and every rank learns whether there is a checkpoint to resume from.
  const RunDir dir = take_run_dir(opt, mesh.world());
  const bool fresh = !dir.checkpoint;
  if (opt.resume && fresh) {
    log_info(str(opt.run_dir.string(), " has no checkpoint (the run stopped before its first): training it again from "
                 "step 0 with its config"));
    if (!cfg.model.init_from.empty()) init = std::make_unique<InitFrom>(cfg.model.init_from, cfg.model);
  }

  fs::path last_ckpt;
  TrainerState state = start_or_resume(opt, fresh, init.get(), *model, engine, mesh, &last_ckpt);
  if (!fresh && state.step >= cfg.train.steps)
    return finished_run_summary(opt, state, last_ckpt, mesh.rank(), count_params(*model, mesh));
  LossScaler scaler = cfg.train.precision == Precision::fp16 ? LossScaler(cfg.train.loss_scale, cfg.train.loss_scale_window)
                                                    : LossScaler();
  if (!fresh) scaler.restore(state.loss_scale);
  if (cfg.train.precision != Precision::fp32 && root)
    log_info(str("mixed precision: ", cfg.train.precision, " compute, fp32 master weights",
                 scaler.enabled() ? str(", dynamic loss scale from ", format_si(scaler.scale(), "", 3)) : std::string()));
  // Joined on every way out (the future's destructor waits).
  std::future<void> env_snapshot = root ? write_run_files(opt, data.tokenizer.get()) : std::future<void>();
  mesh.world().barrier();

  // Micro-batches per step: gradient accumulation times pipeline micro-batches.
  const int64_t B = cfg.train.batch_size, A = micro_batches_per_step(cfg), total = cfg.train.steps;
  const int64_t stop_at = opt.max_steps_here < 0 ? total : std::min(total, state.step + opt.max_steps_here);
  const int64_t units = units_per_example(*model, cfg), global_examples = B * A * shape.dp;
  const bool tokens = is_token_model(model->type());
  const std::string unit = tokens ? "tok/s" : "ex/s";
  TrainSummary summary;
  summary.run_dir = opt.run_dir;
  summary.rank = mesh.rank();
  summary.params = count_params(*model, mesh);
  log_info(str(model->kind(), " model, ", summary.params, " parameters; train data: ", data.train->describe(),
               data.val ? "; val: " + data.val->describe() : ""));
  log_info(str("global batch ", global_examples, " x ", units, " = ", global_examples * units,
               tokens ? " tokens" : " examples", " per step (", B, " per micro-batch x ", A,
               " accumulation x ", shape.dp, " data-parallel), ", num_threads(), " CPU threads per rank, run directory ",
               opt.run_dir.string()));

  install_interrupt_handlers(str(", without a checkpoint (dl-train --resume ", opt.run_dir.string(), " continues from the last one)"));
  Session run(opt, data, *model, mesh, engine, scaler, state, summary, last_ckpt, fresh);
  const bool lines = root && !opt.quiet && !run.bar.enabled() && cfg.log.progress != Progress::none;
  Sampler sampler(data.train->size(), seed, "data/train");
  StepParts parts{cfg, *model, mesh, engine, runner, scaler, *data.train, sampler};
  std::vector<double> rates;

  // DL_CUDA_PROFILE_STEP=N: step N runs inside the CUDA profiler's range (profiler.hpp).
  [[maybe_unused]] const int64_t profile_step = be.device().is_cpu() ? 0 : profile_step_from_env();
  while (state.step < stop_at) {
#ifdef DL_HAVE_CUDA
    if (state.step + 1 == profile_step) cuda_profiler_start();
#endif
    const StepRecord r = train_step(parts, state.step, state.data_position, total);
    if (r.diverged) run.diverged(r);
#ifdef DL_HAVE_CUDA
    if (r.step == profile_step) cuda_profiler_stop();
#endif
    state.step = r.step;
    state.data_position += global_examples;
    state.tokens_seen += global_examples * units;
    summary.train_loss = r.loss;
    const double rate = static_cast<double>(global_examples * units) / r.seconds;
    rates.push_back(rate);
    const double elapsed = run.seconds_before + (monotonic_seconds() - run.session_start);
    if (rates.size() == 1) write_memory_report(opt, mesh, engine, *model, be, summary.params);  // after the first step

    if (r.step % cfg.log.every == 0 || r.step == 1 || r.step == stop_at) {
      ojson rec = step_record(r, rate, elapsed, scaler, mesh.world());
      if (root) run.metrics->record(rec);
      if (lines)
        log_info(str("step ", r.step, "/", total, " loss ", format_fixed(r.loss, 4), " lr ", format_si(r.lr, "", 3),
                     " grad_norm ", format_fixed(r.grad_norm, 3), " ", format_si(rate, unit, 3)));
    }
    run.bar.update(r.step, "loss " + format_fixed(r.loss, 4) + " | " + format_si(rate, unit, 3));
    if (cfg.train.eval_every > 0 && r.step % cfg.train.eval_every == 0 && r.step < stop_at) run.evaluate_now();
    if (cfg.train.checkpoint_every > 0 && r.step % cfg.train.checkpoint_every == 0) run.checkpoint();
    if (r.stop) {
      run.checkpoint();
      summary.interrupted = true;
      break;
    }
  }
  run.bar.finish();
  if (!summary.interrupted) run.evaluate_now();
  run.checkpoint();

  summary.checkpoint = run.last_ckpt;
  summary.steps = state.step;
  summary.tokens_per_sec = median(rates);
  summary.train_seconds = state.train_seconds;
  if (root) write_summary(opt, shape, summary);
  if (summary.interrupted)
    throw Error(ErrorKind::interrupted, str("interrupted at step ", state.step, "; checkpoint ", run.last_ckpt.string(),
                                            " (continue with --resume ", opt.run_dir.string(), ")"));
  return summary;
}

}  // namespace dl
