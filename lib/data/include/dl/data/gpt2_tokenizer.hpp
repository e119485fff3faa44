// GPT-2's byte-level BPE tokenizer (Radford et al. 2019; OpenAI's encoder.py, tiktoken's `gpt2`).
//
// Encoding: the text is cut into pieces by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (a hand-written scanner, contractions case-sensitive as in GPT-2; letters, numbers and white
// space from the table in unicode_classes.inc), then each piece's bytes are merged by BPE, the
// lowest-ranked adjacent pair of merges.txt first. Bytes that are not valid UTF-8 are pieces'
// "other" characters one byte each (Python's str cannot hold them; tiktoken never sees them).
// `<|endoftext|>` in a text is plain text; the separator id is only put between documents.
// Decoding concatenates the tokens' bytes, so decode(encode(b)) == b for any bytes b.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dl/data/dataset.hpp"

namespace dl {

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Loads DIR/vocab.json + DIR/merges.txt, or else DIR/tokenizer.json (Hugging Face's BPE model).
  // Throws dl::Error(usage) naming the file and what is wrong (a malformed merges line by number).
  explicit Gpt2Tokenizer(const std::string& dir);
  // The same from the files' contents, by name ("vocab.json" + "merges.txt", or "tokenizer.json"),
  // for a tokenizer built from memory (tests/fuzz/fuzz_gpt2_tokenizer.cpp); messages name the
  // files under `dir`. The folder constructor reads the files into one of these.
  using Files = std::map<std::string, std::string>;
  Gpt2Tokenizer(const Files& files, const std::string& dir);
  ~Gpt2Tokenizer() override;

  // Remembers the ids of pieces already merged: piece bytes -> ids in one pool, cleared when it
  // passes kMaxEntries so that memory stays bounded on endless streams. One per thread (encode()
  // makes its own).
  class Cache {
   public:
    static constexpr size_t kMaxEntries = size_t{1} << 18;

   private:
    friend class Gpt2Tokenizer;
    struct Span {
      uint32_t first, count;
    };
    struct Hash {
      using is_transparent = void;
      size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::unordered_map<std::string, Span, Hash, std::equal_to<>> map_;
    std::vector<int32_t> pool_;
    std::vector<int32_t> parts_;   // scratch for one merge
    std::vector<uint32_t> ranks_;  // scratch: rank of (parts[k], parts[k+1])
  };
  static std::unique_ptr<Cache> make_cache() { return std::make_unique<Cache>(); }

  // Appends the ids of `text` to `out`.
  void encode_append(std::string_view text, std::vector<int32_t>& out, Cache& cache) const;

  std::vector<int32_t> encode(const std::string& text) const override;
  // Ids the vocabulary does not hold (a padded model can sample them) decode to U+FFFD.
  std::string decode(const std::vector<int32_t>& ids) const override;
  TokenizerKind kind() const override { return TokenizerKind::gpt2; }
  int64_t vocab_size() const override { return static_cast<int64_t>(token_offset_.size()) - 1; }
  std::optional<int32_t> document_separator() const override { return end_of_text_; }
  std::vector<std::string> files() const override { return files_; }
  // A cut between two non-space characters where a piece must end: after a letter or digit
  // before a character of another class, or before a space that follows printable ASCII.
  size_t split_point(std::string_view text, size_t from) const override;
  std::unique_ptr<Encoder> make_encoder() const override;

 private:
  struct PairTable;
  std::string dir_;
  std::vector<std::string> files_;          // the files the vocabulary came from
  std::string token_bytes_;                 // every token's bytes, back to back
  std::vector<uint32_t> token_offset_;      // token i is token_bytes_[offset[i], offset[i+1])
  int32_t byte_token_[256] = {};            // the token of each single byte
  int32_t end_of_text_ = -1;
  std::unique_ptr<PairTable> pairs_;        // (left, right) -> (rank, merged token)
};

// The pieces GPT-2's pattern cuts `text` into, in order (they tile the text).
std::vector<std::string_view> gpt2_pieces(std::string_view text);

// GPT-2's byte -> printable character map (encoder.py's bytes_to_unicode): the code point a byte
// is spelled with in vocab.json and merges.txt.
uint32_t gpt2_byte_to_unicode(unsigned char b);

// `bytes` as valid UTF-8 for showing: each maximal ill-formed subsequence becomes one U+FFFD, as
// Python's bytes.decode("utf-8", errors="replace") (and so GPT-2's decode) does.
std::string utf8_for_display(std::string_view bytes);

}  // namespace dl
