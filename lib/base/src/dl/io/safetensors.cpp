#include "dl/io/safetensors.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "dl/core/error.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/input_file.hpp"

namespace dl {

namespace fs = std::filesystem;
// ordered_json keeps the header's own order, which breaks ties between zero-byte tensors that
// share an offset in the order the writer added them.
using ojson = nlohmann::ordered_json;

namespace {

// The Rust reference implementation refuses headers over 100 MB; a real one is a few hundred KB
// even for models with thousands of tensors, so anything larger is corruption, not a model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kChunkBytes = 4 << 20;  // streaming chunk for checksums
constexpr size_t kMaxPread = 1 << 30;    // Linux caps one read at ~2 GB; stay well under

constexpr const char* kCorruptHint = " — the file is corrupt or was written by an incompatible tool";

// A header that violates the format: the file is damaged or not what the user thinks it is.
template <class... Args>
[[noreturn]] void corrupt(const fs::path& path, Args&&... args) {
  throw_usage(path.string(), ": ", std::forward<Args>(args)..., kCorruptHint);
}

std::string supported_dtypes() {
  std::string out;
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8, DType::u16}) {
    if (!out.empty()) out += ", ";
    out += safetensors_dtype(t);
  }
  return out;
}

std::string dtype_shape(DType t, const Shape& s) { return str(safetensors_dtype(t), shape_str(s)); }

void put_u64_le(std::array<unsigned char, 8>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t get_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// An unsigned JSON integer, rejecting negatives, fractions and values that do not fit uint64.
bool as_u64(const ojson& j, uint64_t& out) {
  if (!j.is_number_unsigned()) return false;
  out = j.get<uint64_t>();
  return true;
}

// Validates one header entry and returns what it describes (offsets not yet checked against
// the other entries).
SafetensorsInfo parse_entry(const fs::path& path, const std::string& name, const ojson& e) {
  SafetensorsInfo info;
  info.name = name;
  if (!e.is_object()) corrupt(path, "tensor '", name, "': header entry is not a JSON object");

  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) corrupt(path, "tensor '", name, "': missing \"dtype\" string");
  const std::string dtype_text = dt->get<std::string>();
  if (!parse_safetensors_dtype(dtype_text, info.dtype))
    throw_usage(path.string(), ": tensor '", name, "': dtype '", dtype_text,
                "' is not supported by dlkit (supported: ", supported_dtypes(), "); convert the file first");

  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) corrupt(path, "tensor '", name, "': missing \"shape\" array");
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t v = 0;
    if (!as_u64(d, v) || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      corrupt(path, "tensor '", name, "': shape ", sh->dump(), " must hold non-negative integers");
    if (__builtin_mul_overflow(numel, v, &numel))
      corrupt(path, "tensor '", name, "': shape ", sh->dump(), " has more elements than fit in 64 bits");
    info.shape.push_back(static_cast<int64_t>(v));
  }

  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !as_u64((*off)[0], info.begin) ||
      !as_u64((*off)[1], info.end))
    corrupt(path, "tensor '", name, "': \"data_offsets\" must be [begin, end] with non-negative integers");
  if (info.end < info.begin)
    corrupt(path, "tensor '", name, "': data_offsets [", info.begin, ", ", info.end, "] end before they begin");

  uint64_t need = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(info.dtype)), &need))
    corrupt(path, "tensor '", name, "': ", dtype_shape(info.dtype, info.shape), " is larger than 2^64 bytes");
  if (info.end - info.begin != need)
    corrupt(path, "tensor '", name, "': data_offsets [", info.begin, ", ", info.end, "] hold ",
            info.end - info.begin, " bytes but ", dtype_shape(info.dtype, info.shape), " needs ", need);
  return info;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writer

void SafetensorsWriter::check_new_name(const std::string& name) const {
  if (name.empty()) throw_runtime("safetensors: a tensor needs a non-empty name");
  if (name == "__metadata__") throw_runtime("safetensors: '__metadata__' is reserved and cannot name a tensor");
  if (index_.count(name)) throw_runtime("safetensors: tensor '", name, "' was added twice");
}

void SafetensorsWriter::add(const std::string& name, const Tensor& host_tensor) {
  check_new_name(name);
  if (!host_tensor.defined()) throw_runtime("safetensors: tensor '", name, "' is undefined");
  if (!host_tensor.device().is_cpu())
    throw_runtime("safetensors: tensor '", name, "' is on ", host_tensor.device().name(),
                  "; copy it to the host before writing");
  index_[name] = entries_.size();
  entries_.push_back({{name, host_tensor.dtype(), host_tensor.shape()},
                      host_tensor.numel() ? host_tensor.raw() : nullptr, host_tensor});
}

void SafetensorsWriter::add_raw(const std::string& name, DType dtype, Shape shape, const void* data) {
  check_new_name(name);
  if (shape_numel(shape) > 0 && data == nullptr) throw_runtime("safetensors: tensor '", name, "' has no data");
  index_[name] = entries_.size();
  entries_.push_back({{name, dtype, std::move(shape)}, data, Tensor()});
}

uint64_t SafetensorsEntry::nbytes() const { return static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dtype); }

std::string safetensors_header(const std::vector<SafetensorsEntry>& entries, const SafetensorsMetadata& metadata) {
  ojson h = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& e : entries) {
    if (h.contains(e.name)) throw_runtime("safetensors: tensor '", e.name, "' declared twice");
    const uint64_t n = e.nbytes();
    ojson entry = ojson::object();
    entry["dtype"] = std::string(safetensors_dtype(e.dtype));
    entry["shape"] = ojson::array();
    for (int64_t d : e.shape) entry["shape"].push_back(d);
    entry["data_offsets"] = ojson::array({offset, offset + n});
    h[e.name] = std::move(entry);
    offset += n;
  }
  std::string s;
  try {
    s = h.dump();
  } catch (const nlohmann::json::exception& ex) {
    throw_usage("safetensors: a tensor name or metadata string is not valid UTF-8 (", ex.what(), ")");
  }
  // The data section then starts 8-byte aligned, so readers can map tensors in place.
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const auto& e : entries_) total += e.spec.nbytes();
  return total;
}

std::string SafetensorsWriter::header_json() const {
  std::vector<SafetensorsEntry> specs;
  specs.reserve(entries_.size());
  for (const auto& e : entries_) specs.push_back(e.spec);
  return safetensors_header(specs, metadata_);
}

uint32_t SafetensorsWriter::write(const fs::path& path) const {
  const std::string header = header_json();
  AtomicFileWriter out(path);
  std::array<unsigned char, 8> len{};
  put_u64_le(len, header.size());
  out.write(len.data(), len.size());
  out.write(header);
  for (const auto& e : entries_) {
    size_t n = static_cast<size_t>(e.spec.nbytes());
    if (n) out.write(e.data, n);
  }
  out.commit();
  return out.crc32c();
}

// ---------------------------------------------------------------------------------------------
// Streaming writer

SafetensorsStreamWriter::SafetensorsStreamWriter(const OutputTarget& target, std::vector<SafetensorsEntry> entries,
                                                 const SafetensorsMetadata& metadata)
    : entries_(std::move(entries)) {
  for (const auto& e : entries_) {
    if (e.name.empty() || e.name == "__metadata__")
      throw_runtime("safetensors: '", e.name, "' cannot name a tensor");
    data_total_ += e.nbytes();
  }
  const std::string header = safetensors_header(entries_, metadata);
  out_.open(target);
  std::array<unsigned char, 8> len{};
  put_u64_le(len, header.size());
  out_.write(len.data(), len.size());
  out_.write(header);
  while (current_ < entries_.size() && entries_[current_].nbytes() == 0) ++current_;
}

const SafetensorsEntry* SafetensorsStreamWriter::next() const {
  return current_ < entries_.size() ? &entries_[current_] : nullptr;
}

void SafetensorsStreamWriter::append(const void* data, size_t n) {
  if (!out_.is_open()) throw_runtime("safetensors: appending to a stream writer that is closed");
  if (n > data_total_ - data_written_)
    throw_runtime(out_.path().string(), ": ", n, " bytes appended but only ", data_total_ - data_written_,
                  " of the declared tensors remain");
  out_.write(data, n);
  data_written_ += n;
  // Advance past every tensor these bytes completed (and any empty ones after them).
  uint64_t left = n;
  while (current_ < entries_.size()) {
    const uint64_t room = entries_[current_].nbytes() - written_in_current_;
    if (left < room) {
      written_in_current_ += left;
      break;
    }
    left -= room;
    written_in_current_ = 0;
    ++current_;
  }
}

uint32_t SafetensorsStreamWriter::commit() {
  if (!out_.is_open()) throw_runtime("safetensors: commit of a stream writer that is closed");
  if (data_written_ != data_total_)
    throw_runtime(out_.path().string(), ": ", data_written_, " of ", data_total_, " tensor bytes written (next: '",
                  next() ? next()->name : std::string(), "')");
  out_.commit();
  return out_.crc32c();
}

const fs::path& SafetensorsStreamWriter::path() const { return out_.path(); }
uint64_t SafetensorsStreamWriter::file_bytes() const { return out_.bytes_written(); }

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsReader::~SafetensorsReader() { close(); }

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept { *this = std::move(other); }

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_size_ = other.file_size_;
    header_len_ = other.header_len_;
    infos_ = std::move(other.infos_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsReader::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  infos_.clear();
  index_.clear();
  metadata_.clear();
  file_size_ = header_len_ = 0;
}

namespace {

// The header length field against the file's size; returns it.
uint64_t checked_header_length(const fs::path& path, const unsigned char* len_field, uint64_t file_size) {
  const uint64_t header_len = get_u64_le(len_field);
  if (header_len > file_size - 8)
    corrupt(path, "the header length field says ", header_len, " bytes but the file has only ", file_size - 8,
            " bytes after it (truncated file?)");
  if (header_len > kMaxHeaderBytes)
    corrupt(path, "the header length ", header_len, " is over the ", kMaxHeaderBytes, "-byte limit");
  return header_len;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view header, uint64_t data_bytes, const fs::path& path) {
  if (header.empty() || header[0] != '{')
    corrupt(path, "the JSON header does not start with '{'");
  ojson h;
  try {
    h = ojson::parse(header);  // trailing padding spaces are JSON whitespace
  } catch (const ojson::parse_error& e) {
    corrupt(path, "the header is not valid JSON (at byte ", e.byte, " of ", header.size(), ")");
  } catch (const ojson::exception& e) {
    // A number too large for a double ("1e555") is out_of_range, not a parse_error
    // (fuzz_safetensors found it escaping as an uncaught exception).
    corrupt(path, "the header is not valid JSON (", e.what(), ")");
  }
  if (!h.is_object()) corrupt(path, "the header is not a JSON object");

  SafetensorsHeader out;
  for (const auto& [key, value] : h.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) corrupt(path, "\"__metadata__\" is not a JSON object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) corrupt(path, "\"__metadata__\" entry '", mk, "' is not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_entry(path, key, value));
  }

  // File order is data order. stable_sort keeps header order among zero-byte tensors at one offset.
  auto& infos = out.tensors;
  std::stable_sort(infos.begin(), infos.end(), [](const SafetensorsInfo& a, const SafetensorsInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const SafetensorsInfo* prev = nullptr;
  for (const auto& t : infos) {
    if (t.begin > expected) {
      if (prev)
        corrupt(path, "tensor '", t.name, "': data_offsets [", t.begin, ", ", t.end, "] leave bytes [",
                expected, ", ", t.begin, ") after tensor '", prev->name, "' unused (offsets must be contiguous)");
      corrupt(path, "tensor '", t.name, "': data_offsets [", t.begin, ", ", t.end,
              "] but the first tensor must start at offset 0");
    }
    if (t.begin < expected)
      corrupt(path, "tensor '", t.name, "': data_offsets [", t.begin, ", ", t.end, "] overlap tensor '",
              prev->name, "' at [", prev->begin, ", ", prev->end, "]");
    expected = t.end;
    prev = &t;
  }
  if (data_bytes < expected)
    corrupt(path, "the data section holds ", data_bytes, " bytes but the header describes ", expected,
            " (the file is truncated)");
  if (data_bytes > expected)
    corrupt(path, "the file has ", data_bytes - expected, " bytes after the last tensor (header describes ",
            expected, " data bytes, the file holds ", data_bytes, ")");
  return out;
}

SafetensorsHeader parse_safetensors(std::string_view file, const fs::path& path) {
  if (file.size() < 8)
    corrupt(path, "the file is ", file.size(), " bytes, too short for the 8-byte header length");
  const auto* bytes = reinterpret_cast<const unsigned char*>(file.data());
  const uint64_t header_len = checked_header_length(path, bytes, file.size());
  return parse_safetensors_header(file.substr(8, header_len), file.size() - 8 - header_len, path);
}

void SafetensorsReader::open(const fs::path& path) {
  close();
  path_ = path;
  // A missing, unreadable or non-regular file (a FIFO, /dev/zero) was named by the user: exit 2
  // tells them to fix the path; the open never waits on a FIFO.
  fd_ = open_input_file(path, "cannot open", &file_size_);
  try {
    if (file_size_ < 8)
      corrupt(path, "the file is ", file_size_, " bytes, too short for the 8-byte header length");
    std::array<unsigned char, 8> len{};
    read_at(0, len.data(), len.size(), "the header length");
    header_len_ = checked_header_length(path, len.data(), file_size_);
    std::string header(header_len_, '\0');
    read_at(8, header.data(), header.size(), "the header");
    SafetensorsHeader parsed = parse_safetensors_header(header, file_size_ - 8 - header_len_, path_);
    infos_ = std::move(parsed.tensors);
    metadata_ = std::move(parsed.metadata);
    for (size_t i = 0; i < infos_.size(); ++i) index_[infos_[i].name] = i;
  } catch (...) {
    close();
    throw;
  }
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(infos_.size());
  for (const auto& t : infos_) out.push_back(t.name);
  return out;
}

const SafetensorsInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw_usage(path_.string(), ": no tensor named '", name, "' (the file has ", infos_.size(), " tensors)");
  return infos_[it->second];
}

void SafetensorsReader::read_at(uint64_t offset, void* dst, size_t n, const std::string& what) const {
  if (fd_ < 0) throw_runtime("safetensors: reading ", what, " from a reader that is not open");
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t k = ::pread(fd_, p, std::min(n, kMaxPread), static_cast<off_t>(offset));
    if (k < 0) {
      if (errno == EINTR) continue;
      throw_runtime("cannot read ", what, " from ", path_.string(), ": ", std::strerror(errno));
    }
    if (k == 0)
      throw_runtime(path_.string(), ": the file ended at byte ", offset, " while reading ", what,
                    " (was it changed while being read?)");
    p += k;
    n -= static_cast<size_t>(k);
    offset += static_cast<uint64_t>(k);
  }
}

Tensor SafetensorsReader::read(const std::string& name) const {
  const SafetensorsInfo& t = info(name);
  Tensor out = Tensor::empty(t.shape, t.dtype);
  if (t.nbytes()) read_at(data_start() + t.begin, out.raw(), t.nbytes(), "tensor '" + name + "'");
  return out;
}

void SafetensorsReader::read_into(const std::string& name, Tensor& dst) const {
  const SafetensorsInfo& t = info(name);
  if (!dst.defined() || !dst.device().is_cpu())
    throw_runtime("safetensors: reading tensor '", name, "' needs a defined host tensor to read into");
  if (dst.dtype() != t.dtype || dst.shape() != t.shape)
    throw_usage(path_.string(), ": tensor '", name, "' is ", dtype_shape(t.dtype, t.shape),
                " in the file but the destination is ", dtype_shape(dst.dtype(), dst.shape()),
                "; was this file written for a different model or config?");
  if (t.nbytes()) read_at(data_start() + t.begin, dst.raw(), t.nbytes(), "tensor '" + name + "'");
}

uint32_t SafetensorsReader::crc32c_of_file() const {
  std::string buf(kChunkBytes, '\0');
  uint32_t crc = 0;
  for (uint64_t pos = 0; pos < file_size_;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, file_size_ - pos));
    read_at(pos, buf.data(), n, "the file for its checksum");
    crc = crc32c(buf.data(), n, crc);
    pos += n;
  }
  return crc;
}

}  // namespace dl
