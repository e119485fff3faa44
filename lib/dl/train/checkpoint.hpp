// Checkpoints: one directory per step under RUN/checkpoints/, published atomically.
//
//   step_00000040/
//     model.safetensors      weights, Hugging Face GPT-2 names and layouts (F32)
//     config.json            transformers' GPT2Config (gpt) or dlkit's model description (mlp)
//     optimizer.safetensors  optimizer state per parameter: "exp_avg.<param>", ...
//     trainer_state.json     step, data position, RNG state, CRC-32C of every file above
//
// The directory is written under a temporary name and renamed into place after every file is
// fsync'ed, and trainer_state.json (the manifest) is written last: a crash at any moment leaves
// either the complete checkpoint or none. A checkpoint whose files fail their CRC is reported and
// skipped in favour of the previous one.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dl/config/config.hpp"
#include "dl/nn/model.hpp"
#include "dl/optim/optimizer.hpp"

namespace dl {

struct TrainerState {
  int64_t step = 0;           // optimizer steps completed
  int64_t data_position = 0;  // next position in the training data stream (Sampler)
  int64_t tokens_seen = 0;    // training tokens (gpt) or examples (mlp) consumed
  uint64_t rng_key = 0;       // the trainer's sampling stream (evaluation samples)
  uint64_t rng_index = 0;
  double train_seconds = 0;   // wall time spent training, summed over resumed runs
};

// Writes a checkpoint for state.step under `root` (RUN/checkpoints) and keeps the newest
// `keep` checkpoints. Returns the published directory.
std::filesystem::path save_checkpoint(const std::filesystem::path& root, Model& model, Optimizer* optimizer,
                                      const TrainerState& state, const Config& config, int64_t keep);

// Checkpoint directories under root, newest step first (complete ones only: the manifest exists).
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& root);

// Verifies the CRC-32C of every file a checkpoint's manifest lists; returns an empty string when
// it is intact, otherwise what is wrong.
std::string verify_checkpoint(const std::filesystem::path& dir);

// The newest checkpoint that verifies; warns about (and skips) corrupt ones. Throws a usage error
// when `root` holds no usable checkpoint.
std::filesystem::path latest_good_checkpoint(const std::filesystem::path& root);

// Loads weights (and optimizer state when given) into a model built for the same config; every
// tensor's name, dtype and shape is checked. Returns the trainer state.
TrainerState load_checkpoint(const std::filesystem::path& dir, Model& model, Optimizer* optimizer);

// The GPT2Config JSON transformers reads (config.json beside model.safetensors).
std::string hf_gpt2_config_json(const ModelConfig& model);

}  // namespace dl
