#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dl/io/crc32c.hpp"

using namespace dl;

namespace {
uint32_t crc_of(const std::string& s) { return crc32c(s.data(), s.size()); }
}  // namespace

TEST_CASE("crc32c matches the published check values") {
  CHECK(crc_of("123456789") == 0xE3069283u);  // the CRC catalogue's check value for CRC-32C
  CHECK(crc_of(std::string(32, '\0')) == 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  CHECK(crc_of(std::string(32, '\xff')) == 0x62A8AB43u);  // RFC 3720 B.4: 32 bytes of 0xff
  std::string inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  CHECK(crc_of(inc) == 0x46DD794Eu);  // RFC 3720 B.4: incrementing bytes
  CHECK(crc_of("The quick brown fox jumps over the lazy dog") == 0x22620404u);
  CHECK(crc_of("") == 0u);
}

TEST_CASE("crc32c extends across pieces") {
  const std::string a = "hello, ", b = "checkpoint world";
  CHECK(crc32c(b.data(), b.size(), crc_of(a)) == crc_of(a + b));
  const std::string digits = "123456789";
  for (size_t cut = 0; cut <= digits.size(); ++cut)
    CHECK(crc32c(digits.data() + cut, digits.size() - cut, crc32c(digits.data(), cut)) == 0xE3069283u);
}

TEST_CASE("masked crc32c per the TFRecord format") {
  // Expected values from /usr/bin/python3: crcmod's predefined "crc-32c" and TensorFlow's mask
  // (rotate right by 15, add 0xa282ead8), neither of which shares code with dl::crc32c.
  CHECK(mask_crc32c(0) == 0xa282ead8u);
  CHECK(mask_crc32c(0xE3069283u) == 0xc78ab0e5u);
  CHECK(masked_crc32c("123456789", 9) == 0xc78ab0e5u);
  // The first record of every TensorBoard file: Event{wall_time 0, file_version "brain.Event:2"},
  // 24 bytes; a TFRecord stores the masked CRC of its little-endian length and of its data.
  const std::string length("\x18\0\0\0\0\0\0\0", 8);
  const std::string event = std::string("\x09\0\0\0\0\0\0\0\0\x1a\x0d", 11) + "brain.Event:2";
  REQUIRE(event.size() == 24);
  CHECK(masked_crc32c(length.data(), length.size()) == 0x224b7fa3u);
  CHECK(masked_crc32c(event.data(), event.size()) == 0xa328dfeeu);
}

TEST_CASE("hardware and table crc32c agree on many lengths and alignments") {
  std::mt19937 gen(1234);
  std::vector<unsigned char> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<unsigned char>(gen());
  // The table path is always there; check it against the known value independently.
  CHECK(detail::crc32c_table("123456789", 9, 0) == 0xE3069283u);
  if (!detail::crc32c_hw_available()) {
    MESSAGE("CPU without SSE4.2: only the table implementation is tested");
    return;
  }
  CHECK(detail::crc32c_hw("123456789", 9, 0) == 0xE3069283u);
  int mismatches = 0;
  for (size_t align = 0; align < 16; ++align) {
    for (size_t len : {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 63, 64, 65, 127, 255, 1000, 1023, 4096}) {
      const unsigned char* p = buf.data() + align;
      uint32_t seed = static_cast<uint32_t>(gen());
      mismatches += detail::crc32c_hw(p, len, seed) != detail::crc32c_table(p, len, seed);
      mismatches += detail::crc32c_hw(p, len, 0) != detail::crc32c_table(p, len, 0);
    }
  }
  CHECK(mismatches == 0);
  // The dispatching entry point uses the hardware path here.
  CHECK(crc32c(buf.data() + 3, 1000) == detail::crc32c_table(buf.data() + 3, 1000, 0));
}
