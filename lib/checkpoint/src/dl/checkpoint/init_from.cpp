#include "dl/checkpoint/init_from.hpp"

#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "dl/checkpoint/checkpoint.hpp"
#include "dl/checkpoint/format.hpp"
#include "dl/config/hf_gpt2_config.hpp"
#include "dl/config/hf_llama_config.hpp"
#include "dl/core/error.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/io/safetensors.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/gpt_from_config.hpp"
#include "dl/nn/llama.hpp"

namespace dl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kHead = "lm_head.weight";

bool is_weight_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// <layers><digits><suffix>: a per-layer tensor.
bool is_layer_tensor(const std::string& name, const std::string& layers, std::initializer_list<const char*> suffixes) {
  if (name.rfind(layers, 0) != 0) return false;
  size_t i = layers.size();
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == layers.size()) return false;
  const std::string rest = name.substr(i);
  for (const char* s : suffixes)
    if (rest == s) return true;
  return false;
}

// Buffers, no weights: GPT-2's causal masks h.N.attn.bias / h.N.attn.masked_bias (older exports,
// openai-community/gpt2's model.safetensors has h.N.attn.bias) and Llama's rotary frequencies
// model.layers.N.self_attn.rotary_emb.inv_freq (exports of transformers before 4.35).
bool is_buffer(const std::string& name) {
  return is_layer_tensor(name, "h.", {".attn.bias", ".attn.masked_bias"}) ||
         is_layer_tensor(name, "model.layers.", {".self_attn.rotary_emb.inv_freq"});
}


std::string expected_text(const Shape& shape) { return "F32, F16 or BF16 " + shape_str(shape); }

}  // namespace

// Named, not anonymous: Impl holds one, and in a unity batch GCC warns (-Wsubobject-linkage)
// about a member whose type has internal linkage.
namespace init_from_detail {
// What differs between the families model.init_from reads.
struct Family {
  std::string name;    // "GPT-2", "Llama"
  std::string embed;   // the token embedding, the tied head's weights
  std::string prefix;  // a prefix of the folder's names taken off ("transformer.": GPT2LMHeadModel's)
  std::string shape;   // the shape config.json describes, for errors
  bool tie_word_embeddings = true;
  const char* layout_hint = "";  // said when a tensor has the wrong shape
};
}  // namespace init_from_detail
using init_from_detail::Family;

struct InitFrom::Impl {
  fs::path folder;
  std::string format;      // "huggingface" or "dlkit-checkpoint"
  fs::path weights_named;  // the file errors about missing tensors name (model.safetensors or the index)
  // Hugging Face folder: the files and, for each model parameter, where it is stored.
  std::vector<std::unique_ptr<SafetensorsReader>> files;
  struct Stored {
    size_t file = 0;
    std::string key;
  };
  std::map<std::string, Stored> stored;
  Family family;
  std::vector<std::string> skipped;  // buffers
  std::string head;
  // An untied model from a tied folder: its lm_head.weight starts as a copy of wte.weight.
  bool head_from_wte = false;
  double open_seconds = 0;  // reading and checking the headers
  // dl-train checkpoint.
  std::unique_ptr<CheckpointReader> checkpoint;

  Tensor read(const std::string& name) const {
    if (checkpoint) return checkpoint->read(head_from_wte && name == kHead ? family.embed : name, "param");
    const Stored& s = stored.at(name);
    return files[s.file]->read(s.key);
  }

  const fs::path& file_of(const std::string& name) const { return files[stored.at(name).file]->path(); }

  void open_huggingface(const ParamSet& whole);
  void open_checkpoint(const ParamSet& whole, ModelType type);
  void take_untied_head(std::map<std::string, Stored>& heads);
  void check_tied_head(std::map<std::string, Stored>& heads);
};

void InitFrom::Impl::open_huggingface(const ParamSet& whole) {
  format = "huggingface";
  std::error_code ec;
  // The files, and for a sharded folder which file the index says holds each tensor.
  std::map<std::string, std::string> weight_map;
  if (fs::exists(folder / kIndexFile, ec)) {
    weights_named = folder / kIndexFile;
    const json index = read_json_file(weights_named);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw_usage(weights_named.string(), ": no \"weight_map\" object (a sharded safetensors index maps each tensor to "
                                          "its file)");
    std::map<std::string, size_t> file_index;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) throw_usage(weights_named.string(), ": weight_map[\"", name, "\"] is not a file name");
      const std::string rel = file.get<std::string>();
      if (rel.empty() || rel.find('/') != std::string::npos || rel == "." || rel == "..")
        throw_usage(weights_named.string(), ": weight_map[\"", name, "\"] = \"", rel,
                    "\" is not a file name in the folder");
      weight_map[name] = rel;
      if (file_index.count(rel)) continue;
      if (!fs::is_regular_file(folder / rel, ec))
        throw_usage(weights_named.string(), ": names shard ", rel, " for tensor '", name, "', but ",
                    (folder / rel).string(), " is missing");
      file_index[rel] = files.size();
      files.push_back(std::make_unique<SafetensorsReader>(folder / rel));
    }
    if (files.empty()) throw_usage(weights_named.string(), ": the weight_map is empty");
  } else if (fs::exists(folder / kSingleFile, ec)) {
    weights_named = folder / kSingleFile;
    files.push_back(std::make_unique<SafetensorsReader>(weights_named));
  } else {
    throw_usage(folder.string(), ": no ", kSingleFile, " or ", kIndexFile,
                " (a Hugging Face ", family.name, " folder holds config.json and the weights in one of them)");
  }

  // Every tensor of every file, by its name without the prefix.
  std::map<std::string, Stored> heads;
  for (size_t f = 0; f < files.size(); ++f) {
    const SafetensorsReader& r = *files[f];
    for (const auto& t : r.tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(t.name);
        if (it == weight_map.end())
          throw_usage(r.path().string(), ": tensor '", t.name, "' is not in ", weights_named.string(),
                      "'s weight_map (the index and its shards disagree)");
        if (it->second != r.path().filename().string())
          throw_usage(r.path().string(), ": tensor '", t.name, "' is also here, but ", weights_named.string(),
                      " places it in ", it->second);
      }
      const std::string& prefix = family.prefix;
      const std::string name = !prefix.empty() && t.name.rfind(prefix, 0) == 0 ? t.name.substr(prefix.size()) : t.name;
      if (is_buffer(name)) {
        skipped.push_back(t.name);
        continue;
      }
      auto& into = name == kHead ? heads : stored;
      if (into.count(name))
        throw_usage(r.path().string(), ": tensor '", t.name, "' is stored twice",
                    prefix.empty() ? " (in two shards)" : " (with and without the '" + prefix + "' prefix, or in two shards)");
      into[name] = {f, t.name};
    }
  }
  for (const auto& [name, rel] : weight_map) {
    bool found = false;
    for (const auto& f : files) found = found || (f->path().filename() == rel && f->contains(name));
    if (!found)
      throw_usage(weights_named.string(), ": weight_map places tensor '", name, "' in ", rel, ", which does not hold it");
  }

  const bool untied = whole.contains(kHead);
  if (untied) take_untied_head(heads);
  // Exactly the model's parameters, each with its whole shape.
  for (const auto& info : whole.infos()) {
    auto it = stored.find(info.name);
    if (it == stored.end())
      throw_usage(weights_named.string(), ": no tensor '", info.name, "'",
                  family.prefix.empty() ? std::string() : " (or '" + family.prefix + info.name + "')",
                  "; the model config.json describes needs it as ", expected_text(info.global_shape));
    const SafetensorsInfo& t = files[it->second.file]->info(it->second.key);
    if (t.shape != info.global_shape)
      throw_usage(file_of(info.name).string(), ": tensor '", t.name, "' is ", shape_str(t.shape),
                  ", the model config.json describes expects ", shape_str(info.global_shape),
                  family.layout_hint);
    if (!is_weight_dtype(t.dtype))
      throw_usage(file_of(info.name).string(), ": tensor '", t.name, "' is ", dtype_name(t.dtype),
                  "; model.init_from reads F32, F16 or BF16 weights");
  }
  std::set<std::string> declared;
  for (const auto& info : whole.infos()) declared.insert(info.name);
  for (const auto& [name, s] : stored)
    if (!declared.count(name)) {
      const SafetensorsInfo& t = files[s.file]->info(s.key);
      throw_usage(files[s.file]->path().string(), ": tensor '", s.key, "' ", shape_str(t.shape),
                  " is not a parameter of the ", family.name, " model config.json describes (", family.shape, ")");
    }
  if (!untied) check_tied_head(heads);
}

// An untied model (config.json's tie_word_embeddings = false, or model.tie_embeddings = false)
// takes the folder's lm_head.weight; a tied folder has none, and its head starts as wte.weight.
void InitFrom::Impl::take_untied_head(std::map<std::string, Stored>& heads) {
  if (!heads.empty()) {
    stored[kHead] = heads.begin()->second;
    head = std::string(kHead) + " (separate)";
    return;
  }
  if (!family.tie_word_embeddings)
    throw_usage(weights_named.string(), ": no tensor '", kHead, "', but ", (folder / "config.json").string(),
                " says tie_word_embeddings = false (a separate LM head)");
  auto wte = stored.find(family.embed);
  if (wte == stored.end()) return;  // the check of every parameter names the missing embedding
  stored[kHead] = wte->second;
  head_from_wte = true;
  head = str(kHead, " (a copy of ", family.embed, ": model.tie_embeddings = false unties the folder's head)");
}

// A tied model takes an lm_head.weight only when it is the embedding, bit for bit (a tied model
// saved with both copies). transformers would silently replace a different one by wte.weight;
// dl-train refuses and names the key that loads it as a head of its own.
void InitFrom::Impl::check_tied_head(std::map<std::string, Stored>& heads) {
  const fs::path cfg = folder / "config.json";
  if (heads.empty()) return;
  const Stored& h = heads.begin()->second;
  const SafetensorsReader& r = *files[h.file];
  const SafetensorsInfo& t = r.info(h.key);
  const Stored& e = stored.at(family.embed);
  const Shape wte_shape = files[e.file]->info(e.key).shape;
  if (t.shape != wte_shape)
    throw_usage(r.path().string(), ": tensor '", h.key, "' is ", shape_str(t.shape), ", expected ", shape_str(wte_shape),
                " (the LM head has ", family.embed, "'s shape)");
  const Tensor lm = r.read(h.key), wte = read(family.embed);
  if (lm.dtype() != wte.dtype() || std::memcmp(lm.raw(), wte.raw(), lm.nbytes()) != 0)
    throw_usage(r.path().string(), ": tensor '", h.key, "' differs from ", family.embed,
                ", but the model ties its LM head to the token embedding (", cfg.string(),
                family.tie_word_embeddings ? " says tie_word_embeddings = true or leaves it out" : " is overridden",
                "); set model.tie_embeddings = false to load it as a separate head");
  head = str(kHead, " (equal to ", family.embed, ")");
}

void InitFrom::Impl::open_checkpoint(const ParamSet& whole, ModelType type) {
  format = "dlkit-checkpoint";
  weights_named = folder / kCheckpointManifest;
  if (std::string problem = verify_checkpoint(folder); !problem.empty()) throw_usage(problem);
  checkpoint = std::make_unique<CheckpointReader>(folder);
  const std::string type_name(Choice<ModelType>(type).name());
  if (checkpoint->model_type() != type_name)
    throw_usage(weights_named.string(), ": the checkpoint holds a '", checkpoint->model_type(),
                "' model; its config.json describes a ", type_name, " model (a damaged checkpoint)");
  // A tied run's checkpoint into an untied model: the head starts as a copy of wte.weight.
  if (whole.contains(kHead) && !checkpoint->has(kHead, "param") && family.tie_word_embeddings) {
    head_from_wte = true;
    head = str(kHead, " (a copy of ", family.embed, ": model.tie_embeddings = false unties the checkpoint's head)");
  } else if (whole.contains(kHead)) {
    head = std::string(kHead) + " (separate)";
  }
  std::set<std::string> declared;
  for (const auto& info : whole.infos()) {
    declared.insert(info.name);
    if (head_from_wte && info.name == kHead) continue;
    if (!checkpoint->has(info.name, "param"))
      throw_usage(weights_named.string(), ": no tensor '", info.name, "'; the model config.json describes needs it as ",
                  shape_str(info.global_shape));
    if (checkpoint->shape(info.name) != info.global_shape)
      throw_usage(weights_named.string(), ": tensor '", info.name, "' is ", shape_str(checkpoint->shape(info.name)),
                  ", the model config.json describes expects ", shape_str(info.global_shape));
  }
  for (const auto& name : checkpoint->names("param"))
    if (!declared.count(name))
      throw_usage(weights_named.string(), ": tensor '", name, "' is not a parameter of the ", family.name,
                  " model config.json describes (", family.shape, ")");
}

InitFrom::InitFrom(const fs::path& folder, const ModelConfig& model) : impl_(std::make_unique<Impl>()) {
  const auto t0 = std::chrono::steady_clock::now();
  impl_->folder = folder;
  const fs::path config_json = init_from_config_json(folder);
  Family& f = impl_->family;
  // The whole model's parameters: names and whole shapes, as one process declares them.
  ParamSet whole;
  if (model.type == ModelType::llama) {
    const HfLlamaShape s = read_hf_llama_config(config_json);
    f = {s.qkv_bias ? "Qwen2" : "Llama", "model.embed_tokens.weight", "",
         str("num_hidden_layers ", s.n_layer, ", hidden_size ", s.n_embd, ", num_key_value_heads ", s.n_kv_head,
             ", intermediate_size ", s.ffn_hidden, ", vocab_size ", s.vocab_size),
         s.tie_word_embeddings, " (nn.Linear weights are [out, in])"};
    whole = LlamaModel::declarations(llama_config_from(model), GptParallel{});
  } else {
    const HfGpt2Shape s = read_hf_gpt2_config(config_json);
    f = {"GPT-2", "wte.weight", "transformer.",
         str("n_layer ", s.n_layer, ", n_embd ", s.n_embd, ", vocab_size ", s.vocab_size), s.tie_word_embeddings,
         " (GPT-2's Conv1D weights are [in, out])"};
    whole = GptModel::declarations(gpt_config_from(model), GptParallel{});
  }
  impl_->head = "tied to " + f.embed;
  if (fs::exists(folder / kCheckpointManifest))
    impl_->open_checkpoint(whole, model.type);
  else
    impl_->open_huggingface(whole);
  impl_->open_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

InitFrom::~InitFrom() = default;

void InitFrom::load(Model& model, parallel::ZeroEngine& engine) const {
  // Unconverted whole tensors of a Hugging Face file go straight from the page cache into the
  // model's buffer (GPT-2 124M: 0.41 s with three copies, see docs/PERFORMANCE.md).
  const Impl& m = *impl_;
  ReadInto direct = [&m](const std::string& name, Tensor& dst) {
    if (m.checkpoint) return false;
    const Impl::Stored& s = m.stored.at(name);
    if (m.files[s.file]->info(s.key).dtype != dst.dtype()) return false;
    m.files[s.file]->read_into(s.key, dst);
    return true;
  };
  load_pieces(
      model.params(), engine.param_pieces_to_load(), [&](const std::string& name) { return m.read(name); },
      [&](const parallel::Piece& p) { return engine.param_piece(p); }, direct);
  engine.after_load();
}

json InitFrom::describe() const {
  const Impl& m = *impl_;
  json d{{"folder", m.folder.string()}, {"format", m.format}, {"open_seconds", m.open_seconds}};
  if (m.checkpoint) {
    d["step"] = m.checkpoint->state().step;
    d["layout"] = m.checkpoint->manifest()["layout"];
    d["tensors"] = m.checkpoint->names("param").size();
    if (m.head != "tied to " + m.family.embed) d["lm_head"] = m.head;
    return d;
  }
  json files = json::array();
  std::map<std::string, int64_t> dtypes;
  for (const auto& f : m.files) files.push_back({{"file", f->path().filename().string()}, {"bytes", f->file_size()}});
  for (const auto& [name, s] : m.stored)
    if (!(m.head_from_wte && name == kHead)) ++dtypes[std::string(safetensors_dtype(m.files[s.file]->info(s.key).dtype))];
  d["files"] = files;
  d["tensors"] = m.stored.size() - (m.head_from_wte ? 1 : 0);  // tensors read from the files
  d["dtypes"] = dtypes;
  d["lm_head"] = m.head;
  d["skipped_buffers"] = m.skipped.size();
  return d;
}

}  // namespace dl
