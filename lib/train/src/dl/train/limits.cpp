#include "dl/train/limits.hpp"

#include <algorithm>
#include <string>

#include "dl/cli/table.hpp"
#include "dl/core/limits.hpp"
#include "dl/nn/gpt_from_config.hpp"
#include "dl/parallel/mesh.hpp"
#include "dl/plan/plan.hpp"
#include "dl/train/trainer.hpp"

namespace dl {

namespace {

// A part of the run's memory and the keys that size it.
struct Part {
  double bytes = 0;
  std::string what, keys, lower;  // lower: the key to lower first when this part is the largest
};

// More parameters than this fill no machine (a petabyte at 2 bytes each), and the exact count
// (int64) could overflow: refused before the planner counts them.
constexpr double kMaxParams = 5e14;

// The GPT's weights from its shape, in double: 12 C^2 per block and the embeddings.
double rough_gpt_params(const ModelConfig& m) {
  const double C = static_cast<double>(m.n_embd);
  return static_cast<double>(m.n_layer) * 12.0 * C * C +
         (static_cast<double>(m.vocab_size) * (m.tie_embeddings ? 1 : 2) + static_cast<double>(m.block_size)) * C;
}

// The mlp's hidden-to-hidden weights (the input width and the classes come from the data).
double rough_mlp_params(const ModelConfig& m) {
  double p = 0;
  for (size_t i = 0; i + 1 < m.hidden.size(); ++i) p += static_cast<double>(m.hidden[i]) * static_cast<double>(m.hidden[i + 1]);
  for (int64_t h : m.hidden) p += static_cast<double>(h);
  return p;
}

bool host_holds_model(const Config& cfg) {
#ifdef DL_HAVE_CUDA
  return cfg.train.device == DeviceChoice::cpu;  // cuda and auto: the GPU's memory (its arena checks)
#else
  (void)cfg;
  return true;
#endif
}

}  // namespace

void check_launch(const Config& config, int world, int local) {
  dist::LaunchEnv env;
  env.world = world;
  env.local_world = local;
  check_run_limits(config, env);
}

void check_run_limits(const Config& cfg, const dist::LaunchEnv& env) {
  check_thread_count(cfg.train.threads, "train.threads");
  refuse_experts(cfg.model);  // before the memory estimate, which would count every expert
  if (cfg.train.threads == 0) env_thread_count();  // DL_NUM_THREADS, which then decides

  const bool gpt = is_token_model(cfg.model.type);  // gpt or llama: the GPT's rough count bounds both
  const std::string model_keys = gpt ? "model.n_layer, model.n_embd, model.vocab_size" : "model.hidden";
  const double rough = gpt ? rough_gpt_params(cfg.model) : rough_mlp_params(cfg.model);
  if (rough > kMaxParams)
    throw_usage(model_keys, ": the model would have about ", rough, " parameters, more than any machine holds (at most ",
                kMaxParams, " are accepted): lower ", gpt ? "model.n_layer or model.n_embd" : "model.hidden");

  const parallel::MeshShape shape = parallel::resolve_mesh(cfg.parallel, cfg.model, env.world);
  const double B = static_cast<double>(cfg.train.batch_size);
  const double A = static_cast<double>(cfg.train.grad_accum) * static_cast<double>(cfg.parallel.microbatches);
  std::vector<Part> parts;
  if (host_holds_model(cfg)) {
    plan::Layout l;
    l.gpus = shape.world();
    l.dp = shape.dp, l.tp = shape.tp, l.pp = shape.pp;
    l.zero = cfg.parallel.zero;
    l.offload_cpu = cfg.parallel.offload == Offload::cpu;
    l.micro_batch = cfg.train.batch_size;
    l.microbatches = micro_batches_per_step(cfg);
    l.precision = cfg.train.precision;
    l.optimizer = plan::optimizer_state(cfg.optim);
    l.schedule = cfg.parallel.schedule;
    l.recompute = cfg.parallel.activation_checkpointing ? plan::Recompute::full : plan::Recompute::none;
    l.attention = plan::attention_for_device(cfg.train.device);
    plan::ModelShape m;
    if (gpt) {
      m = plan::model_from_config(cfg);
    } else {
      m.params = rough;  // activations are not modelled for the mlp: its rows are below
      m.type = ModelType::mlp;
    }
    const plan::MemoryBreakdown mem = plan::memory_per_rank(m, l);
    parts.push_back({mem.model_states() + mem.comm_buffers + mem.host_offload, "model states", model_keys,
                     gpt ? "model.n_layer" : "model.hidden"});
    parts.push_back({mem.activations, "activations of one micro-batch",
                     gpt ? "train.batch_size x model.block_size x model.n_layer" : "train.batch_size", "train.batch_size"});
  }
  // The step's micro-batches are built before it runs: int32 inputs and targets per token (gpt),
  // at least a feature and a label per row (mlp).
  const double row = gpt ? 8.0 * static_cast<double>(cfg.model.block_size) : 8.0;
  parts.push_back({A * B * row, "the step's input batches",
                   "train.grad_accum x parallel.microbatches x train.batch_size", "train.grad_accum"});

  const int ranks = std::max(1, env.local_world);
  // What to lower: the model when its states alone do not fit (no batch size helps), else the
  // largest part.
  double per_rank = 0;
  const Part* largest = &parts.front();
  for (const Part& p : parts) {
    per_rank += p.bytes;
    if (p.bytes > largest->bytes) largest = &p;
  }
  const bool model_alone = host_holds_model(cfg) && parts.front().bytes * ranks > available_memory().bytes;
  if (model_alone) largest = &parts.front();
  std::string what = "this run (";
  for (size_t i = 0; i < parts.size(); ++i)
    what += str(i ? "; " : "", parts[i].what, " ", format_bytes(parts[i].bytes), " by ", parts[i].keys);
  what += ranks > 1 ? str(", per rank x ", ranks, " ranks on this node)") : std::string(")");
  check_memory_fits(per_rank * ranks, what,
                    str("lower ", largest->lower, " (", model_alone ? "the model alone does not fit" : "the largest part: " + largest->what,
                        "), or run where more memory is free"));
}

}  // namespace dl
