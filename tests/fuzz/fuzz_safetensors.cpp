// safetensors files: the length field, the JSON header and the data ranges (SafetensorsReader
// applies the same parse_safetensors_header to files; dl-shard, checkpoints, dl-train --init).
#include <cstring>

#include "dl/io/safetensors.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view file = dl::fuzz::as_text(data, size);
  dl::fuzz::expect_parse_or_usage_error([&] {
    dl::SafetensorsHeader h = dl::parse_safetensors(file, "fuzz.safetensors");
    // Every accepted range lies inside the data section: touch each tensor's first and last byte
    // (ASan reports a read past the input), and the sizes agree with dtype x shape.
    uint64_t header_len = 0;
    std::memcpy(&header_len, data, 8);  // little-endian host
    const uint64_t data_start = 8 + header_len;
    volatile uint8_t sink = 0;
    for (const auto& t : h.tensors) {
      dl::fuzz::require(t.begin <= t.end && data_start + t.end <= size, "tensor range inside the file");
      dl::fuzz::require(t.nbytes() == dl::SafetensorsEntry{t.name, t.dtype, t.shape}.nbytes(),
                        "tensor bytes = dtype size x elements");
      if (t.nbytes()) sink = sink + data[data_start + t.begin] + data[data_start + t.end - 1];
    }
    (void)sink;
  });
  return 0;
}
