// dl-shard merge and split: between a dl-train checkpoint of any layout and one file with
// Hugging Face names, or the shards another layout loads. Both stream: one whole tensor is in
// memory at a time (CheckpointReader assembles it from its pieces), never a whole file, so
// checkpoints larger than memory convert. Both verify the source first (sizes, CRC-32C, the
// pieces its layout writes) and write nothing unless everything succeeds.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "dl/cli/table.hpp"
#include "dl/checkpoint/format.hpp"

namespace dl::shard {

// One file written.
struct WrittenFile {
  std::filesystem::path path;
  std::string file;  // name relative to the output (checkpoint directory or output folder)
  int rank = -1;     // split: the rank that loads it (-1 for merge)
  int dp_rank = 0, tp_rank = 0, pp_rank = 0;
  size_t tensors = 0;
  uint64_t tensor_bytes = 0, file_bytes = 0;
  uint32_t crc32c = 0;
};

struct MergeOptions {
  std::filesystem::path source;  // checkpoint directory, checkpoints root or run directory
  std::filesystem::path output;  // model.safetensors
  bool with_optimizer = false;   // also the optimizer state (optimizer.safetensors beside it)
  bool force = false;            // replace output files that exist (else a usage error, as split's)
};

struct MergeResult {
  std::filesystem::path checkpoint;  // the step directory read
  std::string note;                  // how it was found from MergeOptions::source
  std::string model_type;
  bool qkv_bias = false;  // llama: Qwen2's q/k/v biases (a Qwen2ForCausalLM folder)
  CheckpointLayout layout;
  int64_t step = 0;
  std::vector<WrittenFile> files;
};

// The path of the optimizer file beside a merged model file: "optimizer.safetensors" next to
// "model.safetensors" (a single-process checkpoint's pair), else "<stem>.optimizer.safetensors".
std::filesystem::path optimizer_path_for(const std::filesystem::path& model_file);

// Every parameter, whole, under its Hugging Face name and shape in declaration order, with the
// metadata of dl-train's single-process model.safetensors: merging a single-process checkpoint
// reproduces its model.safetensors byte for byte. Optimizer state as in its optimizer.safetensors
// ("exp_avg.<name>").
MergeResult merge_checkpoint(const MergeOptions& options);

struct SplitOptions {
  std::filesystem::path source;  // checkpoint directory, checkpoints root or run directory
  std::string layout;            // "dp=4,zero=3", "dp=2,tp=2,pp=2", "tp=2"
  int ranks = 0;                 // instead of layout: dp = ranks
  std::filesystem::path output;  // a new run directory
  std::filesystem::path config;  // dl-train config for OUT/config.toml (default: the source run's)
};

struct SplitResult {
  std::filesystem::path checkpoint;  // the step directory read
  std::string note;
  std::string model_type;
  CheckpointLayout from, to;
  int64_t step = 0;
  std::filesystem::path output;      // the run directory written
  std::filesystem::path step_dir;    // its checkpoint
  bool config_written = false;       // OUT/config.toml (resumable with --resume OUT alone)
  std::vector<std::string> notes;    // what was adjusted in the config, how to resume
  std::string resume_command;
  std::vector<WrittenFile> files;
};

// Parses "dp=4,zero=3" (also space separated); keys dp, tp, pp, zero. Keys not given: dp, tp, pp
// 1; zero `source_zero` when dp > 1, else 0. ranks > 0 means dp = ranks.
CheckpointLayout parse_layout(const std::string& text, int ranks, int source_zero);

// Writes OUT as a dl-train run directory holding OUT/checkpoints/step_N/ exactly as dl-train
// saves that layout (same files, keys, pieces, CRCs, manifest) and, when the source run's config
// (or --config) is known, OUT/config.toml with [parallel] set to the layout and train.batch_size
// scaled so the global batch stays the same: `dl-train --resume OUT --nproc-per-node WORLD`
// continues the run. OUT must not exist or be empty; it appears only when complete.
SplitResult split_checkpoint(const SplitOptions& options);

std::string render_merge(const MergeResult& r, OutputFormat f);
std::string render_split(const SplitResult& r, OutputFormat f);

}  // namespace dl::shard
