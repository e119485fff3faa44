#include "dl/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <future>
#include <thread>
#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/core/parallel.hpp"
#include "dl/core/rng.hpp"
#include "dl/core/version.hpp"
#include "dl/dist/device_comm.hpp"
#include "dl/dist/gloo_comm.hpp"
#include "dl/dist/launch_env.hpp"
#include "dl/env/env.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/io/tensorboard.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/mlp.hpp"
#include "dl/optim/loss_scale.hpp"
#include "dl/optim/optimizer.hpp"
#include "dl/parallel/mesh.hpp"
#include "dl/parallel/pipeline.hpp"
#include "dl/parallel/zero.hpp"
#include "dl/train/checkpoint.hpp"
#include "dl/train/device_select.hpp"
#include "dl/train/generate.hpp"
#include "dl/train/step.hpp"

#ifdef DL_HAVE_CUDA
#include "dl/backend/cuda/cuda_backend.hpp"
#include "dl/backend/cuda/nccl.hpp"
#include "dl/backend/cuda/profiler.hpp"
#endif

namespace dl {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using parallel::Mesh;

namespace {

// ---------------------------------------------------------------------------------------------
// Building a run from a config.

// CPU threads per rank: train.threads, or the cores shared among the ranks on this node.
int threads_for(const TrainConfig& t, int local_ranks) {
  if (t.threads > 0) return static_cast<int>(t.threads);
  if (std::getenv("DL_NUM_THREADS")) return 0;  // the launcher (or the user) chose
  int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, hw / std::max(1, local_ranks));
}

// DL_CUDA_PROFILE_STEP: the step to run inside the CUDA profiler's range; unset or empty: none.
int64_t profile_step_from_env() {
  const char* v = std::getenv("DL_CUDA_PROFILE_STEP");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end || n < 1) throw_usage("DL_CUDA_PROFILE_STEP=", v, ": give the number of the step to profile (1 or more)");
  return n;
}

// The device arena's high-water mark on a GPU backend; 0 on the CPU.
double device_peak_bytes(Backend& be) {
#ifdef DL_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&be)) return static_cast<double>(cuda->arena_stats().peak);
#endif
  (void)be;
  return 0;
}

// The dtype the model computes in: train.precision (16-bit runs keep f32 master weights in the
// ZeRO engine).
DType compute_dtype(const TrainConfig& t) {
  if (t.precision == "bf16") return DType::bf16;
  if (t.precision == "fp16") return DType::f16;
  return DType::f32;
}

std::unique_ptr<Model> build_model(const Config& c, const Dataset& train, Backend& be, Mesh* mesh) {
  if (c.model.type == "gpt") {
    if (!train.is_sequence())
      throw_usage("model.type = \"gpt\" needs token data, but data.source ", c.data.source,
                  " holds feature rows (use model.type = \"mlp\")");
    if (c.model.vocab_size < train.min_vocab_size())
      throw_usage("model.vocab_size = ", c.model.vocab_size, " is smaller than the data's vocabulary (",
                  train.min_vocab_size(), " ids); set model.vocab_size >= ", train.min_vocab_size());
    GptParallel par;
    par.activation_checkpointing = c.parallel.activation_checkpointing;
    if (mesh) {
      par.tp_size = mesh->shape().tp;
      par.tp_rank = mesh->tp_rank();
      par.tp = &mesh->tp();
      par.pp_size = mesh->shape().pp;
      par.pp_rank = mesh->pp_rank();
    }
    return std::make_unique<GptModel>(gpt_config_from(c.model), be, compute_dtype(c.train), par);
  }
  if (c.train.precision != "fp32")
    throw_usage("train.precision = \"", c.train.precision, "\" applies to model.type = \"gpt\"; the mlp trains in fp32");
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

std::unique_ptr<Mesh> single_process_mesh() {
  return std::make_unique<Mesh>(parallel::MeshShape{}, dist::make_self_comm());
}

// ---------------------------------------------------------------------------------------------
// Evaluation: forward only, batches split over data-parallel ranks, through the pipeline.

EvalResult evaluate(Model& model, Mesh& mesh, const Dataset& data, int64_t batch_size, int64_t max_batches) {
  const int64_t n = data.size();
  int64_t batches = (n + batch_size - 1) / batch_size;
  if (max_batches > 0) batches = std::min(batches, max_batches);
  const int dp = mesh.shape().dp;
  double loss_sum = 0, targets = 0, correct = 0, hits = 0, total = 0, has_task = 0;
  std::string task_name;
  const bool counts = reports_loss(model, mesh);
  // Every dp rank runs the same number of forwards (ZeRO-3 gathers parameters collectively in
  // forward); a rank past the end repeats batch 0 and discards it.
  const int64_t rounds = (batches + dp - 1) / dp;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t b = round * dp + mesh.dp_rank();
    const bool real = b < batches;
    const int64_t first = real ? b * batch_size : 0;
    std::vector<int64_t> ids;
    for (int64_t i = first; i < std::min(n, first + batch_size); ++i) ids.push_back(i);
    Batch batch = data.make_batch(ids);
    ForwardStats st = parallel::forward_only(model, mesh.pp(), batch);
    if (!counts || !real) continue;
    loss_sum += st.loss_sum;
    targets += static_cast<double>(st.targets);
    correct += static_cast<double>(st.correct);
    if (auto s = data.score(batch, model.correct())) {
      task_name = s->name;
      has_task = 1;
      hits += static_cast<double>(s->hits);
      total += static_cast<double>(s->total);
    }
  }
  Tensor sums = Tensor::empty({6}, DType::f64);
  double* v = sums.data<double>();
  v[0] = loss_sum, v[1] = targets, v[2] = correct, v[3] = hits, v[4] = total, v[5] = has_task;
  mesh.world().allreduce(sums);
  EvalResult r;
  r.targets = static_cast<int64_t>(v[1]);
  r.loss = v[1] > 0 ? v[0] / v[1] : 0.0;
  r.accuracy = v[1] > 0 ? v[2] / v[1] : 0.0;
  if (v[5] > 0) r.task = TaskScore{task_name.empty() ? "exact_match" : task_name, static_cast<int64_t>(v[3]),
                                   static_cast<int64_t>(v[4])};
  return r;
}

// Generations for a person to read (single process): the data's own prompts (greedy), or for
// plain text a continuation of the start of a validation window.
std::vector<std::string> demo_samples(Model& model, const Dataset& val, const Tokenizer* tok, int64_t count,
                                      RandomStream& rng) {
  std::vector<std::string> out;
  if (model.context_length() == 0 || !tok || count <= 0) return out;
  auto prompts = val.prompts(count);
  GenerateOptions go;
  if (!prompts.empty()) {
    for (const auto& p : prompts) {
      go.max_tokens = static_cast<int64_t>(p.expected.size()) + 2;
      go.stop = val.stop_text();
      auto ids = generate(model, tok->encode(p.prompt), go, rng);
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
  auto ids = generate(model, prompt, go, rng);
  std::string text = tok->decode(prompt) + tok->decode(ids);
  for (char& ch : text)
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  out.push_back(text);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Metrics sinks (rank 0): metrics.jsonl, TensorBoard, and stdout with --json.

class Metrics {
 public:
  Metrics(const fs::path& run_dir, bool tensorboard, bool to_stdout) : to_stdout_(to_stdout) {
    jsonl_.open(run_dir / "metrics.jsonl");
    if (tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir);
  }
  std::function<void(const ojson&)> on_record;
  void record(const ojson& rec) {
    if (on_record) on_record(rec);
    jsonl_.write_ordered(rec);
    if (to_stdout_) {
      // As metrics.jsonl writes it: an invalid UTF-8 byte in a sample becomes U+FFFD.
      std::fputs((rec.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n").c_str(), stdout);
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

// Every rank's numbers gathered to every rank (small vectors: timings, memory).
std::vector<std::vector<double>> gather_rows(dist::Comm& world, const std::vector<double>& mine) {
  const int64_t k = static_cast<int64_t>(mine.size());
  Tensor in = Tensor::empty({k}, DType::f64), out = Tensor::empty({k * world.size()}, DType::f64);
  std::copy(mine.begin(), mine.end(), in.data<double>());
  world.allgather(in, out);
  std::vector<std::vector<double>> rows;
  for (int r = 0; r < world.size(); ++r)
    rows.emplace_back(out.data<double>() + r * k, out.data<double>() + (r + 1) * k);
  return rows;
}

ojson column(const std::vector<std::vector<double>>& rows, size_t i) {
  ojson a = ojson::array();
  for (const auto& r : rows) a.push_back(r[i]);
  return a;
}

}  // namespace

Config load_run_config(const fs::path& run_dir, const std::vector<std::string>& overrides) {
  fs::path cfg = run_dir / "config.toml";
  if (!fs::exists(cfg)) throw_usage(run_dir.string(), " is not a dl-train run directory (no config.toml)");
  return load_config(cfg, overrides);
}

TrainSummary run_training(const TrainOptions& opt) {
  const Config& cfg = opt.config;
  const dist::LaunchEnv env = dist::detect_launch_env(dist::process_environment());
  const bool root = env.rank == 0;
  set_log_quiet(opt.quiet || !root);
  set_num_threads(threads_for(cfg.train, env.local_world));
  Backend& be = select_backend(cfg, root);  // device selection: device_select.cpp
  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
  // Everything that can reject the run happens before the run directory exists.
  parallel::MeshShape shape = parallel::resolve_mesh(cfg.parallel, cfg.model, env.world);
  if (!opt.env_lock.empty() && root) {
    EnvCheckResult envr = check_env_lock(opt.env_lock);
    if (envr.breaking)
      throw_usage("this machine does not match ", opt.env_lock.string(), " (breaking drift):\n", envr.table,
                  "fix the environment or re-lock it with `dl-envlock snapshot -o ", opt.env_lock.string(), "`");
    if (envr.drift) log_warn("environment differs from " + opt.env_lock.string() + " (not breaking):\n" + envr.table);
  }
  DataSplits data = open_datasets(cfg.data, cfg.model.block_size, seed);
  if (!opt.resume && !dir_is_empty_or_missing(opt.run_dir))
    throw_usage("run directory ", opt.run_dir.string(),
                " already exists and is not empty: continue it with --resume ", opt.run_dir.string(),
                ", or choose another --run-dir");

  std::unique_ptr<dist::Comm> world =
      env.distributed() ? dist::make_gloo_world(env, cfg.dist.timeout_s) : dist::make_self_comm();
  if (!be.device().is_cpu()) {
    // Device tensors: NCCL when every rank has its own GPU, else staged through Gloo.
    dist::DeviceCollectivesFactory nccl;
#ifdef DL_HAVE_CUDA
    nccl = [&](dist::Comm& host, std::string* why) { return make_nccl_collectives(host, cfg.dist.timeout_s, why); };
#endif
    std::string path;
    world = dist::make_device_comm(std::move(world), [&be](Tensor& d, const Tensor& s) { be.copy(d, s); }, nccl, &path);
    if (root && !path.empty()) log_info("device collectives: " + path);
  }
  if (root && env.distributed())
    log_info(str(env.world, " ranks (", env.source, " launch), mesh ", shape.describe(), ", zero ", cfg.parallel.zero,
                 cfg.parallel.offload == "cpu" ? " with CPU offload" : "",
                 cfg.parallel.activation_checkpointing ? ", activation checkpointing" : ""));
  Mesh mesh(shape, std::move(world));
  std::unique_ptr<Model> model = build_model(cfg, *data.train, be, &mesh);
  parallel::ZeroEngine engine(model->params(), model->param_groups(), mesh.dp(), cfg.parallel, cfg.optim,
                              cfg.dist.bucket_mb, mesh.tp_rank() == 0);
  model->set_hooks(&engine);
  parallel::PipelineRunner runner(*model, mesh.pp(), cfg.parallel.schedule);
  mesh.world().barrier();  // every rank checked the run directory before rank 0 creates it

  TrainerState state;
  state.rng_key = stream_key(seed, "trainer/samples");
  const fs::path ckpt_root = opt.run_dir / "checkpoints";
  fs::path last_ckpt;
  if (opt.resume) {
    last_ckpt = agree_on_checkpoint(ckpt_root, mesh.world());
    state = load_checkpoint(last_ckpt, *model, &engine);
    log_info("resumed from " + last_ckpt.string() + " at step " + std::to_string(state.step));
    const int64_t at = state.step;
    // Metrics after the checkpoint were produced by the lost part of the run: drop them.
    if (root && fs::exists(opt.run_dir / "metrics.jsonl"))
      rewrite_jsonl_keep(opt.run_dir / "metrics.jsonl",
                         [at](const nlohmann::json& j) { return j.value("step", int64_t{0}) <= at; });
  } else {
    engine.initialize(seed);
    if (root) fs::create_directories(ckpt_root);
  }
  LossScaler scaler = cfg.train.precision == "fp16" ? LossScaler(cfg.train.loss_scale, cfg.train.loss_scale_window)
                                                    : LossScaler();
  if (opt.resume) scaler.restore(state.loss_scale);
  if (cfg.train.precision != "fp32" && root)
    log_info(str("mixed precision: ", cfg.train.precision, " compute, fp32 master weights",
                 scaler.enabled() ? str(", dynamic loss scale from ", format_si(scaler.scale(), "", 3)) : std::string()));
  std::future<void> env_snapshot;  // joined on every way out (the future's destructor waits)
  if (root) {
    write_file_atomic(opt.run_dir / "config.toml", config_to_toml(cfg));
    // The environment snapshot probes the machine (about half a second) while training starts.
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
  }
  mesh.world().barrier();

  ParamSet& P = model->params();
  const int dp = shape.dp;
  // Micro-batches per step: gradient accumulation times pipeline micro-batches.
  const int64_t B = cfg.train.batch_size, A = micro_batches_per_step(cfg);
  const int64_t total = cfg.train.steps;
  const int64_t units = units_per_example(*model, cfg);
  const int64_t global_examples = B * A * dp;
  int64_t params_total = 0;
  {
    Tensor n = Tensor::empty({1}, DType::i64);
    int64_t mine = 0;
    for (size_t i = 0; i < P.size(); ++i)
      if (!P.info(i).tied_copy && (P.info(i).slice.whole() ? mesh.tp_rank() == 0 : true)) mine += P.info(i).numel();
    n.data<int64_t>()[0] = mesh.dp_rank() == 0 ? mine : 0;
    mesh.world().allreduce(n);
    params_total = n.data<int64_t>()[0];
  }
  log_info(str(model->kind(), " model, ", params_total, " parameters; train data: ", data.train->describe(),
               data.val ? "; val: " + data.val->describe() : ""));
  log_info(str("global batch ", global_examples, " x ", units, " = ", global_examples * units,
               model->kind() == "gpt" ? " tokens" : " examples", " per step (", B, " per micro-batch x ", A,
               " accumulation x ", dp, " data-parallel), ", num_threads(), " CPU threads per rank, run directory ",
               opt.run_dir.string()));

  install_interrupt_handlers();
  std::unique_ptr<Metrics> metrics;
  if (root) {
    metrics = std::make_unique<Metrics>(opt.run_dir, cfg.log.tensorboard, opt.json);
    metrics->on_record = opt.on_record;
  }
  Sampler sampler(data.train->size(), seed, "data/train");
  RandomStream rng(state.rng_key, state.rng_index);
  const bool bar_wanted = root && !opt.quiet && (cfg.log.progress == "bar" || cfg.log.progress == "auto");
  ProgressBar bar(total, bar_wanted);
  const bool lines = root && !opt.quiet && !bar.enabled() && cfg.log.progress != "none";
  const CheckpointLayout layout{shape.world(), shape.dp, shape.tp, shape.pp, static_cast<int>(cfg.parallel.zero)};
  CheckpointSource ckpt_src{*model, engine, mesh.world(), layout};

  TrainSummary summary;
  summary.run_dir = opt.run_dir;
  summary.rank = mesh.rank();
  summary.params = params_total;
  std::vector<double> rates;
  int64_t last_saved = opt.resume ? state.step : -1;
  int64_t last_eval = -1;
  double session_start = monotonic_seconds();
  const double seconds_before = state.train_seconds;
  const bool samples_possible = shape.world() == 1;

  auto checkpoint = [&]() {
    if (state.step == last_saved || !opt.checkpoints) return;
    state.rng_index = rng.index();
    state.loss_scale = scaler.state();
    state.train_seconds = seconds_before + (monotonic_seconds() - session_start);
    bar.finish();
    last_ckpt = save_checkpoint(ckpt_root, ckpt_src, state, cfg, cfg.train.keep_checkpoints);
    last_saved = state.step;
    log_info("checkpoint " + last_ckpt.filename().string());
  };
  auto run_eval_now = [&]() {
    if (!data.val || state.step == last_eval || !opt.evaluation) return;
    EvalResult e = evaluate(*model, mesh, *data.val, B, cfg.train.eval_batches);
    if (samples_possible) e.samples = demo_samples(*model, *data.val, data.tokenizer.get(), cfg.log.samples, rng);
    last_eval = state.step;
    if (root) {
      ojson rec = eval_record(state.step, e);
      if (!e.samples.empty()) rec["samples"] = e.samples;
      metrics->record(rec);
      bar.finish();
      log_info(eval_line(state.step, e));
      for (const auto& s : e.samples) log_info("  sample: " + s);
    }
    summary.eval = std::move(e);
  };
  auto write_memory_report = [&]() {
    parallel::MemoryUse m = engine.memory();
    auto rows = gather_rows(mesh.world(), {double(mesh.dp_rank()), double(mesh.tp_rank()), double(mesh.pp_rank()),
                                           double(m.params), double(m.grads), double(m.optimizer),
                                           double(m.optimizer_host), double(m.transient),
                                           double(model->activation_bytes()), double(device_peak_bytes(be))});
    if (!root) return;
    ojson ranks = ojson::array();
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& v = rows[r];
      ranks.push_back({{"rank", r}, {"dp_rank", int(v[0])}, {"tp_rank", int(v[1])}, {"pp_rank", int(v[2])},
                       {"params_bytes", int64_t(v[3])}, {"grads_bytes", int64_t(v[4])},
                       {"optimizer_bytes", int64_t(v[5])}, {"optimizer_host_bytes", int64_t(v[6])},
                       {"transient_bytes", int64_t(v[7])}, {"activation_bytes", int64_t(v[8])}});
      // On a GPU: the most bytes the device arena handed out at once (through the first step),
      // i.e. everything the run allocated on the device; CUDA's own context is not included.
      if (!be.device().is_cpu()) ranks.back()["device_peak_bytes"] = int64_t(v[9]);
    }
    ojson report{{"layout", {{"dp", shape.dp}, {"tp", shape.tp}, {"pp", shape.pp}, {"zero", cfg.parallel.zero},
                             {"offload", cfg.parallel.offload}}},
                 {"params", params_total},
                 {"dtype", std::string(dtype_name(P.dtype()))},
                 {"ranks", ranks}};
    write_file_atomic(opt.run_dir / "memory.json", report.dump(2) + "\n");
  };

  double loss = 0;
  bool memory_written = false;
  // DL_CUDA_PROFILE_STEP=N: step N runs inside the CUDA profiler's range (profiler.hpp).
  const int64_t profile_step = be.device().is_cpu() ? 0 : profile_step_from_env();
  StepParts parts{cfg, *model, mesh, engine, runner, scaler, *data.train, sampler};
  while (state.step < total) {
#ifdef DL_HAVE_CUDA
    if (state.step + 1 == profile_step) cuda_profiler_start();
#endif
    const StepRecord r = train_step(parts, state.step, state.data_position, total);
    const double elapsed = seconds_before + (monotonic_seconds() - session_start);
    if (r.diverged) {
      bar.finish();
      std::string what = !std::isfinite(r.loss) ? "loss is " + std::string(std::isnan(r.loss) ? "NaN" : "Inf")
                                                : "gradient norm is " + std::string(std::isnan(r.grad_norm) ? "NaN" : "Inf");
      // The weights before this step are the last good state, if they are finite on every rank.
      Tensor pn = Tensor::empty({1}, DType::f64);
      pn.data<double>()[0] = engine.param_norm_squared();
      mesh.world().allreduce(pn);
      if (std::isfinite(pn.data<double>()[0]) && state.step > 0) checkpoint();
      if (scaler.enabled()) what += str(" with the fp16 loss scale down to ", scaler.scale(), " after ", scaler.skipped_steps(), " skipped steps");
      throw Error(ErrorKind::diverged,
                  str(what, " at step ", r.step, "; the last good checkpoint is ",
                      last_ckpt.empty() ? std::string("(none)") : last_ckpt.string(),
                      " (lower optim.lr, raise schedule.warmup_steps or set optim.grad_clip)"));
    }
#ifdef DL_HAVE_CUDA
    if (r.step == profile_step) cuda_profiler_stop();
#endif
    const int64_t step_no = r.step;
    state.step = step_no;
    state.data_position += global_examples;
    state.tokens_seen += global_examples * units;
    loss = r.loss;
    const double rate = static_cast<double>(global_examples * units) / r.seconds;
    rates.push_back(rate);
    if (!memory_written) {
      write_memory_report();
      memory_written = true;
    }

    if (step_no % cfg.log.every == 0 || step_no == 1 || step_no == total) {
      // Time split per rank: data, compute, communication (dp/tp collectives), pipeline wait
      // (blocked on neighbouring stages: the bubble), optimizer.
      std::vector<double> mine = {r.times.data, r.times.compute, r.times.comm, r.times.pipeline_wait, r.times.optimizer};
      auto rows = shape.world() > 1 ? gather_rows(mesh.world(), mine) : std::vector<std::vector<double>>{mine};
      if (root) {
        ojson rec{{"step", step_no},
                  {"loss", r.loss},
                  {"lr", r.lr},
                  {"grad_norm", r.grad_norm},
                  {"tokens_per_sec", rate},
                  {"elapsed_s", elapsed},
                  {"step_s", r.seconds},
                  {"time_data_s", mine[0]},
                  {"time_compute_s", mine[1]},
                  {"time_comm_s", mine[2]},
                  {"time_pipeline_wait_s", mine[3]},
                  {"time_optimizer_s", mine[4]}};
        if (scaler.enabled()) {
          rec["loss_scale"] = r.loss_scale;
          rec["skipped"] = !r.applied;
          rec["skipped_steps"] = scaler.skipped_steps();
        }
        if (shape.world() > 1) {
          rec["rank_time_compute_s"] = column(rows, 1);
          rec["rank_time_comm_s"] = column(rows, 2);
          rec["rank_time_pipeline_wait_s"] = column(rows, 3);
          rec["rank_time_optimizer_s"] = column(rows, 4);
        }
        metrics->record(rec);
        if (lines)
          log_info(str("step ", step_no, "/", total, " loss ", format_fixed(r.loss, 4), " lr ", format_si(r.lr, "", 3),
                       " grad_norm ", format_fixed(r.grad_norm, 3), " ",
                       format_si(rate, model->kind() == "gpt" ? "tok/s" : "ex/s", 3)));
      }
    }
    bar.update(step_no, "loss " + format_fixed(loss, 4) + " | " +
                            format_si(rate, model->kind() == "gpt" ? "tok/s" : "ex/s", 3));

    if (cfg.train.eval_every > 0 && step_no % cfg.train.eval_every == 0 && step_no < total) run_eval_now();
    if (cfg.train.checkpoint_every > 0 && step_no % cfg.train.checkpoint_every == 0) checkpoint();
    if (r.stop) {
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
  if (root) {
    ojson s{{"status", summary.interrupted ? "interrupted" : "completed"},
            {"steps", summary.steps},
            {"params", summary.params},
            {"layout", {{"dp", shape.dp}, {"tp", shape.tp}, {"pp", shape.pp}, {"zero", cfg.parallel.zero}}},
            {"final_train_loss", summary.train_loss},
            {"median_tokens_per_sec", summary.tokens_per_sec},
            {"train_seconds", summary.train_seconds},
            {"checkpoint", last_ckpt.string()}};
    if (summary.eval) s["final_eval"] = eval_record(summary.steps, *summary.eval);
    write_file_atomic(opt.run_dir / "summary.json", s.dump(2) + "\n");
  }
  if (summary.interrupted)
    throw Error(ErrorKind::interrupted, str("interrupted at step ", state.step, "; checkpoint ", last_ckpt.string(),
                                            " (continue with --resume ", opt.run_dir.string(), ")"));
  return summary;
}

// ---------------------------------------------------------------------------------------------
// eval and sample: a single-process model rebuilt from the run's config and its newest good
// checkpoint (saved under any layout).

namespace {
struct LoadedRun {
  Config config;
  DataSplits data;
  std::unique_ptr<Mesh> mesh;
  std::unique_ptr<Model> model;
  fs::path checkpoint;
  TrainerState state;
};

LoadedRun load_run(const fs::path& run_dir, const std::vector<std::string>& overrides) {
  LoadedRun r;
  r.config = load_run_config(run_dir, overrides);
  set_num_threads(static_cast<int>(r.config.train.threads));
  Backend& be = select_backend(r.config, false);
  r.data = open_datasets(r.config.data, r.config.model.block_size, static_cast<uint64_t>(r.config.train.seed));
  r.mesh = single_process_mesh();
  r.model = build_model(r.config, *r.data.train, be, nullptr);
  r.checkpoint = latest_good_checkpoint(run_dir / "checkpoints");
  r.state = load_checkpoint(r.checkpoint, *r.model, nullptr);
  return r;
}
}  // namespace

EvalReport run_eval(const EvalOptions& o) {
  LoadedRun r = load_run(o.run_dir, o.overrides);
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
  rep.result = evaluate(*r.model, *r.mesh, *target, r.config.train.batch_size, o.max_batches);
  return rep;
}

SampleReport run_sample(const SampleOptions& o) {
  LoadedRun r = load_run(o.run_dir, {});
  if (r.model->context_length() == 0) throw_usage("dl-train sample needs a gpt run; ", o.run_dir.string(), " trained a ", r.model->kind(), " model");
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
      std::string completion = tok.decode(generate(*r.model, ids, go, rng));
      rep.completions.push_back(completion);
      rep.rendered.push_back(val->render(p, completion));
    }
  }
  return rep;
}

}  // namespace dl
