// text:PATH: byte windows at stride block_size and the train/val byte split.
#include <doctest/doctest.h>

#include "dl/data/dataset.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::test;

namespace {
std::string corpus(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + i / 13) % 256);
  return s;
}
DataConfig text_source(const fs::path& p, double val_fraction = 0.1) {
  DataConfig d;
  d.source = "text:" + p.string();
  d.val_fraction = val_fraction;
  return d;
}
int32_t at(const Tensor& t, int64_t r, int64_t c) { return t.data<int32_t>()[r * t.size(-1) + c]; }
}  // namespace

TEST_CASE("text: windows of block_size + 1 bytes at stride block_size, last val_fraction is val") {
  TempDir dir("text");
  const std::string bytes = corpus(1000);
  write_file(dir / "c.txt", bytes);
  auto s = open_datasets(text_source(dir / "c.txt", 0.1), 16, 1);
  REQUIRE(s.train);
  REQUIRE(s.val);
  CHECK(s.tokenizer->name() == "bytes");
  CHECK(s.train->min_vocab_size() == 256);
  // train = bytes [0, 900): (900 - 1) / 16 = 56 windows; val = [900, 1000): 99 / 16 = 6.
  CHECK(s.train->size() == 56);
  CHECK(s.val->size() == 6);
  Batch b = s.train->make_batch({0, 55, 3});
  CHECK(b.inputs.shape() == Shape{3, 16});
  for (int64_t t = 0; t < 16; ++t) {
    CHECK(at(b.inputs, 0, t) == static_cast<unsigned char>(bytes[static_cast<size_t>(t)]));
    CHECK(at(b.targets, 0, t) == static_cast<unsigned char>(bytes[static_cast<size_t>(t + 1)]));
    CHECK(at(b.inputs, 1, t) == static_cast<unsigned char>(bytes[static_cast<size_t>(55 * 16 + t)]));
    CHECK(at(b.targets, 2, t) == static_cast<unsigned char>(bytes[static_cast<size_t>(3 * 16 + t + 1)]));
  }
  // The last train window ends inside the train split: 55 * 16 + 17 = 897 <= 900.
  Batch v = s.val->make_batch({0, 5});
  for (int64_t t = 0; t < 16; ++t) {
    CHECK(at(v.inputs, 0, t) == static_cast<unsigned char>(bytes[static_cast<size_t>(900 + t)]));
    CHECK(at(v.targets, 1, t) == static_cast<unsigned char>(bytes[static_cast<size_t>(900 + 80 + t + 1)]));
  }
  CHECK_THROWS_AS(s.val->make_batch({6}), Error);
  CHECK(s.train->describe().find("train") != std::string::npos);
}

TEST_CASE("text: val_fraction 0 gives no val split; val_source replaces the held-out tail") {
  TempDir dir("text");
  write_file(dir / "a.txt", corpus(1000));
  write_file(dir / "b.txt", std::string(50, 'x'));
  auto s = open_datasets(text_source(dir / "a.txt", 0.0), 16, 1);
  CHECK(s.train->size() == 999 / 16);
  CHECK(s.val == nullptr);

  DataConfig d = text_source(dir / "a.txt", 0.1);
  d.val_source = "text:" + (dir / "b.txt").string();
  auto t = open_datasets(d, 16, 1);
  CHECK(t.train->size() == 999 / 16);  // the whole file trains
  REQUIRE(t.val);
  CHECK(t.val->size() == 49 / 16);
  CHECK(t.val->make_batch({2}).inputs.data<int32_t>()[0] == 'x');
}

TEST_CASE("text: too little data and missing files are usage errors naming the file") {
  TempDir dir("text");
  write_file(dir / "small.txt", corpus(100));
  // val = 10 bytes < block_size + 1 = 17
  auto path = (dir / "small.txt").string();
  CHECK_THROWS_WITH_AS(open_datasets(text_source(dir / "small.txt", 0.1), 16, 1),
                       doctest::Contains((path + ": the validation split holds 10 bytes (100-byte file").c_str()), Error);
  CHECK_THROWS_WITH_AS(open_datasets(text_source(dir / "small.txt", 0.0), 128, 1),
                       doctest::Contains("holds 100 bytes, fewer than model.block_size + 1 = 129"), Error);
  // block_size 99, the most 100 bytes allow: one window, the whole file.
  auto one = open_datasets(text_source(dir / "small.txt", 0.0), 99, 1);
  REQUIRE(one.train->size() == 1);
  Batch b = one.train->make_batch({0});
  const std::string bytes = corpus(100);
  for (int64_t t = 0; t < 99; ++t) {
    CHECK(at(b.inputs, 0, t) == static_cast<unsigned char>(bytes[static_cast<size_t>(t)]));
    CHECK(at(b.targets, 0, t) == static_cast<unsigned char>(bytes[static_cast<size_t>(t + 1)]));
  }
  CHECK_THROWS_WITH_AS(open_datasets(text_source(dir / "nope.txt"), 16, 1),
                       doctest::Contains((dir / "nope.txt").c_str()), Error);
  write_file(dir / "empty.txt", "");
  try {
    open_datasets(text_source(dir / "empty.txt", 0.0), 16, 1);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
  }
}
