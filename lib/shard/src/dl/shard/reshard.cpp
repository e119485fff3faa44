#include "dl/shard/reshard.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/config/choice.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/strings.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/safetensors.hpp"
#include "dl/parallel/mesh.hpp"
#include "dl/shard/source.hpp"

namespace dl::shard {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The keys of --layout "dp=4,zero=3", in the order errors list them.
enum class LayoutKey { dp, tp, pp, zero };
inline constexpr std::string_view kLayoutKeyNames[] = {"dp", "tp", "pp", "zero"};
constexpr std::span<const std::string_view> choice_names(LayoutKey) { return kLayoutKeyNames; }

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw_runtime("cannot read ", p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Removes a temporary output folder unless the work completed and published it.
class TempDirGuard {
 public:
  explicit TempDirGuard(fs::path p) : path_(std::move(p)) {}
  ~TempDirGuard() {
    if (path_.empty()) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

// An absolute, normal path without a trailing separator.
fs::path clean_path(const fs::path& p) {
  fs::path c = fs::absolute(p).lexically_normal();
  return c.has_filename() ? c : c.parent_path();
}

// The bytes of elements [lo, hi) of a contiguous host tensor.
void append_range(SafetensorsStreamWriter& w, const Tensor& t, int64_t lo, int64_t hi) {
  const size_t es = dtype_size(t.dtype());
  if (hi > lo) w.append(static_cast<const char*>(t.raw()) + static_cast<size_t>(lo) * es, static_cast<size_t>(hi - lo) * es);
}

std::string read_file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw_runtime(p.string(), ": cannot read the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

WrittenFile committed(SafetensorsStreamWriter& w, const std::string& rel, size_t tensors) {
  WrittenFile f;
  f.tensor_bytes = w.data_bytes();
  f.crc32c = w.commit();
  f.path = w.path();
  f.file = rel;
  f.tensors = tensors;
  f.file_bytes = w.file_bytes();
  return f;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// merge

fs::path optimizer_path_for(const fs::path& model_file) {
  if (model_file.filename() == "model.safetensors") return model_file.parent_path() / "optimizer.safetensors";
  return model_file.parent_path() / (model_file.stem().string() + ".optimizer.safetensors");
}

MergeResult merge_checkpoint(const MergeOptions& o) {
  if (o.output.empty()) throw_usage("merge: give the output file with -o model.safetensors");
  MergeResult r;
  r.checkpoint = resolve_checkpoint(o.source, &r.note);
  CheckedCheckpoint ck = open_checkpoint(r.checkpoint);
  const CheckpointReader& reader = *ck.reader;
  r.model_type = reader.model_type();
  r.qkv_bias = ck.model.config.qkv_bias;
  r.layout = reader.layout();
  r.step = reader.state().step;

  // What merge reads (the checkpoint's files, its config.json and the run's tokenizer files: the
  // companions copied beside the model) no output may be; every output is checked before the
  // first byte is written. A device, FIFO or stdout gets the model alone: there is no folder
  // beside it for the other files.
  std::vector<fs::path> inputs{r.checkpoint / kCheckpointManifest}, companion_files;
  for (const auto& [file, info] : reader.manifest()["files"].items()) inputs.push_back(r.checkpoint / file);
  std::error_code ec;
  const fs::path tok_dir = r.checkpoint.parent_path().parent_path() / kRunTokenizerDir;
  // The checkpoint's config.json (GPT-2's, verified with the checkpoint) and the run's tokenizer
  // files (RUN/tokenizer/, beside RUN/checkpoints/) go beside the model: the folder is then a
  // whole Hugging Face GPT-2 folder that model.init_from and transformers load.
  if (fs::is_regular_file(r.checkpoint / "config.json", ec)) companion_files.push_back(r.checkpoint / "config.json");
  if (fs::is_directory(tok_dir, ec))
    for (const auto& e : fs::directory_iterator(tok_dir))
      if (e.is_regular_file() && e.path().filename() != "config.json") companion_files.push_back(e.path());
  inputs.insert(inputs.end(), companion_files.begin(), companion_files.end());
  const OutputTarget model_out = output_target(o.output, inputs);
  if (!model_out.is_file() && o.with_optimizer)
    throw_option_error("{with_optimizer} writes optimizer.safetensors beside the model, but ", o.output.string(),
                       " is not a file; name a file");
  const fs::path parent = o.output.has_parent_path() ? o.output.parent_path() : fs::path(".");
  std::optional<OutputTarget> opt_out;
  if (o.with_optimizer) opt_out = output_target(optimizer_path_for(o.output), inputs);
  std::vector<OutputTarget> companion_outs;
  if (model_out.is_file())
    for (const auto& f : companion_files) companion_outs.push_back(output_target(parent / f.filename(), inputs));
  else if (!companion_files.empty())
    log_info(str("config.json and the run's tokenizer files are not copied: ", o.output.string(), " is not a file"));
  // As split refuses a folder that holds something, merge replaces no file without --force: not
  // the model or optimizer file, not a config or tokenizer file that differs from the run's (an
  // equal one, another model of the same run merged beside, is left as it is).
  std::vector<bool> copy(companion_outs.size(), true);
  for (size_t i = 0; i < companion_outs.size(); ++i)
    if (fs::exists(companion_outs[i].path, ec) && companion_outs[i].is_file())
      copy[i] = read_file_bytes(companion_outs[i].path) != read_file_bytes(companion_files[i]);
  if (!o.force) {
    auto refuse_existing = [&](const OutputTarget& out, const char* why) {
      if (out.is_file() && fs::exists(out.path, ec))
        throw_option_error(out.given.string(), " exists", why, "; merge replaces it only with {force}");
    };
    refuse_existing(model_out, "");
    if (opt_out) refuse_existing(*opt_out, "");
    for (size_t i = 0; i < companion_outs.size(); ++i)
      if (copy[i]) refuse_existing(companion_outs[i], " and differs from the run's");
  }

  const auto order = ck.model.tensor_order();
  if (o.with_optimizer && ck.model.state_names.empty())
    throw_usage(r.checkpoint.string(), ": --with-optimizer, but the optimizer (", reader.optimizer_name(),
                ") keeps no state");

  std::vector<SafetensorsEntry> model_entries, opt_entries;
  for (const auto& name : order) model_entries.push_back({name, ck.model.dtype, reader.shape(name)});
  if (o.with_optimizer)
    for (const auto& kind : ck.model.state_names)
      for (const auto& name : order) opt_entries.push_back({kind + "." + name, ck.model.dtype, reader.shape(name)});
  const auto metadata = checkpoint_file_metadata(r.step);
  // Both files stay temporary until every tensor is in: an error leaves neither.
  SafetensorsStreamWriter model_w(model_out, model_entries, metadata);
  std::unique_ptr<SafetensorsStreamWriter> opt_w;
  if (opt_out) opt_w = std::make_unique<SafetensorsStreamWriter>(*opt_out, opt_entries, metadata);
  log_info(str("merging ", r.model_type, " checkpoint step ", r.step, " (", layout_string(r.layout), ", ",
               reader.manifest()["files"].size(), " files) into ", o.output.string()));
  for (const auto& name : order) {
    Tensor t = reader.read(name, "param");
    append_range(model_w, t, 0, t.numel());
  }
  if (opt_w)
    for (const auto& kind : ck.model.state_names)
      for (const auto& name : order) {
        Tensor t = reader.read(name, kind);
        append_range(*opt_w, t, 0, t.numel());
      }
  r.files.push_back(committed(model_w, o.output.filename().string(), model_entries.size()));
  if (opt_w) r.files.push_back(committed(*opt_w, opt_out->given.filename().string(), opt_entries.size()));
  for (size_t i = 0; i < companion_outs.size(); ++i) {
    const OutputTarget& out = companion_outs[i];
    if (!copy[i]) continue;  // already there, byte for byte
    const std::string bytes = read_file_bytes(companion_files[i]);
    WrittenFile f;
    f.path = out.given;
    f.file = out.given.filename().string();
    f.file_bytes = bytes.size();
    f.crc32c = crc32c(bytes.data(), bytes.size());
    write_output(out, bytes);
    r.files.push_back(f);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// split

CheckpointLayout parse_layout(const std::string& text, int ranks, int source_zero) {
  CheckpointLayout l;
  bool zero_given = false;
  if (ranks > 0) {
    if (!text.empty()) throw_option_error("give either {layout} or {ranks}, not both");
    l.dp = ranks;
  } else if (ranks < 0) {
    throw_option_error("{ranks}: need a positive number of ranks, got ", ranks);
  } else {
    if (text.empty()) throw_option_error("split: give the target layout with {layout} \"dp=4,zero=3\" or {ranks} N");
    std::string spaced = text;
    for (char& c : spaced)
      if (c == ',') c = ' ';
    std::map<LayoutKey, int> seen;
    for (const std::string& item : split_words(spaced)) {
      auto eq = item.find('=');
      const std::string name = item.substr(0, eq);
      if (eq == std::string::npos || eq + 1 == item.size())
        throw_option_error("{layout}: '", item, "' is not KEY=VALUE (e.g. {layout} \"dp=4,zero=3\")");
      const std::optional<LayoutKey> key = parse_choice<LayoutKey>(name);
      if (!key) throw_option_error("{layout}: unknown key '", name, "' (", choice_list<LayoutKey>(), ")");
      if (seen.count(*key)) throw_option_error("{layout}: '", name, "' given twice");
      const std::string value = item.substr(eq + 1);
      int v = 0;
      size_t used = 0;
      try {
        v = std::stoi(value, &used);
      } catch (...) {
        used = 0;
      }
      if (used != value.size() || value.empty())
        throw_option_error("{layout}: ", name, " = '", value, "' is not a whole number");
      const bool zero = *key == LayoutKey::zero;
      if (zero ? (v < 0 || v > 3) : v < 1)
        throw_option_error("{layout}: ", name, " = ", v, zero ? " is not a ZeRO stage (0..3)" : " must be at least 1");
      seen[*key] = v;
    }
    if (seen.empty()) throw_option_error("{layout}: empty (e.g. {layout} \"dp=4,zero=3\")");
    for (const auto& [key, v] : seen) {
      switch (key) {
        case LayoutKey::dp: l.dp = v; break;
        case LayoutKey::tp: l.tp = v; break;
        case LayoutKey::pp: l.pp = v; break;
        case LayoutKey::zero: l.zero = v, zero_given = true; break;
      }
    }
  }
  // ZeRO shards over data-parallel ranks: keep the source's stage when there are several.
  if (!zero_given) l.zero = l.dp > 1 ? source_zero : 0;
  l.world = l.dp * l.tp * l.pp;
  return l;
}

namespace {

// The model keys a config must share with the checkpoint to resume it.
void check_config_model(const ModelConfig& have, const ModelConfig& ckpt, const fs::path& cfg_path) {
  auto differ = [&](const char* key, auto a, auto b) {
    if (a != b)
      throw_usage(cfg_path.string(), ": model.", key, " = ", a, " but the checkpoint's model has ", b,
                  " (give the config of the run that wrote it with --config)");
  };
  if (have.type != ckpt.type)
    throw_usage(cfg_path.string(), ": model.type = \"", have.type, "\" but the checkpoint holds a ", ckpt.type, " model");
  if (ckpt.type == ModelType::gpt) {
    differ("n_layer", have.n_layer, ckpt.n_layer);
    differ("n_head", have.n_head, ckpt.n_head);
    differ("n_embd", have.n_embd, ckpt.n_embd);
    differ("block_size", have.block_size, ckpt.block_size);
    differ("vocab_size", have.vocab_size, ckpt.vocab_size);
    auto boolean = [](bool b) { return std::string(b ? "true" : "false"); };
    differ("tie_embeddings", boolean(have.tie_embeddings), boolean(ckpt.tie_embeddings));
  } else {
    if (have.hidden != ckpt.hidden)
      throw_usage(cfg_path.string(), ": model.hidden differs from the checkpoint's layers (give the config of the run "
                                     "that wrote it with --config)");
  }
}

std::string resume_command(const SplitResult& r) {
  std::string cmd = "dl-train";
  if (!r.config_written) cmd += " CONFIG.toml";
  cmd += " --resume " + r.output.string();
  if (r.to.world > 1) cmd += " --nproc-per-node " + std::to_string(r.to.world);
  if (!r.config_written)
    cmd += str(" --set parallel.dp=", r.to.dp, " --set parallel.tp=", r.to.tp, " --set parallel.pp=", r.to.pp,
               " --set parallel.zero=", r.to.zero);
  return cmd;
}

}  // namespace

SplitResult split_checkpoint(const SplitOptions& o) {
  if (o.output.empty()) throw_usage("split: give the output run directory with -o DIR");
  std::error_code ec;
  SplitResult r;
  r.checkpoint = resolve_checkpoint(o.source, &r.note);
  // A device or file is refused, a symlink leads to the folder written, and OUT must not be the
  // checkpoint read or lie inside it (README "Outputs").
  const std::vector<fs::path> inputs{r.checkpoint, o.config};
  const fs::path out = clean_path(output_folder(o.output, inputs));
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw_usage("-o ", o.output.string(), " already exists and is not empty; split writes a new run directory");
  if (!fs::is_directory(out.parent_path(), ec))
    throw_usage("-o ", o.output.string(), ": the folder ", out.parent_path().string(), " does not exist");

  CheckedCheckpoint ck = open_checkpoint(r.checkpoint);
  const CheckpointReader& reader = *ck.reader;
  r.model_type = reader.model_type();
  r.from = reader.layout();
  r.step = reader.state().step;
  r.to = parse_layout(o.layout, o.ranks, r.from.zero);
  r.output = o.output;

  // The layout must suit the model: the same rules dl-train applies at start-up.
  ParallelConfig par;
  par.dp = r.to.dp;
  par.tp = r.to.tp;
  par.pp = r.to.pp;
  par.zero = r.to.zero;
  parallel::resolve_mesh(par, ck.model.config, r.to.world);

  // The run's config, for OUT/config.toml: --config, or the config.toml of the run that wrote
  // the checkpoint (RUN/checkpoints/step_N).
  std::optional<Config> cfg;
  fs::path cfg_path = o.config;
  bool from_source_run = false;
  if (cfg_path.empty()) {
    fs::path run = clean_path(r.checkpoint).parent_path();
    if (run.filename() == "checkpoints" && fs::exists(run.parent_path() / "config.toml")) {
      cfg_path = run.parent_path() / "config.toml";
      from_source_run = true;
    }
  }
  if (!cfg_path.empty()) {
    cfg = load_config(cfg_path);
    check_config_model(cfg->model, ck.model.config, cfg_path);
    cfg->parallel.dp = r.to.dp;
    cfg->parallel.tp = r.to.tp;
    cfg->parallel.pp = r.to.pp;
    cfg->parallel.zero = r.to.zero;
    if (cfg->parallel.offload == Offload::cpu && r.to.zero < 1) {
      cfg->parallel.offload = Offload::none;
      r.notes.push_back("parallel.offload set to \"none\": offload needs zero >= 1");
    }
    if (from_source_run && r.to.dp != r.from.dp) {
      // The same examples per step: batch_size x accumulation x dp stays what the run used.
      const int64_t b = cfg->train.batch_size, total = b * r.from.dp;
      if (total % r.to.dp == 0) {
        cfg->train.batch_size = total / r.to.dp;
        r.notes.push_back(str("train.batch_size ", b, " -> ", cfg->train.batch_size, " so the global batch stays ",
                              total * micro_batches_per_step(*cfg), " examples per step at dp = ", r.to.dp));
      } else {
        r.notes.push_back(str("train.batch_size kept at ", b, ": ", total, " examples per micro-batch step do not divide "
                              "over dp = ", r.to.dp, ", so the global batch changes"));
      }
    }
  } else {
    r.notes.push_back("no config.toml (the source is not inside a run directory and no --config was given): resume "
                      "with your config and the --set flags of the command below");
  }
  r.config_written = cfg.has_value();
  r.resume_command = resume_command(r);

  // Everything is written under a temporary name beside OUT and published in one rename.
  const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  TempDirGuard guard(tmp);
  const fs::path step_rel = fs::path("checkpoints") / checkpoint_dir_name(r.step);
  const fs::path step_tmp = tmp / step_rel;
  fs::create_directories(r.to.world > 1 ? step_tmp / "shards" : step_tmp);

  // What each rank stores, and one streaming writer per file, its tensors declared up front.
  const auto ranks = layout_pieces(ck.model, r.to);
  const parallel::MeshShape mesh{r.to.dp, r.to.tp, r.to.pp};
  struct Output {
    std::unique_ptr<SafetensorsStreamWriter> writer;
    WrittenFile info;
  };
  std::map<std::string, Output> outputs;
  std::vector<std::string> file_order;
  {
    std::map<std::string, std::vector<SafetensorsEntry>> entries;
    for (size_t rk = 0; rk < ranks.size(); ++rk)
      for (const auto& s : ranks[rk]) {
        if (!entries.count(s.file)) {
          file_order.push_back(s.file);
          const MeshRank mr = mesh_rank(mesh, static_cast<int>(rk));
          WrittenFile& w = outputs[s.file].info;
          w.rank = mr.rank, w.dp_rank = mr.dp_rank, w.tp_rank = mr.tp_rank, w.pp_rank = mr.pp_rank;
        }
        entries[s.file].push_back({s.key, ck.model.dtype, s.stored_shape});
      }
    const auto metadata = checkpoint_file_metadata(r.step);
    for (const auto& f : file_order) {
      outputs[f].writer = std::make_unique<SafetensorsStreamWriter>(step_tmp / f, entries[f], metadata);
      outputs[f].info.tensors = entries[f].size();
    }
  }

  // Stream: each whole tensor is read once, in the order every file lays its tensors out
  // (parameters, then each optimizer state, each in declaration order), and its pieces appended
  // to the files that hold them.
  std::map<std::pair<std::string, std::string>, std::vector<const StoredPiece*>> needs;  // (kind, name)
  for (const auto& rank : ranks)
    for (const auto& s : rank) needs[{s.kind, s.name}].push_back(&s);
  std::vector<std::string> kinds{"param"};
  kinds.insert(kinds.end(), ck.model.state_names.begin(), ck.model.state_names.end());
  log_info(str("splitting ", r.model_type, " checkpoint step ", r.step, " (", layout_string(r.from), ") into ",
               layout_string(r.to), ": ", file_order.size(), " files under ", o.output.string()));
  const auto order = ck.model.tensor_order();
  for (const auto& kind : kinds)
    for (const auto& name : order) {
      auto it = needs.find({kind, name});
      if (it == needs.end()) continue;
      const Tensor whole = reader.read(name, kind);
      std::map<std::string, Tensor> locals;  // by tensor-parallel slice
      for (const StoredPiece* s : it->second) {
        const std::string slice_key = s->slice.describe();
        if (!locals.count(slice_key)) locals[slice_key] = extract_slice(whole, s->slice);
        SafetensorsStreamWriter& w = *outputs.at(s->file).writer;
        DL_CHECK(w.next() && w.next()->name == s->key, s->file, ": piece ", s->key, " out of order");
        append_range(w, locals[slice_key], s->lo, s->hi);
      }
    }

  json files = json::object(), pieces = json::array();
  for (const auto& f : file_order) {
    Output& file = outputs.at(f);
    WrittenFile w = committed(*file.writer, f, file.info.tensors);
    w.rank = file.info.rank, w.dp_rank = file.info.dp_rank, w.tp_rank = file.info.tp_rank, w.pp_rank = file.info.pp_rank;
    files[f] = {{"crc32c", w.crc32c}, {"bytes", w.file_bytes}};
    r.files.push_back(std::move(w));
  }
  for (const auto& rank : ranks)
    for (const auto& s : rank) pieces.push_back(piece_json(s));
  // config.json as the source has it (verified against its CRC above).
  const std::string hf_config = read_bytes(r.checkpoint / "config.json");
  write_file_atomic(step_tmp / "config.json", hf_config);
  files["config.json"] = {{"crc32c", crc32c(hf_config.data(), hf_config.size())}, {"bytes", hf_config.size()}};
  // The rest of what the source lists beside its tensors (the run's tokenizer files: dl-train's
  // checkpoints are whole Hugging Face folders) goes along unchanged, checked against its CRC.
  for (const auto& [name, info] : reader.manifest()["files"].items()) {
    if (files.contains(name) || fs::path(name).extension() == ".safetensors") continue;
    if (fs::path(name).filename().string() != name || name == "." || name == "..")
      throw_usage(clean_path(r.checkpoint / kCheckpointManifest).string(), ": lists the file \"", name,
                  "\", which is not a plain file name in the checkpoint folder (a damaged manifest)");
    const std::string bytes = read_bytes(r.checkpoint / name);
    const uint32_t crc = crc32c(bytes.data(), bytes.size());
    if (crc != info.at("crc32c").get<uint32_t>())
      throw_usage(clean_path(r.checkpoint / name).string(), ": changed while split read the checkpoint (CRC-32C ",
                  "0x", hex32(crc), ", the manifest says 0x", hex32(info.at("crc32c").get<uint32_t>()), ")");
    write_file_atomic(step_tmp / name, bytes);
    files[name] = {{"crc32c", crc}, {"bytes", bytes.size()}};
  }
  const json manifest = checkpoint_manifest(r.model_type, reader.state(), reader.manifest()["optimizer"], r.to,
                                            reader.manifest()["tensors"], pieces, files);
  write_file_atomic(step_tmp / kCheckpointManifest, manifest.dump(1) + "\n");
  if (cfg) write_file_atomic(tmp / "config.toml", config_to_toml(*cfg));

  if (fs::exists(out, ec)) fs::remove(out);  // an empty folder (checked above)
  publish_dir_atomic(tmp, out);
  guard.release();
  r.step_dir = o.output / step_rel;
  for (auto& f : r.files) f.path = r.step_dir / f.file;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Output

namespace {

Table files_table(const std::vector<WrittenFile>& files, bool ranks) {
  std::vector<Column> cols = {{"file", "file", false}};
  if (ranks) {
    cols.push_back({"rank", "rank", true});
    cols.push_back({"dp_rank", "dp", true});
    cols.push_back({"tp_rank", "tp", true});
    cols.push_back({"pp_rank", "pp", true});
  }
  cols.push_back({"tensors", "tensors", true});
  cols.push_back({"tensor_bytes", "tensor bytes", true});
  cols.push_back({"file_bytes", "file bytes", true});
  cols.push_back({"crc32c", "crc32c", false});
  Table t(cols);
  for (const auto& f : files) {
    std::vector<Cell> row = {Cell::str(f.file)};
    if (ranks) {
      row.push_back(Cell::integer(f.rank));
      row.push_back(Cell::integer(f.dp_rank));
      row.push_back(Cell::integer(f.tp_rank));
      row.push_back(Cell::integer(f.pp_rank));
    }
    row.push_back(Cell::integer(static_cast<int64_t>(f.tensors)));
    row.push_back(Cell{static_cast<int64_t>(f.tensor_bytes), format_bytes(static_cast<double>(f.tensor_bytes))});
    row.push_back(Cell{static_cast<int64_t>(f.file_bytes), format_bytes(static_cast<double>(f.file_bytes))});
    row.push_back(Cell::checksum(f.crc32c));
    t.add_row(std::move(row));
  }
  return t;
}

uint64_t total_tensor_bytes(const std::vector<WrittenFile>& files) {
  uint64_t n = 0;
  for (const auto& f : files) n += f.tensor_bytes;
  return n;
}

size_t total_tensors(const std::vector<WrittenFile>& files) {
  size_t n = 0;
  for (const auto& f : files) n += f.tensors;
  return n;
}

nlohmann::ordered_json layout_json(const CheckpointLayout& l) {
  return {{"world", l.world}, {"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"zero", l.zero}};
}

}  // namespace

std::string render_merge(const MergeResult& r, OutputFormat f) {
  Table t = files_table(r.files, false);
  if (f == OutputFormat::json) {
    nlohmann::ordered_json doc;
    doc["checkpoint"] = r.checkpoint.string();
    doc["model_type"] = r.model_type;
    doc["step"] = r.step;
    doc["layout"] = layout_json(r.layout);
    doc["tensors"] = total_tensors(r.files);
    doc["tensor_bytes"] = total_tensor_bytes(r.files);
    doc["files"] = nlohmann::ordered_json::parse(t.render(OutputFormat::json));
    return doc.dump(2) + "\n";
  }
  if (f == OutputFormat::jsonl || f == OutputFormat::csv) return t.render(f);
  std::string head = str("merged ", r.model_type, " checkpoint ", r.checkpoint.string(), " (step ", r.step, ", ",
                         layout_string(r.layout), r.note.empty() ? "" : "; " + r.note, "): ", total_tensors(r.files),
                         " tensors, ", format_bytes(static_cast<double>(total_tensor_bytes(r.files))), "\n\n");
  t.add_note(r.model_type == "llama"
                 ? str("# Hugging Face ", r.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM",
                       " names and [out,in] shapes (the single-process checkpoint's model.safetensors)")
                 : r.model_type == "gpt"
                       ? "# Hugging Face GPT-2 names and [in,out] shapes (the single-process checkpoint's model.safetensors)"
                       : "# the single-process checkpoint's model.safetensors");
  return head + t.render(f);
}

std::string render_split(const SplitResult& r, OutputFormat f) {
  Table t = files_table(r.files, true);
  if (f == OutputFormat::json) {
    nlohmann::ordered_json doc;
    doc["checkpoint"] = r.checkpoint.string();
    doc["model_type"] = r.model_type;
    doc["step"] = r.step;
    doc["from"] = layout_json(r.from);
    doc["to"] = layout_json(r.to);
    doc["output"] = r.output.string();
    doc["step_dir"] = r.step_dir.string();
    doc["config_written"] = r.config_written;
    doc["resume_command"] = r.resume_command;
    doc["notes"] = r.notes;
    doc["tensors"] = total_tensors(r.files);
    doc["tensor_bytes"] = total_tensor_bytes(r.files);
    doc["files"] = nlohmann::ordered_json::parse(t.render(OutputFormat::json));
    return doc.dump(2) + "\n";
  }
  if (f == OutputFormat::jsonl || f == OutputFormat::csv) return t.render(f);
  std::string head = str("split ", r.model_type, " checkpoint ", r.checkpoint.string(), " (step ", r.step, ", ",
                         layout_string(r.from), r.note.empty() ? "" : "; " + r.note, ") into ", layout_string(r.to),
                         ": ", r.files.size(), " files, ", total_tensors(r.files), " pieces, ",
                         format_bytes(static_cast<double>(total_tensor_bytes(r.files))), " in ", r.step_dir.string(),
                         "\n\n");
  for (const auto& n : r.notes) t.add_note("# " + n);
  t.add_note("# resume: " + r.resume_command);
  return head + t.render(f);
}

}  // namespace dl::shard
