#include "dl/checkpoint/format.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <utility>
#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/input_file.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/io/safetensors.hpp"

namespace dl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = kCheckpointManifest;
constexpr const char* kFormat = "dlkit-checkpoint";
constexpr int kFormatVersion = 3;        // manifest_crc32c and the steps' agreement
constexpr int kUncheckedFormatVersion = 2;  // before them: still read, with a warning

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

namespace {
// The shape keys of a llama config.json and the [model] fields they hold (n_kv_head and
// ffn_hidden resolved: 0 means n_head and 4 x n_embd).
json llama_shape(const ModelConfig& m) {
  return {{"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"num_key_value_heads", m.n_kv_head > 0 ? m.n_kv_head : m.n_head},
          {"hidden_size", m.n_embd},
          {"intermediate_size", m.ffn_hidden > 0 ? m.ffn_hidden : 4 * m.n_embd},
          {"max_position_embeddings", m.block_size},
          {"vocab_size", m.vocab_size},
          {"rms_norm_eps", m.rms_norm_eps},
          {"rope_theta", m.rope_theta},
          {"tie_word_embeddings", m.tie_embeddings}};
}
}  // namespace

std::string llama_config_json(const ModelConfig& m) {
  json j = llama_shape(m);
  if (m.qkv_bias) {
    // Qwen2ForCausalLM: q/k/v biases always. No sliding window; null (not a window that a
    // transformers version might apply from max_window_layers on) and no layer beyond that.
    j["model_type"] = "qwen2";
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = m.n_layer;
  } else {
    j["model_type"] = "llama";
    j["architectures"] = {"LlamaForCausalLM"};
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["hidden_act"] = "silu";
  j["torch_dtype"] = "float32";
  j["rope_scaling"] = nullptr;
  if (m.rope_scaling != RopeScaling::none) {
    j["rope_scaling"] = {{"rope_type", m.rope_scaling}, {"factor", m.rope_factor}};
    if (m.rope_scaling == RopeScaling::llama3) {
      j["rope_scaling"]["low_freq_factor"] = m.rope_low_freq_factor;
      j["rope_scaling"]["high_freq_factor"] = m.rope_high_freq_factor;
      j["rope_scaling"]["original_max_position_embeddings"] = m.rope_original_max_position;
    }
  }
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
  seal_checkpoint_manifest(m);
  return m;
}

uint32_t checkpoint_manifest_crc32c(const json& manifest) {
  json content = manifest;
  content.erase(kManifestChecksum);
  const std::string text = content.dump();  // compact; json's objects keep their keys sorted
  return crc32c(text.data(), text.size());
}

void seal_checkpoint_manifest(json& manifest) { manifest[kManifestChecksum] = checkpoint_manifest_crc32c(manifest); }

// ---------------------------------------------------------------------------------------------
// Finding and verifying.

namespace {

// Where a manifest field sits, for messages: "trainer_state.json: pieces[3].range".
struct ManifestCheck {
  std::string file;
  template <class... Args>
  [[noreturn]] void fail(const std::string& field, Args&&... why) const {
    throw_usage(file, ": ", field, ": ", std::forward<Args>(why)..., " (a damaged or hand-edited checkpoint manifest)");
  }
  const json& object(const json& m, const std::string& key, const std::string& field) const {
    auto it = m.find(key);
    if (it == m.end() || !it->is_object()) fail(field, "missing or not a JSON object");
    return *it;
  }
  int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail(field, "not an integer: ", v.dump());
    // json holds every non-negative integer as unsigned: compared with signed bounds as numbers,
    // not as uint64_t (a negative `hi` cast to uint64_t let any value through, and `lo` was unchecked).
    const bool inside = v.is_number_unsigned()
                            ? std::cmp_greater_equal(v.get<uint64_t>(), lo) && std::cmp_less_equal(v.get<uint64_t>(), hi)
                            : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    if (!inside) fail(field, v.dump(), " is outside [", lo, ", ", hi, "]");
    return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
  }
  void optional_integer(const json& m, const std::string& key, const std::string& field, int64_t lo, int64_t hi) const {
    if (m.contains(key)) integer(m[key], field, lo, hi);
  }
  void optional_unsigned(const json& m, const std::string& key, const std::string& field) const {
    if (m.contains(key) && !m[key].is_number_unsigned() && !(m[key].is_number_integer() && m[key].get<int64_t>() >= 0))
      fail(field, "not a non-negative integer: ", m[key].dump());
  }
  const std::string& string(const json& m, const std::string& key, const std::string& field) const {
    auto it = m.find(key);
    if (it == m.end() || !it->is_string()) fail(field, "missing or not a string");
    return it->get_ref<const std::string&>();
  }
};

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();

// A file named by the manifest must stay inside the checkpoint folder: relative, no "..", no
// empty or "." parts, so neither the verifier nor the reader ever opens anything else.
bool safe_relative_name(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\0') != std::string::npos) return false;
  for (const auto& part : fs::path(name)) {
    const std::string p = part.string();
    if (p.empty() || p == "." || p == "..") return false;
  }
  return true;
}

}  // namespace

json parse_checkpoint_manifest(std::string_view text, const fs::path& manifest_path) {
  const ManifestCheck c{manifest_path.string()};
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    throw_usage(c.file, ": not valid JSON (", e.what(), ")");
  }
  if (!m.is_object() || m.value("format", json()) != kFormat)
    throw_usage(c.file, ": not a dlkit checkpoint manifest (no \"format\": \"", kFormat, "\")");
  const json version = m.value("version", json());
  if (version != kFormatVersion && version != kUncheckedFormatVersion)
    throw_usage(c.file, ": checkpoint format version ", version.dump(), ", this dlkit reads versions ",
                kUncheckedFormatVersion, " and ", kFormatVersion);
  if (version == kFormatVersion) {
    // First, so that an edited value is reported as an edit, whatever it was changed to.
    if (!m.contains(kManifestChecksum))
      c.fail(kManifestChecksum, "missing (a format version ", kFormatVersion, " manifest carries the CRC-32C of its content)");
    const auto want = static_cast<uint32_t>(c.integer(m[kManifestChecksum], kManifestChecksum, 0, 0xffffffffLL));
    const uint32_t got = checkpoint_manifest_crc32c(m);
    if (got != want) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "the content's CRC-32C is %08x, the field says %08x", got, want);
      c.fail(kManifestChecksum, buf, ": a field was changed after the checkpoint was written");
    }
  }
  if (m.contains("model_type")) c.string(m, "model_type", "model_type");
  for (const char* key : {"step", "data_position", "tokens_seen"}) c.optional_integer(m, key, key, 0, kMaxI64);
  if (m.contains("train_seconds") && !m["train_seconds"].is_number()) c.fail("train_seconds", "not a number");
  if (m.contains("rng")) {
    const json& r = c.object(m, "rng", "rng");
    c.optional_unsigned(r, "key", "rng.key");
    c.optional_unsigned(r, "index", "rng.index");
  }
  if (m.contains("loss_scale")) {
    const json& ls = c.object(m, "loss_scale", "loss_scale");
    if (ls.contains("scale") && !ls["scale"].is_number()) c.fail("loss_scale.scale", "not a number");
    c.optional_integer(ls, "good_steps", "loss_scale.good_steps", 0, kMaxI64);
    c.optional_integer(ls, "skipped_steps", "loss_scale.skipped_steps", 0, kMaxI64);
  }
  if (m.contains("optimizer")) {
    const json& o = c.object(m, "optimizer", "optimizer");
    if (o.contains("name")) c.string(o, "name", "optimizer.name");
    c.optional_integer(o, "steps", "optimizer.steps", 0, kMaxI64);
  }
  if (m.contains("layout")) {
    const json& l = c.object(m, "layout", "layout");
    for (const char* key : {"world", "dp", "tp", "pp"}) c.optional_integer(l, key, str("layout.", key), 1, 1 << 20);
    c.optional_integer(l, "zero", "layout.zero", 0, 3);
  }

  // Files: names inside the folder, sizes and checksums as numbers; their total bounds every tensor.
  const json& files = c.object(m, "files", "files");
  uint64_t total_bytes = 0;
  for (const auto& [name, info] : files.items()) {
    const std::string field = str("files[\"", name, "\"]");
    if (!safe_relative_name(name))
      c.fail(field, "names a file outside the checkpoint folder (absolute, empty, '.' or '..' parts)");
    if (!info.is_object()) c.fail(field, "not a JSON object");
    const uint64_t bytes = static_cast<uint64_t>(c.integer(info.value("bytes", json()), field + ".bytes", 0, kMaxI64));
    c.integer(info.value("crc32c", json()), field + ".crc32c", 0, 0xffffffffLL);
    if (__builtin_add_overflow(total_bytes, bytes, &total_bytes)) c.fail(field + ".bytes", "the files' sizes overflow");
  }

  // Tensors: shapes of non-negative sizes, a known dtype, no more bytes than the files hold.
  const json& tensors = c.object(m, "tensors", "tensors");
  for (const auto& [name, t] : tensors.items()) {
    const std::string field = str("tensors[\"", name, "\"]");
    if (!t.is_object()) c.fail(field, "not a JSON object");
    auto sh = t.find("shape");
    if (sh == t.end() || !sh->is_array()) c.fail(field + ".shape", "missing or not an array");
    uint64_t bytes = 1;
    for (const auto& d : *sh) {
      uint64_t n = static_cast<uint64_t>(c.integer(d, field + ".shape", 0, kMaxI64));
      if (__builtin_mul_overflow(bytes, n, &bytes)) c.fail(field + ".shape", sh->dump(), " has too many elements");
    }
    DType dt = DType::f32;
    if (t.contains("dtype") && (!t["dtype"].is_string() || !parse_safetensors_dtype(t["dtype"].get<std::string>(), dt)))
      c.fail(field + ".dtype", "not a known dtype: ", t["dtype"].dump());
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dtype_size(dt)), &bytes) || bytes > total_bytes)
      c.fail(field + ".shape", sh->dump(), " needs more bytes than the checkpoint's files hold (", total_bytes, ")");
  }

  // Pieces: each names a listed file, a listed tensor, a slice inside it and a flat range.
  if (m.contains("pieces") && !m["pieces"].is_array()) c.fail("pieces", "not an array");
  size_t i = 0;
  for (const auto& p : m.value("pieces", json::array())) {
    const std::string field = str("pieces[", i++, "]");
    if (!p.is_object()) c.fail(field, "not a JSON object");
    const std::string& name = c.string(p, "name", field + ".name");
    c.string(p, "kind", field + ".kind");
    c.string(p, "key", field + ".key");
    const std::string& file = c.string(p, "file", field + ".file");
    if (!files.contains(file)) c.fail(field + ".file", "'", file, "' is not in the manifest's \"files\"");
    if (!tensors.contains(name)) c.fail(field + ".name", "'", name, "' is not in the manifest's \"tensors\"");
    const json& shape = tensors[name]["shape"];
    auto range = p.find("range");
    if (range == p.end() || !range->is_array() || range->size() != 2) c.fail(field + ".range", "not [lo, hi]");
    if (c.integer((*range)[0], field + ".range", 0, kMaxI64) > c.integer((*range)[1], field + ".range", 0, kMaxI64))
      c.fail(field + ".range", range->dump(), " ends before it begins");
    const json& slice = c.object(p, "slice", field + ".slice");
    const int64_t dim = c.integer(slice.value("dim", json()), field + ".slice.dim", -1, static_cast<int64_t>(shape.size()) - 1);
    if (dim < 0) continue;
    const int64_t extent = shape[static_cast<size_t>(dim)].get<int64_t>();
    auto segs = slice.find("segments");
    if (segs == slice.end() || !segs->is_array()) c.fail(field + ".slice.segments", "missing or not an array");
    for (const auto& seg : *segs) {
      if (!seg.is_array() || seg.size() != 2) c.fail(field + ".slice.segments", "an entry is not [start, length]");
      const int64_t start = c.integer(seg[0], field + ".slice.segments", 0, extent);
      c.integer(seg[1], field + ".slice.segments", 0, extent - start);
    }
  }
  return m;
}

json read_checkpoint_manifest(const fs::path& dir) {
  const fs::path p = dir / kManifest;
  return parse_checkpoint_manifest(read_input_file(p, "cannot read checkpoint manifest"), p);
}

std::optional<int64_t> checkpoint_dir_step(const std::string& name) {
  constexpr size_t kPrefix = 5;  // "step_"
  if (name.size() <= kPrefix || name.size() > kPrefix + 18 || name.rfind("step_", 0) != 0) return std::nullopt;
  for (size_t i = kPrefix; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  const int64_t step = std::stoll(name.substr(kPrefix));
  if (checkpoint_dir_name(step) != name) return std::nullopt;  // "step_40", "step_000000040"
  return step;
}

std::vector<fs::path> list_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto step = checkpoint_dir_step(e.path().filename().string());
    if (!step || !e.is_directory(ec) || !fs::exists(e.path() / kManifest, ec)) continue;
    found.emplace_back(*step, e.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

namespace {

// Empty when `path`, links resolved, lies inside `dir` (links resolved); otherwise where it leads.
std::string outside(const fs::path& path, const fs::path& dir) {
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec), real_dir = fs::canonical(dir, ec);
  if (real.empty() || real_dir.empty()) return path.string() + ": cannot be resolved";
  const fs::path rel = real.lexically_relative(real_dir);
  if (!rel.empty() && *rel.begin() != ".." && rel != ".") return "";
  return path.string() + " resolves to " + real.string() + ", outside " + real_dir.string();
}

// A step folder of `root` lies directly in it, links resolved (a link to another run's
// checkpoint is not this run's).
std::string outside_run(const fs::path& dir, const fs::path& root) {
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec), real_root = fs::canonical(root, ec);
  if (!real.empty() && real.parent_path() == real_root) return "";
  return str(dir.string(), " resolves to ", real.string(), ", outside ", real_root.string(),
             " (a link to another run's checkpoint? a run resumes only from its own)");
}

// The manifest's step against the folder's name; empty when they agree or the name is no step
// folder's (a checkpoint copied to a folder of the user's naming).
std::string folder_step_problem(const fs::path& dir, const json& m) {
  const auto named = checkpoint_dir_step(dir.filename().string());
  const int64_t step = m.value("step", int64_t{0});
  if (!named || *named == step) return "";
  return str((dir / kManifest).string(), ": step: ", step, ", but the folder is ", dir.filename().string(),
             " (a checkpoint renamed, copied or linked from another step)");
}

// verify_checkpoint, the manifest it read back in `manifest`.
std::string verify(const fs::path& dir, json& m) {
  try {
    m = read_checkpoint_manifest(dir);
  } catch (const Error& e) {
    return e.what();
  }
  if (std::string problem = folder_step_problem(dir, m); !problem.empty()) return problem;
  const bool checked = m["version"] == kFormatVersion;
  const std::string step = std::to_string(m.value("step", int64_t{0}));
  for (const auto& [name, info] : m["files"].items()) {
    fs::path p = dir / name;
    std::error_code ec;
    if (!fs::exists(p, ec)) return p.string() + ": missing";
    if (std::string problem = outside(p, dir); !problem.empty())
      return problem + " (a checkpoint's files are its own, never links to another's)";
    uint64_t bytes = info["bytes"].get<uint64_t>();
    if (fs::file_size(p, ec) != bytes)
      return p.string() + ": " + std::to_string(fs::file_size(p, ec)) + " bytes, the manifest says " +
             std::to_string(bytes) + " (truncated?)";
    uint32_t want = info["crc32c"].get<uint32_t>();
    uint32_t got = file_crc32c(p);
    if (got != want) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": CRC-32C %08x, the manifest says %08x (corrupt)", got, want);
      return p.string() + buf;
    }
    if (p.extension() != ".safetensors") continue;
    try {
      const SafetensorsMetadata meta = SafetensorsReader(p).metadata();
      auto it = meta.find("dlkit.step");
      if (it == meta.end() && checked) return p.string() + ": dlkit.step: missing from the file's metadata";
      if (it != meta.end() && it->second != step)
        return str(p.string(), ": dlkit.step: ", it->second, ", but ", kManifest, " says step ", step,
                   " (a file from another checkpoint)");
    } catch (const Error& e) {
      return e.what();
    }
  }
  return "";
}

}  // namespace

std::vector<fs::path> own_checkpoints(const fs::path& root) {
  std::vector<fs::path> out;
  for (const auto& dir : list_checkpoints(root)) {
    std::error_code ec;
    if (fs::is_symlink(dir, ec) || !outside_run(dir, root).empty()) continue;
    try {
      if (folder_step_problem(dir, read_checkpoint_manifest(dir)).empty()) out.push_back(dir);
    } catch (const Error&) {  // not a manifest this run wrote (or one damaged since)
    }
  }
  return out;
}

std::string verify_checkpoint(const fs::path& dir) {
  json m;
  return verify(dir, m);
}

fs::path latest_good_checkpoint(const fs::path& root) {
  auto all = list_checkpoints(root);
  if (all.empty())
    throw_usage("no checkpoint in ", root.string(),
                " (was the run started? it writes one at the end, every train.checkpoint_every steps, and on Ctrl-C)");
  for (const auto& dir : all) {
    json m;
    std::string problem = outside_run(dir, root);
    if (problem.empty()) problem = verify(dir, m);
    if (problem.empty()) {
      if (m["version"] != kFormatVersion)
        log_warn(str("checkpoint ", dir.filename().string(), " is format version ", m["version"].dump(),
                     ", written before checkpoints carried a checksum of their metadata: its ", kManifest,
                     " is not verified (the files' CRC-32C are); the next checkpoint this run writes is version ",
                     kFormatVersion));
      return dir;
    }
    log_warn("skipping checkpoint " + dir.filename().string() + ": " + problem);
  }
  throw_usage("every checkpoint in ", root.string(), " failed verification (see the warnings above)");
}

void check_checkpoint_model(const fs::path& dir, const ModelConfig& want) {
  const fs::path file = dir / "config.json";
  const json j = read_json_file(file);
  const std::string type = j.is_object() ? j.value("model_type", "") : "";
  if (type != "gpt2" && type != "dlkit-mlp" && type != "llama" && type != "qwen2")
    throw_usage(file.string(), ": model_type is ", j.is_object() ? j.value("model_type", json()).dump() : "missing",
                ", expected \"gpt2\", \"llama\", \"qwen2\" or \"dlkit-mlp\" (a damaged checkpoint config)");
  auto differ = [&](const char* key, const auto& had, const auto& asked) {
    if (had == asked) return;
    auto text = [](const auto& v) { return json(v).dump(); };
    throw_usage("model.", key, ": ", text(had), " in the checkpoint ", dir.string(), ", ", text(asked),
                " in the config: a resumed run continues the model it trained (set model.", key, " back to ", text(had),
                ", or start a new run)");
  };
  const bool llama = type == "llama" || type == "qwen2";  // qwen2: a llama run with q/k/v biases
  differ("type", std::string(type == "gpt2" ? "gpt" : llama ? "llama" : "mlp"), std::string(want.type.name()));
  if (want.type == ModelType::llama) {
    differ("qkv_bias", type == "qwen2", want.qkv_bias);
    // The shape the run was started with: every key must still hold (named by its config.json key).
    const json shape = llama_shape(want);
    for (const auto& [key, asked] : shape.items())
      if (j.value(key, json()) != asked)
        throw_usage("model: ", key, " = ", j.value(key, json()).dump(), " in the checkpoint ", dir.string(), ", ",
                    asked.dump(), " in the config: a resumed run continues the model it trained (start a new run "
                    "to change the shape)");
  } else if (want.type == ModelType::gpt) {
    const HfGpt2Shape s = read_hf_gpt2_config(file);
    differ("n_layer", s.n_layer, want.n_layer);
    differ("n_head", s.n_head, want.n_head);
    differ("n_embd", s.n_embd, want.n_embd);
    differ("block_size", s.n_positions, want.block_size);
    differ("vocab_size", s.vocab_size, want.vocab_size);
    differ("tie_embeddings", s.tie_word_embeddings, want.tie_embeddings);
  } else {
    const json hidden = j.value("hidden", json()), activation = j.value("activation", json());
    if (!hidden.is_array() || !activation.is_string())
      throw_usage(file.string(), ": hidden or activation missing (a damaged checkpoint config)");
    differ("hidden", hidden, json(want.hidden));
    differ("activation", activation.get<std::string>(), std::string(want.activation.name()));
  }
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

CheckpointReader::CheckpointReader(const fs::path& dir) : CheckpointReader(dir, read_checkpoint_manifest(dir)) {}

CheckpointReader::CheckpointReader(const fs::path& dir, json manifest) : dir_(dir), impl_(std::make_unique<Impl>()) {
  impl_->manifest = std::move(manifest);
  const json& m = impl_->manifest;
  for (const auto& p : m.value("pieces", json::array()))
    impl_->pieces[p["name"].get<std::string>()][p["kind"].get<std::string>()].push_back(p);
}

CheckpointReader::~CheckpointReader() = default;

const json& CheckpointReader::manifest() const { return impl_->manifest; }

CheckpointLayout CheckpointReader::layout() const {
  const json l = impl_->manifest.value("layout", json::object());
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
