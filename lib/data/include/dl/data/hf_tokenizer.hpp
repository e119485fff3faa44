// A Hugging Face tokenizer.json with a BPE model (the `tokenizers` library's format), as the
// Llama-family models ship it. Supported, and nothing else (any other model, normalizer,
// pre-tokenizer, decoder or post-processor, or an option that changes ids, is refused by name):
//   - GPT-2 style: ByteLevel pre-tokenizer (its GPT-2 pattern or use_regex false, add_prefix_space)
//     and ByteLevel decoder;
//   - Llama 3 / Qwen2 style: Split on Llama 3's or Qwen2's pattern (Isolated), then ByteLevel
//     with use_regex false; Qwen2's NFC normalizer;
//   - SentencePiece style (Llama 2, Mistral, TinyLlama): the Prepend("▁") + Replace(" ", "▁")
//     normalizers or the Metaspace pre-tokenizer, byte_fallback `<0xNN>` tokens, unk_token and
//     fuse_unk, and the Replace, ByteFallback, Fuse, Strip (or Metaspace) decoders;
//   - added_tokens, matched in the text before pre-tokenization (leftmost, longest), as
//     `tokenizers` does; merges as "a b" or ["a", "b"]; ignore_merges.
// Ids are `tokenizers`' encode(text, add_special_tokens=False): a post-processor's template
// (Llama's <s>) is not applied; documents of a stream are separated by document_separator().
// Decoding runs the file's decoder chain with added tokens as their text; byte tokens that do not
// form UTF-8 stay raw bytes (tokenizers shows U+FFFD), so decode(encode(t)) == t for any bytes t
// in the ByteLevel styles and for valid UTF-8 with byte fallback.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dl/data/dataset.hpp"

namespace dl {

class HfTokenizer final : public Tokenizer {
 public:
  // Loads DIR/tokenizer.json (and DIR/tokenizer_config.json's eos_token and bos_token, when there is one).
  // Throws dl::Error(usage) naming the file, the field and what is supported.
  explicit HfTokenizer(const std::string& dir);
  // The same from the files' text (tokenizer_config may be empty); messages name DIR's files.
  HfTokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config, const std::string& dir);
  ~HfTokenizer() override;

  std::vector<int32_t> encode(const std::string& text) const override;
  // Ids the vocabulary does not hold (a padded model can sample them) decode to U+FFFD.
  std::string decode(const std::vector<int32_t>& ids) const override;
  TokenizerKind kind() const override { return TokenizerKind::hf; }
  int64_t vocab_size() const override;
  // tokenizer_config.json's eos_token, else the first of <|endoftext|>, </s>, <|end_of_text|> the
  // file holds; none otherwise.
  std::optional<int32_t> document_separator() const override;
  // tokenizer_config.json's bos_token and eos_token, when it names tokens of the vocabulary.
  std::optional<int32_t> bos_token_id() const override;
  std::optional<int32_t> eos_token_id() const override;
  // tokenizer.json, and tokenizer_config.json and special_tokens_map.json when DIR has them.
  std::vector<std::string> files() const override;
  // Where the pieces provably restart: before a space that follows printable ASCII for the
  // pattern and Metaspace styles; after a newline that no merge touches for the SentencePiece
  // style without splitting; nowhere when an added token holds such a character.
  size_t split_point(std::string_view text, size_t from) const override;
  std::unique_ptr<Encoder> make_encoder() const override;

  // The id of a token by its text (an added token's content or a vocabulary entry as spelled).
  std::optional<int32_t> token_id(std::string_view spelled) const;
  // The pipeline in a few words, e.g. "BPE 32000 tokens + 3 added; Prepend + Replace; byte_fallback".
  std::string describe() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The pieces a Split pre-tokenizer with `pattern` (tokenizer.json's spelling of the Llama 3,
// Qwen2 or GPT-2 pattern) cuts `text` into, in order. Throws dl::Error(usage) for another pattern.
std::vector<std::string_view> hf_pattern_pieces(std::string_view text, std::string_view pattern);

}  // namespace dl
