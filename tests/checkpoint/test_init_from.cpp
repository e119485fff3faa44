// model.init_from (dl/checkpoint/init_from.cpp, the shape in config/hf_gpt2_config.cpp):
// Hugging Face GPT-2 folders written by the PyTorch reference (tests/scripts/hf_gpt2.py: random
// weights, GPT-2's 50257-token vocabulary) load in every on-disk form; dl-train's loss equals the
// reference's; fine-tuning lowers it and resumes bit for bit; dl-train checkpoints load too; bad
// folders exit 2 naming the file and the problem. Llama-family folders (tests/scripts/hf_llama.py)
// load, their checkpoints round-trip, and what the llama model does not compute is refused by
// name. Layouts: test_layout_checkpoints.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

#include "dl/data/hf_tokenizer.hpp"
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
         "eval_batches = 1\n\n[log]\nevery = 1\nsamples = 0\nprogress = \"none\"\ntensorboard = false\nenv_lock = false\n";
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

// A run from `hf` (with [model] lines `model_keys`) exits 2, its stderr holding each of `expect`,
// and writes nothing.
void check_refused(const fs::path& hf, const std::string& model_keys, const fs::path& run_dir,
                   const std::vector<std::string>& expect) {
  const fs::path cfg = run_dir.parent_path() / "c.toml";
  std::string toml = finetune_toml(hf, hf);
  toml.insert(toml.find("init_from"), model_keys);
  write_file(cfg, toml);
  Result r = train(cfg, run_dir);
  CHECK(r.code == 2);
  for (const auto& e : expect) CHECK_MESSAGE(r.err.find(e) != std::string::npos, "want: " << e << "\nstderr: " << r.err);
  CHECK(!fs::exists(run_dir));
}

// (DIR/<stem>K, base updated with specs[K].spec and, when seed0 >= 0, seed seed0 + K) for each.
template <class Spec>
std::vector<std::pair<fs::path, json>> spec_folders(const fs::path& dir, const std::string& stem, const json& base,
                                                    const std::vector<Spec>& specs, int seed0) {
  std::vector<std::pair<fs::path, json>> folders;
  for (size_t k = 0; k < specs.size(); ++k) {
    json spec = base;
    if (specs[k].spec.is_object()) spec.update(specs[k].spec);
    if (seed0 >= 0) spec["seed"] = seed0 + static_cast<int>(k);
    folders.emplace_back(dir / (stem + std::to_string(k)), spec);
  }
  return folders;
}

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
  const std::vector<std::pair<fs::path, json>> folders = spec_folders(d.path(), "hf", kShape, forms, 10);
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
      // Values of another JSON type (fuzz_hf_config): exit 1 with the JSON library's type_error before.
      {"a string epsilon", {{"config", {{"layer_norm_epsilon", "1e-5"}}}}, none,
       {"config.json: \"layer_norm_epsilon\" must be a number, got \"1e-5\""}},
      {"a numeric activation", {{"config", {{"activation_function", 5}}}}, none,
       {"config.json: \"activation_function\" must be a string, got 5"}},
      {"a numeric tie_word_embeddings", {{"config", {{"tie_word_embeddings", 1}}}}, none,
       {"config.json: \"tie_word_embeddings\" must be true or false, got 1"}},
  };
  const std::vector<std::pair<fs::path, json>> folders = spec_folders(d.path(), "hf", shape, cases, -1);
  write_hf_gpt2s(folders);
  int i = 0;
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const fs::path hf = folders[static_cast<size_t>(i++)].first;
    c.damage(hf);
    check_refused(hf, c.model_keys, d / ("run" + std::to_string(i)), c.expect);
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

// ---------------------------------------------------------------------------------------------
// Llama-family folders (tests/scripts/hf_llama.py: random weights, GQA 4:2, LlamaForCausalLM's
// names and nn.Linear layouts, the reference is tests/scripts/torch_llama.py).

namespace {

const json kLlamaShape = {{"n_layer", 2},  {"n_head", 4},          {"n_kv_head", 2},
                          {"n_embd", 32},  {"intermediate_size", 48}, {"max_position_embeddings", 16},
                          {"vocab_size", 512}};

// dl-train --steps 0 from the folder `hf` (DIR/c.toml, the folder's data) into `run_dir`: its
// step-0 evaluation within 1e-5 of the PyTorch reference's loss.
Result check_loads_as_reference(const fs::path& dir, const fs::path& hf, const fs::path& run_dir,
                                const std::string& name, double reference) {
  write_file(dir / "c.toml", finetune_toml(hf, hf));
  Result r = train(dir / "c.toml", run_dir, {"--steps", "0"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  REQUIRE(r.val_loss.count(0));
  MESSAGE(name << ": dl-train " << r.val_loss[0] << ", PyTorch " << reference << ", relative difference "
               << rel(r.val_loss[0], reference));
  CHECK(rel(r.val_loss[0], reference) < 1e-5);
  return r;
}

// model.init_from of `checkpoint` (evaluated on hf's data, into `run_dir`): `val_loss`, bit for bit.
void check_reloads(const fs::path& dir, const fs::path& checkpoint, const fs::path& hf, const fs::path& run_dir,
                   double val_loss) {
  write_file(dir / "c2.toml", finetune_toml(checkpoint, hf));
  Result again = train(dir / "c2.toml", run_dir, {"--steps", "0"});
  INFO(again.err);
  REQUIRE(again.code == 0);
  CHECK(again.val_loss.at(0) == val_loss);
}

// DIR/c.toml (check_loads_as_reference's) in `layout` on 2 processes: `val_loss` within 1e-6 (tp
// sums the vocabulary in another order), and its sharded checkpoint loads back in one process
// to `val_loss` exactly (the same weights).
void check_layout_loads(const fs::path& dir, const fs::path& hf, const std::string& layout, double val_loss) {
  CAPTURE(layout);
  const std::string tag = layout + "-" + hf.filename().string();
  const fs::path lrun = dir / ("layout-" + tag);
  Result l = train(dir / "c.toml", lrun, {"--steps", "0", "--nproc-per-node", "2", "--set", layout});
  INFO(l.err);
  REQUIRE(l.code == 0);
  CHECK(rel(l.val_loss.at(0), val_loss) < 1e-6);
  check_reloads(dir, lrun / "checkpoints" / "step_00000000", hf, dir / ("back-" + tag), val_loss);
}

}  // namespace

// Qwen2ForCausalLM folders are the llama with random q/k/v biases, a sliding window written but
// off (use_sliding_window = false, as Qwen2.5's config.json) and no bias keys in config.json.
TEST_CASE("a PyTorch-written Llama folder (GQA 4:2) loads in every form and layout, gives the reference's loss, "
          "and its checkpoint round-trips; Qwen2 folders (q/k/v biases) too") {
  TempDir d("init-llama");
  struct Form {
    std::string name;
    json spec;
    int64_t tensors;  // read from the files
  };
  const json llama3 = {{"rope_type", "llama3"},      {"factor", 8.0},
                       {"low_freq_factor", 1.0},     {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8}};
  std::vector<Form> forms = {
      {"f32, one file, untied", {{"dtype", "F32"}}, 21},
      {"f32, 2 shards, tied, rotary_emb.inv_freq buffers", {{"dtype", "F32"}, {"shards", 2}, {"tie", true}, {"inv_freq", true}}, 20},
      {"bf16, one file, tied, llama3 rope_scaling", {{"dtype", "BF16"}, {"tie", true}, {"config", {{"rope_scaling", llama3}}}}, 20},
      {"bf16, 3 shards, untied, Mistral with sliding_window = block_size",
       {{"dtype", "BF16"}, {"shards", 3}, {"model_type", "mistral"}, {"config", {{"sliding_window", 16}}}}, 21},
      {"f16, one file, untied, linear rope_scaling (old \"type\" key), Mistral's default window",
       {{"dtype", "F16"}, {"model_type", "mistral"}, {"config", {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}}}, 21},
      {"Qwen2, f32, one file, untied", {{"dtype", "F32"}, {"model_type", "qwen2"}}, 27},  // 3 biases a block
      {"Qwen2, bf16, 2 shards, tied", {{"dtype", "BF16"}, {"model_type", "qwen2"}, {"shards", 2}, {"tie", true}}, 26},
  };
  const std::vector<std::pair<fs::path, json>> folders = spec_folders(d.path(), "hf", kLlamaShape, forms, 20);
  const std::vector<double> references = write_hf_llamas(folders);
  std::vector<std::pair<fs::path, fs::path>> checkpoints;  // (checkpoint, its data)
  for (size_t i = 0; i < forms.size(); ++i) {
    const Form& f = forms[i];
    CAPTURE(f.name);
    const fs::path hf = folders[i].first;
    const fs::path run_dir = d / ("run" + std::to_string(i));
    Result r = check_loads_as_reference(d.path(), hf, run_dir, f.name, references[i]);
    const json source = json::parse(read_file(run_dir / "init_from.json"));
    CHECK(source["format"] == "huggingface");
    CHECK(source["tensors"] == f.tensors);
    CHECK(source["skipped_buffers"] == (f.spec.value("inv_freq", false) ? 2 : 0));
    CHECK(source["dtypes"].contains(f.spec["dtype"].get<std::string>()));
    CHECK(read_file(run_dir / "config.toml").find("type = \"llama\"") != std::string::npos);
    const bool qwen2 = f.spec.value("model_type", "") == "qwen2";
    CHECK((read_file(run_dir / "config.toml").find("qkv_bias = true") != std::string::npos) == qwen2);

    // The checkpoint is a LlamaForCausalLM (Qwen2ForCausalLM) folder: model.init_from of it gives
    // the same eval, bit for bit (and the reference reads it, below).
    const fs::path ckpt = run_dir / "checkpoints" / "step_00000000";
    const json cfg = json::parse(read_file(ckpt / "config.json"));
    CHECK(cfg["architectures"] == json::array({qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}));
    CHECK(cfg["model_type"] == (qwen2 ? "qwen2" : "llama"));
    CHECK(cfg["tie_word_embeddings"] == f.spec.value("tie", false));
    checkpoints.emplace_back(ckpt, hf);
    check_reloads(d.path(), ckpt, hf, d / ("again" + std::to_string(i)), r.val_loss[0]);
    if (i == 1)  // other layouts load the folder the same, and their sharded checkpoints load back
      for (const std::string layout : {"parallel.tp=2", "parallel.pp=2"})
        check_layout_loads(d.path(), hf, layout, r.val_loss[0]);
    if (i == 5) check_layout_loads(d.path(), hf, "parallel.tp=2", r.val_loss[0]);  // biases split with their heads
    if (i == 0 || qwen2) {  // dl-train eval of the run: its checkpoint on the run's val data
      RunResult e = run(tool("dl-train"), {"eval", "--run-dir", run_dir.string(), "--format", "json"});
      INFO(e.err);
      REQUIRE(e.exit_code == 0);
      CHECK(rel(json::parse(e.out)["loss"].get<double>(), references[i]) < 1e-5);
    }
  }
  // The reference reading each checkpoint: the weights dl-train loaded (f32), the same loss.
  const std::vector<double> back = hf_llama_folder_losses(checkpoints, 4);
  for (size_t i = 0; i < forms.size(); ++i) {
    CAPTURE(forms[i].name);
    CHECK(back[i] == references[i]);
  }
}

TEST_CASE("Llama folders dl-train does not compute the same way exit 2 naming the key, before anything is written") {
  TempDir d("init-llama-bad");
  json spec = kLlamaShape;
  spec["seed"] = 5;
  const fs::path base = d / "base";
  write_hf_llamas({{base, spec}});
  const json config = json::parse(read_file(base / "config.json"));
  struct Case {
    std::string name;
    json config;  // keys changed in config.json (null: removed)
    std::vector<std::string> expect;
    std::string model_keys = "";  // [model] lines
  };
  std::vector<Case> cases = {
      {"a sliding window shorter than the block", {{"model_type", "mistral"}, {"sliding_window", 8}},
       {"config.json says sliding_window = 8", "model.block_size is 16", "set model.block_size to at most 8"}},
      {"Mistral's default window under a longer block",
       {{"model_type", "mistral"}, {"sliding_window", nullptr}, {"max_position_embeddings", 8192}},
       {"sliding_window = 4096"}, "block_size = 4100\n"},
      {"attention_bias", {{"attention_bias", true}},
       {"config.json: attention_bias is true (biases on q_proj, k_proj, v_proj and o_proj)",
        "q_proj, k_proj and v_proj only (Qwen2's)"}},
      {"mlp_bias", {{"mlp_bias", true}}, {"config.json: mlp_bias is true"}},
      {"mixture of experts", {{"num_local_experts", 8}, {"num_experts_per_tok", 2}},
       {"config.json: num_local_experts is 8 (a mixture of experts)"}},
      {"yarn rope_scaling", {{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
       {"config.json: rope_scaling type \"yarn\"", "\"linear\" or \"llama3\""}},
      {"head_dim", {{"head_dim", 16}}, {"config.json: head_dim is 16", "hidden_size / num_attention_heads = 8"}},
      {"hidden_act", {{"hidden_act", "gelu"}}, {"config.json: hidden_act is \"gelu\""}},
      {"a layer more than the weights hold", {{"num_hidden_layers", 3}},
       {"model.safetensors: no tensor 'model.layers.2.input_layernorm.weight'; the model config.json describes needs "
        "it as F32, F16 or BF16 [32]"}},
      {"a layer fewer", {{"num_hidden_layers", 1}},
       {"model.safetensors: tensor 'model.layers.1.", "is not a parameter of the Llama model config.json describes "
        "(num_hidden_layers 1, hidden_size 32, num_key_value_heads 2, intermediate_size 48, vocab_size 512)"}},
      {"Qwen2 with use_sliding_window", {{"model_type", "qwen2"}, {"use_sliding_window", true}},
       {"config.json: use_sliding_window is true"}},
      {"model.qkv_bias = false against a Qwen2 folder", {{"model_type", "qwen2"}},
       {"c.toml:2: model.qkv_bias = false, but ", "config.json says model_type = \"qwen2\", which has q/k/v biases"},
       "qkv_bias = false\n"},
      {"a Qwen2 folder without the biases", {{"model_type", "qwen2"}},
       {"model.safetensors: no tensor 'model.layers.0.self_attn.q_proj.bias'", "F32, F16 or BF16 [32]"}},
      {"model.qkv_bias = true against a Llama folder", json::object(),
       {"c.toml:2: model.qkv_bias = true, but ", "config.json says model_type = \"llama\", which has no q/k/v biases"},
       "qkv_bias = true\n"},
      {"model.type = \"gpt\" against a llama folder", json::object(),
       {"c.toml:2: model.init_from holds a llama model", "model.type is \"gpt\""}, "type = \"gpt\"\n"},
      {"model.n_kv_head against num_key_value_heads", json::object(),
       {"c.toml:2: model.n_kv_head = 4, but ", "config.json says num_key_value_heads = 2"}, "n_kv_head = 4\n"},
      {"block_size beyond max_position_embeddings", json::object(),
       {"c.toml:2: model.block_size = 32, but ", "config.json says max_position_embeddings = 16"}, "block_size = 32\n"},
  };
  int i = 0;
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const fs::path hf = d / ("hf" + std::to_string(i++));
    fs::create_directories(hf);
    for (const char* f : {"model.safetensors", "train.bin", "val.bin"}) fs::copy_file(base / f, hf / f);
    json changed = config;
    for (const auto& [k, v] : c.config.items()) {
      if (v.is_null())
        changed.erase(k);
      else
        changed[k] = v;
    }
    write_file(hf / "config.json", changed.dump(2));
    check_refused(hf, c.model_keys, d / ("run" + std::to_string(i)), c.expect);
  }
}

// A Hugging Face tokenizer in `folder`: BPE over ByteLevel with the letters a..z (ids 0..25) and
// "Ġ" (a space, 26), no merges, <s> 27 and </s> 28 as tokenizer_config.json's bos and eos (added
// tokens follow the vocabulary: tokenizers renumbers them so).
void write_letter_tokenizer(const fs::path& folder) {
  json vocab = json::object();
  for (int c = 0; c < 26; ++c) vocab[std::string(1, static_cast<char>('a' + c))] = c;
  vocab["\xC4\xA0"] = 26;
  auto special = [](int id, const char* content) {
    return json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  write_file(folder / "tokenizer.json",
             json{{"version", "1.0"}, {"added_tokens", {special(27, "<s>"), special(28, "</s>")}},
                  {"pre_tokenizer", byte_level}, {"decoder", byte_level},
                  {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}}.dump());
  write_file(folder / "tokenizer_config.json",
             R"({"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast"})");
}

// transformers itself, when a Python with it is named: DL_TEST_TRANSFORMERS_PYTHON (e.g. a venv
// made with `python3 -m venv --system-site-packages V && V/bin/pip install transformers==4.44.2`,
// which runs on Debian's torch 1.13). Not created here: installing it would add minutes to CI on a
// cold pip cache. The source folders carry a tokenizer, so the checkpoints do too: AutoTokenizer
// loads it from the checkpoint with the bos/eos ids that its config.json names.
TEST_CASE("transformers' LlamaForCausalLM and Qwen2ForCausalLM .from_pretrained load dl-train llama checkpoints and "
          "give their loss") {
  const char* python = std::getenv("DL_TEST_TRANSFORMERS_PYTHON");
  if (python == nullptr || *python == '\0') {
    MESSAGE("skipped: DL_TEST_TRANSFORMERS_PYTHON (a Python with transformers) is not set");
    return;
  }
  TempDir d("init-llama-transformers");
  struct Form {
    json spec;
  };
  const std::vector<Form> forms = {{{{"tie", false}}}, {{{"tie", true}}}, {{{"model_type", "qwen2"}}}};
  const auto folders = spec_folders(d.path(), "hf", kLlamaShape, forms, 40);
  write_hf_llamas(folders);
  for (const auto& f : folders) write_letter_tokenizer(f.first);
  std::vector<std::string> args = {source_path("tests/scripts/hf_llama.py").string(), "--transformers-loss",
                                   folders[0].first.string(), "4"};
  std::vector<double> ours;
  for (size_t i = 0; i < folders.size(); ++i) {
    // Three training steps: the checkpoint holds weights dl-train wrote, not the folder's.
    write_file(d / "c.toml", finetune_toml(folders[i].first, folders[0].first));
    const fs::path run_dir = d / ("run" + std::to_string(i));
    Result r = train(d / "c.toml", run_dir, {"--steps", "3", "--set", "train.eval_every=3"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    REQUIRE(r.val_loss.count(3));
    ours.push_back(r.val_loss[3]);
    args.push_back((run_dir / "checkpoints" / "step_00000003").string());
  }
  RunResult t = run(python, args);
  if (t.exit_code != 0 && t.err.find("No module named 'transformers'") != std::string::npos) {
    MESSAGE("skipped: " << python << " has no transformers");
    return;
  }
  INFO(t.err);
  REQUIRE(t.exit_code == 0);
  const json losses = json::parse(t.out);
  REQUIRE(losses.size() == ours.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    CAPTURE(i);
    MESSAGE("transformers " << losses[i]["loss"].get<double>() << ", dl-train " << ours[i]);
    CHECK(rel(losses[i]["loss"].get<double>(), ours[i]) < 1e-5);
    const json& tok = losses[i]["tokenizer"];
    CHECK(tok["bos_token_id"] == 27);
    CHECK(tok["eos_token_id"] == 28);
    CHECK(tok["config_bos_token_id"] == 27);
    CHECK(tok["config_eos_token_id"] == 28);
    CHECK(tok["ids"].get<std::vector<int32_t>>() == dl::HfTokenizer(args[4 + i]).encode("hello world"));
  }
}
