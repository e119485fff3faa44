#include "dl/shard/source.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "dl/config/hf_llama_config.hpp"
#include "dl/core/error.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/gpt_from_config.hpp"
#include "dl/nn/llama.hpp"

namespace dl::shard {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path resolve_checkpoint(const fs::path& path, std::string* note) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw_usage(path.string(), ": no such file or directory");
  if (!fs::is_directory(path, ec))
    throw_usage(path.string(), ": not a dl-train checkpoint directory (give a step_* directory, a run directory or its "
                               "checkpoints/ folder)");
  if (fs::exists(path / kCheckpointManifest)) return path;
  for (const fs::path& root : {path, path / "checkpoints"}) {
    auto all = list_checkpoints(root);
    if (!all.empty()) {
      if (note)
        *note = str("newest of ", all.size(), " checkpoint", all.size() == 1 ? "" : "s", " in ", root.string());
      return all.front();
    }
  }
  throw_usage(path.string(), ": not a dl-train checkpoint (no ", kCheckpointManifest, ", no checkpoints/step_*)");
}

std::string layout_string(const CheckpointLayout& l) {
  return str("dp=", l.dp, " tp=", l.tp, " pp=", l.pp, " zero=", l.zero);
}

MeshRank mesh_rank(const parallel::MeshShape& m, int rank) {
  // The same order as parallel::Mesh: tp innermost, then dp, then pp.
  return {rank, (rank / m.tp) % m.dp, rank % m.tp, rank / (m.tp * m.dp)};
}

ParamSet CheckpointModel::declarations(const parallel::MeshShape& mesh, int tp_rank, int pp_rank,
                                       std::vector<std::pair<size_t, size_t>>* groups) const {
  if (is_token_model(config.type)) {
    GptParallel par;
    par.tp_size = mesh.tp;
    par.tp_rank = tp_rank;
    par.pp_size = mesh.pp;
    par.pp_rank = pp_rank;
    if (config.type == ModelType::llama) return LlamaModel::declarations(llama_config_from(config), par, groups);
    return GptModel::declarations(gpt_config_from(config), par, groups);
  }
  ParamSet p = mlp_param_declarations(mlp);
  if (groups) *groups = {{0, p.size()}};
  return p;
}

std::vector<std::string> CheckpointModel::tensor_order() const {
  ParamSet whole = declarations(parallel::MeshShape{}, 0, 0);
  std::vector<std::string> out;
  for (const auto& info : whole.infos()) out.push_back(info.name);
  return out;
}

namespace {

int64_t json_int(const json& j, const char* key, const fs::path& file) {
  if (!j.contains(key) || !j[key].is_number_integer())
    throw_usage(file.string(), ": no integer \"", key, "\" (a dl-train checkpoint's config.json has it)");
  return j[key].get<int64_t>();
}

}  // namespace

CheckpointModel checkpoint_model(const CheckpointReader& reader) {
  CheckpointModel m;
  const fs::path cfg_path = reader.dir() / "config.json";
  const json cfg = read_json_file(cfg_path);
  const std::string type = reader.model_type();
  const std::optional<ModelType> kind = parse_choice<ModelType>(type);
  const auto names = reader.names("param");
  if (names.empty()) throw_usage(reader.dir().string(), ": the manifest lists no parameters");
  m.dtype = reader.dtype(names.front());
  const json& opt = reader.manifest()["optimizer"];
  if (opt.is_object() && opt.contains("state"))
    for (const auto& s : opt["state"]) m.state_names.push_back(s.get<std::string>());
  if (kind) m.config.type = *kind;
  if (kind == ModelType::gpt) {
    m.config.n_layer = json_int(cfg, "n_layer", cfg_path);
    m.config.n_head = json_int(cfg, "n_head", cfg_path);
    m.config.n_embd = json_int(cfg, "n_embd", cfg_path);
    m.config.block_size = json_int(cfg, "n_positions", cfg_path);
    m.config.vocab_size = json_int(cfg, "vocab_size", cfg_path);
    m.config.init_std = cfg.value("initializer_range", 0.02);
    if (cfg.contains("tie_word_embeddings")) {
      if (!cfg["tie_word_embeddings"].is_boolean())
        throw_usage(cfg_path.string(), ": \"tie_word_embeddings\" must be true or false, got ",
                    cfg["tie_word_embeddings"].dump());
      m.config.tie_embeddings = cfg["tie_word_embeddings"].get<bool>();
    }
    if (m.config.n_layer < 1 || m.config.n_head < 1 || m.config.n_embd < 1 || m.config.n_embd % m.config.n_head != 0 ||
        m.config.block_size < 1 || m.config.vocab_size < 1)
      throw_usage(cfg_path.string(), ": not a valid GPT-2 shape (n_layer ", m.config.n_layer, ", n_head ",
                  m.config.n_head, ", n_embd ", m.config.n_embd, ")");
  } else if (kind == ModelType::llama) {
    // dl-train writes a llama checkpoint's config.json as transformers' LlamaConfig (Qwen2Config
    // with q/k/v biases); its shape
    // declares the tensors (max_position_embeddings is the run's block size).
    const HfLlamaShape s = read_hf_llama_config(cfg_path);
    m.config.n_layer = s.n_layer;
    m.config.n_head = s.n_head;
    m.config.n_kv_head = s.n_kv_head;
    m.config.n_embd = s.n_embd;
    m.config.ffn_hidden = s.ffn_hidden;
    m.config.vocab_size = s.vocab_size;
    m.config.block_size = s.max_position_embeddings;
    m.config.rms_norm_eps = s.rms_norm_eps;
    m.config.rope_theta = s.rope_theta;
    m.config.rope_scaling = s.rope_scaling;
    m.config.rope_factor = s.rope_factor;
    m.config.rope_low_freq_factor = s.rope_low_freq_factor;
    m.config.rope_high_freq_factor = s.rope_high_freq_factor;
    m.config.rope_original_max_position = s.rope_original_max_position;
    m.config.tie_embeddings = s.tie_word_embeddings;
    m.config.qkv_bias = s.qkv_bias;
    m.config.init_std = cfg.value("initializer_range", 0.02);
  } else if (kind == ModelType::mlp) {
    if (cfg.contains("activation") && cfg["activation"].is_string()) {
      const std::string name = cfg["activation"].get<std::string>();
      const std::optional<Activation> activation = parse_choice<Activation>(name);
      if (!activation) throw_usage(cfg_path.string(), ": activation '", name, "' is neither ", choice_list<Activation>(" nor "));
      m.config.activation = *activation;
    }
    m.mlp.activation = m.config.activation;
    // Widths from the tensors: layers.{i}.weight is [out, in].
    int layers = 0;
    while (reader.has("layers." + std::to_string(layers) + ".weight")) ++layers;
    if (layers == 0) throw_usage(reader.dir().string(), ": an mlp checkpoint without layers.0.weight");
    m.mlp.n_inputs = static_cast<int>(reader.shape("layers.0.weight").at(1));
    m.mlp.hidden.clear();
    m.config.hidden.clear();
    for (int i = 0; i + 1 < layers; ++i) {
      const int w = static_cast<int>(reader.shape("layers." + std::to_string(i) + ".weight").at(0));
      m.mlp.hidden.push_back(w);
      m.config.hidden.push_back(w);
    }
    m.mlp.n_classes = static_cast<int>(reader.shape("layers." + std::to_string(layers - 1) + ".weight").at(0));
  } else {
    throw_usage(reader.dir().string(), ": model_type '", type, "' is none of gpt, llama, mlp");
  }
  // The model rebuilt from config.json must declare exactly the manifest's tensors.
  ParamSet whole = m.declarations(parallel::MeshShape{}, 0, 0);
  std::set<std::string> declared;
  for (const auto& info : whole.infos()) {
    declared.insert(info.name);
    if (!reader.manifest()["tensors"].contains(info.name))
      throw_usage(reader.dir().string(), ": the manifest has no tensor '", info.name, "', which the model of ",
                  cfg_path.filename().string(), " declares (the checkpoint is incomplete or mislabelled)");
    Shape have = reader.shape(info.name);
    if (have != info.global_shape)
      throw_usage(reader.dir().string(), ": tensor '", info.name, "' is ", shape_str(have), " in the manifest but ",
                  shape_str(info.global_shape), " for the model of config.json (shape disagreement)");
    if (reader.dtype(info.name) != m.dtype)
      throw_usage(reader.dir().string(), ": tensor '", info.name, "' is ", dtype_name(reader.dtype(info.name)),
                  ", the others ", dtype_name(m.dtype));
  }
  for (const auto& [name, info] : reader.manifest()["tensors"].items())
    if (!declared.count(name))
      throw_usage(reader.dir().string(), ": the manifest lists tensor '", name, "', which the model of config.json "
                                         "does not have");
  return m;
}

std::vector<std::vector<StoredPiece>> layout_pieces(const CheckpointModel& model, const CheckpointLayout& layout) {
  const parallel::MeshShape mesh{layout.dp, layout.tp, layout.pp};
  DL_CHECK(mesh.world() == layout.world, "layout world ", layout.world, " is not dp x tp x pp = ", mesh.world());
  std::vector<std::vector<StoredPiece>> out;
  std::map<std::pair<int, int>, std::pair<ParamSet, std::vector<std::pair<size_t, size_t>>>> stages;
  for (int r = 0; r < layout.world; ++r) {
    const MeshRank mr = mesh_rank(mesh, r);
    auto key = std::make_pair(mr.tp_rank, mr.pp_rank);
    if (!stages.count(key)) {
      std::vector<std::pair<size_t, size_t>> groups;
      ParamSet p = model.declarations(mesh, mr.tp_rank, mr.pp_rank, &groups);
      stages.emplace(key, std::make_pair(std::move(p), std::move(groups)));
    }
    const auto& [params, groups] = stages.at(key);
    parallel::ZeroPieces zp =
        parallel::zero_pieces(params, groups, {layout.zero, layout.dp, mr.dp_rank, mr.tp_rank == 0});
    out.push_back(checkpoint_pieces(params, zp, model.state_names, r, layout.world == 1));
  }
  return out;
}

namespace {

void check_pieces(const CheckpointReader& reader, const CheckpointModel& model) {
  const CheckpointLayout layout = reader.layout();
  const fs::path mpath = reader.dir() / kCheckpointManifest;
  if (layout.dp < 1 || layout.tp < 1 || layout.pp < 1 || layout.world != layout.dp * layout.tp * layout.pp ||
      layout.zero < 0 || layout.zero > 3)
    throw_usage(mpath.string(), ": layout ", layout_string(layout), " with world ", layout.world, " is not a valid mesh");
  // Every piece the layout's ranks write, each exactly once, and nothing else.
  std::map<std::string, const json*> listed;  // file|key -> manifest entry
  for (const auto& p : reader.manifest()["pieces"]) {
    const std::string id = p.value("file", "") + "|" + p.value("key", "");
    if (!listed.emplace(id, &p).second)
      throw_usage(mpath.string(), ": piece '", p.value("key", ""), "' of ", p.value("file", ""), " is listed twice");
  }
  const auto expected = layout_pieces(model, layout);
  size_t matched = 0;
  for (size_t r = 0; r < expected.size(); ++r)
    for (const auto& s : expected[r]) {
      auto it = listed.find(s.file + "|" + s.key);
      if (it == listed.end())
        throw_usage(reader.dir().string(), ": rank ", r, "'s piece '", s.key, "' (", s.kind, " ", s.name, ") of ", s.file,
                    " is not in the manifest: the checkpoint is missing a rank's shard or was written for another "
                    "layout than its ",
                    layout_string(layout));
      const json want = piece_json(s);
      if (*it->second != want)
        throw_usage(reader.dir().string(), ": piece '", s.key, "' of ", s.file, " is ", it->second->dump(),
                    " in the manifest, but layout ", layout_string(layout), " writes ", want.dump(),
                    " (mismatched shards)");
      ++matched;
    }
  if (matched != listed.size()) {
    std::set<std::string> want_ids;
    for (const auto& rank : expected)
      for (const auto& s : rank) want_ids.insert(s.file + "|" + s.key);
    for (const auto& [id, p] : listed)
      if (!want_ids.count(id))
        throw_usage(reader.dir().string(), ": the manifest lists piece '", p->value("key", ""), "' of ",
                    p->value("file", ""), ", which layout ", layout_string(layout), " does not write (mismatched shards)");
  }
}

}  // namespace

CheckedCheckpoint open_checkpoint(const fs::path& dir) {
  std::string problem = verify_checkpoint(dir);
  if (!problem.empty()) throw_usage(problem);
  CheckedCheckpoint c;
  c.reader = std::make_unique<CheckpointReader>(dir);
  c.model = checkpoint_model(*c.reader);
  check_pieces(*c.reader, c.model);
  return c;
}

}  // namespace dl::shard
