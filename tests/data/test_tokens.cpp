// tokens:GLOB: llm.c shards (uint16 and uint32 tokens) and headerless uint16 files, validation of
// headers and sizes, the model vocabulary they need.
#include <doctest/doctest.h>

#include <cstring>

#include "dl/data/dataset.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::test;

namespace {
std::string u16s(const std::vector<uint16_t>& t) {
  std::string s(t.size() * 2, '\0');
  std::memcpy(s.data(), t.data(), s.size());
  return s;
}
// An llm.c shard; `count` and `version` default to the honest values.
std::string shard(const std::vector<uint16_t>& t, int32_t count = -1, int32_t version = 1) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = version;
  header[2] = count < 0 ? static_cast<int32_t>(t.size()) : count;
  std::string s(1024, '\0');
  std::memcpy(s.data(), header.data(), 1024);
  return s + u16s(t);
}
// An llm.c shard of uint32 tokens (Llama 3's layout: magic 20240801, version 7).
std::string shard32(const std::vector<uint32_t>& t, int32_t version = 7) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240801;
  header[1] = version;
  header[2] = static_cast<int32_t>(t.size());
  std::string s(1024 + 4 * t.size(), '\0');
  std::memcpy(s.data(), header.data(), 1024);
  std::memcpy(s.data() + 1024, t.data(), 4 * t.size());
  return s;
}
std::vector<uint16_t> seq(size_t n, uint16_t start) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(start + (i * 37) % 1000);
  return t;
}
DataConfig tokens_source(const std::string& glob, double val_fraction = 0.2) {
  DataConfig d;
  d.source = "tokens:" + glob;
  d.val_fraction = val_fraction;
  return d;
}
std::vector<int32_t> row(const Tensor& t, int64_t r) {
  const int64_t T = t.size(-1);
  return {t.data<int32_t>() + r * T, t.data<int32_t>() + (r + 1) * T};
}
std::vector<int32_t> slice(const std::vector<uint16_t>& t, size_t from, size_t n) {
  return {t.begin() + static_cast<long>(from), t.begin() + static_cast<long>(from + n)};
}
// Writes dir/name; opening it is a usage error naming the file and saying `why`.
void expect_corrupt(const TempDir& dir, const std::string& name, const std::string& content, const std::string& why) {
  write_file(dir / name, content);
  std::string path = (dir / name).string();
  CAPTURE(name);
  try {
    open_datasets(tokens_source(path, 0.0), 4, 1);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    std::string msg = e.what();
    CAPTURE(msg);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(why) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("tokens: llm.c shards round trip; windows stay inside shards; last windows are val") {
  TempDir dir("tok");
  auto a = seq(20, 100), b = seq(30, 2000);
  b[7] = 4321;  // the largest id
  write_file(dir / "shard_001.bin", shard(b));
  write_file(dir / "shard_000.bin", shard(a));
  write_file(dir / "other.txt", "not matched");
  auto s = open_datasets(tokens_source((dir / "shard_*.bin").string(), 0.2), 8, 1);
  CHECK(s.tokenizer->name() == "ids");
  // shard_000: (20 - 1) / 8 = 2 windows, shard_001: 29 / 8 = 3; 5 in all, round(5 * 0.2) = 1 val.
  REQUIRE(s.train);
  REQUIRE(s.val);
  CHECK(s.train->size() == 4);
  CHECK(s.val->size() == 1);
  CHECK(s.train->min_vocab_size() == 4322);
  CHECK(s.val->min_vocab_size() == 4322);
  Batch t = s.train->make_batch({0, 1, 2, 3});
  CHECK(t.inputs.shape() == Shape{4, 8});
  CHECK(row(t.inputs, 0) == slice(a, 0, 8));
  CHECK(row(t.targets, 0) == slice(a, 1, 8));
  CHECK(row(t.inputs, 1) == slice(a, 8, 8));
  CHECK(row(t.targets, 1) == slice(a, 9, 8));
  CHECK(row(t.inputs, 2) == slice(b, 0, 8));  // not a's tail: windows do not cross shards
  CHECK(row(t.inputs, 3) == slice(b, 8, 8));
  Batch v = s.val->make_batch({0});
  CHECK(row(v.inputs, 0) == slice(b, 16, 8));
  CHECK(row(v.targets, 0) == slice(b, 17, 8));
  CHECK_THROWS_AS(s.val->make_batch({1}), Error);
  // The id tokenizer prints what the model sees.
  CHECK(s.tokenizer->decode(row(v.inputs, 0)).rfind(std::to_string(b[16]) + " ", 0) == 0);
}

TEST_CASE("tokens: headerless nanoGPT .bin files; val_source; val_fraction 0") {
  TempDir dir("tok");
  auto tr = seq(101, 5), va = seq(41, 60000);
  write_file(dir / "train.bin", u16s(tr));
  write_file(dir / "val.bin", u16s(va));
  DataConfig d = tokens_source((dir / "train.bin").string(), 0.1);
  d.val_source = "tokens:" + (dir / "val.bin").string();
  auto s = open_datasets(d, 10, 1);
  CHECK(s.train->size() == 10);  // all of train.bin: 100 / 10
  CHECK(s.val->size() == 4);     // 40 / 10
  CHECK(row(s.train->make_batch({9}).targets, 0) == slice(tr, 91, 10));
  CHECK(row(s.val->make_batch({3}).inputs, 0) == slice(va, 30, 10));
  // Both splits report the larger vocabulary (val holds ids near 61000).
  int64_t vmax = *std::max_element(va.begin(), va.end()) + 1;
  CHECK(s.train->min_vocab_size() == vmax);
  CHECK(s.val->min_vocab_size() == vmax);

  auto z = open_datasets(tokens_source((dir / "train.bin").string(), 0.0), 10, 1);
  CHECK(z.train->size() == 10);
  CHECK(z.val == nullptr);
}

TEST_CASE("tokens: corrupt shards are usage errors naming the file and the problem") {
  TempDir dir("tok");
  auto t = seq(1000, 0);
  std::string trimmed = shard(t);
  trimmed.resize(trimmed.size() - 4);
  expect_corrupt(dir, "short.bin", trimmed, "corrupt token shard '" + (dir / "short.bin").string() +
                                         "': header says 1000 tokens but the file holds 998");
  expect_corrupt(dir, "long.bin", shard(t) + "x", "header says 1000 tokens but the file holds 1000 tokens and a stray byte");
  expect_corrupt(dir, "version.bin", shard(t, -1, 7), "header version is 7, expected 1");
  expect_corrupt(dir, "odd.bin", u16s(t) + "x", "headerless uint16 token file must have an even size, but it has 2001 bytes");
  expect_corrupt(dir, "header.bin", shard(t).substr(0, 100), "shorter than the 1024-byte header");
  expect_corrupt(dir, "tiny.bin", u16s(seq(4, 0)), "none holds model.block_size + 1 = 5 tokens");
  // Missing files and empty globs.
  CHECK_THROWS_WITH_AS(open_datasets(tokens_source((dir / "none_*.bin").string()), 4, 1),
                       doctest::Contains("matches no files"), Error);
  CHECK_THROWS_WITH_AS(open_datasets(tokens_source((dir / "missing.bin").string()), 4, 1),
                       doctest::Contains("no such file"), Error);
  // Too few windows to hold out validation.
  write_file(dir / "one.bin", u16s(seq(5, 0)));
  CHECK_THROWS_WITH_AS(open_datasets(tokens_source((dir / "one.bin").string(), 0.1), 4, 1),
                       doctest::Contains("too few to hold out"), Error);
}

TEST_CASE("tokens: a damaged llm.c header is an error naming the file, never read as headerless tokens") {
  TempDir dir("tok");
  const auto t = seq(1000, 0);
  auto with_first_int = [&](std::string s, uint32_t first) {
    std::memcpy(s.data(), &first, sizeof first);
    return s;
  };
  const uint32_t magic = 20240520;
  // Any one bit of the magic flipped, the rest of the header intact.
  for (int bit : {0, 7, 13, 20, 31})
    expect_corrupt(dir, "bit" + std::to_string(bit) + ".bin", with_first_int(shard(t), magic ^ (1u << bit)), "magic");
  // One byte of the magic overwritten, and the version damaged too: one byte off the magic is enough.
  expect_corrupt(dir, "byte.bin", with_first_int(shard(t, -1, 9), (magic & 0xffff00ffu) | 0x4200u), "one byte");
  // The magic zeroed; the version and the token count match an llm.c header for this file's size.
  expect_corrupt(dir, "zeroed.bin", with_first_int(shard(t), 0), "version 1, 1000 tokens");

  // A headerless file whose first two tokens are two bytes off the magic, or whose next two are
  // (1, 0), is tokens: nothing else there looks like a header.
  std::vector<uint16_t> h = seq(101, 5);
  const uint32_t near = magic ^ 0x00400040u;
  h[0] = static_cast<uint16_t>(near & 0xffff);
  h[1] = static_cast<uint16_t>(near >> 16);
  h[2] = 1;
  h[3] = 0;
  write_file(dir / "headerless.bin", u16s(h));
  auto s = open_datasets(tokens_source((dir / "headerless.bin").string(), 0.0), 10, 1);
  CHECK(s.train->size() == 10);
  CHECK(row(s.train->make_batch({0}).inputs, 0) == slice(h, 0, 10));
}

TEST_CASE("tokens: uint32 llm.c shards hold ids past 65,535 and mix with uint16 shards") {
  TempDir dir("tok32");
  std::vector<uint32_t> wide(40);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = 65530 + static_cast<uint32_t>(i * 1777);  // 65,530 .. 134,833
  wide[5] = 128255;
  const auto narrow = seq(25, 300);
  write_file(dir / "a_000.bin", shard(narrow));
  write_file(dir / "a_001.bin", shard32(wide));
  auto s = open_datasets(tokens_source((dir / "a_*.bin").string(), 0.0), 8, 1);
  // a_000: (25 - 1) / 8 = 3 windows, a_001: 39 / 8 = 4.
  REQUIRE(s.train->size() == 7);
  const uint32_t top = *std::max_element(wide.begin(), wide.end());
  CHECK(s.train->min_vocab_size() == int64_t{top} + 1);
  CHECK(dl::test::has(s.train->vocab_origin(), "token id " + std::to_string(top)));
  CHECK(dl::test::has(s.train->vocab_origin(), (dir / "a_001.bin").string()));
  Batch b = s.train->make_batch({2, 3, 6});
  CHECK(row(b.inputs, 0) == slice(narrow, 16, 8));
  const std::vector<int32_t> first(wide.begin(), wide.begin() + 8), next(wide.begin() + 1, wide.begin() + 9);
  CHECK(row(b.inputs, 1) == first);
  CHECK(row(b.targets, 1) == next);
  const std::vector<int32_t> last(wide.begin() + 24, wide.begin() + 32);
  CHECK(row(b.inputs, 2) == last);

  // The uint32 layout's header is checked as the uint16 one's is.
  const std::string good = shard32(wide);
  std::string cut = good;
  cut.resize(cut.size() - 3);
  expect_corrupt(dir, "cut.bin", cut, "header says 40 tokens but the file holds 39 tokens and a stray byte");
  expect_corrupt(dir, "stray.bin", good + "xyz", "header says 40 tokens but the file holds 40 tokens and 3 stray bytes");
  expect_corrupt(dir, "v1.bin", shard32(wide, 1), "header version is 1, expected 7 with the magic 20240801 (uint32 tokens)");
  std::string damaged = good;
  damaged[1] = static_cast<char>(damaged[1] ^ 0x10);
  expect_corrupt(dir, "damaged.bin", damaged, "one byte off the llm.c magic 20240801");
  std::string zeroed = good;
  std::memset(zeroed.data(), 0, 4);
  expect_corrupt(dir, "zeroed.bin", zeroed, "version 7, 40 tokens");
}

TEST_CASE("tokens: a model vocabulary smaller than the shards' ids is refused naming the file") {
  TempDir dir("tokvocab");
  write_file(dir / "s_000.bin", shard(seq(30, 0)));
  write_file(dir / "s_001.bin", shard32({5, 70000, 9, 3, 1, 2, 4, 6, 8, 7}));
  auto s = open_datasets(tokens_source((dir / "s_*.bin").string(), 0.0), 4, 1);
  CHECK_NOTHROW(check_model_vocab(*s.train, 70001));
  try {
    check_model_vocab(*s.train, 65536);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(dl::test::has(msg, "model.vocab_size = 65536 is smaller than the data's vocabulary (70001 ids: token id 70000 in tokens:"));
    CHECK(dl::test::has(msg, "file '" + (dir / "s_001.bin").string() + "'"));
  }
  // A tokenizer's vocabulary wider than the ids is what the model needs, and is named.
  DataConfig d = tokens_source((dir / "s_000.bin").string(), 0.0);
  d.tokenizer = "gpt2:" + dl::test::shared_path("data/gpt2").string();
  auto g = open_datasets(d, 4, 1);
  CHECK_THROWS_WITH_AS(check_model_vocab(*g.train, 1000), doctest::Contains("(50257 ids: the vocabulary of data.tokenizer = \"gpt2:"), Error);
}

TEST_CASE("tokens and text cannot be mixed across train and val") {
  TempDir dir("tok");
  write_file(dir / "t.bin", u16s(seq(100, 0)));
  write_file(dir / "c.txt", std::string(100, 'a'));
  DataConfig d = tokens_source((dir / "t.bin").string());
  d.val_source = "text:" + (dir / "c.txt").string();
  CHECK_THROWS_WITH_AS(open_datasets(d, 8, 1), doctest::Contains("one vocabulary"), Error);
}
