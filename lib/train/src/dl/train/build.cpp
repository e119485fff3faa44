// Building a run from a config: threads, the communicators, the model; loading a finished run.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <random>
#include <thread>

#include <toml++/toml.h>

#include "dl/cli/app.hpp"
#include "dl/core/parallel.hpp"
#include "dl/core/strings.hpp"
#include "dl/checkpoint/format.hpp"
#include "dl/core/version.hpp"
#include "dl/dist/device_comm.hpp"
#include "dl/dist/gloo_comm.hpp"
#include "dl/env/env.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/dir_lock.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/gpt_from_config.hpp"
#include "dl/nn/llama.hpp"
#include "dl/nn/mlp.hpp"
#include "dl/device/select.hpp"
#include "dl/train/run.hpp"

#ifdef DL_HAVE_CUDA
#include "dl/device/cuda/nccl.hpp"
#endif

namespace dl {

namespace fs = std::filesystem;
using parallel::Mesh;

namespace {

// The dtype the model computes in: train.precision (16-bit runs keep f32 master weights in the
// ZeRO engine).
DType compute_dtype(const TrainConfig& t) {
  if (t.precision == Precision::bf16) return DType::bf16;
  if (t.precision == Precision::fp16) return DType::f16;
  return DType::f32;
}

}  // namespace

int threads_for(const TrainConfig& t, int local_ranks) {
  if (t.threads > 0) return static_cast<int>(t.threads);
  if (std::getenv("DL_NUM_THREADS")) return 0;  // the launcher (or the user) chose
  int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, hw / std::max(1, local_ranks));
}

void check_machine_against(const fs::path& env_lock) {
  EnvCheckResult envr = check_env_lock(env_lock);
  if (envr.breaking)
    throw_usage("this machine does not match ", env_lock.string(), " (breaking drift):\n", envr.table,
                "fix the environment or re-lock it with `dl-envlock snapshot -o ", env_lock.string(), "`");
  if (envr.drift) log_warn("environment differs from " + env_lock.string() + " (not breaking):\n" + envr.table);
}

std::unique_ptr<dist::Comm> open_world(const dist::LaunchEnv& env, const Config& cfg, Backend& be,
                                       const parallel::MeshShape& shape) {
  const bool root = env.rank == 0;
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
                 cfg.parallel.offload == Offload::cpu ? " with CPU offload" : "",
                 cfg.parallel.activation_checkpointing ? ", activation checkpointing" : ""));
  return world;
}
std::unique_ptr<Model> build_model(const Config& c, const Dataset& train, Backend& be, Mesh* mesh) {
  if (is_token_model(c.model.type)) {
    if (!train.is_sequence())
      throw_usage("model.type = \"", c.model.type, "\" needs token data, but data.source ", c.data.source,
                  " holds feature rows (use model.type = \"mlp\")");
    check_model_vocab(train, c.model.vocab_size);
    GptParallel par;
    par.activation_checkpointing = c.parallel.activation_checkpointing;
    if (mesh) {
      par.tp_size = mesh->shape().tp;
      par.tp_rank = mesh->tp_rank();
      par.tp = &mesh->tp();
      par.pp_size = mesh->shape().pp;
      par.pp_rank = mesh->pp_rank();
    }
    if (c.model.type == ModelType::llama)
      return std::make_unique<LlamaModel>(llama_config_from(c.model), be, compute_dtype(c.train), par);
    return std::make_unique<GptModel>(gpt_config_from(c.model), be, compute_dtype(c.train), par);
  }
  if (c.train.precision != Precision::fp32)
    throw_usage("train.precision = \"", c.train.precision, "\" applies to model.type = \"gpt\" and \"llama\"; the mlp trains in fp32");
  if (train.is_sequence())
    throw_usage("model.type = \"mlp\" needs feature rows (csv:...), but data.source ", c.data.source, " holds tokens");
  MlpConfig m;
  m.n_inputs = static_cast<int>(train.n_features());
  m.n_classes = static_cast<int>(train.n_classes());
  m.hidden.assign(c.model.hidden.begin(), c.model.hidden.end());
  m.activation = c.model.activation;
  return std::make_unique<MlpModel>(m, be);
}

int64_t units_per_example(const Model& m, const Config& c) { return is_token_model(m.type()) ? c.model.block_size : 1; }

int64_t count_params(Model& model, Mesh& mesh) {
  ParamSet& P = model.params();
  Tensor n = Tensor::empty({1}, DType::i64);
  int64_t mine = 0;
  for (size_t i = 0; i < P.size(); ++i)
    if (!P.info(i).tied_copy && (P.info(i).slice.whole() ? mesh.tp_rank() == 0 : true)) mine += P.info(i).numel();
  n.data<int64_t>()[0] = mesh.dp_rank() == 0 ? mine : 0;
  mesh.world().allreduce(n);
  return n.data<int64_t>()[0];
}

namespace {

constexpr const char* kRunDirWhat = "run directory";
// Written by rank 0 into the run directory it took, read by every other rank, removed once all
// have looked (check_shared_run_dir).
constexpr const char* kRankTokenFile = ".rank0-token";

std::string continue_it_hint(const fs::path& run_dir) {
  return str("continue it with --resume ", run_dir.string(), ", or choose another --run-dir");
}

int64_t random_token() {
  std::random_device rd;
  return static_cast<int64_t>((static_cast<uint64_t>(rd()) << 32 | rd()) >> 1);
}

// Whether `file` holds `token`. A shared filesystem may show a file written on another node a
// moment late (NFS caches directory lookups), so a missing or other token is looked at again for
// up to two seconds.
bool sees_token(const fs::path& file, int64_t token) {
  const std::string want = std::to_string(token);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    std::ifstream in(file);
    std::string got;
    if (in && std::getline(in, got) && got == want) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Every rank writes its part of each checkpoint into the run directory, so every rank must see
// the directory rank 0 took; ranks given different --run-dirs, or nodes each with a disk of its
// own, would otherwise train to the end and fail at the first checkpoint. Rank 0 wrote `token`
// into it; every rank looks for it in its own run_dir, and all of them stop (usage) when any
// does not find it.
void check_shared_run_dir(const fs::path& dir, int64_t token, dist::Comm& world) {
  Tensor unseen = Tensor::zeros({world.size()}, DType::i64);
  if (world.rank() != 0 && !sees_token(dir / kRankTokenFile, token)) unseen.data<int64_t>()[world.rank()] = 1;
  world.allreduce(unseen);
  if (world.rank() == 0) {
    std::error_code ec;
    fs::remove(dir / kRankTokenFile, ec);
  }
  std::vector<std::string> ranks;
  for (int r = 0; r < world.size(); ++r)
    if (unseen.data<int64_t>()[r] != 0) ranks.push_back(std::to_string(r));
  if (ranks.empty()) return;
  const std::string who = str(ranks.size() == 1 ? "rank " : "ranks ", join(ranks, ", "));
  throw_usage(who, " of ", world.size(), " cannot see the run directory rank 0 took",
              world.rank() == 0 ? ", " + dir.string() : std::string(), " (the ", kRankTokenFile, " rank 0 wrote is not in ",
              world.rank() == 0 ? "the --run-dir of " + who : dir.string(), "): nodes must share the run directory: give "
              "every node the same --run-dir on a filesystem they all mount (NFS, Lustre, ...), where every rank writes "
              "its part of each checkpoint");
}

}  // namespace

void check_run_dir(const TrainOptions& opt) {
  const fs::path& dir = opt.run_dir;
  std::error_code ec;
  if (!opt.resume) {
    check_dir_unused(dir, kRunDirWhat, continue_it_hint(dir));
    return;
  }
  if (!fs::is_directory(dir, ec)) throw_usage("--resume ", dir.string(), ": no such run directory");
  if (!fs::exists(dir / "config.toml", ec) && !fs::is_directory(dir / "checkpoints", ec))
    throw_usage(dir.string(), " is not a dl-train run directory (no config.toml, no checkpoints/)");
}

RunDir take_run_dir(const TrainOptions& opt, dist::Comm& world) {
  RunDir r;
  // Rank 0 holds the lock; the run has a checkpoint; the token rank 0 wrote into it.
  Tensor taken = Tensor::zeros({3}, DType::i64);
  std::exception_ptr refused;
  if (world.rank() == 0) {
    try {
      r.lock = opt.resume ? lock_dir(opt.run_dir, kRunDirWhat)
                          : create_locked_dir(opt.run_dir, kRunDirWhat, continue_it_hint(opt.run_dir));
      taken.data<int64_t>()[0] = 1;
      taken.data<int64_t>()[1] = opt.resume && !list_checkpoints(opt.run_dir / "checkpoints").empty();
      if (world.size() > 1) {
        taken.data<int64_t>()[2] = random_token();
        write_file_atomic(opt.run_dir / kRankTokenFile, std::to_string(taken.data<int64_t>()[2]) + "\n");
      }
    } catch (...) {
      refused = std::current_exception();
    }
  }
  world.broadcast(taken, 0);
  if (refused) std::rethrow_exception(refused);
  if (taken.data<int64_t>()[0] == 0)
    throw_usage("rank 0 could not take the run directory ", opt.run_dir.string(), " (its message says why)");
  r.checkpoint = taken.data<int64_t>()[1] != 0;
  if (world.size() > 1) check_shared_run_dir(opt.run_dir, taken.data<int64_t>()[2], world);
  return r;
}

std::future<void> write_run_files(const TrainOptions& opt, const Tokenizer* tokenizer) {
  write_file_atomic(opt.run_dir / "config.toml", config_to_toml(opt.config));
  // The tokenizer travels with the run, so sample and eval read the text as training did.
  const std::vector<std::string> tok_files = tokenizer ? tokenizer->files() : std::vector<std::string>{};
  if (!tok_files.empty() && !fs::exists(opt.run_dir / kRunTokenizerDir)) {
    const fs::path tmp = opt.run_dir / (std::string(kRunTokenizerDir) + ".tmp");
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    for (const std::string& f : tok_files) fs::copy_file(f, tmp / fs::path(f).filename());
    publish_dir_atomic(tmp, opt.run_dir / kRunTokenizerDir);
  }
  if (!opt.env_snapshot || !opt.config.log.env_lock) return {};
  return std::async(std::launch::async, [dir = opt.run_dir] {
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

Config load_run_config(const fs::path& run_dir, const std::vector<std::string>& overrides) {
  fs::path cfg = run_dir / "config.toml";
  if (!fs::exists(cfg)) throw_usage(run_dir.string(), " is not a dl-train run directory (no config.toml)");
  // The run's copy of its tokenizer, wherever the folder it was trained with is now.
  // Its kind is the one the run was trained with (a GPT-2 tokenizer.json stays "gpt2:").
  std::vector<std::string> sets = overrides;
  if (fs::is_directory(run_dir / kRunTokenizerDir)) {
    // Read as written: the folder it names may be gone, which loading the config would refuse.
    bool hf = false;
    try {
      hf = toml::parse_file(cfg.string())["data"]["tokenizer"].value_or(std::string()).starts_with("hf:");
    } catch (const toml::parse_error&) {
      // load_config below says what is wrong with the file
    }
    sets.insert(sets.begin(), "data.tokenizer=\"" + std::string(hf ? "hf:" : "gpt2:") +
                                  fs::absolute(run_dir / kRunTokenizerDir).string() + "\"");
  }
  // model.init_from's folder is a record here: the weights come from the run's checkpoints.
  return load_config(cfg, sets, InitFromUse::recorded);
}

fs::path default_run_dir(const std::string& config_path, const std::map<std::string, std::string>& env) {
  const std::string stem = fs::path(config_path).stem().string();
  if (default_run_dir_is_shared(env)) {
    const auto step = env.find("SLURM_STEP_ID");
    return fs::path("runs") / str(stem, "-slurm-", env.at("SLURM_JOB_ID"),
                                  step != env.end() && !step->second.empty() ? "." + step->second : "");
  }
  return timestamped_dir("runs", config_path);
}

fs::path timestamped_dir(const fs::path& root, const std::string& file) {
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return root / (fs::path(file).stem().string() + "-" + stamp);
}

bool default_run_dir_is_shared(const std::map<std::string, std::string>& env) {
  const auto job = env.find("SLURM_JOB_ID");
  return job != env.end() && !job->second.empty();
}

LoadedRun load_run(const fs::path& run_dir, const std::vector<std::string>& overrides) {
  LoadedRun r;
  r.config = load_run_config(run_dir, overrides);
  set_num_threads(static_cast<int>(r.config.train.threads));
  Backend& be = select_backend(r.config, false);
  r.data = open_datasets(r.config.data, r.config.model.block_size, static_cast<uint64_t>(r.config.train.seed));
  r.mesh = std::make_unique<Mesh>(parallel::MeshShape{}, dist::make_self_comm());
  r.model = build_model(r.config, *r.data.train, be, nullptr);
  r.checkpoint = latest_good_checkpoint(run_dir / "checkpoints");
  check_checkpoint_model(r.checkpoint, r.config.model);
  r.state = load_checkpoint(r.checkpoint, *r.model, nullptr);
  return r;
}

}  // namespace dl
