// GPT-2 tokenizer files: Gpt2Tokenizer (data.tokenizer = "gpt2:DIR", dl-train tokenize, sample,
// eval). Input: vocab.json, a NUL byte, then merges.txt; without a NUL byte the input is a
// tokenizer.json. An accepted tokenizer then encodes the input itself and must decode it back.
#include <string>
#include <vector>

#include "dl/data/gpt2_tokenizer.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = dl::fuzz::as_text(data, size);
  dl::Gpt2Tokenizer::Files files;
  if (const size_t nul = in.find('\0'); nul != std::string_view::npos) {
    files["vocab.json"] = std::string(in.substr(0, nul));
    files["merges.txt"] = std::string(in.substr(nul + 1));
  } else {
    files["tokenizer.json"] = std::string(in);
  }
  dl::fuzz::expect_parse_or_usage_error([&] {
    const dl::Gpt2Tokenizer tok(files, "fuzz-tokenizer");
    const std::string text(in);
    const std::vector<int32_t> ids = tok.encode(text);
    for (int32_t id : ids) dl::fuzz::require(id >= 0 && id < tok.vocab_size(), "encode gives ids of the vocabulary");
    dl::fuzz::require(tok.decode(ids) == text, "decode(encode(b)) == b");
  });
  return 0;
}
