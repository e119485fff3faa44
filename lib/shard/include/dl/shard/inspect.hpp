// dl-shard inspect: the tensors of a safetensors file or a dl-train checkpoint (names, dtypes,
// shapes, bytes, CRC-32C per tensor) and the verification of every file against the
// checkpoint's manifest (trainer_state.json, lib/checkpoint/include/dl/checkpoint/format.hpp). Files are streamed in
// chunks: nothing is loaded whole, so checkpoints larger than memory inspect fine.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dl/cli/table.hpp"
#include "dl/config/choice.hpp"

namespace dl::shard {

struct TensorEntry {
  std::string file;   // file name inside the checkpoint (or the file's name)
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t elements = 0;
  uint64_t bytes = 0;
  uint64_t offset = 0;  // absolute byte offset in the file
  uint32_t crc32c = 0;  // CRC-32C of the tensor's bytes
};

struct FileEntry {
  std::string file;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;                    // of the whole file as read
  std::optional<uint32_t> expected_crc32c;  // from the manifest
  std::optional<uint64_t> expected_bytes;
  size_t tensors = 0;                     // safetensors files
  std::string problem;                    // "" when intact (or nothing to compare with)
};

// What dl-shard inspect looked at; the names are the json's "kind".
enum class InspectKind { checkpoint, safetensors };
inline constexpr std::string_view kInspectKindNames[] = {"checkpoint", "safetensors"};
constexpr std::span<const std::string_view> choice_names(InspectKind) { return kInspectKindNames; }

struct Inspection {
  std::filesystem::path path;  // what was inspected (the checkpoint directory or the file)
  InspectKind kind = InspectKind::checkpoint;
  std::string note;            // e.g. "newest of 3 checkpoints in runs/a/checkpoints"
  int64_t step = -1;           // checkpoint step
  std::string model_type;      // checkpoint's model_type
  std::string layout;          // checkpoint's layout ("world=1 dp=1 tp=1 pp=1 zero=0")
  std::vector<FileEntry> files;
  std::vector<TensorEntry> tensors;

  bool ok() const;
  std::string first_problem() const;  // "<path>: <what is wrong>", "" when ok()
  uint64_t tensor_bytes() const;
};

// Inspects PATH: a .safetensors file; a checkpoint directory (holding trainer_state.json); a
// checkpoints root or a run directory (its newest checkpoint). Every file the manifest lists is
// read once: tensors get their own CRC-32C and the whole file's CRC-32C and size are compared
// with the manifest. A damaged file is recorded in FileEntry::problem (inspection goes on); a
// path that is none of the above is a usage error.
Inspection inspect_path(const std::filesystem::path& path);

// table/md: the tensors, then the files and their verification; json: one object
// {path, kind, step, model_type, layout, ok, files: [...], tensors: [...]}; jsonl/csv: one row
// per tensor.
std::string render_inspection(const Inspection& ins, OutputFormat f);

}  // namespace dl::shard
