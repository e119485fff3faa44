// The training configuration: TOML sections [model] [data] [optim] [schedule] [train]
// [parallel] [log], each a typed struct with defaults. Every key is declared once, in
// visit_config() (config.cpp), with its type, range and help; loading, --set overrides,
// validation, --print-config and the docs all walk that one list.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "dl/config/choice.hpp"

namespace dl {

struct ModelConfig {
  Choice<ModelType> type = ModelType::gpt;
  // gpt
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;  // sequence length used for training and the position table size
  int64_t vocab_size = 256;
  double init_std = 0.02;    // gpt: weights N(0, init_std); mlp layers use Kaiming normal
  // gpt: the LM head is the token embedding (GPT-2); false: a separate lm_head.weight [V, D]
  // (config.json's tie_word_embeddings = false)
  bool tie_embeddings = true;
  // gpt: a folder whose weights the run starts from (a Hugging Face GPT-2 folder or a dl-train
  // checkpoint); its config.json fixes n_layer, n_head, n_embd, block_size and vocab_size. The
  // loaded config holds the absolute path.
  std::string init_from;
  // llama (n_layer, n_head, n_embd, block_size, vocab_size, init_std and tie_embeddings too)
  int64_t n_kv_head = 0;   // K/V heads (grouped-query attention); 0: n_head
  int64_t ffn_hidden = 0;  // the SwiGLU MLP's width (intermediate_size); 0: 4 x n_embd
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  Choice<RopeScaling> rope_scaling = RopeScaling::none;
  double rope_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position = 8192;
  // Biases on the q, k and v projections (Qwen2); a checkpoint's config.json is then Qwen2ForCausalLM's
  bool qkv_bias = false;
  // llama, planned only: a mixture of experts (plan::ModelShape's experts, active_experts,
  // expert_ffn, shared_experts, dense_layers), which dl-shard plan and dl-cost estimate read;
  // dl-train builds no experts and refuses n_experts > 0 (refuse_experts).
  int64_t n_experts = 0;
  int64_t n_experts_active = 0;
  int64_t expert_ffn_hidden = 0;  // 0: model.ffn_hidden's width
  int64_t n_shared_experts = 0;
  int64_t n_dense_layers = 0;
  // mlp
  std::vector<int64_t> hidden = {64, 64};
  Choice<Activation> activation = Activation::relu;

  bool operator==(const ModelConfig&) const = default;
};

// The largest transformer a config may describe: 10^15 parameters (about 500x the largest published
// dense model). The loader refuses more, counted in long double, so the int64 counts of the model's
// parameters and buffers (nn, plan) never overflow.
inline constexpr double kMaxModelParameters = 1e15;

struct DataConfig {
  // "synthetic:addition" | "text:PATH" (or a glob: files are documents) | "tokens:GLOB" | "csv:PATH". Paths in a config file are
  // relative to that file's folder; the resolved config holds absolute paths.
  std::string source = "synthetic:addition";
  std::string val_source;     // optional separate validation source, same forms
  // text: data, sample prompts and eval: "bytes" | "gpt2:DIR" (vocab.json + merges.txt or
  // tokenizer.json in DIR; relative to the config file's folder, absolute once resolved)
  std::string tokenizer = "bytes";
  double val_fraction = 0.1;  // held-out tail when val_source is empty
  int64_t digits = 3;         // synthetic:addition operand digits
  int64_t label_column = -1;  // csv: label column index, negative counts from the end
  bool normalize = true;      // csv: standardise features with the training split's mean/std

  bool operator==(const DataConfig&) const = default;
};

struct OptimConfig {
  Choice<OptimizerKind> name = OptimizerKind::adamw;
  double lr = 1e-3;
  double weight_decay = 0.1;  // decoupled for AdamW; not applied to biases and LayerNorm
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double momentum = 0.9;   // sgd
  double dampening = 0.0;  // sgd: the new gradient enters the momentum buffer times 1 - dampening
  bool nesterov = false;   // sgd; needs momentum > 0 and dampening 0, as in torch.optim.SGD
  double grad_clip = 1.0;  // global gradient-norm clipping; 0 disables

  bool operator==(const OptimConfig&) const = default;
};

struct ScheduleConfig {
  Choice<Decay> decay = Decay::cosine;
  int64_t warmup_steps = 0;      // linear warm-up from 0
  int64_t decay_steps = 0;       // steps over which lr decays to min_lr_ratio * lr; 0 = train.steps
  double min_lr_ratio = 0.1;

  bool operator==(const ScheduleConfig&) const = default;
};

// The most optimizer steps a run (train.steps) or a sweep's trial (early_stopping.max_steps) may
// ask for: the loop keeps a number per step, and a billion steps outlast any machine's lease.
inline constexpr int64_t kMaxTrainSteps = 1000000000;

struct TrainConfig {
  int64_t steps = 1000;
  int64_t batch_size = 16;  // sequences (gpt) or examples (mlp) per micro-batch per data-parallel rank
  int64_t grad_accum = 1;   // micro-batches per optimizer step
  int64_t seed = 1337;
  Choice<DeviceChoice> device = DeviceChoice::cpu;
  Choice<Precision> precision = Precision::fp32;
  double loss_scale = 65536;       // fp16: initial dynamic loss scale
  int64_t loss_scale_window = 2000;  // fp16: overflow-free steps before the scale doubles
  int64_t threads = 0;             // CPU threads; 0 = all cores
  int64_t eval_every = 100;        // steps between validation passes; 0 = only at the end
  int64_t eval_batches = 4;        // micro-batches per validation pass
  int64_t checkpoint_every = 0;    // steps between checkpoints; 0 = only at the end
  int64_t keep_checkpoints = 3;    // newest K checkpoints kept

  bool operator==(const TrainConfig&) const = default;
};

struct ParallelConfig {
  int64_t dp = -1;  // -1 means "auto" (the default): world / (tp * pp), as torchrun + DDP users expect
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t zero = 0;                 // 0..3
  Choice<Offload> offload = Offload::none;
  int64_t microbatches = 1;         // pipeline micro-batches per step (see micro_batches_per_step)
  Choice<PipelineSchedule> schedule = PipelineSchedule::one_f_one_b;
  bool activation_checkpointing = false;

  bool operator==(const ParallelConfig&) const = default;
};

struct DistConfig {
  double timeout_s = 300;   // every collective and rendezvous wait gives up after this long
  double bucket_mb = 25;    // gradient all-reduce bucket size
  bool operator==(const DistConfig&) const = default;
};

struct LogConfig {
  int64_t every = 10;          // steps between log lines / metrics records
  bool tensorboard = true;     // write an events file in the run directory
  Choice<Progress> progress = Progress::automatic;  // automatic: a bar on a terminal
  int64_t samples = 4;         // generated samples shown at each evaluation (gpt)
  // RUN/env.lock: the machine's driver, CUDA libraries, compilers and packages in dl-envlock's
  // format, probed in the background (about a second of CPU: dpkg-query, compilers, loading
  // cuBLASLt to ask its version). false for many short runs that need no record of the machine.
  bool env_lock = true;

  bool operator==(const LogConfig&) const = default;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  ScheduleConfig schedule;
  TrainConfig train;
  ParallelConfig parallel;
  DistConfig dist;
  LogConfig log;

  bool operator==(const Config&) const = default;
};

// Micro-batches each data-parallel rank runs per optimizer step: train.grad_accum times
// parallel.microbatches (the pipeline's micro-batches). dl-train, dl-shard and dl-cost agree on it.
inline int64_t micro_batches_per_step(const Config& c) { return c.train.grad_accum * c.parallel.microbatches; }

// What model.init_from's folder is to a config. `start`: the config starts a run, so the folder
// must exist and its config.json fixes the model's shape. `recorded`: a run's own resolved
// config.toml (--resume, eval, sample), which already holds the shape and whose weights come from
// the run's checkpoints, so the folder is only a record and may be gone.
enum class InitFromUse { start, recorded };

// Loads a TOML file, applies "--set" overrides ("section.key=value"), validates every key, and
// resolves data paths. Throws dl::Error(usage) naming the file, line and key.
Config load_config(const std::filesystem::path& file, const std::vector<std::string>& overrides = {},
                   InitFromUse init_from = InitFromUse::start);
// The same from TOML text; `source_name` names it in errors; relative data paths resolve
// against `base_dir`.
Config parse_config(std::string_view toml_text, std::string_view source_name,
                    const std::filesystem::path& base_dir, const std::vector<std::string>& overrides = {});
// The fully resolved config as TOML: every section and key, in declaration order.
std::string config_to_toml(const Config& config);

// A TOML basic string literal with every character escaped as TOML requires ("a\"b" -> "\"a\\\"b\"").
std::string toml_quote(std::string_view s);
// A TOML float literal that reads back as the same double ("0.001", "2.0", "1e-08").
std::string toml_float(double x);

// One line per key for --help and docs: "model.n_layer (int, default 4): ..."
struct ConfigKeyDoc {
  std::string key;   // "model.n_layer"
  std::string type;  // "int", "float", "bool", "string", "int array", "int or \"auto\""
  std::string default_value;
  std::string help;
  std::string allowed;  // "" | ">= 1" | "in [0, 0.5]" | "one of cpu, cuda, auto" | ...
};
std::vector<ConfigKeyDoc> config_key_docs();

// Regular files matching a glob pattern (POSIX glob(3)), sorted; empty when none match.
std::vector<std::string> glob_files(const std::string& pattern);

// A data source split at its first ':': "text:/abs/x.txt" -> {"text", "/abs/x.txt"}. In a loaded
// Config the kind is one of synthetic, text, tokens, csv and paths/globs are absolute.
struct DataSourceSpec {
  std::string kind;
  std::string arg;
};
DataSourceSpec split_data_source(std::string_view source);

}  // namespace dl
