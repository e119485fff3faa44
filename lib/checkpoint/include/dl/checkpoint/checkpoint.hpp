// Writing a checkpoint from a training run and loading one into a model of any layout: the
// collectives every rank calls (the format itself: dl/checkpoint/format.hpp).
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dl/checkpoint/format.hpp"
#include "dl/config/config.hpp"
#include "dl/dist/comm.hpp"
#include "dl/nn/model.hpp"
#include "dl/parallel/zero.hpp"

namespace dl {

// What a checkpoint carries of the run's tokenizer (Tokenizer::files(), bos_token_id(), ...):
// its files go into the checkpoint, which is then a whole Hugging Face folder, and a llama
// config.json gets bos_token_id / eos_token_id.
struct CheckpointTokenizer {
  std::vector<std::string> files;
  std::optional<int32_t> bos_token_id, eos_token_id;
};

// Everything a rank contributes to a checkpoint.
struct CheckpointSource {
  Model& model;
  parallel::ZeroEngine& engine;
  dist::Comm& world;
  CheckpointLayout layout;
  CheckpointTokenizer tokenizer = {};
};

// Collective: every rank calls it. Writes the checkpoint for state.step under `root`
// (RUN/checkpoints, on a filesystem every rank sees) and keeps the newest `keep`. Returns the
// published directory.
std::filesystem::path save_checkpoint(const std::filesystem::path& root, CheckpointSource& src,
                                      const TrainerState& state, const Config& config, int64_t keep);

// Collective: rank 0 chooses the newest good checkpoint and every rank gets the same one.
std::filesystem::path agree_on_checkpoint(const std::filesystem::path& root, dist::Comm& world);

// Where a piece of a parameter (or of its optimizer state) lives on this rank.
using PieceStorage = std::function<Tensor(const parallel::Piece&)>;
// Reads a whole tensor straight into `dst` (a host tensor of its shape) when the source can do so
// without conversion; false when it cannot.
using ReadInto = std::function<bool(const std::string& name, Tensor& dst)>;
// Writes each of this rank's `pieces` from the whole tensor `whole(name)` returns (host, any float
// dtype): its tensor-parallel slice, then the piece's flat range, converted to the storage's dtype.
// A piece that is a whole, unsliced host parameter goes through `read_into` first, if given
// (one copy instead of three).
void load_pieces(ParamSet& params, const std::vector<parallel::Piece>& pieces,
                 const std::function<Tensor(const std::string&)>& whole, const PieceStorage& dst_of,
                 const ReadInto& read_into = {});

// Loads weights (and, with an engine, optimizer state) into a model built for any layout; every
// tensor's name and whole shape is checked. Returns the trainer state.
TrainerState load_checkpoint(const std::filesystem::path& dir, Model& model, parallel::ZeroEngine* engine);

}  // namespace dl
