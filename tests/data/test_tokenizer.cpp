// The bytes and ids tokenizers.
#include <doctest/doctest.h>

#include "dl/data/dataset.hpp"

using namespace dl;

TEST_CASE("byte tokenizer: ids are the bytes, decode maps them back") {
  auto t = make_byte_tokenizer();
  CHECK(t->name() == "bytes");
  std::string s = "Hi\n\xff\x00!";
  s.push_back('\0');
  auto ids = t->encode(s);
  REQUIRE(ids.size() == s.size());
  CHECK(ids[0] == 72);
  CHECK(ids[1] == 105);
  CHECK(ids[2] == 10);
  CHECK(ids[3] == 255);
  CHECK(t->decode(ids) == s);
  // Ids a byte vocabulary cannot hold decode to U+FFFD instead of failing.
  CHECK(t->decode({65, 300, 66}) == "A\xEF\xBF\xBD" "B");
}

TEST_CASE("id tokenizer: whitespace-separated decimal ids") {
  auto t = make_id_tokenizer();
  CHECK(t->name() == "ids");
  auto ids = t->encode("  15496 11\t995\n0 ");
  CHECK(ids == std::vector<int32_t>{15496, 11, 995, 0});
  CHECK(t->decode(ids) == "15496 11 995 0");
  CHECK(t->encode("").empty());
  CHECK_THROWS_WITH_AS(t->encode("12 abc"), doctest::Contains("'abc' is not a token id"), Error);
  CHECK_THROWS_AS(t->encode("-3"), Error);
}
