#include <doctest/doctest.h>

#include <string>

#include "dl/core/error.hpp"
#include "dl/core/rng.hpp"
#include "dl/env/sha256.hpp"
#include "support/support.hpp"

using namespace dl;

namespace {

// Runs the digest with the portable code and (where the CPU has it) SHA-NI; both must agree.
std::string both(const std::string& data) {
  Sha256::set_hardware_enabled(false);
  std::string portable = sha256_hex(data);
  Sha256::set_hardware_enabled(true);
  std::string hw = sha256_hex(data);
  CHECK(portable == hw);
  return portable;
}

}  // namespace

TEST_CASE("sha256: FIPS 180-2 test vectors, portable and SHA-NI") {
  // FIPS 180-2, appendix B.1 ("abc") and B.2 (the 448-bit message).
  CHECK(both("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(both("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(both("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // B.3: one million 'a'.
  CHECK(both(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  MESSAGE("SHA-NI available: " << Sha256::hardware_available());
}

TEST_CASE("sha256: split updates give the same digest at every boundary") {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(static_cast<unsigned char>(uniform_at(42, static_cast<uint64_t>(i)) * 256));
  std::string whole = sha256_hex(data);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{55}, size_t{56}, size_t{63}, size_t{64}, size_t{65}, size_t{128}, size_t{999}}) {
    Sha256 h;
    h.update(data.substr(0, cut));
    h.update(data.substr(cut));
    CHECK(h.hex_digest() == whole);
  }
  // Lengths around the padding boundary, portable against hardware.
  for (size_t n : {size_t{55}, size_t{56}, size_t{57}, size_t{63}, size_t{64}, size_t{119}, size_t{120}})
    CHECK(both(data.substr(0, n)).size() == 64);
}

TEST_CASE("sha256_file agrees with sha256sum") {
  test::TempDir dir("sha");
  std::string data;
  for (int i = 0; i < (3 << 20) + 17; ++i) data += static_cast<char>(i * 7 + (i >> 9));
  test::write_file(dir / "blob", data);
  std::string mine = sha256_file(dir / "blob");
  CHECK(mine == sha256_hex(data));
  auto r = test::run("/usr/bin/sha256sum", {(dir / "blob").string()});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.substr(0, 64) == mine);
  CHECK_THROWS_AS(sha256_file(dir / "missing"), Error);
}
