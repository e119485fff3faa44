// Tokenizing files on several threads: in-process ids and dl-train tokenize's shards are the ids
// of encoding each file whole, <|endoftext|> between files, for any thread count and chunk size.
#include <doctest/doctest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/data/gpt2_tokenizer.hpp"
#include "dl/data/hf_tokenizer.hpp"
#include "dl/data/tokenize.hpp"
#include "support/support.hpp"

using namespace dl;
namespace fs = std::filesystem;

namespace {

// Text of every kind the reference cases hold (scripts, emoji, code, space runs, contractions),
// shuffled into documents by a fixed generator, plus invalid UTF-8.
std::vector<std::string> write_corpus(const fs::path& dir, int files, size_t bytes_each) {
  std::vector<std::string> texts;
  for (const std::string& line :
       dl::test::lines(dl::test::read_file(dl::test::shared_path("data/gpt2/tokenizer-cases.jsonl"))))
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
  texts.push_back("bad \xff\xfe bytes \xe2\x82 cut");
  uint64_t x = 88172645463325252ull;
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string doc;
    while (doc.size() < bytes_each) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      doc += texts[x % texts.size()];
      doc += " \n\n  \t"[x % 5 == 0 ? 1 : x % 4];
    }
    const fs::path p = dir / ("doc" + std::to_string(f) + ".txt");
    dl::test::write_file(p, doc);
    paths.push_back(p.string());
  }
  return paths;
}

std::vector<int32_t> whole_file_ids(const std::vector<std::string>& files) {
  std::vector<int32_t> ids;
  for (size_t f = 0; f < files.size(); ++f) {
    if (f) ids.push_back(50256);
    auto one = dl::test::gpt2_tokenizer().encode(dl::test::read_file(files[f]));
    ids.insert(ids.end(), one.begin(), one.end());
  }
  return ids;
}

// The ids of an llm.c shard of `width`-byte tokens (2: magic 20240520, version 1; 4: 20240801, 7).
std::vector<int32_t> read_shard(const fs::path& p, size_t width = 2) {
  const std::string b = dl::test::read_file(p);
  REQUIRE(b.size() >= 1024);
  int32_t header[3];
  std::memcpy(header, b.data(), sizeof header);
  CHECK(header[0] == (width == 2 ? 20240520 : 20240801));
  CHECK(header[1] == (width == 2 ? 1 : 7));
  REQUIRE(b.size() == 1024 + width * static_cast<size_t>(header[2]));
  std::vector<int32_t> ids(static_cast<size_t>(header[2]));
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t v = 0;  // little-endian, as the machines that run the tests are
    std::memcpy(&v, b.data() + 1024 + width * i, width);
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

std::vector<int32_t> read_shards(const std::vector<std::string>& paths, size_t width = 2) {
  std::vector<int32_t> ids;
  for (const auto& p : paths) {
    auto one = read_shard(p, width);
    ids.insert(ids.end(), one.begin(), one.end());
  }
  return ids;
}

// GPT-2's BPE as a tokenizer.json whose ids are GPT-2's plus kWideShift: a vocabulary of 115,257
// ids astride the 16-bit limit (Llama 3 has 128,256, Qwen2 151,646), whose ids are known from
// GPT-2's. Written to DIR/tokenizer.json; returns DIR.
constexpr int32_t kWideShift = 65000;
std::string write_wide_tokenizer(const fs::path& dir) {
  const fs::path gpt2 = dl::test::shared_path("data/gpt2");
  nlohmann::json vocab = nlohmann::json::parse(dl::test::read_file(gpt2 / "vocab.json"));
  for (auto& id : vocab) id = id.get<int32_t>() + kWideShift;
  nlohmann::json merges = nlohmann::json::array();
  for (const std::string& line : dl::test::lines(dl::test::read_file(gpt2 / "merges.txt")))
    if (!line.empty() && !line.starts_with("#version")) merges.push_back(line);
  const nlohmann::json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  fs::create_directories(dir);
  dl::test::write_file(dir / "tokenizer.json",
                       nlohmann::json{{"pre_tokenizer", pre}, {"decoder", pre},
                                      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}}.dump());
  return dir.string();
}

std::vector<int32_t> shifted(std::vector<int32_t> ids) {
  for (int32_t& id : ids) id += kWideShift;
  return ids;
}

}  // namespace

TEST_CASE("tokenize: chunks on 1 and 4 threads give the ids of whole files, <|endoftext|> between") {
  dl::test::TempDir tmp("tokenize");
  const auto files = write_corpus(tmp.path(), 3, 40000);
  const auto expected = whole_file_ids(files);
  REQUIRE(expected.size() > 20000);
  for (int threads : {1, 4}) {
    for (size_t chunk : {size_t{1000}, size_t{1} << 20}) {
      CAPTURE(threads);
      CAPTURE(chunk);
      std::vector<int32_t> got;
      TokenStreamOptions o;
      o.threads = threads;
      o.chunk_bytes = chunk;
      tokenize_stream(dl::test::gpt2_tokenizer(), files, o, [&](const std::vector<int32_t>& ids, int part) {
        CHECK(part == 0);
        got.insert(got.end(), ids.begin(), ids.end());
      });
      CHECK(got == expected);
    }
  }
  CHECK(tokenize_files(dl::test::gpt2_tokenizer(), files, 2) == expected);
}

TEST_CASE("tokenize: split points cut nowhere a piece continues") {
  // Every position's split point, in text that is hard to cut: each part encoded alone gives the
  // whole's ids.
  const std::string text = "a'b 'tis IT'S x  y\n\n z12ab\xe4\xb8\xad\xe6\x96\x87\xef\xbc\x8c\xd9\xa3x \xff\xfe'll..s";
  const auto whole = dl::test::gpt2_tokenizer().encode(text);
  for (size_t from = 0; from <= text.size(); ++from) {
    const size_t cut = dl::test::gpt2_tokenizer().split_point(text, from);
    CAPTURE(from);
    REQUIRE(cut >= from);
    REQUIRE(cut <= text.size());
    auto a = dl::test::gpt2_tokenizer().encode(text.substr(0, cut));
    const auto b = dl::test::gpt2_tokenizer().encode(text.substr(cut));
    a.insert(a.end(), b.begin(), b.end());
    CHECK(a == whole);
  }
}

TEST_CASE("tokenize: shards hold the in-process ids, the same bytes on 1 and 3 threads") {
  dl::test::TempDir tmp("shards");
  const auto files = write_corpus(tmp.path(), 2, 30000);
  const auto expected = whole_file_ids(files);
  std::vector<std::string> first_bytes;
  for (int threads : {1, 3}) {
    CAPTURE(threads);
    TokenizeOptions o;
    o.sources = {(tmp.path() / "doc*.txt").string()};
    o.out_dir = (tmp.path() / ("out" + std::to_string(threads))).string();
    o.shard_tokens = 4000;
    o.val_fraction = 0.1;
    o.threads = threads;
    o.chunk_bytes = 2000;
    const TokenizeSummary s = tokenize_to_shards(dl::test::gpt2_tokenizer(), o);
    CHECK(s.files == 2);
    CHECK(s.val_tokens > 0);
    CHECK(s.train_tokens + s.val_tokens == static_cast<int64_t>(expected.size()));
    std::vector<std::string> train, val;
    for (const auto& p : s.shards) (fs::path(p).filename().string().starts_with("train_") ? train : val).push_back(p);
    std::sort(train.begin(), train.end());
    std::sort(val.begin(), val.end());
    CHECK(read_shard(train[0]).size() == 4000);
    auto ids = read_shards(train);
    CHECK(static_cast<int64_t>(ids.size()) == s.train_tokens);
    const auto v = read_shards(val);
    ids.insert(ids.end(), v.begin(), v.end());
    CHECK(ids == expected);
    std::string all;
    for (const auto& p : train) all += dl::test::read_file(p);
    for (const auto& p : val) all += dl::test::read_file(p);
    first_bytes.push_back(all);
  }
  CHECK(first_bytes[0] == first_bytes[1]);

  // Shards readable by tokens: data, with the GPT-2 tokenizer for prompts.
  DataConfig d;
  d.source = "tokens:" + (tmp.path() / "out1" / "train_*.bin").string();
  d.val_source = "tokens:" + (tmp.path() / "out1" / "val_*.bin").string();
  d.tokenizer = "gpt2:" + dl::test::shared_path("data/gpt2").string();
  auto splits = open_datasets(d, 64, 1);
  CHECK(splits.train->size() > 0);
  CHECK(splits.val->size() > 0);
  CHECK(splits.tokenizer->name() == "gpt2");
  CHECK(splits.train->min_vocab_size() == 50257);

  // A folder holding shards already is refused (a glob would mix old and new).
  TokenizeOptions again;
  again.sources = {files[0]};
  again.out_dir = (tmp.path() / "out1").string();
  CHECK_THROWS_WITH_AS(tokenize_to_shards(dl::test::gpt2_tokenizer(), again), doctest::Contains("already holds token shards"), Error);
}

TEST_CASE("text: data with the gpt2 tokenizer: the files' ids, documents separated") {
  dl::test::TempDir tmp("textgpt2");
  const auto files = write_corpus(tmp.path(), 2, 5000);
  const auto expected = whole_file_ids(files);
  DataConfig d;
  d.source = "text:" + (tmp.path() / "doc*.txt").string();
  d.tokenizer = "gpt2:" + dl::test::shared_path("data/gpt2").string();
  d.val_fraction = 0.0;
  const int64_t T = 16;
  auto s = open_datasets(d, T, 1);
  CHECK(s.tokenizer->name() == "gpt2");
  CHECK(s.train->min_vocab_size() == 50257);
  REQUIRE(s.train->size() == static_cast<int64_t>(expected.size() - 1) / T);
  Batch b = s.train->make_batch({0, 3});
  for (int64_t t = 0; t < T; ++t) {
    CHECK(b.inputs.data<int32_t>()[t] == expected[static_cast<size_t>(t)]);
    CHECK(b.targets.data<int32_t>()[T + t] == expected[static_cast<size_t>(3 * T + t + 1)]);
  }
  // The byte tokenizer has no separator: several files are refused.
  d.tokenizer = "bytes";
  CHECK_THROWS_WITH_AS(open_datasets(d, T, 1), doctest::Contains("no separator between documents"), Error);
}

TEST_CASE("dl-train tokenize: shards from the command, errors exit 2 naming the file") {
  dl::test::TempDir tmp("tokcli");
  const auto files = write_corpus(tmp.path(), 2, 20000);
  const std::string gpt2_dir = dl::test::shared_path("data/gpt2").string();
  const auto expected = whole_file_ids(files);
  std::vector<std::vector<int32_t>> outs;
  for (const char* threads : {"1", "2"}) {
    const std::string out = (tmp.path() / (std::string("out") + threads)).string();
    auto r = dl::test::run(dl::test::tool("dl-train"),
                           {"tokenize", (tmp.path() / "doc*.txt").string(), "--tokenizer", gpt2_dir, "-o", out,
                            "--shard-tokens", "3000", "--threads", threads});
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("tokenized 2 file(s)") != std::string::npos);
    std::vector<std::string> shards;
    for (const std::string& line : dl::test::lines(r.out))
      if (!line.empty()) shards.push_back(line.substr(0, line.find('\t')));
    CHECK(shards.size() == (expected.size() + 2999) / 3000);
    outs.push_back(read_shards(shards));
  }
  CHECK(outs[0] == expected);
  CHECK(outs[1] == expected);

  // A merges file with a malformed line, a missing folder: exit 2 naming file and line.
  fs::create_directories(tmp / "badtok");
  fs::copy_file(fs::path(gpt2_dir) / "vocab.json", tmp / "badtok" / "vocab.json");
  dl::test::write_file(tmp / "badtok" / "merges.txt", "#version: 0.2\n\xc4\xa0 t\nbroken\n");
  auto r = dl::test::run(dl::test::tool("dl-train"),
                         {"tokenize", files[0], "--tokenizer", (tmp / "badtok").string(), "-o", (tmp / "o").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find((tmp / "badtok" / "merges.txt").string() + ":3: malformed merge 'broken'") != std::string::npos);
  r = dl::test::run(dl::test::tool("dl-train"),
                    {"tokenize", (tmp / "none*.txt").string(), "--tokenizer", gpt2_dir, "-o", (tmp / "o").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("matches no files") != std::string::npos);
  // Threads beyond the cap (core/limits.hpp): exit 2 naming the flag, no folder made.
  r = dl::test::run(dl::test::tool("dl-train"), {"tokenize", files[0], "--tokenizer", gpt2_dir, "-o",
                                                 (tmp / "many").string(), "--threads", "100000"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--threads = 100000 is beyond the thread cap") != std::string::npos);
  CHECK(!fs::exists(tmp / "many"));
}

TEST_CASE("tokenize: a vocabulary past 16 bits writes uint32 shards that tokens: and text: read with every id") {
  dl::test::TempDir tmp("wide");
  const auto files = write_corpus(tmp.path(), 2, 6000);
  const HfTokenizer tok(write_wide_tokenizer(tmp / "tok"));
  REQUIRE(tok.vocab_size() == 50257 + kWideShift);
  const auto expected = shifted(whole_file_ids(files));
  REQUIRE(*std::max_element(expected.begin(), expected.end()) > 65535);  // uint16 would cut these
  TokenizeOptions o;
  o.sources = {(tmp.path() / "doc*.txt").string()};
  o.out_dir = (tmp.path() / "out").string();
  o.shard_tokens = 1500;
  o.val_fraction = 0.2;
  o.threads = 2;
  o.chunk_bytes = 1000;
  const TokenizeSummary s = tokenize_to_shards(tok, o);
  CHECK(s.token_bytes == 4);
  CHECK(dl::test::has(describe_tokenize_summary(s), "of uint32 tokens"));
  std::vector<std::string> train, val;
  for (const auto& p : s.shards) (fs::path(p).filename().string().starts_with("train_") ? train : val).push_back(p);
  auto ids = read_shards(train, 4);
  const auto v = read_shards(val, 4);
  ids.insert(ids.end(), v.begin(), v.end());
  CHECK(ids == expected);

  const int64_t T = 16;
  DataConfig d;
  d.source = "tokens:" + (tmp.path() / "out" / "train_*.bin").string();
  d.val_source = "tokens:" + (tmp.path() / "out" / "val_*.bin").string();
  d.tokenizer = "hf:" + (tmp.path() / "tok").string();
  auto splits = open_datasets(d, T, 1);
  CHECK(splits.train->min_vocab_size() == 50257 + kWideShift);
  Batch b = splits.train->make_batch({0});
  CHECK(std::vector<int32_t>(b.inputs.data<int32_t>(), b.inputs.data<int32_t>() + T) ==
        std::vector<int32_t>(expected.begin(), expected.begin() + T));

  // text: tokenizes in-process into 32-bit ids: the same ids, none cut.
  d.source = "text:" + (tmp.path() / "doc*.txt").string();
  d.val_source.clear();
  d.val_fraction = 0.0;
  auto text = open_datasets(d, T, 1);
  Batch t = text.train->make_batch({1});
  CHECK(std::vector<int32_t>(t.targets.data<int32_t>(), t.targets.data<int32_t>() + T) ==
        std::vector<int32_t>(expected.begin() + T + 1, expected.begin() + 2 * T + 1));
}

TEST_CASE("dl-train tokenize: a Llama 3-sized tokenizer.json gives uint32 shards; a model too small for their ids exits 2 naming the shard") {
  dl::test::TempDir tmp("widecli");
  const auto files = write_corpus(tmp.path(), 1, 6000);
  const std::string tok_dir = write_wide_tokenizer(tmp / "tok");
  const std::string out = (tmp.path() / "out").string();
  auto r = dl::test::run(dl::test::tool("dl-train"), {"tokenize", files[0], "--tokenizer", tok_dir, "-o", out});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(dl::test::has(r.err, "1 shard(s) of uint32 tokens"));
  const std::string shard = (fs::path(out) / "train_000000.bin").string();
  CHECK(r.out == shard + "\t" + std::to_string(read_shard(shard, 4).size()) + "\n");
  CHECK(read_shard(shard, 4) == shifted(whole_file_ids(files)));

  const std::string config = R"([model]
type = "gpt"
n_layer = 1
n_head = 2
n_embd = 8
block_size = 16
vocab_size = 65536

[data]
source = "tokens:)" + out + R"(/train_*.bin"
val_fraction = 0.0

[train]
steps = 1
batch_size = 2
threads = 1
)";
  dl::test::write_file(tmp / "run.toml", config);
  r = dl::test::run(dl::test::tool("dl-train"), {(tmp / "run.toml").string(), "--run-dir", (tmp / "run").string(), "--quiet"});
  CHECK(r.exit_code == 2);
  CHECK(dl::test::has(r.err, "model.vocab_size = 65536 is smaller than the data's vocabulary"));
  CHECK(dl::test::has(r.err, "file '" + shard + "'"));
}
