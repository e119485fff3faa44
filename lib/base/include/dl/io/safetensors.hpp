// safetensors files (https://github.com/huggingface/safetensors; REFERENCE.md "File formats"):
//   u64 little-endian header length N | N bytes of JSON, starting with '{', space-padded to a
//   multiple of 8 | the tensors' bytes, back to back.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data start) plus an optional "__metadata__" map of strings.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dl/core/dtype.hpp"
#include "dl/core/tensor.hpp"
#include "dl/io/atomic_file.hpp"

namespace dl {

using SafetensorsMetadata = std::map<std::string, std::string>;

// A tensor as a safetensors header declares it.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t nbytes() const;
};

// The header (JSON, space-padded to a multiple of 8) for tensors laid out in this order.
std::string safetensors_header(const std::vector<SafetensorsEntry>& entries, const SafetensorsMetadata& metadata);

// Collects tensors and writes them in one pass. Nothing is copied: add() keeps a reference to the
// tensor's storage and add_raw() keeps the pointer, so the data must stay unchanged until write().
class SafetensorsWriter {
 public:
  void add(const std::string& name, const Tensor& host_tensor);
  void add_raw(const std::string& name, DType dtype, Shape shape, const void* data);
  void set_metadata(SafetensorsMetadata metadata) { metadata_ = std::move(metadata); }

  // Writes the file atomically (temp file + fsync + rename); tensors are laid out in the order
  // they were added. Returns the CRC-32C of the whole file as written.
  uint32_t write(const std::filesystem::path& path) const;

  size_t size() const { return entries_.size(); }
  uint64_t data_bytes() const;  // sum of the tensors' byte sizes

 private:
  struct Entry {
    SafetensorsEntry spec;
    const void* data;
    Tensor keep_alive;  // holds the storage of add()ed tensors
  };
  void check_new_name(const std::string& name) const;
  std::string header_json() const;

  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  SafetensorsMetadata metadata_;
};

// Writes a file whose tensors are declared up front and whose bytes then arrive in order, any
// number of bytes at a time, so a file larger than memory is written without holding it (dl-shard
// merge and split). The header is the one SafetensorsWriter writes for the same tensors: both
// produce identical files. Atomic: nothing appears at `path` before commit(); a writer destroyed
// without commit() (an exception) removes its temporary file.
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(const std::filesystem::path& path, std::vector<SafetensorsEntry> entries,
                          const SafetensorsMetadata& metadata = {})
      : SafetensorsStreamWriter(OutputTarget::file(path), std::move(entries), metadata) {}
  // A user-named output (output_target()): a device, FIFO or stdout is written through.
  SafetensorsStreamWriter(const OutputTarget& target, std::vector<SafetensorsEntry> entries,
                          const SafetensorsMetadata& metadata = {});
  // Bytes of the current tensor (the first declared one not yet complete); a call may span
  // tensors. More bytes than declared is an error.
  void append(const void* data, size_t n);
  // The tensor the next bytes belong to (nullptr when every tensor is complete).
  const SafetensorsEntry* next() const;
  uint64_t data_bytes() const { return data_total_; }
  // Publishes the file; an error unless every declared byte was written. Returns the CRC-32C of
  // the whole file.
  uint32_t commit();
  const std::filesystem::path& path() const;
  uint64_t file_bytes() const;  // bytes written so far, header included

 private:
  AtomicFileWriter out_;
  std::vector<SafetensorsEntry> entries_;
  size_t current_ = 0;         // index of the tensor being written
  uint64_t written_in_current_ = 0;
  uint64_t data_total_ = 0, data_written_ = 0;
};

struct SafetensorsInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the data section
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

// A validated header: the tensors in file order (by data offset) and the metadata.
struct SafetensorsHeader {
  std::vector<SafetensorsInfo> tensors;
  SafetensorsMetadata metadata;
};
// Checks the JSON header of a file whose data section holds `data_bytes` bytes: every entry's
// dtype, shape and offsets, offsets contiguous from 0 and covering the data exactly. Throws
// dl::Error(usage) naming `path` and the tensor. SafetensorsReader::open applies it to a file.
SafetensorsHeader parse_safetensors_header(std::string_view header, uint64_t data_bytes,
                                           const std::filesystem::path& path);
// The same for a whole file held in memory (length field, header, data size).
SafetensorsHeader parse_safetensors(std::string_view file, const std::filesystem::path& path);

// Reads tensors one at a time with pread, so a file larger than memory can be loaded piecewise.
// open() validates the whole header against the format (and the file size) up front; any
// violation is a dl::Error(usage) naming the file and, where there is one, the tensor.
class SafetensorsReader {
 public:
  SafetensorsReader() = default;
  explicit SafetensorsReader(const std::filesystem::path& path) { open(path); }
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;

  void open(const std::filesystem::path& path);
  void close() noexcept;

  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> names() const;  // in file order (by data offset)
  const std::vector<SafetensorsInfo>& tensors() const { return infos_; }  // file order
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const SafetensorsInfo& info(const std::string& name) const;  // dl::Error(usage) if absent
  const SafetensorsMetadata& metadata() const { return metadata_; }
  uint64_t header_bytes() const { return header_len_; }   // N
  uint64_t data_start() const { return 8 + header_len_; }  // absolute offset of the data section
  uint64_t file_size() const { return file_size_; }

  // A new host tensor holding the named tensor's bytes (reads only those bytes).
  Tensor read(const std::string& name) const;
  // Reads into an existing host tensor (a model parameter); dtype and shape must match exactly.
  void read_into(const std::string& name, Tensor& dst) const;
  // CRC-32C of the whole file, streamed in chunks (compare with SafetensorsWriter::write()).
  uint32_t crc32c_of_file() const;

 private:
  void read_at(uint64_t offset, void* dst, size_t n, const std::string& what) const;

  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t header_len_ = 0;
  std::vector<SafetensorsInfo> infos_;
  std::unordered_map<std::string, size_t> index_;
  SafetensorsMetadata metadata_;
};

}  // namespace dl
