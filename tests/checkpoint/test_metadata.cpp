// A checkpoint's metadata is verified like its tensors (dl/checkpoint/format.hpp,
// docs/FORMATS.md): trainer_state.json carries the CRC-32C of its own content, the folder's
// step, the manifest's step and every file's dlkit.step agree, and a step folder lies in its own
// run. A checkpoint that fails any of these is skipped with a warning naming the file and the
// field, and the previous one is used, as for a flipped tensor byte. Rotation deletes only the
// run's own step folders; resume refuses a [model] change the tensor shapes do not show.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "dl/checkpoint/format.hpp"
#include "dl/io/safetensors.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"
#include "train/run_files.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

// Four steps of the tiny GPT, a checkpoint after steps 2 and 4.
const std::string kFourSteps = tiny_gpt({{"train.steps", "4"}, {"train.checkpoint_every", "2"}, {"train.keep_checkpoints", "5"}});

RunResult dl_train(const std::vector<std::string>& args) { return run(tool("dl-train"), args); }

// A run trained for `steps` (checkpoints every 2) in d/name.
fs::path trained(const TempDir& d, const std::string& name, int steps) {
  write_file(d / "c.toml", kFourSteps);
  const fs::path run_dir = d / name;
  RunResult r = dl_train({(d / "c.toml").string(), "--run-dir", run_dir.string(), "--steps", std::to_string(steps)});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return run_dir;
}

// A copy of `run_dir` at d/name, to damage.
fs::path copy_of(const fs::path& run_dir, const TempDir& d, const std::string& name) {
  fs::copy(run_dir, d / name, fs::copy_options::recursive);
  return d / name;
}

fs::path step_dir(const fs::path& run_dir, int64_t step) { return run_dir / "checkpoints" / step_name(step); }

json manifest_of(const fs::path& ckpt) { return json::parse(read_file(ckpt / "trainer_state.json")); }
void save_manifest(const fs::path& ckpt, const json& m) { write_file(ckpt / "trainer_state.json", m.dump(1) + "\n"); }

// dl-train --resume to `steps`: the step it resumed at is the one before its first loss.
struct Resumed {
  RunResult r;
  int64_t at = -1;
};
Resumed resume(const fs::path& run_dir, const std::vector<std::string>& extra = {}, int steps = 6) {
  std::vector<std::string> args = {"--resume", run_dir.string(), "--steps", std::to_string(steps), "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  Resumed out{dl_train(args)};
  const auto losses = losses_of(out.r.out);
  if (!losses.empty()) out.at = losses.begin()->first - 1;
  return out;
}

// Resume skipped step 4's checkpoint with a warning holding every one of `names`, and went on from step 2.
void check_fell_back(const Resumed& x, const std::vector<std::string>& names) {
  INFO(x.r.err);
  CHECK(x.r.exit_code == 0);
  CHECK(has(x.r.err, "skipping checkpoint step_00000004"));
  for (const auto& n : names) CHECK_MESSAGE(has(x.r.err, n), n);
  CHECK(x.at == 2);
}

}  // namespace

TEST_CASE("an edited trainer_state.json fails its checksum: resume skips it for the previous checkpoint") {
  TempDir d("ckpt-meta");
  const fs::path base = trained(d, "base", 4);
  const fs::path ck4 = step_dir(base, 4);
  json m = manifest_of(ck4);
  REQUIRE(m["version"] == 3);
  REQUIRE(m["manifest_crc32c"].is_number_unsigned());
  CHECK(m["manifest_crc32c"].get<uint32_t>() == dl::checkpoint_manifest_crc32c(m));
  CHECK(dl::verify_checkpoint(ck4) == "");

  // Each field one off: the CRC-32C of the manifest's content no longer matches.
  for (const char* field : {"data_position", "step", "optimizer.steps"}) {
    CAPTURE(field);
    const fs::path run_dir = copy_of(base, d, std::string("edit-") + field);
    json e = manifest_of(step_dir(run_dir, 4));
    json& v = std::string(field) == "optimizer.steps" ? e["optimizer"]["steps"] : e[field];
    v = v.get<int64_t>() + 1;
    save_manifest(step_dir(run_dir, 4), e);
    CHECK(has(dl::verify_checkpoint(step_dir(run_dir, 4)), "manifest_crc32c"));
    check_fell_back(resume(run_dir), {(step_dir(run_dir, 4) / "trainer_state.json").string(), "manifest_crc32c"});
  }

  {  // A manifest of this format without its checksum is corrupt.
    const fs::path run_dir = copy_of(base, d, "no-checksum");
    json e = manifest_of(step_dir(run_dir, 4));
    e.erase("manifest_crc32c");
    save_manifest(step_dir(run_dir, 4), e);
    check_fell_back(resume(run_dir), {"trainer_state.json", "manifest_crc32c", "missing"});
  }
  {  // A format-2 manifest (written before the checksum) is accepted with a warning.
    const fs::path run_dir = copy_of(base, d, "legacy");
    json e = manifest_of(step_dir(run_dir, 4));
    e.erase("manifest_crc32c");
    e["version"] = 2;
    save_manifest(step_dir(run_dir, 4), e);
    CHECK(dl::verify_checkpoint(step_dir(run_dir, 4)) == "");
    Resumed x = resume(run_dir);
    INFO(x.r.err);
    CHECK(x.r.exit_code == 0);
    CHECK(x.at == 4);
    CHECK(has(x.r.err, "format version 2"));
    CHECK(has(x.r.err, "not verified"));
  }
}

TEST_CASE("the folder's step, the manifest's step and every file's dlkit.step must agree") {
  TempDir d("ckpt-steps");
  const fs::path base = trained(d, "base", 4);

  {  // A step folder holding another step's checkpoint.
    const fs::path run_dir = copy_of(base, d, "renamed");
    // step_00000004 holds step 2's checkpoint (its manifest and files say 2).
    fs::remove_all(step_dir(run_dir, 4));
    fs::copy(step_dir(run_dir, 2), step_dir(run_dir, 4), fs::copy_options::recursive);
    CHECK(has(dl::verify_checkpoint(step_dir(run_dir, 4)), "step"));
    Resumed x = resume(run_dir);
    check_fell_back(x, {(step_dir(run_dir, 4) / "trainer_state.json").string(), "step: 2", "step_00000004"});
  }
  {  // A file whose dlkit.step is not the manifest's.
    const fs::path run_dir = copy_of(base, d, "shard-step");
    const fs::path ck = step_dir(run_dir, 4), model = ck / "model.safetensors";
    // model.safetensors rewritten with dlkit.step 3, the manifest's size, CRC and checksum updated.
    dl::SafetensorsWriter w;
    {
      dl::SafetensorsReader r(model);
      for (const auto& name : r.names()) w.add(name, r.read(name));
      auto meta = r.metadata();
      REQUIRE(meta["dlkit.step"] == "4");
      meta["dlkit.step"] = "3";
      w.set_metadata(meta);
    }
    const uint32_t crc = w.write(model);
    json m = manifest_of(ck);
    m["files"]["model.safetensors"] = {{"crc32c", crc}, {"bytes", fs::file_size(model)}};
    dl::seal_checkpoint_manifest(m);
    save_manifest(ck, m);
    const std::string problem = dl::verify_checkpoint(ck);
    CHECK(has(problem, model.string()));
    CHECK(has(problem, "dlkit.step"));
    check_fell_back(resume(run_dir), {model.string(), "dlkit.step", "3"});
  }
}

TEST_CASE("a step folder that resolves outside its run is skipped") {
  TempDir d("ckpt-link");
  const fs::path other = trained(d, "other", 6);
  const fs::path run_dir = copy_of(trained(d, "base", 4), d, "linked");
  // RUN/checkpoints/step_00000006 -> OTHER/checkpoints/step_00000006: a complete, intact checkpoint
  // of another run.
  fs::create_directory_symlink(step_dir(other, 6), step_dir(run_dir, 6));
  Resumed x = resume(run_dir);
  INFO(x.r.err);
  CHECK(x.r.exit_code == 0);
  CHECK(has(x.r.err, "skipping checkpoint step_00000006"));
  CHECK(has(x.r.err, "outside"));
  CHECK(x.at == 4);
  // The other run's checkpoint is untouched.
  CHECK(dl::verify_checkpoint(step_dir(other, 6)) == "");
}

TEST_CASE("keep_checkpoints deletes only the run's own step folders") {
  TempDir d("ckpt-keep");
  const fs::path run_dir = trained(d, "run", 2);
  const fs::path ckpts = run_dir / "checkpoints";
  // The user's copies: a backup, an unpadded name, and a step_* folder holding another step.
  for (const char* name : {"step_00000002.bak", "step_2", "step_00000001"})
    fs::copy(step_dir(run_dir, 2), ckpts / name, fs::copy_options::recursive);
  Resumed x = resume(run_dir, {"--set", "train.keep_checkpoints=2"}, 8);
  INFO(x.r.err);
  REQUIRE(x.r.exit_code == 0);
  CHECK(x.at == 2);
  for (const char* name : {"step_00000002.bak", "step_2", "step_00000001"}) {
    CAPTURE(name);
    CHECK(fs::exists(ckpts / name / "trainer_state.json"));
  }
  // Rotation kept the newest two of the run's own: 6 and 8.
  CHECK(!fs::exists(step_dir(run_dir, 2)));
  CHECK(!fs::exists(step_dir(run_dir, 4)));
  CHECK(fs::exists(step_dir(run_dir, 6)));
  CHECK(fs::exists(step_dir(run_dir, 8)));
}

TEST_CASE("resume refuses a [model] change, even one that keeps every tensor's shape") {
  TempDir d("ckpt-model");
  const fs::path run_dir = trained(d, "run", 2);
  // n_head 2 -> 4 keeps every tensor's shape (n_embd 16).
  Resumed x = resume(run_dir, {"--set", "model.n_head=4"});
  INFO(x.r.err);
  CHECK(x.r.exit_code == 2);
  CHECK(has(x.r.err, "model.n_head"));
  CHECK(has(x.r.err, "2"));
  CHECK(has(x.r.err, "4"));
  CHECK(has(x.r.err, "step_00000002"));
  CHECK(x.r.out.empty());
  for (const char* key : {"model.n_layer=2", "model.tie_embeddings=false", "model.block_size=8"}) {
    CAPTURE(key);
    x = resume(run_dir, {"--set", key});
    CHECK(x.r.exit_code == 2);
    CHECK(has(x.r.err, std::string(key).substr(0, std::string(key).find('='))));
  }
  // The same model resumes.
  CHECK(resume(run_dir).r.exit_code == 0);
}

TEST_CASE("check_checkpoint_model compares an mlp checkpoint's hidden widths and activation") {
  TempDir d("ckpt-mlp");
  dl::ModelConfig m;
  m.type = dl::ModelType::mlp;
  m.hidden = {8, 8};
  m.activation = dl::Activation::relu;
  const fs::path ck = d / "step_00000001";
  fs::create_directories(ck);
  write_file(ck / "config.json", dl::mlp_config_json(m));
  dl::check_checkpoint_model(ck, m);
  dl::ModelConfig other = m;
  other.activation = dl::Activation::gelu;
  CHECK_THROWS_WITH_AS(dl::check_checkpoint_model(ck, other), doctest::Contains("model.activation"), dl::Error);
  other = m;
  other.hidden = {8, 4};
  CHECK_THROWS_WITH_AS(dl::check_checkpoint_model(ck, other), doctest::Contains("model.hidden"), dl::Error);
  other = m;
  other.type = dl::ModelType::gpt;
  CHECK_THROWS_WITH_AS(dl::check_checkpoint_model(ck, other), doctest::Contains("model.type"), dl::Error);
}

TEST_CASE("a manifest integer is checked against both bounds: a slice dim of a 0-d tensor, layout.dp 0") {
  // tp2.json, a version 2 manifest (no content checksum), edited field by field. Both were let
  // through: json holds non-negative integers as unsigned, and the check compared them with the
  // bounds cast to uint64_t (a negative upper bound let anything pass, the lower one was not read).
  const json seed = json::parse(read_file(source_path("tests/fuzz/corpus/fuzz_checkpoint_manifest/tp2.json")));
  const std::string name = seed["pieces"][0]["name"];
  auto parse = [](const json& m) {
    return usage_error_of([&] { dl::parse_checkpoint_manifest(m.dump(), "trainer_state.json"); });
  };
  CHECK(parse(seed).empty());

  json scalar = seed;  // the piece slices dim 1 of a tensor with no dimensions (the fuzzer's find)
  scalar["tensors"][name]["shape"] = json::array();
  const std::string dim_error = parse(scalar);
  CHECK(has(dim_error, "pieces[0].slice.dim: 1 is outside [-1, -1]"));

  json no_ranks = seed;
  no_ranks["layout"]["dp"] = 0;
  CHECK(has(parse(no_ranks), "layout.dp: 0 is outside [1, 1048576]"));
  json zero_five = seed;
  zero_five["layout"]["zero"] = 5;
  CHECK(has(parse(zero_five), "layout.zero: 5 is outside [0, 3]"));
}
