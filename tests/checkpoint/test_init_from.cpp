// model.init_from (dl/checkpoint/init_from.cpp, the shape in config/hf_gpt2_config.cpp):
// Hugging Face GPT-2 folders written by the PyTorch reference (tests/scripts/hf_gpt2.py: random
// weights, GPT-2's 50257-token vocabulary) load in every on-disk form; dl-train's loss equals the
// reference's; fine-tuning lowers it and resumes bit for bit; dl-train checkpoints load too; bad
// folders exit 2 naming the file and the problem. Layouts: test_layout_checkpoints.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "support/hf_gpt2.hpp"
#include "support/support.hpp"

using namespace dl::test;
using nlohmann::json;

namespace {

// GPT-2's vocabulary, a tiny body: the test takes seconds.
const json kShape = {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 16}, {"n_positions", 16}, {"vocab_size", 50257}};

// Trains on FOLDER/train.bin and evaluates on its 4 validation windows (one batch of 4).
std::string finetune_toml(const fs::path& init_from, const fs::path& data) {
  return "[model]\ninit_from = \"" + init_from.string() + "\"\n\n[data]\nsource = \"tokens:" +
         (data / "train.bin").string() + "\"\nval_source = \"tokens:" + (data / "val.bin").string() +
         "\"\n\n[optim]\nlr = 1e-2\n\n[schedule]\ndecay_steps = 20\n\n[train]\nsteps = 20\nbatch_size = 4\nthreads = 1\neval_every = 0\n"
         "eval_batches = 1\n\n[log]\nevery = 1\nsamples = 0\nprogress = \"none\"\ntensorboard = false\n";
}

struct Result {
  int code = -1;
  std::string err;
  std::map<int64_t, double> loss, val_loss;
};

// The losses of dl-train --json's step records on `out` into `into`.
void add_records(const std::string& out, Result& into) {
  for (const auto& l : lines(out)) {
    if (l.empty() || l[0] != '{') continue;
    json j = json::parse(l);
    if (j.contains("loss")) into.loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
    if (j.contains("val_loss")) into.val_loss[j["step"].get<int64_t>()] = j["val_loss"].get<double>();
  }
}

Result train(const fs::path& cfg, const fs::path& run_dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {cfg.string(), "--run-dir", run_dir.string(), "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  RunResult r = run(tool("dl-train"), args);
  Result out;
  out.code = r.exit_code;
  out.err = r.err;
  add_records(r.out, out);
  return out;
}

// dl-train --resume RUN --steps 20 after `a`'s first steps: every step's loss equals the
// uninterrupted run's, bit for bit.
void resume_to_20(const fs::path& run_dir, Result& a, const Result& full) {
  RunResult b = run(tool("dl-train"), {"--resume", run_dir.string(), "--steps", "20", "--json"});
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  add_records(b.out, a);
  REQUIRE(a.loss.size() == 20);
  for (int64_t s = 1; s <= 20; ++s) {
    CAPTURE(s);
    CHECK(a.loss.at(s) == full.loss.at(s));  // exact
  }
}

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

}  // namespace

TEST_CASE("a PyTorch-written GPT-2 folder loads in every on-disk form and gives the reference's loss") {
  TempDir d("init-forms");
  struct Form {
    std::string name;
    json spec;
    int64_t tensors = 2 + 12 * 2 + 2;  // read from the files: the blocks' and the embeddings', ln_f
    std::string model_keys = "";       // [model] lines
  };
  // f32 with openai-community/gpt2's mask buffers; f16 with GPT2LMHeadModel's prefix, in two
  // shards; bf16 with a copy of the embedding as lm_head.weight and tie_word_embeddings false (an
  // untied head that starts equal to wte); f32 with a head of its own (the reference's loss uses
  // it); a tied folder untied by model.tie_embeddings = false (the head starts as wte's copy).
  std::vector<Form> forms = {
      {"f32, mask buffers", {{"dtype", "F32"}, {"mask_buffers", true}}},
      {"f16, transformer. prefix, 2 shards", {{"dtype", "F16"}, {"prefix", true}, {"shards", 2}}},
      {"bf16, lm_head.weight, untied config", {{"dtype", "BF16"}, {"lm_head", "copy"}, {"tie", false}}, 29},
      {"f32, untied lm_head.weight of its own", {{"dtype", "F32"}, {"lm_head", "random"}, {"tie", false}}, 29},
      {"f32, tied folder, model.tie_embeddings = false", {{"dtype", "F32"}}, 28, "tie_embeddings = false\n"},
  };
  std::vector<std::pair<fs::path, json>> folders;
  for (size_t k = 0; k < forms.size(); ++k) {
    json spec = kShape;
    spec.update(forms[k].spec);
    spec["seed"] = 10 + k;
    folders.emplace_back(d / ("hf" + std::to_string(k)), spec);
  }
  const std::vector<double> references = write_hf_gpt2s(folders);
  int i = 0;
  for (const auto& f : forms) {
    CAPTURE(f.name);
    const fs::path hf = folders[static_cast<size_t>(i)].first;
    const double reference = references[static_cast<size_t>(i)];
    std::string toml = finetune_toml(hf, hf);
    toml.insert(toml.find("init_from"), f.model_keys);
    write_file(d / "c.toml", toml);
    const fs::path run_dir = d / ("run" + std::to_string(i++));
    Result r = train(d / "c.toml", run_dir, {"--steps", "0"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    REQUIRE(r.val_loss.count(0));
    MESSAGE(f.name << ": dl-train " << r.val_loss[0] << ", PyTorch " << reference << ", relative difference "
                   << rel(r.val_loss[0], reference));
    CHECK(rel(r.val_loss[0], reference) < 1e-5);
    // The run records where its weights came from.
    json source = json::parse(read_file(run_dir / "init_from.json"));
    CHECK(source["format"] == "huggingface");
    CHECK(source["folder"] == hf.string());
    CHECK(source["tensors"] == f.tensors);
    CHECK(source["dtypes"].contains(f.spec["dtype"].get<std::string>()));
    // The run's model, its checkpoint and its config.json say whether the head is tied.
    const bool tied = f.spec.value("tie", true) && f.model_keys.empty();
    CHECK(source["lm_head"].get<std::string>().starts_with(tied ? "tied" : "lm_head.weight"));
    CHECK(read_file(run_dir / "config.toml").find(tied ? "tie_embeddings = true" : "tie_embeddings = false") !=
          std::string::npos);
    const json hf_config = json::parse(read_file(run_dir / "checkpoints" / "step_00000000" / "config.json"));
    CHECK(hf_config["tie_word_embeddings"] == tied);
  }
}

TEST_CASE("fine-tuning from a GPT-2 folder lowers the loss, resumes bit for bit, and its checkpoint starts a run") {
  TempDir d("init-tune");
  const fs::path hf = d / "hf";
  json spec = kShape;
  spec["seed"] = 3;
  const double reference = write_hf_gpt2(hf, spec);
  write_file(d / "c.toml", finetune_toml(hf, hf));

  Result full = train(d / "c.toml", d / "full");
  INFO(full.err);
  REQUIRE(full.code == 0);
  REQUIRE(full.loss.size() == 20);
  REQUIRE(full.val_loss.count(20));
  MESSAGE("val loss " << reference << " (PyTorch, step 0) -> " << full.val_loss[20] << " after 20 steps; train loss "
                      << full.loss[1] << " -> " << full.loss[20]);
  CHECK(full.val_loss[20] < reference - 1.0);
  // Training batches differ step to step: compare the first and the last five steps' mean.
  double early = 0, late = 0;
  for (int64_t s = 1; s <= 5; ++s) early += full.loss[s] / 5, late += full.loss[15 + s] / 5;
  CHECK(late < early - 1.0);
  // A fresh optimizer at step 0: the first step's loss is the loaded weights' loss on its batch.
  json first = json::parse(lines(read_file(d / "full" / "metrics.jsonl")).front());
  CHECK(first["step"] == 1);

  // 10 steps, then --resume to 20: the same bits at every step.
  Result a = train(d / "c.toml", d / "split", {"--steps", "10"});
  REQUIRE(a.code == 0);
  resume_to_20(d / "split", a, full);

  // The fine-tuned run's checkpoint as model.init_from: the same weights, so the same loss.
  const fs::path ckpt = d / "full" / "checkpoints" / "step_00000020";
  write_file(d / "c2.toml", finetune_toml(ckpt, hf));
  Result again = train(d / "c2.toml", d / "again", {"--steps", "0"});
  INFO(again.err);
  REQUIRE(again.code == 0);
  CHECK(again.val_loss[0] == full.val_loss[20]);
  CHECK(json::parse(read_file(d / "again" / "init_from.json"))["format"] == "dlkit-checkpoint");
  // Untied from the tied checkpoint: lm_head.weight starts as its wte.weight, the same loss.
  Result untied = train(d / "c2.toml", d / "untied", {"--steps", "0", "--set", "model.tie_embeddings=false"});
  INFO(untied.err);
  REQUIRE(untied.code == 0);
  CHECK(untied.val_loss[0] == full.val_loss[20]);
  CHECK(json::parse(read_file(d / "untied" / "init_from.json"))["lm_head"].get<std::string>().starts_with(
      "lm_head.weight (a copy of wte.weight"));
  // A run directory is not a checkpoint: the error says which folder to give.
  write_file(d / "c3.toml", finetune_toml(d / "full", hf));
  Result run_dir = train(d / "c3.toml", d / "r3", {"--steps", "0"});
  CHECK(run_dir.code == 2);
  CHECK(run_dir.err.find("is a dl-train run directory: give one of its checkpoints") != std::string::npos);
}

TEST_CASE("bad GPT-2 folders exit 2 naming the file and the problem, before anything is written") {
  TempDir d("init-bad");
  json shape = kShape;
  shape["vocab_size"] = 256;  // errors need no large vocabulary
  struct Case {
    std::string name;
    json spec;
    std::function<void(const fs::path&)> damage;
    std::vector<std::string> expect;
    std::string model_keys = "";  // [model] lines
  };
  auto none = [](const fs::path&) {};
  std::vector<Case> cases = {
      {"missing config.json", {}, [](const fs::path& f) { fs::remove(f / "config.json"); },
       {"/hf0: no config.json"}},
      {"missing model.safetensors", {}, [](const fs::path& f) { fs::remove(f / "model.safetensors"); },
       {"/hf1: no model.safetensors or model.safetensors.index.json"}},
      {"missing shard", {{"shards", 2}},
       [](const fs::path& f) { fs::remove(f / "model-00002-of-00002.safetensors"); },
       {"model.safetensors.index.json: names shard model-00002-of-00002.safetensors", "is missing"}},
      {"wrong shape", {{"transpose", {"h.1.attn.c_attn.weight"}}}, none,
       {"model.safetensors: tensor 'h.1.attn.c_attn.weight' is [48,16], the model config.json describes expects [16,48]"}},
      {"config.json disagrees with [model]", {}, none,
       {"c.toml:2: model.n_layer = 3, but ", "/hf4/config.json says n_layer = 2"}, "n_layer = 3\n"},
      {"block_size disagrees with n_positions", {}, none,
       {"model.block_size = 32, but ", "config.json says n_positions = 16"}, "block_size = 32\n"},
      {"missing tensor", {{"drop", {"h.1.ln_2.bias"}}}, none,
       {"model.safetensors: no tensor 'h.1.ln_2.bias' (or 'transformer.h.1.ln_2.bias')", "F32, F16 or BF16 [16]"}},
      {"extra tensor", {{"extra", {{"h.0.attn.rotary", {4}}}}}, none,
       {"model.safetensors: tensor 'h.0.attn.rotary' [4] is not a parameter of the GPT-2 model config.json describes"}},
      {"truncated safetensors", {},
       [](const fs::path& f) { fs::resize_file(f / "model.safetensors", fs::file_size(f / "model.safetensors") - 100); },
       {"model.safetensors", "truncated"}},
      {"a tied config with another lm_head.weight", {{"lm_head", "random"}}, none,
       {"model.safetensors: tensor 'lm_head.weight' differs from wte.weight",
        "set model.tie_embeddings = false to load it as a separate head"}},
      {"an untied config without lm_head.weight", {{"tie", false}}, none,
       {"model.safetensors: no tensor 'lm_head.weight', but ", "config.json says tie_word_embeddings = false"}},
      {"model.tie_embeddings = true against an untied config", {{"lm_head", "random"}, {"tie", false}}, none,
       {"c.toml:2: model.tie_embeddings = true, but ", "config.json says tie_word_embeddings = false"},
       "tie_embeddings = true\n"},
      {"another LayerNorm epsilon", {{"config", {{"layer_norm_epsilon", 1e-6}}}}, none,
       {"config.json: layer_norm_epsilon is 1e-06; dl-train's GPT-2 computes LayerNorm with 1e-5"}},
      {"erf GELU", {{"config", {{"activation_function", "gelu"}}}}, none,
       {"config.json: activation_function is \"gelu\""}},
  };
  std::vector<std::pair<fs::path, json>> folders;
  for (size_t k = 0; k < cases.size(); ++k) {
    json spec = shape;
    if (cases[k].spec.is_object()) spec.update(cases[k].spec);
    folders.emplace_back(d / ("hf" + std::to_string(k)), spec);
  }
  write_hf_gpt2s(folders);
  int i = 0;
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const fs::path hf = folders[static_cast<size_t>(i++)].first;
    c.damage(hf);
    std::string toml = finetune_toml(hf, hf);
    toml.insert(toml.find("init_from"), c.model_keys);
    write_file(d / "c.toml", toml);
    const fs::path run_dir = d / ("run" + std::to_string(i));
    Result r = train(d / "c.toml", run_dir);
    CHECK(r.code == 2);
    for (const auto& e : c.expect) CHECK_MESSAGE(r.err.find(e) != std::string::npos, "want: " << e << "\nstderr: " << r.err);
    CHECK(!fs::exists(run_dir));
  }
}

TEST_CASE("a run started from a GPT-2 folder resumes, evaluates and samples after the folder is deleted; a fresh run "
          "without it exits 2") {
  TempDir d("init-gone");
  // An untied head: the resumed run must take lm_head.weight from its own checkpoint too.
  const fs::path hf = d / "hf", data = d / "data";
  json spec = kShape;
  spec.update({{"seed", 4}, {"lm_head", "random"}, {"tie", false}});
  write_hf_gpt2(hf, spec);
  fs::create_directories(data);
  for (const char* f : {"train.bin", "val.bin"}) fs::copy_file(hf / f, data / f);
  write_file(d / "c.toml", finetune_toml(hf, data));

  Result full = train(d / "c.toml", d / "full");
  INFO(full.err);
  REQUIRE(full.code == 0);
  REQUIRE(full.loss.size() == 20);
  Result a = train(d / "c.toml", d / "split", {"--steps", "10"});
  REQUIRE(a.code == 0);
  fs::remove_all(hf);

  // --resume reads the run's resolved config.toml and its checkpoint: the same bits at every step.
  resume_to_20(d / "split", a, full);
  REQUIRE(a.val_loss.count(20));
  CHECK(a.val_loss[20] == full.val_loss[20]);

  // eval and sample load the newest checkpoint: the resumed run's val loss, and ids from the model.
  RunResult e = run(tool("dl-train"), {"eval", "--run-dir", (d / "split").string(), "--format", "json"});
  INFO(e.err);
  REQUIRE(e.exit_code == 0);
  const json ej = json::parse(e.out);
  CHECK(ej["step"] == 20);
  MESSAGE("eval after the folder is gone: loss " << ej["loss"].get<double>() << ", val_loss at step 20 "
                                                 << full.val_loss[20]);
  CHECK(rel(ej["loss"].get<double>(), full.val_loss[20]) < 1e-6);
  RunResult s = run(tool("dl-train"), {"sample", "--run-dir", (d / "split").string(), "--prompt", "464 3290 318",
                                       "--tokens", "4", "--format", "json"});
  INFO(s.err);
  REQUIRE(s.exit_code == 0);
  const json sj = json::parse(s.out);
  REQUIRE(sj.size() == 1);
  CHECK(!sj[0]["completion"].get<std::string>().empty());

  // A fresh run needs the folder: exit 2 naming model.init_from, nothing written.
  Result fresh = train(d / "c.toml", d / "fresh");
  CHECK(fresh.code == 2);
  CHECK_MESSAGE(fresh.err.find("model.init_from") != std::string::npos, fresh.err);
  CHECK_MESSAGE(fresh.err.find(hf.string()) != std::string::npos, fresh.err);
  CHECK(!fs::exists(d / "fresh"));
}
