#include "dl/checkpoint/format.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/io/safetensors.hpp"

namespace dl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = kCheckpointManifest;
constexpr const char* kFormat = "dlkit-checkpoint";
constexpr int kFormatVersion = 2;

uint32_t file_crc32c(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw_runtime("cannot read ", p.string());
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    crc = crc32c(buf.data(), static_cast<size_t>(f.gcount()), crc);
  }
  return crc;
}

json slice_json(const TensorSlice& s) {
  json segs = json::array();
  for (auto [start, len] : s.segments) segs.push_back({start, len});
  return {{"dim", s.dim}, {"segments", segs}};
}

TensorSlice slice_from(const json& j) {
  TensorSlice s;
  s.dim = j.value("dim", -1);
  for (const auto& seg : j.value("segments", json::array())) s.segments.emplace_back(seg[0].get<int64_t>(), seg[1].get<int64_t>());
  return s;
}

}  // namespace

std::string mlp_config_json(const ModelConfig& m) {
  json j{{"model_type", "dlkit-mlp"}, {"hidden", m.hidden}, {"activation", m.activation}};
  return j.dump(2) + "\n";
}

std::string checkpoint_rank_file(int rank, const char* ext) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "shards/rank%05d.%s", rank, ext);
  return buf;
}

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::map<std::string, std::string> checkpoint_file_metadata(int64_t step) {
  return {{"format", "pt"}, {"dlkit.step", std::to_string(step)}};
}

std::vector<StoredPiece> checkpoint_pieces(const ParamSet& P, const parallel::ZeroPieces& zp,
                                           const std::vector<std::string>& state_names, int rank, bool single) {
  std::vector<StoredPiece> out;
  auto add = [&](const parallel::Piece& p, int state) {
    const ParamInfo& info = P.info(p.param);
    StoredPiece s;
    s.param = p.param;
    s.state = state;
    s.name = info.name;
    s.kind = state < 0 ? "param" : state_names[static_cast<size_t>(state)];
    const bool whole = p.lo == 0 && p.hi == info.numel();
    if (single) {
      // Hugging Face names in model.safetensors, so transformers loads the folder as is.
      s.file = state < 0 ? "model.safetensors" : "optimizer.safetensors";
      s.key = state < 0 ? info.name : s.kind + "." + info.name;
    } else {
      s.file = checkpoint_rank_file(rank, "safetensors");
      s.key = (state < 0 ? "" : s.kind + ".") + info.name;
      if (!whole) s.key += "@" + std::to_string(p.lo);
    }
    s.slice = info.slice;
    s.local_shape = info.shape;
    s.lo = p.lo;
    s.hi = p.hi;
    // A whole local tensor keeps its shape (readable as is); a shard is flat.
    s.stored_shape = whole ? info.shape : Shape{p.hi - p.lo};
    out.push_back(std::move(s));
  };
  for (const auto& p : zp.params_to_save) add(p, -1);
  for (size_t k = 0; k < state_names.size(); ++k)
    for (const auto& p : zp.state_to_save) add(p, static_cast<int>(k));
  return out;
}

json piece_json(const StoredPiece& s) {
  return json{{"name", s.name}, {"kind", s.kind}, {"file", s.file}, {"key", s.key}, {"slice", slice_json(s.slice)},
              {"local_shape", s.local_shape}, {"range", {s.lo, s.hi}}};
}

json tensors_json(const ParamSet& P, DType dtype) {
  json tensors = json::object();
  for (size_t i = 0; i < P.size(); ++i)
    if (!P.info(i).tied_copy)
      tensors[P.info(i).name] = {{"shape", P.info(i).global_shape}, {"dtype", std::string(safetensors_dtype(dtype))}};
  return tensors;
}

json checkpoint_manifest(const std::string& model_type, const TrainerState& state, const json& optimizer,
                         const CheckpointLayout& L, const json& tensors, const json& pieces, const json& files) {
  json m{{"format", kFormat},
              {"version", kFormatVersion},
              {"dlkit_version", DL_VERSION},
              {"model_type", model_type},
              {"step", state.step},
              {"data_position", state.data_position},
              {"tokens_seen", state.tokens_seen},
              {"rng", {{"key", state.rng_key}, {"index", state.rng_index}}},
              {"train_seconds", state.train_seconds},
              {"optimizer", optimizer},
              {"layout", {{"world", L.world}, {"dp", L.dp}, {"tp", L.tp}, {"pp", L.pp}, {"zero", L.zero}}},
              {"tensors", tensors},
              {"pieces", pieces},
              {"files", files}};
  const LossScaleState& ls = state.loss_scale;
  if (ls.scale > 0)  // fp16 runs: the dynamic loss scaler resumes where it was
    m["loss_scale"] = {{"scale", ls.scale}, {"good_steps", ls.good_steps}, {"skipped_steps", ls.skipped_steps}};
  return m;
}

// ---------------------------------------------------------------------------------------------
// Finding and verifying.

std::vector<fs::path> list_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || n.rfind("step_", 0) != 0) continue;
    if (!fs::exists(e.path() / kManifest)) continue;
    try {
      found.emplace_back(std::stoll(n.substr(5)), e.path());
    } catch (...) {
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::string verify_checkpoint(const fs::path& dir) {
  json m;
  try {
    m = read_json_file(dir / kManifest);
  } catch (const Error& e) {
    return e.what();
  }
  if (m.value("format", "") != kFormat) return (dir / kManifest).string() + ": not a dlkit checkpoint manifest";
  if (m.value("version", 0) != kFormatVersion)
    return (dir / kManifest).string() + ": checkpoint format version " + std::to_string(m.value("version", 0)) +
           ", this dlkit reads version " + std::to_string(kFormatVersion);
  if (!m.contains("files") || !m["files"].is_object()) return (dir / kManifest).string() + ": no file list";
  for (const auto& [name, info] : m["files"].items()) {
    fs::path p = dir / name;
    std::error_code ec;
    if (!fs::exists(p, ec)) return p.string() + ": missing";
    uint64_t bytes = info.value("bytes", uint64_t{0});
    if (fs::file_size(p, ec) != bytes)
      return p.string() + ": " + std::to_string(fs::file_size(p, ec)) + " bytes, the manifest says " +
             std::to_string(bytes) + " (truncated?)";
    uint32_t want = info.value("crc32c", uint32_t{0});
    uint32_t got = file_crc32c(p);
    if (got != want) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": CRC-32C %08x, the manifest says %08x (corrupt)", got, want);
      return p.string() + buf;
    }
  }
  return "";
}

fs::path latest_good_checkpoint(const fs::path& root) {
  auto all = list_checkpoints(root);
  if (all.empty())
    throw_usage("no checkpoint in ", root.string(),
                " (was the run started? it writes one at the end, every train.checkpoint_every steps, and on Ctrl-C)");
  for (const auto& dir : all) {
    std::string problem = verify_checkpoint(dir);
    if (problem.empty()) return dir;
    log_warn("skipping checkpoint " + dir.filename().string() + ": " + problem);
  }
  throw_usage("every checkpoint in ", root.string(), " failed verification (see the warnings above)");
}

// ---------------------------------------------------------------------------------------------
// Reading whole tensors back from pieces.

struct CheckpointReader::Impl {
  json manifest;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files;
  // name -> kind -> piece entries
  std::map<std::string, std::map<std::string, std::vector<json>>> pieces;
  SafetensorsReader& file(const fs::path& dir, const std::string& rel) {
    auto& f = files[rel];
    if (!f) f = std::make_unique<SafetensorsReader>(dir / rel);
    return *f;
  }
};

CheckpointReader::CheckpointReader(const fs::path& dir) : dir_(dir), impl_(std::make_unique<Impl>()) {
  impl_->manifest = read_json_file(dir / kManifest);
  const json& m = impl_->manifest;
  if (m.value("format", "") != kFormat || m.value("version", 0) != kFormatVersion)
    throw_usage((dir / kManifest).string(), ": not a dlkit checkpoint manifest of format version ", kFormatVersion);
  for (const auto& p : m.value("pieces", json::array()))
    impl_->pieces[p["name"].get<std::string>()][p["kind"].get<std::string>()].push_back(p);
}

CheckpointReader::~CheckpointReader() = default;

const json& CheckpointReader::manifest() const { return impl_->manifest; }

CheckpointLayout CheckpointReader::layout() const {
  const json& l = impl_->manifest["layout"];
  return {l.value("world", 1), l.value("dp", 1), l.value("tp", 1), l.value("pp", 1), l.value("zero", 0)};
}

std::string CheckpointReader::model_type() const { return impl_->manifest.value("model_type", ""); }

std::vector<std::string> CheckpointReader::names(const std::string& kind) const {
  std::vector<std::string> out;
  for (const auto& [name, info] : impl_->manifest["tensors"].items())
    if (has(name, kind)) out.push_back(name);
  return out;
}

bool CheckpointReader::has(const std::string& name, const std::string& kind) const {
  auto it = impl_->pieces.find(name);
  return it != impl_->pieces.end() && it->second.count(kind);
}

Shape CheckpointReader::shape(const std::string& name) const {
  const json& t = impl_->manifest["tensors"];
  if (!t.contains(name)) throw_usage(dir_.string(), ": the checkpoint has no tensor '", name, "'");
  return t[name]["shape"].get<Shape>();
}

DType CheckpointReader::dtype(const std::string& name) const {
  DType d;
  std::string s = impl_->manifest["tensors"][name].value("dtype", "F32");
  if (!parse_safetensors_dtype(s, d)) throw_usage(dir_.string(), ": tensor '", name, "' has unknown dtype ", s);
  return d;
}

Tensor CheckpointReader::read(const std::string& name, const std::string& kind) const {
  const Shape global = shape(name);
  const DType dt = dtype(name);
  auto it = impl_->pieces.find(name);
  if (it == impl_->pieces.end() || !it->second.count(kind))
    throw_usage(dir_.string(), ": no ", kind, " pieces for tensor '", name, "' (was a rank's shard lost?)");
  // Group the pieces by tensor-parallel slice, assemble each slice, place it in the whole tensor.
  std::map<std::string, std::vector<const json*>> by_slice;
  for (const auto& p : it->second.at(kind)) by_slice[p["slice"].dump()].push_back(&p);
  Tensor whole = Tensor::zeros(global, dt);
  int64_t covered = 0;
  for (const auto& [key, ps] : by_slice) {
    TensorSlice slice = slice_from(json::parse(key));
    Shape local_shape = slice.local_shape(global);
    Tensor local = Tensor::zeros(local_shape, dt);
    int64_t filled = 0;
    for (const json* p : ps) {
      int64_t lo = (*p)["range"][0], hi = (*p)["range"][1];
      const std::string rel = (*p)["file"], tkey = (*p)["key"];
      SafetensorsReader& f = impl_->file(dir_, rel);
      if (!f.contains(tkey))
        throw_usage((dir_ / rel).string(), ": tensor '", tkey, "' listed in the manifest is missing (corrupt shard)");
      const auto& info = f.info(tkey);
      if (info.dtype != dt || shape_numel(info.shape) != hi - lo || lo < 0 || hi > local.numel())
        throw_usage((dir_ / rel).string(), ": tensor '", tkey, "' is ", dtype_name(info.dtype), shape_str(info.shape),
                    ", the manifest expects ", hi - lo, " elements of ", dtype_name(dt), " ", name,
                    " (shapes disagree between shards)");
      Tensor dst = local.view({local.numel()}).flat_slice(lo, {info.shape.empty() ? 1 : shape_numel(info.shape)});
      Tensor shaped = dst.view(info.shape);
      f.read_into(tkey, shaped);
      filled += hi - lo;
    }
    if (filled != local.numel())
      throw_usage(dir_.string(), ": tensor '", name, "' (", kind, ", slice ", slice.describe(), ") has ", filled, " of ",
                  local.numel(), " elements in the shards: a rank's shard is missing");
    insert_slice(whole, local, slice);
    covered += local.numel();
  }
  if (covered != shape_numel(global))
    throw_usage(dir_.string(), ": tensor '", name, "' (", kind, ") covers ", covered, " of ", shape_numel(global),
                " elements: a tensor-parallel rank's shard is missing");
  return whole;
}

TrainerState CheckpointReader::state() const {
  const json& m = impl_->manifest;
  TrainerState st;
  st.step = m.value("step", int64_t{0});
  st.data_position = m.value("data_position", int64_t{0});
  st.tokens_seen = m.value("tokens_seen", int64_t{0});
  st.train_seconds = m.value("train_seconds", 0.0);
  if (m.contains("loss_scale") && m["loss_scale"].is_object()) {
    st.loss_scale.scale = m["loss_scale"].value("scale", 0.0);
    st.loss_scale.good_steps = m["loss_scale"].value("good_steps", int64_t{0});
    st.loss_scale.skipped_steps = m["loss_scale"].value("skipped_steps", int64_t{0});
  }
  if (m.contains("rng")) {
    st.rng_key = m["rng"].value("key", uint64_t{0});
    st.rng_index = m["rng"].value("index", uint64_t{0});
  }
  return st;
}

std::string CheckpointReader::optimizer_name() const {
  const json& o = impl_->manifest["optimizer"];
  return o.is_object() ? o.value("name", "") : "";
}

int64_t CheckpointReader::optimizer_steps() const {
  const json& o = impl_->manifest["optimizer"];
  return o.is_object() ? o.value("steps", int64_t{0}) : 0;
}

}  // namespace dl
