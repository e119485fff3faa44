#include "dl/shard/inspect.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"
#include "dl/core/tensor.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/io/safetensors.hpp"
#include "dl/checkpoint/format.hpp"

namespace dl::shard {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = "trainer_state.json";
constexpr size_t kChunk = 4 << 20;

// Streams [begin, begin + n) of an open file through CRC-32C, continuing `crc`; `part` gets its
// own CRC when non-null. Returns the continued CRC; throws when the file ends early.
uint32_t stream_crc(std::ifstream& f, const fs::path& path, uint64_t n, uint32_t crc, uint32_t* part,
                    std::vector<char>& buf) {
  uint32_t own = 0;
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
    f.read(buf.data(), static_cast<std::streamsize>(k));
    if (static_cast<size_t>(f.gcount()) != k) throw_usage(path.string(), ": the file ended early (truncated?)");
    crc = crc32c(buf.data(), k, crc);
    if (part) own = crc32c(buf.data(), k, own);
    n -= k;
  }
  if (part) *part = own;
  return crc;
}

// The whole-file CRC and size, streamed.
void checksum_file(const fs::path& p, FileEntry& fe) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw_runtime("cannot read ", p.string());
  std::vector<char> buf(kChunk);
  uint32_t crc = 0;
  uint64_t total = 0;
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto k = static_cast<size_t>(f.gcount());
    crc = crc32c(buf.data(), k, crc);
    total += k;
  }
  fe.crc32c = crc;
  fe.bytes = total;
}

// A safetensors file: the header checked by SafetensorsReader, then one sequential pass that
// checksums each tensor and the whole file (tensors are contiguous in offset order, and the
// reader has checked they fill the file exactly).
void inspect_safetensors(const fs::path& p, const std::string& label, FileEntry& fe, std::vector<TensorEntry>& out) {
  SafetensorsReader reader;
  try {
    reader.open(p);
  } catch (const Error& e) {
    checksum_file(p, fe);
    fe.problem = e.what();
    return;
  }
  std::ifstream f(p, std::ios::binary);
  if (!f) throw_runtime("cannot read ", p.string());
  std::vector<char> buf(kChunk);
  uint32_t crc = stream_crc(f, p, reader.data_start(), 0, nullptr, buf);
  for (const auto& info : reader.tensors()) {
    TensorEntry t;
    t.file = label;
    t.name = info.name;
    t.dtype = std::string(safetensors_dtype(info.dtype));
    t.shape = info.shape;
    t.elements = 1;
    for (auto d : info.shape) t.elements *= static_cast<uint64_t>(d);
    t.bytes = info.nbytes();
    t.offset = reader.data_start() + info.begin;
    crc = stream_crc(f, p, t.bytes, crc, &t.crc32c, buf);
    out.push_back(std::move(t));
    ++fe.tensors;
  }
  fe.crc32c = crc;
  fe.bytes = reader.file_size();
}


bool is_safetensors(const fs::path& p) { return p.extension() == ".safetensors"; }

void inspect_checkpoint(const fs::path& dir, Inspection& ins) {
  ins.kind = InspectKind::checkpoint;
  const fs::path mpath = dir / kManifest;
  // Checked field by field first: a file named outside the folder is never opened.
  json m = read_checkpoint_manifest(dir);
  ins.step = m.value("step", int64_t{-1});
  ins.model_type = m.value("model_type", "");
  if (m.contains("layout") && m["layout"].is_object()) {
    std::string s;
    for (const char* k : {"world", "dp", "tp", "pp", "zero"})
      if (m["layout"].contains(k)) s += (s.empty() ? "" : " ") + std::string(k) + "=" + m["layout"][k].dump();
    ins.layout = s;
  }
  if (!m.contains("files") || !m["files"].is_object()) throw_usage(mpath.string(), ": the manifest lists no files");
  std::set<std::string> listed;
  for (const auto& [name, info] : m["files"].items()) {
    listed.insert(name);
    FileEntry fe;
    fe.file = name;
    if (info.contains("crc32c") && info["crc32c"].is_number_unsigned()) fe.expected_crc32c = info["crc32c"].get<uint32_t>();
    if (info.contains("bytes") && info["bytes"].is_number_unsigned()) fe.expected_bytes = info["bytes"].get<uint64_t>();
    const fs::path p = dir / name;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) {
      fe.problem = "missing (the manifest lists it)";
      ins.files.push_back(std::move(fe));
      continue;
    }
    if (is_safetensors(p)) inspect_safetensors(p, name, fe, ins.tensors);
    else checksum_file(p, fe);
    if (fe.problem.empty() && fe.expected_bytes && fe.bytes != *fe.expected_bytes)
      fe.problem = str(fe.bytes, " bytes, the manifest says ", *fe.expected_bytes, " (truncated?)");
    if (fe.problem.empty() && fe.expected_crc32c && fe.crc32c != *fe.expected_crc32c)
      fe.problem = str("CRC-32C 0x", hex32(fe.crc32c), ", the manifest says 0x", hex32(*fe.expected_crc32c), " (corrupt)");
    if (!fe.problem.empty() && fe.expected_crc32c && fe.crc32c != *fe.expected_crc32c &&
        fe.problem.find("CRC-32C") == std::string::npos)
      fe.problem += str("; CRC-32C 0x", hex32(fe.crc32c), ", the manifest says 0x", hex32(*fe.expected_crc32c));
    ins.files.push_back(std::move(fe));
  }
  // Safetensors files the manifest does not list: shown, with nothing to verify against.
  std::vector<fs::path> extra;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && is_safetensors(e.path()) && !listed.count(e.path().filename().string()))
      extra.push_back(e.path());
  std::sort(extra.begin(), extra.end());
  for (const auto& p : extra) {
    FileEntry fe;
    fe.file = p.filename().string();
    inspect_safetensors(p, fe.file, fe, ins.tensors);
    ins.files.push_back(std::move(fe));
  }
}

}  // namespace

bool Inspection::ok() const {
  for (const auto& f : files)
    if (!f.problem.empty()) return false;
  return true;
}

std::string Inspection::first_problem() const {
  for (const auto& f : files)
    if (!f.problem.empty()) {
      const fs::path p = kind == InspectKind::checkpoint ? path / f.file : path;
      return p.string() + ": " + f.problem;
    }
  return "";
}

uint64_t Inspection::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.bytes;
  return n;
}

Inspection inspect_path(const fs::path& path) {
  Inspection ins;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw_usage(path.string(), ": no such file or directory");
  if (fs::is_regular_file(path, ec)) {
    ins.path = path;
    ins.kind = InspectKind::safetensors;
    FileEntry fe;
    fe.file = path.filename().string();
    inspect_safetensors(path, fe.file, fe, ins.tensors);
    ins.files.push_back(std::move(fe));
    return ins;
  }
  if (!fs::is_directory(path, ec)) throw_usage(path.string(), ": not a file or a directory");
  if (fs::exists(path / kManifest)) {
    ins.path = path;
    inspect_checkpoint(path, ins);
    return ins;
  }
  // A checkpoints root (RUN/checkpoints) or a run directory: the newest complete checkpoint.
  for (const fs::path& root : {path, path / "checkpoints"}) {
    auto all = list_checkpoints(root);
    if (!all.empty()) {
      ins.path = all.front();
      ins.note = str("newest of ", all.size(), " checkpoint", all.size() == 1 ? "" : "s", " in ", root.string());
      inspect_checkpoint(all.front(), ins);
      return ins;
    }
  }
  throw_usage(path.string(), ": neither a .safetensors file nor a dl-train checkpoint (no ", kManifest,
              ", no checkpoints/step_*)");
}

std::string render_inspection(const Inspection& ins, OutputFormat f) {
  Table tensors({{"file", "file", false},
                 {"tensor", "tensor", false},
                 {"dtype", "dtype", false},
                 {"shape", "shape", false},
                 {"elements", "elements", true},
                 {"bytes", "bytes", true},
                 {"offset", "offset", true},
                 {"crc32c", "crc32c", false}});
  for (const auto& t : ins.tensors) {
    Cell shape_cell{std::vector<int64_t>(t.shape.begin(), t.shape.end()), shape_str(t.shape)};
    tensors.add_row({Cell::str(t.file), Cell::str(t.name), Cell::str(t.dtype), shape_cell,
                     Cell::integer(static_cast<int64_t>(t.elements)),
                     Cell::integer(static_cast<int64_t>(t.bytes)),  // json wrote 65536.0
                     Cell::integer(static_cast<int64_t>(t.offset)), Cell::checksum(t.crc32c)});
  }
  Table files({{"file", "file", false},
               {"bytes", "bytes", true},
               {"tensors", "tensors", true},
               {"crc32c", "crc32c", false},
               {"expected_crc32c", "manifest crc32c", false},
               {"ok", "status", false},
               {"problem", "problem", false}});
  for (const auto& fe : ins.files) {
    std::string status = !fe.problem.empty() ? "FAILED" : (fe.expected_crc32c ? "ok" : "not listed");
    if (ins.kind == InspectKind::safetensors && fe.problem.empty()) status = "header ok";
    files.add_row({Cell::str(fe.file), Cell::integer(static_cast<int64_t>(fe.bytes)),
                   Cell::integer(static_cast<int64_t>(fe.tensors)), Cell::checksum(fe.crc32c),
                   fe.expected_crc32c ? Cell::checksum(*fe.expected_crc32c) : Cell::null(),
                   Cell{fe.problem.empty(), status},
                   fe.problem.empty() ? Cell::null("") : Cell::str(fe.problem)});
  }
  switch (f) {
    case OutputFormat::json: {
      nlohmann::ordered_json doc;
      doc["path"] = ins.path.string();
      doc["kind"] = std::string(choice_name(ins.kind));
      doc["step"] = ins.step >= 0 ? nlohmann::ordered_json(ins.step) : nlohmann::ordered_json(nullptr);
      doc["model_type"] = ins.model_type;
      doc["layout"] = ins.layout;
      doc["ok"] = ins.ok();
      doc["tensor_count"] = ins.tensors.size();
      doc["tensor_bytes"] = ins.tensor_bytes();
      doc["files"] = nlohmann::ordered_json::parse(files.render(OutputFormat::json));
      doc["tensors"] = nlohmann::ordered_json::parse(tensors.render(OutputFormat::json));
      return doc.dump(2) + "\n";
    }
    case OutputFormat::jsonl:
    case OutputFormat::csv:
      return tensors.render(f);
    case OutputFormat::table:
    case OutputFormat::md: {
      std::string head = ins.kind == InspectKind::checkpoint
                             ? str("checkpoint ", ins.path.string(), ": step ", ins.step, ", ", ins.model_type, " model",
                                   ins.layout.empty() ? "" : ", layout " + ins.layout)
                             : str("safetensors ", ins.path.string());
      if (!ins.note.empty()) head += " (" + ins.note + ")";
      head += str("; ", ins.tensors.size(), " tensors, ", ins.tensor_bytes(), " bytes of tensor data\n\n");
      files.add_note(ins.ok() ? (ins.kind == InspectKind::checkpoint ? "# every file matches the manifest's size and CRC-32C"
                                                          : "# header valid; no manifest to compare checksums with")
                              : "# FAILED: " + ins.first_problem());
      files.add_note("# crc32c: CRC-32C (Castagnoli) in hex, of each tensor's bytes and of each whole file");
      return head + tensors.render(f) + "\n" + files.render(f);
    }
  }
  return "";
}

}  // namespace dl::shard
