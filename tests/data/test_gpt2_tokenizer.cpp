// GPT-2's byte-level BPE against tiktoken's ids for the real GPT-2 files
// (../shared/data/gpt2/: vocab.json, merges.txt, tokenizer-cases.jsonl), and its errors on bad folders.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "dl/core/error.hpp"
#include "dl/data/gpt2_tokenizer.hpp"
#include "support/support.hpp"

using namespace dl;
namespace fs = std::filesystem;

namespace {

fs::path gpt2_dir() { return dl::test::shared_path("data/gpt2"); }

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string& line : dl::test::lines(dl::test::read_file(gpt2_dir() / "tokenizer-cases.jsonl"))) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    out.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>()});
  }
  return out;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// A small GPT-2-style folder: the 256 byte tokens, a few merges, <|endoftext|>.
void write_small_folder(const fs::path& dir, const std::string& merges_text, int drop_byte = -1) {
  fs::create_directories(dir);
  nlohmann::json vocab = nlohmann::json::object();
  int32_t id = 0;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    uint32_t cp = gpt2_byte_to_unicode(static_cast<unsigned char>(b));
    if (cp < 0x80) s.push_back(static_cast<char>(cp));
    else s += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    if (b != drop_byte) vocab[s] = id++;
  }
  for (const char* t : {"ab", "abc", "\xc4\xa0" "a"}) vocab[t] = id++;  // "Ġa" is " a"
  vocab["<|endoftext|>"] = id++;
  dl::test::write_file(dir / "vocab.json", vocab.dump());
  dl::test::write_file(dir / "merges.txt", merges_text);
}

}  // namespace

TEST_CASE("gpt2 tokenizer: every reference case encodes to tiktoken's ids and decodes back") {
  const auto all = cases();
  REQUIRE(all.size() >= 20);
  auto cache = Gpt2Tokenizer::make_cache();
  for (const Case& c : all) {
    CAPTURE(c.text);
    CHECK(ids_text(dl::test::gpt2_tokenizer().encode(c.text)) == ids_text(c.ids));
    CHECK(dl::test::gpt2_tokenizer().decode(c.ids) == c.text);
    // One cache over all cases gives the same ids as a fresh one.
    std::vector<int32_t> again;
    dl::test::gpt2_tokenizer().encode_append(c.text, again, *cache);
    CHECK(again == c.ids);
  }
  CHECK(dl::test::gpt2_tokenizer().vocab_size() == 50257);
  CHECK(dl::test::gpt2_tokenizer().document_separator() == 50256);
  CHECK(dl::test::gpt2_tokenizer().name() == "gpt2");
}

TEST_CASE("gpt2 tokenizer: pieces follow GPT-2's pattern, contractions case-sensitive") {
  auto pieces = [](std::string_view s) {
    std::vector<std::string> out;
    for (auto p : gpt2_pieces(s)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(pieces("I'm here") == V{"I", "'m", " here"});
  CHECK(pieces("IT'S") == V{"IT", "'", "S"});
  CHECK(pieces("we'd've") == V{"we", "'d", "'ve"});
  CHECK(pieces("a  b\n\nc  ") == V{"a", " ", " b", "\n", "\n", "c", "  "});  // the run leaves its last space
  CHECK(pieces("x1.5 ,,y") == V{"x", "1", ".", "5", " ,,", "y"});
  CHECK(pieces("caf\xc3\xa9 \xd9\xa3\xd9\xa4") == V{"caf\xc3\xa9", " \xd9\xa3\xd9\xa4"});  // é letter, Arabic digits
  CHECK(pieces("a\xe3\x80\x80" "b") == V{"a", "\xe3\x80\x80", "b"});                          // U+3000 is space
  CHECK(pieces("a\xff\xfe!b") == V{"a", "\xff\xfe!", "b"});  // invalid bytes are "other" characters
}

TEST_CASE("gpt2 tokenizer: the byte map is encoder.py's bytes_to_unicode") {
  CHECK(gpt2_byte_to_unicode('!') == '!');
  CHECK(gpt2_byte_to_unicode(' ') == 0x120);  // Ġ
  CHECK(gpt2_byte_to_unicode('\n') == 0x10A);  // Ċ
  CHECK(gpt2_byte_to_unicode(0) == 0x100);
  CHECK(gpt2_byte_to_unicode(0x7F) == 0x121);
  CHECK(gpt2_byte_to_unicode(0xAD) == 0x143);
  CHECK(gpt2_byte_to_unicode(0xE9) == 0xE9);
  std::set<uint32_t> distinct;
  for (int b = 0; b < 256; ++b) distinct.insert(gpt2_byte_to_unicode(static_cast<unsigned char>(b)));
  CHECK(distinct.size() == 256);
  // Every byte on its own is its own token, and any bytes round-trip.
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  CHECK(dl::test::gpt2_tokenizer().decode(dl::test::gpt2_tokenizer().encode(all)) == all);
  for (int b = 0; b < 256; ++b) {
    std::string one(1, static_cast<char>(b));
    auto ids = dl::test::gpt2_tokenizer().encode(one);
    REQUIRE(ids.size() == 1);
    CHECK(dl::test::gpt2_tokenizer().decode(ids) == one);
  }
}

TEST_CASE("gpt2 tokenizer: invalid UTF-8 decodes to its bytes; shown as Python's errors=\"replace\"") {
  const std::string bad = "ok \xe2\x82 then \xff\xc0\xaf end\xf0\x9f\x98";
  CHECK(dl::test::gpt2_tokenizer().decode(dl::test::gpt2_tokenizer().encode(bad)) == bad);
  // Expected strings from Python 3.11's bytes.decode("utf-8", errors="replace").
  const std::string R = "\xef\xbf\xbd";
  CHECK(utf8_for_display("a\xff" "b") == "a" + R + "b");
  CHECK(utf8_for_display("\xe2\x82") == R);
  CHECK(utf8_for_display("\xe2\x82x") == R + "x");
  CHECK(utf8_for_display("\xf0\x9f\x98") == R);
  CHECK(utf8_for_display("\xed\xa0\x80") == R + R + R);
  CHECK(utf8_for_display("\xc0\xaf") == R + R);
  CHECK(utf8_for_display("\xf4\x90\x80\x80") == R + R + R + R);
  CHECK(utf8_for_display("ok\xe2\x82\xac") == "ok\xe2\x82\xac");
  // Ids beyond the vocabulary (a padded model) show as U+FFFD.
  CHECK(dl::test::gpt2_tokenizer().decode({15496, 50300}) == "Hello" + R);
}

TEST_CASE("gpt2 tokenizer: tokenizer.json gives the same ids as vocab.json + merges.txt") {
  dl::test::TempDir tmp("tokjson");
  nlohmann::json vocab = nlohmann::json::parse(dl::test::read_file(gpt2_dir() / "vocab.json"));
  nlohmann::json merges = nlohmann::json::array();
  bool first = true, as_pairs = false;
  for (const std::string& line : dl::test::lines(dl::test::read_file(gpt2_dir() / "merges.txt"))) {
    if (first && line.starts_with("#version")) {
      first = false;
      continue;
    }
    if (line.empty()) continue;
    // Both spellings Hugging Face writes: "a b" and ["a", "b"].
    if (as_pairs) merges.push_back({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
    else merges.push_back(line);
    as_pairs = !as_pairs;
  }
  vocab.erase("<|endoftext|>");  // comes back through added_tokens
  nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
                      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  dl::test::write_file(tmp / "tokenizer.json", j.dump());
  Gpt2Tokenizer t(tmp.path().string());
  CHECK(t.vocab_size() == 50257);
  CHECK(t.document_separator() == 50256);
  for (const Case& c : cases()) {
    CAPTURE(c.text);
    CHECK(t.encode(c.text) == c.ids);
  }
}

TEST_CASE("gpt2 tokenizer: a small folder merges by rank") {
  dl::test::TempDir tmp("small");
  write_small_folder(tmp.path(), "#version: 0.2\na b\nab c\n\xc4\xa0 a\n");
  Gpt2Tokenizer t(tmp.path().string());
  CHECK(t.vocab_size() == 260);
  CHECK(t.document_separator() == 259);
  CHECK(t.encode("abc ab a") == std::vector<int32_t>{257, 32, 256, 258});  // " ab": (a, b) ranks before (Ġ, a)
}

TEST_CASE("gpt2 tokenizer: bad folders name the file and what is wrong") {
  dl::test::TempDir tmp("bad");
  auto fails = [](const fs::path& dir, const std::string& text) {
    CAPTURE(dir);
    CHECK_THROWS_WITH_AS(Gpt2Tokenizer(dir.string()), doctest::Contains(text.c_str()), Error);
    try {
      Gpt2Tokenizer t(dir.string());
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
    }
  };
  fails(tmp / "none", "does not exist");
  fs::create_directories(tmp / "empty");
  fails(tmp / "empty", "holds neither vocab.json + merges.txt nor tokenizer.json");

  write_small_folder(tmp / "malformed", "#version: 0.2\na b\nab c d\n");
  fails(tmp / "malformed", "merges.txt:3: malformed merge 'ab c d'");
  write_small_folder(tmp / "unknown", "#version: 0.2\na b\nq z\n");
  fails(tmp / "unknown", "merges.txt:3: merge 'q z' makes 'qz', which");
  write_small_folder(tmp / "dropped", "a b\n", 'b');
  fails(tmp / "dropped", "vocab.json: no token for the byte 0x62");
  write_small_folder(tmp / "nomerges", "a b\n");
  fs::remove(tmp / "nomerges" / "merges.txt");
  fails(tmp / "nomerges", "merges.txt: missing");
  write_small_folder(tmp / "badjson", "a b\n");
  dl::test::write_file(tmp / "badjson" / "vocab.json", "{\"a\": 0,");
  fails(tmp / "badjson", "vocab.json: not valid JSON");
  write_small_folder(tmp / "gap", "a b\n");
  dl::test::write_file(tmp / "gap" / "vocab.json", "{\"a\": 0, \"b\": 5}");
  fails(tmp / "gap", "vocab.json: token 'b' has id 5; the 2 tokens must have the ids 0..1");

  CHECK_THROWS_WITH_AS(make_tokenizer("gpt3:x"), doctest::Contains("is not a tokenizer"), Error);
  CHECK(make_tokenizer("bytes")->name() == "bytes");
  CHECK(make_tokenizer("gpt2:" + gpt2_dir().string())->vocab_size() == 50257);
}
