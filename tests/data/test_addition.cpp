// synthetic:addition: exact examples, answer-only targets, exact-match scoring, rendering.
#include <doctest/doctest.h>

#include <algorithm>
#include <regex>

#include "dl/data/dataset.hpp"
#include "dl/data/sources.hpp"

using namespace dl;

namespace {
DataConfig addition(int64_t digits = 3) {
  DataConfig d;
  d.source = "synthetic:addition";
  d.digits = digits;
  return d;
}
std::vector<int32_t> row(const Tensor& t, int64_t r) {
  const int64_t T = t.size(-1);
  const int32_t* p = t.data<int32_t>() + r * T;
  return {p, p + T};
}
// The T + 1 tokens of example row r: inputs plus the last target (the window's last token is
// always an answer ';' or padding, so take it from the text when the target is ignored).
std::string text_of(const Batch& b, int64_t r) {
  auto in = row(b.inputs, r);
  int32_t last = row(b.targets, r).back();
  in.push_back(last >= 0 ? last : '\n');
  return make_byte_tokenizer()->decode(in);
}
bool same(const Batch& a, const Batch& b) {
  auto eq = [](const Tensor& x, const Tensor& y) {
    return x.shape() == y.shape() &&
           std::equal(x.data<int32_t>(), x.data<int32_t>() + x.numel(), y.data<int32_t>());
  };
  return eq(a.inputs, b.inputs) && eq(a.targets, b.targets);
}
}  // namespace

TEST_CASE("problem text: zero-padded operands, reversed digits+1-digit sum") {
  CHECK(data::addition_problem(42, 317, 3) == "042+317=9530;");
  CHECK(data::addition_problem(999, 999, 3) == "999+999=8991;");
  CHECK(data::addition_problem(0, 0, 1) == "0+0=00;");
  CHECK(data::addition_problem_len(3) == 13);
}

TEST_CASE("a known example with a fixed seed, and its targets") {
  auto s = open_datasets(addition(3), 32, 1337);
  REQUIRE(s.train);
  REQUIRE(s.val);
  REQUIRE(s.tokenizer);
  CHECK(s.tokenizer->name() == "bytes");
  CHECK(s.train->is_sequence());
  CHECK(s.train->min_vocab_size() == 256);
  CHECK(s.train->size() == int64_t(1) << 40);
  CHECK(s.val->size() == 256);
  CHECK(s.train->stop_text() == ";");

  Batch b = s.train->make_batch({0, 5});
  CHECK(b.inputs.shape() == Shape{2, 32});
  CHECK(b.targets.shape() == Shape{2, 32});
  // block_size 32: 33 tokens hold two 13-token problems and 7 pad bytes.
  std::string t0 = text_of(b, 0);
  CHECK(t0 == "374+205=9750;930+027=7590;\n\n\n\n\n\n\n");
  std::regex shape("([0-9]{3})\\+([0-9]{3})=([0-9]{4});([0-9]{3})\\+([0-9]{3})=([0-9]{4});\n{7}");
  std::smatch m;
  REQUIRE(std::regex_match(t0, m, shape));
  for (int k : {1, 4}) {
    int a = std::stoi(m[k].str()), c = std::stoi(m[k + 1].str());
    std::string rev = m[k + 2].str();
    std::reverse(rev.begin(), rev.end());
    CHECK(std::stoi(rev) == a + c);
  }
  // Targets: the next token at answer positions (4 sum digits and ';' of each problem), else -1.
  auto in = row(b.inputs, 0), tg = row(b.targets, 0);
  std::vector<int32_t> tokens = make_byte_tokenizer()->encode(t0);
  for (int64_t t = 0; t < 32; ++t) {
    int64_t next = t + 1, within = next % 13;
    bool answer = next < 26 && within >= 8;  // "ddd+ddd=" is 8 tokens, then 4 digits and ';'
    CAPTURE(t);
    CHECK(tg[static_cast<size_t>(t)] == (answer ? tokens[static_cast<size_t>(next)] : -1));
  }
  int answers = 0;
  for (int32_t v : tg) answers += v >= 0;
  CHECK(answers == 10);
  CHECK(tg[7] == m[3].str()[0]);  // at '=' the target is the first (least significant) sum digit
  CHECK(tg[11] == ';');
  CHECK(tg[12] == -1);  // the next problem's first digit is not a target
}

TEST_CASE("split determinism: a pure function of (seed, split, example id)") {
  auto a = open_datasets(addition(3), 64, 1337), b = open_datasets(addition(3), 64, 1337),
       c = open_datasets(addition(3), 64, 1338);
  std::vector<int64_t> ids{3, 1, 4, 1, 5, 9, 2, 6};
  CHECK(same(a.train->make_batch(ids), b.train->make_batch(ids)));
  CHECK(same(a.val->make_batch(ids), b.val->make_batch(ids)));
  CHECK(!same(a.train->make_batch(ids), c.train->make_batch(ids)));
  CHECK(!same(a.val->make_batch(ids), c.val->make_batch(ids)));
  CHECK(!same(a.train->make_batch(ids), a.val->make_batch(ids)));  // different streams
  // An example does not depend on the batch it is in.
  Batch one = a.train->make_batch({5}), many = a.train->make_batch(ids);
  CHECK(row(one.inputs, 0) == row(many.inputs, 4));
  CHECK(row(one.targets, 0) == row(many.targets, 4));
  // Example ids are checked.
  CHECK_THROWS_AS(a.val->make_batch({256}), Error);
  CHECK_THROWS_AS(a.val->make_batch({-1}), Error);
}

TEST_CASE("score: exact match of whole answers") {
  auto s = open_datasets(addition(3), 64, 7);
  Batch b = s.val->make_batch({0, 1, 2});
  // 65 tokens hold 5 problems per row.
  const int64_t N = b.targets.numel();
  Tensor correct = Tensor::empty({N}, DType::i32);
  for (int64_t i = 0; i < N; ++i) correct.data<int32_t>()[i] = 1;
  auto sc = s.val->score(b, correct);
  REQUIRE(sc.has_value());
  CHECK(sc->name == "exact_match");
  CHECK(sc->total == 15);
  CHECK(sc->hits == 15);
  // Wrong predictions at ignored positions do not matter.
  const int32_t* tg = b.targets.data<int32_t>();
  for (int64_t i = 0; i < N; ++i)
    if (tg[i] < 0) correct.data<int32_t>()[i] = 0;
  CHECK(s.val->score(b, correct)->hits == 15);
  // One wrong digit in the second problem of row 1 (row 1 starts at 64; the problem's first
  // answer target is at 64 + 13 + 7), and a wrong ';' in the last problem of row 2.
  correct.data<int32_t>()[64 + 13 + 7 + 2] = 0;
  int64_t last_semicolon = -1;
  for (int64_t i = 128; i < 192; ++i)
    if (tg[i] == ';') last_semicolon = i;
  REQUIRE(last_semicolon > 128);
  correct.data<int32_t>()[last_semicolon] = 0;
  sc = s.val->score(b, correct);
  CHECK(sc->total == 15);
  CHECK(sc->hits == 13);
  // All wrong.
  for (int64_t i = 0; i < N; ++i) correct.data<int32_t>()[i] = 0;
  CHECK(s.val->score(b, correct)->hits == 0);
}

TEST_CASE("prompts are validation problems, render un-reverses the answer") {
  auto s = open_datasets(addition(3), 64, 7);
  auto ps = s.val->prompts(12);
  REQUIRE(ps.size() == 12);
  // The first five prompts are the five problems of validation example 0, in order.
  std::string ex0 = text_of(s.val->make_batch({0}), 0);
  for (int k = 0; k < 5; ++k) CHECK(ex0.substr(static_cast<size_t>(13 * k), 13) == ps[static_cast<size_t>(k)].prompt + ps[static_cast<size_t>(k)].expected);
  for (const auto& p : ps) {
    CHECK(p.prompt.size() == 8);
    CHECK(p.expected.size() == 5);
    CHECK(p.expected.back() == ';');
    int a = std::stoi(p.prompt.substr(0, 3)), b = std::stoi(p.prompt.substr(4, 3));
    std::string out = s.val->render(p.prompt, p.expected);
    CHECK(out == p.prompt + std::to_string(a + b) + " ok");
  }
  CHECK(s.val->render("042+317=", "9530;") == "042+317=359 ok");
  CHECK(s.val->render("042+317=", "9530;123") == "042+317=359 ok");
  CHECK(s.val->render("042+317=", "8530;") == "042+317=358 wrong (359)");
  CHECK(s.val->render("500+500=", "0001;") == "500+500=1000 ok");
  CHECK(s.val->render("000+000=", "0000;") == "000+000=0 ok");
  CHECK(s.val->render("042+317=", "95;") == "042+317=59 wrong (359)");
  CHECK(s.val->render("042+317=", "9x\n;") == "042+317=\"9x?\" wrong (359)");
  CHECK(s.val->render("hello", " world") == "hello world");
  CHECK(s.train->prompts(2).size() == 2);
  CHECK(s.train->prompts(2)[0].prompt == ps[0].prompt);  // always validation problems
}

TEST_CASE("addition: digits and block_size limits are usage errors naming the key") {
  CHECK_THROWS_WITH_AS(open_datasets(addition(3), 11, 1), doctest::Contains("model.block_size"), Error);
  CHECK_THROWS_WITH_AS(open_datasets(addition(3), 11, 1), doctest::Contains("at least 12"), Error);
  {
    // block_size 12, the least: a window of 13 tokens holds exactly one problem, no padding.
    auto least = open_datasets(addition(3), 12, 1);
    Batch b = least.train->make_batch({0, 1});
    REQUIRE(b.inputs.shape() == Shape{2, 12});
    for (int64_t r = 0; r < 2; ++r) {
      const std::string t = text_of(b, r);
      CAPTURE(t);
      std::smatch m;
      REQUIRE(std::regex_match(t, m, std::regex("([0-9]{3})\\+([0-9]{3})=([0-9]{4});")));
      std::string rev = m[3].str();
      std::reverse(rev.begin(), rev.end());
      CHECK(std::stoi(rev) == std::stoi(m[1].str()) + std::stoi(m[2].str()));
    }
  }
  CHECK_THROWS_WITH_AS(open_datasets(addition(0), 64, 1), doctest::Contains("data.digits"), Error);
  CHECK_THROWS_WITH_AS(open_datasets(addition(10), 64, 1), doctest::Contains("data.digits"), Error);
  // digits = 9 still fits int64 arithmetic.
  auto s = open_datasets(addition(9), 64, 1);
  auto p = s.val->prompts(1)[0];
  CHECK(s.val->render(p.prompt, p.expected).ends_with(" ok"));
  try {
    open_datasets(addition(3), 11, 1);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
  }
}
