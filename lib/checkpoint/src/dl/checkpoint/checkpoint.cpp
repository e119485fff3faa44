#include "dl/checkpoint/checkpoint.hpp"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "dl/io/atomic_file.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/input_file.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/io/safetensors.hpp"

namespace dl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Tensor host_copy(Backend& be, const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be.copy(h, t);
  return h;
}


// config.json with the tokenizer's bos_token_id / eos_token_id, as transformers' configs carry them
// (generation stops at eos_token_id).
std::string with_special_token_ids(const std::string& config_json, const CheckpointTokenizer& tok) {
  if (!tok.bos_token_id && !tok.eos_token_id) return config_json;
  json j = json::parse(config_json);
  if (tok.bos_token_id) j["bos_token_id"] = *tok.bos_token_id;
  if (tok.eos_token_id) j["eos_token_id"] = *tok.eos_token_id;
  return j.dump(2) + "\n";
}

// Copies the run's tokenizer files into the checkpoint folder `dir`, listed in `files` with their
// CRCs as every checkpoint file is. The run's own copy (RUN/tokenizer/, made when it started) is
// read when there is one, so a tokenizer folder moved during the run does not fail a checkpoint.
void add_tokenizer_files(const fs::path& root, const fs::path& dir, const CheckpointTokenizer& tok, json& files) {
  for (const std::string& source : tok.files) {
    const std::string name = fs::path(source).filename().string();
    if (files.contains(name)) continue;  // never a checkpoint's own config.json
    std::error_code ec;
    const fs::path run_copy = root.parent_path() / kRunTokenizerDir / name;
    const std::string bytes = read_input_file(fs::is_regular_file(run_copy, ec) ? run_copy : fs::path(source),
                                              "cannot read the run's tokenizer file");
    write_file_atomic(dir / name, bytes);
    files[name] = {{"crc32c", crc32c(bytes.data(), bytes.size())}, {"bytes", bytes.size()}};
  }
}

}  // namespace

// Saving.

fs::path save_checkpoint(const fs::path& root, CheckpointSource& src, const TrainerState& state, const Config& config,
                         int64_t keep) {
  dist::Comm& world = src.world;
  const int rank = world.rank();
  const bool single = src.layout.world == 1;
  const std::string name = checkpoint_dir_name(state.step);
  const fs::path final_dir = root / name;
  const fs::path tmp = root / ("." + name + ".tmp");
  std::error_code ec;
  if (rank == 0) {
    fs::create_directories(root);
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp / "shards");
  }
  world.barrier();
  ParamSet& P = src.model.params();
  Backend& be = P.backend();
  parallel::ZeroEngine& eng = src.engine;
  const auto& state_names = eng.optimizer().state_names();
  try {
    // This rank's pieces, parameters then optimizer state, each file's tensors in that order.
    const auto stored = checkpoint_pieces(P, eng.pieces(), state_names, rank, single);
    json pieces = json::array(), files = json::object();
    std::map<std::string, SafetensorsWriter> writers;  // by file
    std::vector<std::string> file_order;
    for (const auto& s : stored) {
      Tensor d = host_copy(be, s.state < 0 ? eng.param_piece({s.param, s.lo, s.hi})
                                           : eng.state_piece(static_cast<size_t>(s.state), {s.param, s.lo, s.hi}));
      if (!writers.count(s.file)) file_order.push_back(s.file);
      writers[s.file].add(s.key, d.view(s.stored_shape));  // the writer keeps d alive
      pieces.push_back(piece_json(s));
    }
    for (const auto& rel : file_order) {
      SafetensorsWriter& w = writers[rel];
      w.set_metadata(checkpoint_file_metadata(state.step));
      uint32_t crc = w.write(tmp / rel);
      files[rel] = {{"crc32c", crc}, {"bytes", fs::file_size(tmp / rel)}};
    }
    // Whole-tensor shapes and dtypes, for checking and for merging.
    json fragment{{"pieces", pieces}, {"files", files}, {"tensors", tensors_json(P, eng.checkpoint_dtype())}};
    write_file_atomic(tmp / checkpoint_rank_file(rank, "json"), fragment.dump());
  } catch (...) {
    // A failed rank must not leave the others waiting at the barrier forever: its error reaches
    // the launcher, which stops every rank.
    throw;
  }
  world.barrier();

  fs::path published;
  if (rank == 0) {
    json pieces = json::array(), files = json::object(), tensors = json::object();
    for (int r = 0; r < src.layout.world; ++r) {
      fs::path frag = tmp / checkpoint_rank_file(r, "json");
      json f = read_json_file(frag);
      for (auto& p : f["pieces"]) pieces.push_back(p);
      for (auto& [k, v] : f["files"].items()) files[k] = v;
      for (auto& [k, v] : f["tensors"].items()) tensors[k] = v;
      fs::remove(frag);
    }
    std::string cfg = src.model.type() == ModelType::gpt     ? hf_gpt2_config_json(config.model)
                      : src.model.type() == ModelType::llama ? llama_config_json(config.model)
                                                             : mlp_config_json(config.model);
    if (src.model.type() == ModelType::llama) cfg = with_special_token_ids(cfg, src.tokenizer);
    write_file_atomic(tmp / "config.json", cfg);
    files["config.json"] = {{"crc32c", crc32c(cfg.data(), cfg.size())}, {"bytes", cfg.size()}};
    add_tokenizer_files(root, tmp, src.tokenizer, files);
    json optimizer{{"name", eng.optimizer().name()}, {"steps", eng.optimizer().step_count()}, {"state", state_names}};
    json manifest = checkpoint_manifest(src.model.kind(), state, optimizer, src.layout, tensors, pieces, files);
    write_file_atomic(tmp / kCheckpointManifest, manifest.dump(1) + "\n");
    if (single) fs::remove(tmp / "shards", ec);
    if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a re-save of the same step replaces it
    publish_dir_atomic(tmp, final_dir);
    // Rotation: the newest `keep` of the run's own checkpoints up to this one stay. Newer ones (left
    // when the run resumed from an older checkpoint) are replaced when the run reaches their step.
    int64_t kept = 0;
    for (const auto& dir : own_checkpoints(root))
      if (*checkpoint_dir_step(dir.filename().string()) <= state.step && ++kept > std::max<int64_t>(keep, 1))
        fs::remove_all(dir, ec);
  }
  world.barrier();  // nobody moves on before the checkpoint is complete
  return final_dir;
}


fs::path agree_on_checkpoint(const fs::path& root, dist::Comm& world) {
  Tensor step = Tensor::zeros({1}, DType::i64);
  std::string error;
  if (world.rank() == 0) {
    try {
      fs::path dir = latest_good_checkpoint(root);
      step.data<int64_t>()[0] = *checkpoint_dir_step(dir.filename().string());
    } catch (const Error& e) {
      error = e.what();
      step.data<int64_t>()[0] = -1;
    }
  }
  world.broadcast(step, 0);
  int64_t s = step.data<int64_t>()[0];
  if (s < 0) throw_usage(world.rank() == 0 ? error : "rank 0 found no usable checkpoint in " + root.string());
  return root / checkpoint_dir_name(s);
}

// ---------------------------------------------------------------------------------------------
// Loading into a model of any layout.

void load_pieces(ParamSet& P, const std::vector<parallel::Piece>& pieces,
                 const std::function<Tensor(const std::string&)>& whole, const PieceStorage& dst_of,
                 const ReadInto& read_into) {
  Backend& be = P.backend();
  std::map<size_t, std::vector<parallel::Piece>> by_param;
  for (const auto& p : pieces) by_param[p.param].push_back(p);
  for (auto& [i, ps] : by_param) {
    const ParamInfo& info = P.info(i);
    if (read_into && info.slice.whole() && ps.size() == 1 && ps[0].lo == 0 && ps[0].hi == info.numel()) {
      Tensor dst = dst_of(ps[0]);
      if (dst.device().is_cpu()) {
        Tensor shaped = dst.view(info.shape);
        if (read_into(info.name, shaped)) continue;
      }
    }
    Tensor all = whole(info.name);
    Tensor local = info.slice.whole() ? all : extract_slice(all, info.slice);
    Tensor flat = local.view({local.numel()});
    for (const auto& p : ps) {
      Tensor dst = dst_of(p);
      copy_converted(be, dst, flat.flat_slice(p.lo, {p.hi - p.lo}));  // f32 weights into a 16-bit model round
    }
  }
}

TrainerState load_checkpoint(const fs::path& dir, Model& model, parallel::ZeroEngine* engine) {
  CheckpointReader r(dir);
  if (r.model_type() != model.kind())
    throw_usage(dir.string(), ": checkpoint holds a '", r.model_type(), "' model, the config builds '", model.kind(), "'");
  ParamSet& P = model.params();
  for (size_t i = 0; i < P.size(); ++i) {
    const ParamInfo& info = P.info(i);
    Shape want = info.global_shape;
    Shape have = r.shape(info.name);
    if (have != want)
      throw_usage(dir.string(), ": tensor '", info.name, "' is ", shape_str(have), " but the model expects ", shape_str(want),
                  " (check model.* against the checkpoint's config.json)");
  }
  auto fill = [&](const std::string& kind, const std::vector<parallel::Piece>& pieces, const PieceStorage& dst_of) {
    load_pieces(P, pieces, [&](const std::string& name) { return r.read(name, kind); }, dst_of);
  };
  if (engine) {
    fill("param", engine->param_pieces_to_load(), [&](const parallel::Piece& p) { return engine->param_piece(p); });
    const auto& names = engine->optimizer().state_names();
    if (r.optimizer_name() != engine->optimizer().name())
      throw_usage(dir.string(), ": optimizer state is for '", r.optimizer_name(), "', the config uses '",
                  engine->optimizer().name(), "'");
    for (size_t k = 0; k < names.size(); ++k) {
      if (!r.has(P.info(0).name, names[k]))
        throw_usage(dir.string(), ": no ", names[k], " state (a weights-only checkpoint cannot resume training)");
      fill(names[k], engine->state_pieces_to_load(), [&, k](const parallel::Piece& p) { return engine->state_piece(k, p); });
    }
    engine->optimizer().set_step_count(r.optimizer_steps());
    engine->after_load();
  } else {
    std::vector<parallel::Piece> whole;
    for (size_t i = 0; i < P.size(); ++i) whole.push_back({i, 0, P.info(i).numel()});
    fill("param", whole, [&](const parallel::Piece& p) {
      return P.value(p.param).view({P.info(p.param).numel()}).flat_slice(p.lo, {p.hi - p.lo});
    });
  }
  return r.state();
}

}  // namespace dl
