// Hugging Face tokenizer.json files: HfTokenizer (data.tokenizer = "hf:DIR", an init_from folder's
// tokenizer, dl-train tokenize, sample, eval). Input: tokenizer.json, then optionally a NUL byte and
// a text to encode (else the file's own text is encoded). An accepted tokenizer must give ids of
// its vocabulary, decode them without failing, and encode the same text the same way with its
// streaming encoder's first chunk.
#include <string>
#include <vector>

#include "dl/data/hf_tokenizer.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = dl::fuzz::as_text(data, size);
  const size_t nul = in.find('\0');
  const std::string file(in.substr(0, nul));
  const std::string text(nul == std::string_view::npos ? in : in.substr(nul + 1));
  dl::fuzz::expect_parse_or_usage_error([&] {
    const dl::HfTokenizer tok(file, "", "fuzz-tokenizer");
    const std::vector<int32_t> ids = tok.encode(text);
    for (int32_t id : ids) dl::fuzz::require(id >= 0 && id < tok.vocab_size(), "encode gives ids of the vocabulary");
    (void)tok.decode(ids);
  });
  return 0;
}
