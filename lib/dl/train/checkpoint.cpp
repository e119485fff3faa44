#include "dl/train/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dl/cli/app.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/io/safetensors.hpp"

namespace dl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kManifest = "trainer_state.json";
constexpr const char* kFormat = "dlkit-checkpoint";
constexpr int kFormatVersion = 1;

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// Host copy of a tensor (identity for host tensors).
Tensor host_view(Backend& be, const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be.copy(h, t);
  return h;
}

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


std::string mlp_config_json(const ModelConfig& m) {
  json j{{"model_type", "dlkit-mlp"}, {"hidden", m.hidden}, {"activation", m.activation}};
  return j.dump(2) + "\n";
}

}  // namespace

std::string hf_gpt2_config_json(const ModelConfig& m) {
  json j{{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", m.vocab_size},
         {"n_positions", m.block_size},
         {"n_ctx", m.block_size},
         {"n_embd", m.n_embd},
         {"n_layer", m.n_layer},
         {"n_head", m.n_head},
         {"n_inner", nullptr},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", 1e-5},
         {"initializer_range", m.init_std},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0},
         {"scale_attn_weights", true},
         {"tie_word_embeddings", true},
         {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

fs::path save_checkpoint(const fs::path& root, Model& model, Optimizer* optimizer, const TrainerState& state,
                         const Config& config, int64_t keep) {
  fs::create_directories(root);
  const std::string name = step_dir_name(state.step);
  const fs::path final_dir = root / name;
  const fs::path tmp = root / ("." + name + ".tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp);
  try {
    ParamSet& P = model.params();
    Backend& be = P.backend();
    json files = json::object();

    SafetensorsWriter weights;
    for (size_t i = 0; i < P.size(); ++i) weights.add(P.info(i).name, host_view(be, P.value(i)));
    weights.set_metadata({{"format", "pt"}, {"dlkit.step", std::to_string(state.step)}});
    uint32_t crc = weights.write(tmp / "model.safetensors");
    files["model.safetensors"] = {{"crc32c", crc}, {"bytes", fs::file_size(tmp / "model.safetensors")}};

    std::string cfg = model.kind() == "gpt" ? hf_gpt2_config_json(config.model) : mlp_config_json(config.model);
    write_file_atomic(tmp / "config.json", cfg);
    files["config.json"] = {{"crc32c", crc32c(cfg.data(), cfg.size())}, {"bytes", cfg.size()}};

    json opt = nullptr;
    if (optimizer) {
      SafetensorsWriter ow;
      std::vector<Tensor> keep_alive;
      for (auto& s : optimizer->state()) {
        Tensor flat = host_view(be, s.flat);
        keep_alive.push_back(flat);
        for (size_t i = 0; i < P.size(); ++i)
          ow.add(s.name + "." + P.info(i).name, flat.flat_slice(P.info(i).offset, P.info(i).shape));
      }
      ow.set_metadata({{"format", "pt"}, {"optimizer", optimizer->name()}});
      uint32_t ocrc = ow.write(tmp / "optimizer.safetensors");
      files["optimizer.safetensors"] = {{"crc32c", ocrc}, {"bytes", fs::file_size(tmp / "optimizer.safetensors")}};
      opt = {{"name", optimizer->name()}, {"steps", optimizer->step_count()}};
    }

    json manifest{{"format", kFormat},
                  {"version", kFormatVersion},
                  {"dlkit_version", DL_VERSION},
                  {"model_type", model.kind()},
                  {"step", state.step},
                  {"data_position", state.data_position},
                  {"tokens_seen", state.tokens_seen},
                  {"rng", {{"key", state.rng_key}, {"index", state.rng_index}}},
                  {"train_seconds", state.train_seconds},
                  {"optimizer", opt},
                  {"layout", {{"world", 1}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero", 0}}},
                  {"files", files}};
    write_file_atomic(tmp / kManifest, manifest.dump(2) + "\n");
    if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a re-save of the same step replaces it
    publish_dir_atomic(tmp, final_dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  // Retention: newest `keep` complete checkpoints stay.
  auto all = list_checkpoints(root);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < all.size(); ++i) fs::remove_all(all[i], ec);
  return final_dir;
}

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
  if (all.empty()) throw_usage("no checkpoint in ", root.string(), " (was the run started? it writes one at the end, "
                               "every train.checkpoint_every steps, and on Ctrl-C)");
  for (const auto& dir : all) {
    std::string problem = verify_checkpoint(dir);
    if (problem.empty()) return dir;
    log_warn("skipping checkpoint " + dir.filename().string() + ": " + problem);
  }
  throw_usage("every checkpoint in ", root.string(), " failed verification (see the warnings above)");
}

TrainerState load_checkpoint(const fs::path& dir, Model& model, Optimizer* optimizer) {
  std::string problem = verify_checkpoint(dir);
  if (!problem.empty()) throw_usage("checkpoint ", dir.string(), " is damaged: ", problem);
  json m = read_json_file(dir / kManifest);
  if (m.value("model_type", "") != model.kind())
    throw_usage(dir.string(), ": checkpoint holds a '", m.value("model_type", "?"), "' model, the config builds '",
                model.kind(), "'");
  ParamSet& P = model.params();
  Backend& be = P.backend();
  SafetensorsReader weights(dir / "model.safetensors");
  auto load_into = [&](const SafetensorsReader& r, const std::string& tensor, Tensor dst) {
    if (!r.contains(tensor))
      throw_usage(r.path().string(), ": tensor '", tensor, "' is missing (the checkpoint was written for another model "
                  "config)");
    const auto& info = r.info(tensor);
    if (info.shape != dst.shape() || info.dtype != dst.dtype())
      throw_usage(r.path().string(), ": tensor '", tensor, "' is ", dtype_name(info.dtype), shape_str(info.shape),
                  " but the model expects ", dst.describe(), " (check model.* against the checkpoint's config.json)");
    if (dst.device().is_cpu()) {
      r.read_into(tensor, dst);
    } else {
      Tensor h = r.read(tensor);
      be.copy(dst, h);
    }
  };
  for (size_t i = 0; i < P.size(); ++i) load_into(weights, P.info(i).name, P.value(i));
  if (weights.tensors().size() != P.size())
    throw_usage(weights.path().string(), " holds ", weights.tensors().size(), " tensors, the model has ", P.size());

  if (optimizer) {
    if (!fs::exists(dir / "optimizer.safetensors"))
      throw_usage(dir.string(), ": no optimizer.safetensors (a weights-only checkpoint cannot resume training)");
    std::string saved = m["optimizer"].is_object() ? m["optimizer"].value("name", "") : "";
    if (saved != optimizer->name())
      throw_usage(dir.string(), ": optimizer state is for '", saved, "', the config uses '", optimizer->name(), "'");
    SafetensorsReader ostate(dir / "optimizer.safetensors");
    for (auto& s : optimizer->state())
      for (size_t i = 0; i < P.size(); ++i)
        load_into(ostate, s.name + "." + P.info(i).name, s.flat.flat_slice(P.info(i).offset, P.info(i).shape));
    optimizer->set_step_count(m["optimizer"].value("steps", int64_t{0}));
  }
  TrainerState st;
  st.step = m.value("step", int64_t{0});
  st.data_position = m.value("data_position", int64_t{0});
  st.tokens_seen = m.value("tokens_seen", int64_t{0});
  st.train_seconds = m.value("train_seconds", 0.0);
  if (m.contains("rng")) {
    st.rng_key = m["rng"].value("key", uint64_t{0});
    st.rng_index = m["rng"].value("index", uint64_t{0});
  }
  return st;
}

}  // namespace dl
