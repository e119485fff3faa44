// A run with data.tokenizer = "gpt2:DIR": it keeps its tokenizer (RUN/tokenizer/), so sample and
// eval read text as training did even after DIR is gone; dl-shard merge puts the tokenizer files
// beside model.safetensors; a model vocabulary the tokenizer cannot cover exits 2 naming the file.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "support/support.hpp"

using namespace dl::test;
namespace fs = std::filesystem;

namespace {

std::string config(const std::string& text_glob, int64_t vocab_size) {
  return R"([model]
type = "gpt"
n_layer = 1
n_head = 2
n_embd = 8
block_size = 16
vocab_size = )" + std::to_string(vocab_size) + R"(

[data]
source = "text:)" + text_glob + R"("
tokenizer = "gpt2:tok"
val_fraction = 0.2

[train]
steps = 2
batch_size = 2
threads = 1
eval_batches = 1

[log]
samples = 0
progress = "none"
env_lock = false
)";
}

// GPT-2's BPE as a Hugging Face tokenizer.json (ByteLevel) in DIR, with `added` tokens after its
// vocabulary (ids from 50256 on). Without <|endoftext|>, which Gpt2Tokenizer requires: read as
// "gpt2:" a run's copy would be refused.
void write_hf_gpt2_tokenizer(const fs::path& dir, const nlohmann::json& added = nlohmann::json::array()) {
  const fs::path gpt2 = shared_path("data/gpt2");
  nlohmann::json merges = nlohmann::json::array();
  for (const std::string& line : lines(read_file(gpt2 / "merges.txt")))
    if (!line.empty() && !line.starts_with("#version")) merges.push_back(line);
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::json vocab = nlohmann::json::parse(read_file(gpt2 / "vocab.json"));
  vocab.erase("<|endoftext|>");
  const nlohmann::json tok = {{"added_tokens", added},
                              {"pre_tokenizer", byte_level},
                              {"decoder", byte_level},
                              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  fs::create_directories(dir);
  write_file(dir / "tokenizer.json", tok.dump());
}

// DIR/a.txt, a short story, and the config of a run on it with data.tokenizer = "hf:tok".
std::string hf_story_config(const fs::path& dir) {
  std::string story;
  for (int i = 0; i < 40; ++i) story += "The quick brown fox jumps over the lazy dog, isn't it? ";
  write_file(dir / "a.txt", story);
  std::string cfg = config("a.txt", 50304);
  cfg.replace(cfg.find("gpt2:tok"), 8, "hf:tok");
  return cfg;
}

}  // namespace

TEST_CASE("a gpt2-tokenizer run keeps its tokenizer for sample, eval and dl-shard merge") {
  TempDir d("tokrun");
  fs::copy(shared_path("data/gpt2"), d / "tok");
  std::string story;
  for (int i = 0; i < 40; ++i) story += "The quick brown fox jumps over the lazy dog, isn't it? ";
  write_file(d / "a.txt", story);
  write_file(d / "b.txt", "Hello world. " + story);
  write_file(d / "run.toml", config("*.txt", 50304));  // padded to a multiple of 128, as llm.c does
  const fs::path run_dir = d / "run";
  auto r = run(tool("dl-train"), {(d / "run.toml").string(), "--run-dir", run_dir.string(), "--quiet"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(run_dir / "tokenizer" / "vocab.json") == read_file(d / "tok" / "vocab.json"));
  CHECK(read_file(run_dir / "tokenizer" / "merges.txt") == read_file(d / "tok" / "merges.txt"));

  // The folder the run was trained with is gone: the run's copy serves.
  fs::rename(d / "tok", d / "tok-moved");
  r = run(tool("dl-train"), {"sample", "--run-dir", run_dir.string(), "--prompt", "Hello world", "--tokens", "4",
                             "--format", "json"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j.dump().find("Hello world") != std::string::npos);
  r = run(tool("dl-train"), {"eval", "--run-dir", run_dir.string(), "--data", "text:" + (d / "a.txt").string(),
                             "--format", "json"});
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);

  fs::create_directories(d / "hf");
  r = run(tool("dl-shard"), {"merge", run_dir.string(), "-o", (d / "hf" / "model.safetensors").string()});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(fs::exists(d / "hf" / "model.safetensors"));
  CHECK(read_file(d / "hf" / "vocab.json") == read_file(d / "tok-moved" / "vocab.json"));
  CHECK(read_file(d / "hf" / "merges.txt") == read_file(d / "tok-moved" / "merges.txt"));
}

TEST_CASE("a model vocabulary past the tokenizer's trains (ids beyond it are padding, never sampled)") {
  TempDir d("tokvocab");
  fs::copy(shared_path("data/gpt2"), d / "tok");
  std::string story;
  for (int i = 0; i < 20; ++i) story += "The quick brown fox jumps over the lazy dog. ";
  write_file(d / "a.txt", story);
  write_file(d / "run.toml", config("a.txt", 60000));
  // Refused before (exit 2, "the tokenizer's vocabulary holds 50257 tokens, smaller than the
  // model's ids"), which also kept configs/gpt2-124m.toml (V = 50257 over bytes) from starting.
  auto r = run(tool("dl-train"), {(d / "run.toml").string(), "--run-dir", (d / "run").string(), "--quiet"});
  CHECK_MESSAGE(r.exit_code == 0, r.err);
}

TEST_CASE("an hf-tokenizer run keeps its tokenizer.json for sample and eval") {
  // GPT-2's BPE as a Hugging Face tokenizer.json (ByteLevel), in a folder of its own.
  TempDir d("hfrun");
  write_hf_gpt2_tokenizer(d / "tok");
  std::string cfg = hf_story_config(d.path());
  write_file(d / "run.toml", cfg);
  const fs::path run_dir = d / "run";
  auto r = run(tool("dl-train"), {(d / "run.toml").string(), "--run-dir", run_dir.string(), "--quiet"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(run_dir / "tokenizer" / "tokenizer.json") == read_file(d / "tok" / "tokenizer.json"));

  // The folder is gone: the run's copy serves, read as tokenizer.json again.
  fs::rename(d / "tok", d / "tok-moved");
  r = run(tool("dl-train"), {"sample", "--run-dir", run_dir.string(), "--prompt", "Hello world", "--tokens", "4",
                             "--format", "json"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.out, "Hello world"));
  r = run(tool("dl-train"), {"eval", "--run-dir", run_dir.string(), "--data", "text:" + (d / "a.txt").string(),
                             "--format", "json"});
  CHECK_MESSAGE(r.exit_code == 0, r.err);
}

TEST_CASE("an hf-tokenizer llama run's checkpoints are whole Hugging Face folders: tokenizer files, bos/eos ids") {
  TempDir d("hfllama");
  auto special = [](int id, const char* content) {
    return nlohmann::json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  write_hf_gpt2_tokenizer(d / "tok", {special(50256, "<|begin_of_text|>"), special(50257, "<|end_of_text|>")});
  // transformers saves AddedToken objects as {"content": ...}; older folders a bare string.
  write_file(d / "tok" / "tokenizer_config.json",
             R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>", "lstrip": false},)"
             R"( "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 16})");
  write_file(d / "tok" / "special_tokens_map.json", R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"})");
  std::string cfg = hf_story_config(d.path());
  cfg.replace(cfg.find("type = \"gpt\""), 12, "type = \"llama\"");
  write_file(d / "run.toml", cfg);
  const fs::path run_dir = d / "run";
  auto r = run(tool("dl-train"), {(d / "run.toml").string(), "--run-dir", run_dir.string(), "--quiet"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const fs::path ck = run_dir / "checkpoints" / "step_00000002";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    CAPTURE(f);
    REQUIRE(fs::exists(ck / f));
    CHECK(read_file(ck / f) == read_file(d / "tok" / f));
    CHECK(read_file(run_dir / "tokenizer" / f) == read_file(d / "tok" / f));
  }
  const auto hf = nlohmann::json::parse(read_file(ck / "config.json"));
  CHECK(hf["model_type"] == "llama");
  CHECK(hf["bos_token_id"] == 50256);
  CHECK(hf["eos_token_id"] == 50257);
  // Listed with their CRCs as every checkpoint file is: a damaged copy makes the checkpoint bad.
  const auto manifest = nlohmann::json::parse(read_file(ck / "trainer_state.json"));
  CHECK(manifest["files"].contains("tokenizer.json"));
  CHECK(manifest["files"].contains("special_tokens_map.json"));

  // The checkpoint folder is a model.init_from folder with its tokenizer: no data.tokenizer needed.
  std::string again = config("a.txt", 50304);
  again.replace(again.find("type = \"gpt\""), 12, "init_from = \"" + ck.string() + "\"");
  for (const std::string key : {"tokenizer = \"gpt2:tok\"\n", "n_layer = 1\n", "n_head = 2\n", "n_embd = 8\n"})
    again.replace(again.find(key), key.size(), "");
  write_file(d / "again.toml", again);
  fs::rename(d / "tok", d / "tok-moved");
  r = run(tool("dl-train"), {(d / "again.toml").string(), "--run-dir", (d / "run2").string(), "--quiet"});
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(read_file(d / "run2" / "tokenizer" / "tokenizer_config.json") == read_file(d / "tok-moved" / "tokenizer_config.json"));
}
