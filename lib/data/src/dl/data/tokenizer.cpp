// The tokenizers dlkit ships: raw bytes, whitespace-separated decimal ids, GPT-2's BPE
// (gpt2_tokenizer.cpp) and Hugging Face's tokenizer.json (hf_tokenizer.cpp), chosen by
// make_tokenizer (a spec) or load_tokenizer (a folder).
#include <cctype>
#include <charconv>

#include "dl/data/dataset.hpp"
#include <filesystem>

#include "dl/core/error.hpp"
#include "dl/data/gpt2_tokenizer.hpp"
#include "dl/data/hf_tokenizer.hpp"

namespace dl {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  // Ids outside 0..255 (a model with a larger vocabulary can sample them) decode to U+FFFD.
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) out.push_back(static_cast<char>(static_cast<unsigned char>(id)));
      else out += "\xEF\xBF\xBD";
    }
    return out;
  }
  TokenizerKind kind() const override { return TokenizerKind::bytes; }
  int64_t vocab_size() const override { return 256; }
};

class IdTokenizer final : public Tokenizer {
 public:
  size_t split_point(std::string_view text, size_t from) const override {
    while (from < text.size() && !std::isspace(static_cast<unsigned char>(text[from]))) ++from;
    return from;
  }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      if (i == text.size()) break;
      size_t j = i;
      while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
      std::string_view word(text.data() + i, j - i);
      int32_t id = 0;
      auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
      if (ec != std::errc() || p != word.data() + word.size() || id < 0)
        throw_usage("'", word, "' is not a token id (the ids tokenizer reads whitespace-separated ",
                    "non-negative decimal ids, e.g. \"15496 11 995\")");
      ids.push_back(id);
      i = j;
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out.push_back(' ');
      out += std::to_string(ids[i]);
    }
    return out;
  }
  TokenizerKind kind() const override { return TokenizerKind::ids; }
};

// Any tokenizer's encoder: encode() on a copy of the text.
class PlainEncoder final : public Tokenizer::Encoder {
 public:
  explicit PlainEncoder(const Tokenizer& t) : t_(t) {}
  void encode_append(std::string_view text, std::vector<int32_t>& out) override {
    auto ids = t_.encode(std::string(text));
    out.insert(out.end(), ids.begin(), ids.end());
  }

 private:
  const Tokenizer& t_;
};

}  // namespace

std::unique_ptr<Tokenizer::Encoder> Tokenizer::make_encoder() const { return std::make_unique<PlainEncoder>(*this); }

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }
std::unique_ptr<Tokenizer> make_id_tokenizer() { return std::make_unique<IdTokenizer>(); }

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "bytes") return make_byte_tokenizer();
  if (spec.starts_with("gpt2:") && spec.size() > 5) return std::make_unique<Gpt2Tokenizer>(spec.substr(5));
  if (spec.starts_with("hf:") && spec.size() > 3) return std::make_unique<HfTokenizer>(spec.substr(3));
  throw_usage("data.tokenizer = \"", spec, "\" is not a tokenizer; use \"bytes\", \"gpt2:DIR\" (a folder with ",
              "vocab.json + merges.txt or tokenizer.json) or \"hf:DIR\" (a folder with a Hugging Face tokenizer.json)");
}

std::string tokenizer_spec_of_folder(const std::string& folder) {
  namespace fs = std::filesystem;
  const fs::path d(folder);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) throw_usage("tokenizer folder '", folder, "' does not exist");
  if (fs::exists(d / "vocab.json", ec) && fs::exists(d / "merges.txt", ec)) return "gpt2:" + folder;
  if (fs::exists(d / "tokenizer.json", ec)) return "hf:" + folder;
  throw_usage("tokenizer folder '", folder, "' holds neither vocab.json + merges.txt (GPT-2) nor tokenizer.json (Hugging Face)");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& folder) { return make_tokenizer(tokenizer_spec_of_folder(folder)); }

}  // namespace dl
