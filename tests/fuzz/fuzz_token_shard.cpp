// Token shards (llm.c header with uint16 or uint32 tokens, or headerless uint16): parse_token_shard,
// as tokens:GLOB maps them.
#include <algorithm>
#include <cstring>
#include <vector>

#include "dl/data/sources.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint32_t> aligned((size + 3) / 4);  // a mapping is page-aligned; the fuzzer's buffer is not
  if (size) std::memcpy(aligned.data(), data, size);
  const auto* bytes = reinterpret_cast<const unsigned char*>(aligned.data());
  dl::fuzz::expect_parse_or_usage_error([&] {
    dl::data::TokenShardView v = dl::data::parse_token_shard(bytes, size, "fuzz.bin", "tokens:fuzz.bin");
    dl::fuzz::require(v.n_tokens >= 0, "token count is non-negative");
    dl::fuzz::require(v.token_bytes == 2 || v.token_bytes == 4, "tokens are 2 or 4 bytes wide");
    dl::fuzz::require(v.tokens + v.n_tokens * v.token_bytes <= bytes + size, "tokens lie inside the file");
    uint32_t max_id = 0;  // what open_shards computes over every token
    for (int64_t i = 0; i < v.n_tokens; ++i) max_id = std::max(max_id, v[i]);
    (void)max_id;
  });
  return 0;
}
