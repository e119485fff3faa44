// Checkpoints: one directory per step under RUN/checkpoints/, published atomically.
//
// Single process:                        Several ranks:
//   step_00000040/                         step_00000040/
//     model.safetensors   (HF GPT-2)         shards/rank00000.safetensors ... (one per rank)
//     optimizer.safetensors                  config.json
//     config.json                            trainer_state.json
//     trainer_state.json
//
// Every stored tensor is a *piece* of a whole-model tensor: the manifest (trainer_state.json)
// lists, for each piece, the file and key that hold it, which tensor-parallel slice of the
// whole tensor it belongs to, and which flat element range of that slice (ZeRO shards cut
// tensors anywhere). A single-process checkpoint has one whole piece per tensor, stored under
// its Hugging Face name with its shape, so transformers can load the folder; a sharded one is
// turned into that by `dl-shard merge`. Any layout loads any checkpoint: each rank rebuilds the
// whole tensors it needs from their pieces and takes its own slice and shard.
//
// The directory is written under a temporary name by every rank, the manifest is written last
// by rank 0 with the CRC-32C of every file, and the directory is renamed into place: a crash at
// any moment leaves the complete checkpoint or none. The manifest carries the CRC-32C of its own
// content (manifest_crc32c), and the folder's name, the manifest and every file name the same
// step. A checkpoint that fails any check (a file's CRC, the manifest's, a step that disagrees, a
// step folder outside its run) is reported and the previous one is used. docs/FORMATS.md
// defines the format.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dl/config/config.hpp"
#include "dl/config/hf_gpt2_config.hpp"
#include "dl/core/slice.hpp"
#include "dl/nn/params.hpp"
#include "dl/optim/loss_scale.hpp"
#include "dl/parallel/zero.hpp"

namespace dl {

struct TrainerState {
  int64_t step = 0;           // optimizer steps completed
  int64_t data_position = 0;  // next position in the training data stream (Sampler)
  int64_t tokens_seen = 0;    // training tokens (gpt) or examples (mlp) consumed
  uint64_t rng_key = 0;       // the trainer's sampling stream (evaluation samples)
  uint64_t rng_index = 0;
  double train_seconds = 0;   // wall time spent training, summed over resumed runs
  LossScaleState loss_scale;  // fp16 dynamic loss scaling (scale 0: not recorded)
};

struct CheckpointLayout {
  int world = 1, dp = 1, tp = 1, pp = 1, zero = 0;
};

// One tensor a checkpoint file stores: a piece of a whole-model tensor.
struct StoredPiece {
  size_t param = 0;        // index in the rank's ParamSet
  int state = -1;          // -1: the parameter's value; k: optimizer state k
  std::string name, kind;  // whole-model tensor name; "param" or the state's name ("exp_avg")
  std::string file, key;   // file inside the checkpoint directory, tensor name in that file
  TensorSlice slice;       // where the rank's (tensor-parallel) local tensor sits in the whole one
  Shape local_shape;       // the local tensor's shape
  int64_t lo = 0, hi = 0;  // flat element range of the local tensor
  Shape stored_shape;      // local_shape when the piece is the whole local tensor, else {hi - lo}
};

// What a rank writes, in file order: single process, model.safetensors (Hugging Face names)
// then optimizer.safetensors ("exp_avg.<name>"); several ranks, shards/rankNNNNN.safetensors
// with keys "<name>" / "<state>.<name>", plus "@<lo>" for a flat shard. save_checkpoint and
// dl-shard split both use it, so a split checkpoint is what dl-train writes for that layout.
std::vector<StoredPiece> checkpoint_pieces(const ParamSet& params, const parallel::ZeroPieces& pieces,
                                           const std::vector<std::string>& state_names, int rank, bool single_process);

// The pieces' manifest entries.
nlohmann::json piece_json(const StoredPiece& piece);
// Whole-tensor shapes and dtypes of the parameters a rank holds (tied copies left out).
nlohmann::json tensors_json(const ParamSet& params, DType dtype);
// safetensors metadata of every checkpoint file.
std::map<std::string, std::string> checkpoint_file_metadata(int64_t step);
// "step_00000040".
std::string checkpoint_dir_name(int64_t step);
// "shards/rank00003.<ext>": a rank's file in a sharded checkpoint.
std::string checkpoint_rank_file(int rank, const char* ext);
// The manifest (trainer_state.json), written last: `optimizer` is {name, steps, state}, `files`
// maps each file to {crc32c, bytes}. Sealed (below): write it as it is returned.
nlohmann::json checkpoint_manifest(const std::string& model_type, const TrainerState& state,
                                   const nlohmann::json& optimizer, const CheckpointLayout& layout,
                                   const nlohmann::json& tensors, const nlohmann::json& pieces,
                                   const nlohmann::json& files);
inline constexpr const char* kCheckpointManifest = "trainer_state.json";
// The manifest's own checksum: the CRC-32C of its canonical text without this key (compact JSON,
// object keys in ascending byte order at every level, as nlohmann::json's dump() writes it;
// docs/FORMATS.md).
inline constexpr const char* kManifestChecksum = "manifest_crc32c";
uint32_t checkpoint_manifest_crc32c(const nlohmann::json& manifest);
// Sets manifest["manifest_crc32c"]: the last change to a manifest before it is written.
void seal_checkpoint_manifest(nlohmann::json& manifest);
// A run's copy of its GPT-2 tokenizer files (vocab.json + merges.txt, or tokenizer.json), beside
// RUN/checkpoints/: what dl-train sample and eval on the run read, and dl-shard merge copies.
inline constexpr const char* kRunTokenizerDir = "tokenizer";

// The manifest checked field by field before anything trusts it: format and version, its checksum
// (format version 3; version 2, written before the checksum, has none), numbers of
// the right type and range, every listed file inside the checkpoint folder (no absolute path, no
// ".."), every tensor no larger than the files hold, every piece naming a listed file and tensor
// and a slice inside that tensor. Throws dl::Error(usage) naming `manifest_path` and the field.
nlohmann::json parse_checkpoint_manifest(std::string_view text, const std::filesystem::path& manifest_path);
// dir/trainer_state.json read (regular files only) and parsed as above.
nlohmann::json read_checkpoint_manifest(const std::filesystem::path& dir);

// The step a step folder's name stands for: exactly checkpoint_dir_name(step) ("step_00000040" ->
// 40); nullopt for any other name ("step_00000040.bak", "step_40", "step_x").
std::optional<int64_t> checkpoint_dir_step(const std::string& name);

// Folders under root named exactly as a step folder, newest step first (complete ones only: the
// manifest exists). Nothing else there is ever taken for a checkpoint.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& root);

// The run's own checkpoints, newest first: the step folders of list_checkpoints that are folders
// (not symbolic links) directly in root whose manifest reads back (its checksum included) with the
// step of the folder's name. Rotation (train.keep_checkpoints) deletes among these only.
std::vector<std::filesystem::path> own_checkpoints(const std::filesystem::path& root);

// Verifies a checkpoint: its manifest (checksum included), the step of the folder's name (when it
// is a step folder's name) against the manifest's, and every file the manifest lists: inside the
// folder after resolving links, its size, its CRC-32C, and a safetensors file's dlkit.step against
// the manifest's step. Returns an empty string when it is intact, otherwise what is wrong, naming
// the file and the field.
std::string verify_checkpoint(const std::filesystem::path& dir);

// The newest checkpoint of root that lies in root (after resolving links) and verifies; warns
// about (and skips) the others, and warns when the one it takes is format version 2 (no checksum:
// its metadata cannot be verified). Throws a usage error when `root` holds no usable checkpoint.
std::filesystem::path latest_good_checkpoint(const std::filesystem::path& root);

// Resume and eval continue the checkpoint's model: every architecture key of `model` (type;
// gpt: n_layer, n_head, n_embd, block_size, vocab_size, tie_embeddings; mlp: hidden, activation)
// must equal what the checkpoint's config.json says. Throws dl::Error(usage) naming the key, the
// checkpoint's value and the config's. (init_std and init_from only choose initial weights.)
void check_checkpoint_model(const std::filesystem::path& dir, const ModelConfig& model);

// Reads whole tensors back from their pieces (any layout), one tensor at a time.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::filesystem::path& dir);
  // A manifest already read and checked by parse_checkpoint_manifest; files are read from `dir`.
  CheckpointReader(const std::filesystem::path& dir, nlohmann::json manifest);
  ~CheckpointReader();
  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& manifest() const;
  CheckpointLayout layout() const;
  std::string model_type() const;
  // Whole-model tensor names of a kind ("param", "exp_avg", ...), in manifest order.
  std::vector<std::string> names(const std::string& kind = "param") const;
  bool has(const std::string& name, const std::string& kind = "param") const;
  Shape shape(const std::string& name) const;
  DType dtype(const std::string& name) const;
  // The whole tensor, assembled from its pieces; a usage error names what is missing.
  Tensor read(const std::string& name, const std::string& kind = "param") const;
  TrainerState state() const;
  std::string optimizer_name() const;
  int64_t optimizer_steps() const;

 private:
  struct Impl;
  std::filesystem::path dir_;
  std::unique_ptr<Impl> impl_;
};

// config.json of an mlp checkpoint.
std::string mlp_config_json(const ModelConfig& model);
// A llama run's config.json, in transformers' LlamaConfig keys (model_type "llama"), or with
// model.qkv_bias Qwen2Config's (model_type "qwen2", Qwen2ForCausalLM).
std::string llama_config_json(const ModelConfig& model);

}  // namespace dl
