// Hugging Face tokenizer.json (HfTokenizer): hand-checked pieces, merges, byte fallback and
// decoders on small files; refusals by name; and ids equal to the `tokenizers` library's on 1 MB
// of multilingual text for tokenizers trained with it in every supported style (a venv under the
// build folder; skipped with the reason when it cannot be created).
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
using json = nlohmann::json;

namespace {

const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> pieces(const std::string& text, const std::string& pattern) {
  std::vector<std::string> out;
  for (std::string_view p : hf_pattern_pieces(text, pattern)) out.emplace_back(p);
  return out;
}

// GPT-2's spelling of a byte (ByteLevel's alphabet).
std::string spelled_byte(int b) {
  const uint32_t cp = gpt2_byte_to_unicode(static_cast<unsigned char>(b));
  std::string s;
  if (cp < 0x80) s.push_back(static_cast<char>(cp));
  else s += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  return s;
}

// A ByteLevel tokenizer.json: the 256 bytes (ids 0..255), "ab" 256, "Ġa" 257 (" a"), "Ġab" 258,
// <|endoftext|> 259 as an added special token; merges (Ġ, a), (a, b), (Ġa, b) in that order.
json byte_level_file(json pre_tokenizer) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spelled_byte(b)] = b;
  vocab["ab"] = 256;
  vocab["\xC4\xA0" "a"] = 257;
  vocab["\xC4\xA0" "ab"] = 258;
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", {{{"id", 259}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                             {"rstrip", false}, {"normalized", false}, {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                     {"merges", json::array({json::array({"\xC4\xA0", "a"}), "a b", "\xC4\xA0" "a b"})}}}};
}

json byte_level_pre(bool prefix_space = false) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"trim_offsets", true}, {"use_regex", true}};
}

// Llama 2's layout: <unk> <s> </s>, the 256 <0xNN> tokens (3..258), "▁" 259, "h" 260, "i" 261,
// "▁h" 262, "▁hi" 263; byte_fallback; Prepend + Replace normalizers; the SentencePiece decoders.
const std::string kMeta = "\xE2\x96\x81";  // ▁
json sentencepiece_file(bool byte_fallback = true) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  vocab[kMeta] = 259;
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab[kMeta + "h"] = 262;
  vocab[kMeta + "hi"] = 263;
  json added = json::array();
  for (int id = 0; id < 3; ++id)
    added.push_back({{"id", id}, {"content", id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>"}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  return {{"added_tokens", added},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", kMeta}},
                                                                 {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor", {{"type", "TemplateProcessing"}, {"single", json::array()}, {"pair", json::array()}, {"special_tokens", json::object()}}},
          {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                                                           {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                           {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", true}, {"byte_fallback", byte_fallback}, {"vocab", vocab},
                     {"merges", json::array({kMeta + " h", kMeta + "h i"})}}}};
}

HfTokenizer from_json(const json& j, const std::string& config = "") { return HfTokenizer(j.dump(), config, "mem"); }

std::string refusal(const json& j) {
  return dl::test::usage_error_of([&] { from_json(j); });
}

}  // namespace

TEST_CASE("hf tokenizer: the Llama 3 and Qwen2 patterns cut text as tokenizers' regex does") {
  using V = std::vector<std::string>;
  CHECK(pieces("Hello world", kLlama3) == V{"Hello", " world"});
  CHECK(pieces("I'M here, we'Ve", kLlama3) == V{"I", "'M", " here", ",", " we", "'Ve"});
  CHECK(pieces("12345 x", kLlama3) == V{"123", "45", " x"});
  CHECK(pieces("12345 x", kQwen2) == V{"1", "2", "3", "4", "5", " x"});
  CHECK(pieces("a  b", kLlama3) == V{"a", " ", " b"});
  CHECK(pieces("x\n\n  y", kLlama3) == V{"x", "\n\n", " ", " y"});
  CHECK(pieces("foo.\r\nbar", kLlama3) == V{"foo", ".\r\n", "bar"});
  CHECK(pieces("\tword.Net .x 3.14", kLlama3) == V{"\tword", ".Net", " .", "x", " ", "3", ".", "14"});
  CHECK(pieces("!!!abc a  \n", kLlama3) == V{"!!!", "abc", " a", "  \n"});
  CHECK(pieces("end  ", kLlama3) == V{"end", "  "});
  // Letters and numbers of other scripts; a combining mark is neither.
  CHECK(pieces("мир٣٤ नमस्ते", kLlama3) == V{"мир", "٣٤", " नमस", "्त", "े"});
  CHECK_THROWS_WITH_AS(hf_pattern_pieces("x", "\\w+"), doctest::Contains("is not one dlkit scans"), Error);
}

TEST_CASE("hf tokenizer: ByteLevel merges by rank, matches added tokens first and decodes back") {
  const HfTokenizer t = from_json(byte_level_file(byte_level_pre()));
  CHECK(t.vocab_size() == 260);
  CHECK(t.document_separator() == 259);
  // " ab": (Ġ, a) ranks before (a, b); "<|endoftext|>" is one token, not its 13 bytes.
  CHECK(t.encode("ab ab<|endoftext|>x") == std::vector<int32_t>{256, 258, 259, 'x'});
  CHECK(t.decode({256, 258, 259, 'x'}) == "ab ab<|endoftext|>x");
  CHECK(t.decode({9999}) == "\xEF\xBF\xBD");
  const std::string bytes("\xFF\xFE a\x00 \xC3", 7);  // not UTF-8: still one token per byte, and back
  CHECK(t.decode(t.encode(bytes)) == bytes);
  // add_prefix_space: a space before each split's text, none before a continued chunk's.
  const HfTokenizer p = from_json(byte_level_file(byte_level_pre(true)));
  CHECK(p.encode("ab") == std::vector<int32_t>{258});
  CHECK(p.encode("<|endoftext|>ab") == std::vector<int32_t>{259, 258});
  std::vector<int32_t> ids;
  p.make_encoder()->encode_append_continued("ab", ids);
  CHECK(ids == std::vector<int32_t>{256});
}

TEST_CASE("hf tokenizer: SentencePiece-style BPE with byte fallback, unk and its decoders") {
  const HfTokenizer t = from_json(sentencepiece_file());
  CHECK(t.encode("hi hi") == std::vector<int32_t>{263, 263});
  // é is not in the vocabulary: its two UTF-8 bytes as <0xC3> <0xA9>.
  CHECK(t.encode("h\xC3\xA9") == std::vector<int32_t>{262, 3 + 0xC3, 3 + 0xA9});
  CHECK(t.decode({262, 3 + 0xC3, 3 + 0xA9}) == "h\xC3\xA9");
  // Prepend applies to each split: after <s> too, as tokenizers does.
  CHECK(t.encode("<s>hi</s>") == std::vector<int32_t>{1, 263, 2});
  CHECK(t.decode({1, 263, 2}) == "<s> hi</s>");
  CHECK(t.document_separator() == 2);
  // Without byte_fallback the unknown characters become one fused <unk>.
  const HfTokenizer u = from_json(sentencepiece_file(false));
  CHECK(u.encode("h\xC3\xA9\xC3\xA9i") == std::vector<int32_t>{262, 0, 261});
  // Metaspace with prepend_scheme "first": "▁" only at the text's start, not after <s>.
  json m = sentencepiece_file();
  m["normalizer"] = nullptr;
  m["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}, {"split", false}};
  const HfTokenizer ms = from_json(m);
  CHECK(ms.encode("hi hi") == std::vector<int32_t>{263, 263});
  CHECK(ms.encode("<s>hi") == std::vector<int32_t>{1, 260, 261});
  CHECK(ms.token_id("<0x0A>") == 3 + 0x0A);
  CHECK(ms.describe() == "BPE 264 tokens + 0 added; Metaspace(split false); byte_fallback");
}

TEST_CASE("hf tokenizer: the NFC normalizer composes, reorders marks and leaves excluded composites apart") {
  json j = byte_level_file(byte_level_pre());
  j["normalizer"] = {{"type", "NFC"}};
  const HfTokenizer t = from_json(j);
  auto bytes_of = [&](const std::string& s) {
    std::string out;
    for (int32_t id : t.encode(s)) out.push_back(static_cast<char>(id));  // byte tokens are their byte
    return out;
  };
  CHECK(bytes_of("cafe\xCC\x81") == "caf\xC3\xA9");                             // e + U+0301 -> U+00E9
  CHECK(bytes_of("e\xCC\xA3\xCC\x82 x") == "\xE1\xBB\x87 x");                    // e + U+0323 + U+0302 -> U+1EC7
  CHECK(bytes_of("e\xCC\x82\xCC\xA3") == "\xE1\xBB\x87");                        // the marks in the other order too
  CHECK(bytes_of("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8") == "\xEA\xB0\x81");     // jamo G + A + G -> U+AC01
  CHECK(bytes_of("\xE0\xA5\x98") == "\xE0\xA4\x95\xE0\xA4\xBC");                  // U+0958 decomposes, stays apart
  CHECK(bytes_of("\xFF\xCC\x81") == "\xFF\xCC\x81");                             // a raw byte blocks composing
}

TEST_CASE("hf tokenizer: ignore_merges takes a piece the vocabulary holds whole") {
  json j = byte_level_file(byte_level_pre());
  j["model"]["vocab"]["abc"] = 260;  // no merge makes it
  CHECK(from_json(j).encode("abc") == std::vector<int32_t>{256, 'c'});
  j["model"]["ignore_merges"] = true;
  CHECK(from_json(j).encode("abc") == std::vector<int32_t>{260});
}

TEST_CASE("hf tokenizer: the eos_token of tokenizer_config.json separates documents") {
  json j = byte_level_file(byte_level_pre());
  CHECK(from_json(j, R"({"eos_token": {"content": "a", "special": true}})").document_separator() == 'a');
  CHECK(dl::test::usage_error_of([&] { from_json(j, R"({"eos_token": "<eos>"})"); }) ==
        "mem/tokenizer_config.json: eos_token '<eos>' is not a token of mem/tokenizer.json");
}

TEST_CASE("hf tokenizer: what it does not implement is refused by name") {
  const json base = byte_level_file(byte_level_pre());
  auto with = [&](const std::string& key, const json& v) {
    json j = base;
    j[key] = v;
    return refusal(j);
  };
  CHECK(with("pre_tokenizer", {{"type", "Whitespace"}}) ==
        "mem/tokenizer.json: pre_tokenizer type \"Whitespace\" is not supported (supported: ByteLevel, Split on the "
        "Llama 3 or Qwen2 pattern, Metaspace, Sequence of Split and ByteLevel)");
  CHECK(dl::test::has(with("normalizer", {{"type", "NFKC"}}), "normalizer type \"NFKC\" is not supported (supported: NFC, Prepend"));
  CHECK(dl::test::has(with("decoder", {{"type", "WordPiece"}}), "decoder type \"WordPiece\" is not supported"));
  CHECK(dl::test::has(with("post_processor", {{"type", "BertProcessing"}}), "post_processor type \"BertProcessing\" is not supported"));
  CHECK(dl::test::has(with("truncation", {{"max_length", 512}}), "truncation is set"));
  CHECK(dl::test::has(with("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}, {"invert", false}}),
                      "pre_tokenizer Split pattern \"\\\\w+\" is not supported"));
  CHECK(dl::test::has(with("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", kLlama3}}}, {"behavior", "Removed"}, {"invert", false}}),
                      "pre_tokenizer Split behavior \"Removed\" is not supported (supported: Isolated)"));
  json model = base;
  model["model"]["type"] = "Unigram";
  CHECK(refusal(model) == "mem/tokenizer.json: model type \"Unigram\" is not supported (supported: BPE)");
  model = base;
  model["model"]["dropout"] = 0.1;
  CHECK(dl::test::has(refusal(model), "model.dropout 0.1 is not supported"));
  model = base;
  model["model"]["continuing_subword_prefix"] = "##";
  CHECK(dl::test::has(refusal(model), "model.continuing_subword_prefix \"##\" is not supported"));
  model = base;
  model["model"]["merges"].push_back("q z");
  CHECK(dl::test::has(refusal(model), "model.merges[3]: merge 'q z' makes 'qz', which model.vocab does not hold"));
  model = base;
  model["model"]["vocab"]["far"] = 1 << 30;  // would make a table of 2^30 entries
  CHECK(dl::test::has(refusal(model), "model.vocab: token 'far' has id 1073741824; ids are integers from 0 below 1048837"));
  model = base;
  model["added_tokens"][0]["id"] = 1 << 30;
  CHECK(dl::test::has(refusal(model), "added_tokens[0]: id 1073741824 is not from 0 below 1048836"));
  model = base;
  model["added_tokens"][0]["lstrip"] = true;
  CHECK(refusal(model) == "mem/tokenizer.json: added_tokens[0] '<|endoftext|>': lstrip true is not supported (supported: false)");
  CHECK(dl::test::has(refusal(json::array()), "not a tokenizer.json"));
  CHECK(dl::test::has(dl::test::usage_error_of([] { HfTokenizer("{", "", "mem"); }), "mem/tokenizer.json: not valid JSON"));
}

TEST_CASE("hf tokenizer: folders pick their tokenizer and the tools refuse what is unsupported with exit 2") {
  dl::test::TempDir tmp("hf");
  fs::create_directories(tmp / "hf");
  dl::test::write_file(tmp / "hf" / "tokenizer.json", byte_level_file(byte_level_pre()).dump());
  CHECK(load_tokenizer((tmp / "hf").string())->kind() == TokenizerKind::hf);
  CHECK(make_tokenizer("hf:" + (tmp / "hf").string())->name() == "hf");
  CHECK(load_tokenizer(dl::test::shared_path("data/gpt2").string())->kind() == TokenizerKind::gpt2);
  fs::create_directories(tmp / "none");
  CHECK(dl::test::has(dl::test::usage_error_of([&] { load_tokenizer((tmp / "none").string()); }),
                      "holds neither vocab.json + merges.txt (GPT-2) nor tokenizer.json (Hugging Face)"));

  dl::test::write_file(tmp / "text.txt", "ab ab<|endoftext|>x");
  auto r = dl::test::run(dl::test::tool("dl-train"), {"tokenize", (tmp / "text.txt").string(), "--tokenizer",
                                                      (tmp / "hf").string(), "-o", (tmp / "shards").string()});
  CHECK(r.exit_code == 0);
  CHECK_MESSAGE(dl::test::has(r.out, "train_000000.bin\t4"), r.out, r.err);
  json bad = byte_level_file({{"type", "Whitespace"}});
  fs::create_directories(tmp / "bad");
  dl::test::write_file(tmp / "bad" / "tokenizer.json", bad.dump());
  r = dl::test::run(dl::test::tool("dl-train"), {"tokenize", (tmp / "text.txt").string(), "--tokenizer",
                                                 (tmp / "bad").string(), "-o", (tmp / "shards2").string()});
  CHECK(r.exit_code == 2);
  CHECK(dl::test::has(r.err, "tokenizer.json: pre_tokenizer type \"Whitespace\" is not supported"));
}

TEST_CASE("hf tokenizer: ids equal the tokenizers library's on 1 MB of multilingual text, in every style") {
  const fs::path build = fs::path(dl::test::tool("dl-train")).parent_path().parent_path();
  const fs::path venv = build / "venv-tokenizers";
  const auto setup = dl::test::run("/bin/bash", {dl::test::source_path("scripts/tokenizers-venv.sh").string(), venv.string()});
  if (setup.exit_code != 0) {
    MESSAGE("skipped: " << setup.err);
    return;
  }
  // The reference files depend only on the script and the tokenizers version: made once per build.
  const fs::path ref = build / "hf-tokenizer-reference";
  const std::string script = dl::test::source_path("tests/scripts/hf_tokenizers_reference.py").string();
  const std::string stamp = std::to_string(std::hash<std::string>{}(dl::test::read_file(script)));
  if (!fs::exists(ref / "stamp") || dl::test::read_file(ref / "stamp") != stamp) {
    fs::remove_all(ref);
    const auto made = dl::test::run((venv / "bin" / "python").string(), {script, ref.string(), dl::test::source_path(".").string()});
    REQUIRE_MESSAGE(made.exit_code == 0, made.err);
    dl::test::write_file(ref / "stamp", stamp);
  }
  const std::string text = dl::test::read_file(ref / "text.txt");
  REQUIRE(text.size() >= 1'000'000);
  for (const std::string style : {"gpt2", "gpt2-prefix", "llama3", "qwen2", "sentencepiece", "metaspace"}) {
    CAPTURE(style);
    const fs::path dir = ref / style;
    const std::string raw = dl::test::read_file(dir / "ids.bin");
    std::vector<int32_t> want(raw.size() / 4);
    std::memcpy(want.data(), raw.data(), raw.size());
    const HfTokenizer t(dir.string());
    const std::vector<int32_t> got = t.encode(text);
    if (got != want) {
      size_t k = 0;
      while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
      const size_t from = k > 3 ? k - 3 : 0;
      FAIL_CHECK("first difference at id " << k << " of " << want.size() << ": dlkit "
                 << t.decode(std::vector<int32_t>(got.begin() + from, got.begin() + std::min(got.size(), k + 4)))
                 << " | tokenizers "
                 << t.decode(std::vector<int32_t>(want.begin() + from, want.begin() + std::min(want.size(), k + 4))));
    }
    // Cut into 64 kB chunks at the split points on 2 threads: the same ids.
    CHECK(t.split_point(text, 64 << 10) < text.size());
    dl::test::write_file(dir / "text.txt", text);
    TokenStreamOptions o;
    o.threads = 2;
    o.chunk_bytes = 64 << 10;
    std::vector<int32_t> chunked;
    tokenize_stream(t, {(dir / "text.txt").string()}, o,
                    [&](const std::vector<int32_t>& ids, int) { chunked.insert(chunked.end(), ids.begin(), ids.end()); });
    CHECK(chunked == want);
    const std::string decoded = t.decode(want);
    CHECK(decoded == dl::test::read_file(dir / "decoded.txt"));
    if (json::parse(dl::test::read_file(dir / "meta.json"))["round_trips"].get<bool>()) CHECK(decoded == text);
  }
}
