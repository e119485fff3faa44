// What dl-shard split and merge need to know about a dl-train checkpoint before they touch its
// tensors: which directory it is, that every file passes its CRC-32C, which model it holds, and
// that its pieces are exactly the ones its layout's ranks write (lib/checkpoint/include/dl/checkpoint/format.hpp).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dl/config/config.hpp"
#include "dl/nn/mlp.hpp"
#include "dl/nn/params.hpp"
#include "dl/parallel/mesh.hpp"
#include "dl/checkpoint/format.hpp"

namespace dl::shard {

// A checkpoint directory (step_*), a checkpoints root or a run directory (its newest complete
// checkpoint). `note` says which one was chosen when PATH was not a checkpoint itself. Usage
// error when PATH holds none.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path, std::string* note = nullptr);

// The model a checkpoint holds, rebuilt from its config.json and tensor shapes, so the
// parameters of any rank of any layout can be declared without training code.
struct CheckpointModel {
  ModelConfig config;  // type; gpt: n_layer, n_head, n_embd, block_size, vocab_size, init_std; mlp: hidden, activation
  MlpConfig mlp;       // mlp: widths read from the tensors
  DType dtype = DType::f32;
  std::vector<std::string> state_names;  // optimizer state kinds ("exp_avg", "exp_avg_sq")

  // The parameters rank (tp_rank, pp_rank) of a mesh declares, unallocated, and its groups.
  ParamSet declarations(const parallel::MeshShape& mesh, int tp_rank, int pp_rank,
                        std::vector<std::pair<size_t, size_t>>* groups = nullptr) const;
  // Whole-model parameter names in declaration order (the order of a single-process
  // checkpoint's model.safetensors).
  std::vector<std::string> tensor_order() const;
};

// Reads the model from an opened checkpoint and checks it against the manifest's tensor list
// (names and whole shapes); a disagreement is a usage error naming the tensor.
CheckpointModel checkpoint_model(const CheckpointReader& reader);

// One rank's place in a mesh (Megatron order: tp innermost, then dp, then pp).
struct MeshRank {
  int rank = 0, dp_rank = 0, tp_rank = 0, pp_rank = 0;
};
MeshRank mesh_rank(const parallel::MeshShape& mesh, int rank);

// The pieces every rank of `layout` writes, in rank order (checkpoint_pieces for each rank).
std::vector<std::vector<StoredPiece>> layout_pieces(const CheckpointModel& model, const CheckpointLayout& layout);

// A checkpoint verified before any tensor is read from it: every file's size and CRC-32C
// against the manifest, the model against the manifest's tensors, then the manifest's pieces
// against the ones its layout's ranks write (a lost or foreign rank, a piece with another range
// or slice). Usage error naming the file or tensor.
struct CheckedCheckpoint {
  std::unique_ptr<CheckpointReader> reader;
  CheckpointModel model;
};
CheckedCheckpoint open_checkpoint(const std::filesystem::path& dir);

std::string layout_string(const CheckpointLayout& l);  // "dp=2 tp=1 pp=1 zero=3"

}  // namespace dl::shard
